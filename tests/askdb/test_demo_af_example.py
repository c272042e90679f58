"""The demo's seeded "count the number of patients diagnosed with atrial fibrillation" counts every
AF code the data holds, ICD-9 and ICD-10 (it once matched only the ICD-9 title), and the request
desk's code check finds nothing it misses."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from askdb.services.requests import sql_code_check
from infra import embedded
from metadata_admin.clinical.synthetic import load_vocab

pytestmark = pytest.mark.django_db
TRAIN = Path(__file__).resolve().parents[2] / "benchmarks/data/mimiciv/train.json"


def test_the_seeded_af_example_counts_icd9_and_icd10_codes(source):
    example = next(p for p in json.loads(TRAIN.read_text()) if p["question"].startswith(
        "count the number of patients diagnosed with atrial fibrillation"))  # fmt: skip
    # The vocabulary's "afib" group holds atrial flutter too, which is not what the question asks.
    af = [c for c in load_vocab().diagnoses if c.group == "afib" and "fibrillation" in c.title.lower()]
    assert {c.version for c in af} == {9, 10}
    codes = ", ".join(f"('{c.code}', {c.version})" for c in af)
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        (seeded,) = conn.execute(example["sql"]).fetchone()
        (every,) = conn.execute(
            "SELECT COUNT(DISTINCT subject_id) FROM mimiciv_hosp.diagnoses_icd "
            f"WHERE (TRIM(icd_code), icd_version) IN ({codes})"
        ).fetchone()
        (icd9_only,) = conn.execute(
            "SELECT COUNT(DISTINCT subject_id) FROM mimiciv_hosp.diagnoses_icd WHERE icd_code = '42731'"
        ).fetchone()
    assert seeded == every > icd9_only
    checks = sql_code_check(source=source, sql=example["sql"])
    assert checks and not [m for c in checks for m in c["missing"] if "fibrillation" in m["title"].lower()]
