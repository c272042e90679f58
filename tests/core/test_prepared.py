"""The analysis prepare_sql makes of the validated tree is the one the release reads (the engine,
corrections, picked candidates): it must say what a fresh analysis of the same SQL says, for
every query that passes, whoever asks, so reusing it (instead of a second parse) weakens nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from core.prepared import prepare_sql
from core.privacy import PrivacyPolicy, PrivacyRefusal, analyse_output
from core.validation import SqlValidationError
from tests.core.test_aggregate import ACCEPTED, AGGREGATE_ONLY, REFUSED
from tests.core.test_validation import CATALOG

HOSTILE = yaml.safe_load((Path(__file__).parent / "data" / "hostile_sql.yaml").read_text(encoding="utf-8"))
P, A = "mimiciv_hosp.patients", "mimiciv_hosp.admissions"
ROW_LEVEL_SQL = [
    f"SELECT subject_id, gender FROM {P} WHERE anchor_age > 60",
    f"SELECT p.subject_id, count(*) AS n FROM {P} p JOIN {A} a ON a.subject_id = p.subject_id GROUP BY p.subject_id",
    f"SELECT gender, count(*) FROM {P} WHERE subject_id = 10000032 GROUP BY gender",
    f"SELECT count(*) FROM {P} WHERE dod IS NOT NULL",
    f"WITH t AS (SELECT subject_id, anchor_age FROM {P}) SELECT max(anchor_age) FROM t",
    f"SELECT * FROM {P} -- a comment\r LIMIT 5",
    f'SELECT U&"\\0064od" FROM {P}',
]
ROW_LEVEL = replace(AGGREGATE_ONLY, row_level=True, sensitive_allowed=True)
CORPUS = [
    *ACCEPTED,
    *(sql for sql, _ in REFUSED),
    *ROW_LEVEL_SQL,
    *(item["sql"] for item in HOSTILE if item.get("dialect", "postgres") == "postgres"),
]


def _meaning(analysis):
    """Everything the release reads (the notes are the report's, and the rewrite adds one)."""
    return replace(analysis, notes=())


@pytest.mark.parametrize("policy", [AGGREGATE_ONLY, ROW_LEVEL], ids=["aggregate-only", "row-level"])
def test_the_prepared_analysis_is_what_a_fresh_analysis_of_the_sql_says(policy: PrivacyPolicy):
    compared = 0
    for sql in CORPUS:
        try:
            prepared = prepare_sql(sql, CATALOG, policy)
        except (SqlValidationError, PrivacyRefusal):
            continue  # refused before anything runs: nothing is released
        fresh = analyse_output(sql, CATALOG.dialect, policy=policy, catalog=CATALOG)
        assert _meaning(prepared.analysis) == _meaning(fresh), sql
        compared += 1
    assert compared >= (8 if policy is AGGREGATE_ONLY else 50)
