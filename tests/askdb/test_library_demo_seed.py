"""`make demo` seeds the library with our benchmark's train split, written on MIMIC-IV; on the
synthetic demo data its patient ids are replaced by patients the data has, so a newcomer's first
patient-specific question gets rows rather than "nothing matches"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from askdb.models import Example, Run
from askdb.selectors import library_suggestions
from askdb.services.calibration import answer_is_usable, library_seed_demo
from askdb.services.privacy import privacy_policy
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

    # The seed's years are years the data has admissions in (the synthetic data spreads its patients
    # over 2110-2210, not MIMIC-IV's years), in the question and the SQL alike.
    assert "years the data lacks replaced by years it has" in summary, summary
    _, years = sql_check(
        source=source, sql="SELECT DISTINCT EXTRACT(YEAR FROM a.admittime) FROM mimiciv_hosp.admissions AS a"
    )
    years = {str(int(row[0])) for row in years.rows}
    for example in Example.objects.filter(source=source):
        named = set(re.findall(r"\b(2[01]\d\d)\b", example.sql))
        assert named <= years and named <= set(re.findall(r"\d+", example.question)), (
            example.question,
            example.sql,
        )

    # Every suggestion the home page offers was asked on the data and answers with something to read:
    # no "0", no empty list, not only "<11".
    assert re.search(r"\d+ library questions asked on the data: \d+ answer and may be suggested", summary), (
        summary
    )
    suggested = library_suggestions(source=source)
    assert len(suggested) == 6 and all(e.answers_as_is for e in suggested)
    assert Example.objects.filter(source=source, answers_as_is=False).exists()  # some were left out
    policy = privacy_policy(source=source, user=None, evaluation=True)
    for example in suggested:
        rows = sql_check(source=source, sql=example.sql, policy=policy)[1].rows
        assert answer_is_usable(rows), (example.question, rows)
    # "top diagnoses" counts patients, not diagnosis rows
    top = Example.objects.get(
        source=source, question="what are the top 3 diagnoses of patients aged 80 or older?"
    )
    assert "COUNT(DISTINCT di.subject_id) AS n_patients" in top.sql

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


@pytest.mark.parametrize(
    ("rows", "usable"),
    [([], False), ([[0]], False), ([[None]], False), ([["<11"]], False), ([["a", "<11"], ["b", "<11"]], False), ([["a", "<11"], ["b", 12]], True),
     ([[None, "<11"], [None, "<11"]], False), ([[42]], True), ([["F"]], True), ([[1, 2.5]], True)],
)  # fmt: skip
def test_a_suggestion_must_answer_with_something_to_read(rows, usable):
    assert answer_is_usable(rows) is usable


def test_a_library_seeded_before_gets_the_faster_sql_with_the_same_answer(source, tmp_path):
    """A demo library seeded before "the top 5 most frequent lab tests" read the lab test counts
    keeps answering the same, from the counts; an edited example is left as its editor wrote it."""
    from askdb.services.calibration import _SEED_SUPERSEDED

    item = next(i for i in json.loads(TRAIN.read_text()) if i["id"] == "tr-048")
    edited = {"id": "x-1", "question": "which lab tests are done most often?",
              "sql": _SEED_SUPERSEDED["tr-048"].replace("LIMIT 5", "LIMIT 7")}  # fmt: skip
    older = tmp_path / "train.json"
    older.write_text(json.dumps([item | {"sql": _SEED_SUPERSEDED["tr-048"]}, edited]))
    library_seed_demo(source=source, path=older)
    example = Example.objects.get(source=source, question=item["question"])
    assert "labevents AS l" in example.sql
    _, before = sql_check(source=source, sql=example.sql)

    assert "1 made faster with the same answer" in library_seed_demo(source=source, path=TRAIN)
    example.refresh_from_db()
    assert "labevents_item_counts" in example.sql and example.template
    _, after = sql_check(source=source, sql=example.sql)
    assert after.rows == before.rows and len(after.rows) == 5
    assert "labevents AS l" in Example.objects.get(source=source, question=edited["question"]).sql
    assert "made faster" not in library_seed_demo(source=source, path=TRAIN)  # once
