"""`make demo` seeds the library with our benchmark's train split, written on MIMIC-IV; on the
synthetic demo data its patient ids are replaced by patients the data has, so a newcomer's first
patient-specific question gets rows rather than "nothing matches"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from askdb.models import Example, Run
from askdb.services.calibration import library_seed_demo
from askdb.services.runs import question_submit_sync
from askdb.services.sql import sql_check
from tests.factories import make_user

pytestmark = pytest.mark.django_db

TRAIN = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "mimiciv" / "train.json"


def test_seeded_patient_questions_name_patients_the_demo_data_has(source):
    seed_ids = {
        m for i in json.loads(TRAIN.read_text()) for m in re.findall(r"subject_id = (\d+)", i["sql"] or "")
    }
    summary = library_seed_demo(source=source, path=TRAIN)
    assert "patient ids the data lacks replaced" in summary, summary

    _, present = sql_check(source=source, sql="SELECT p.subject_id FROM mimiciv_hosp.patients AS p")
    present = {str(row[0]) for row in present.rows}
    personal = [e for e in Example.objects.filter(source=source) if "subject_id" in e.sql]
    assert personal
    for example in personal:
        named = set(re.findall(r"subject_id = (\d+)", example.sql))
        assert named <= present and not named & seed_ids, (example.question, example.sql)
        assert named <= set(re.findall(r"\d+", example.question)), example.question  # question and SQL agree
        assert example.template_key and not example.template.get("error"), example.question

    # Most of them answer with rows on the demo data (a patient may lack the one lab asked about).
    with_rows = sum(sql_check(source=source, sql=e.sql, row_cap=1)[1].row_count > 0 for e in personal)
    assert with_rows >= 0.8 * len(personal), (with_rows, len(personal))

    # Asked as is, with no LLM, the seeded question is answered from the library with rows.
    gender = next(e for e in personal if e.question.startswith("what is the gender of patient"))
    asker = make_user("demo-newcomer", "researcher")
    run = Run.objects.get(pk=question_submit_sync(user=asker, text=gender.question, source=source).pk)
    assert run.status == "succeeded" and run.result_rows, (run.status, run.outcome, run.result_rows)


def test_ids_the_data_has_are_kept(source, tmp_path):
    _, result = sql_check(source=source, sql="SELECT MIN(p.subject_id) FROM mimiciv_hosp.patients AS p")
    patient = result.rows[0][0]
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"question": f"what is the gender of patient {patient}?",
                                 "sql": f"SELECT p.gender FROM mimiciv_hosp.patients AS p WHERE p.subject_id = {patient}"}]))  # fmt: skip
    summary = library_seed_demo(source=source, path=seed)
    assert "replaced" not in summary
    assert Example.objects.get(source=source).question == f"what is the gender of patient {patient}?"
