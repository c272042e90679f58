"""Every string of the hostile corpus (data/hostile_sql.yaml) fails safely.

`refused` entries must be refused by validation. `capped` entries are ordinary-looking resource
bombs (generate_series, repeat, recursive CTEs): validation may accept them, because execution
limits stop them; tests/test_clinical_limits.py runs those limits against PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.validation import SqlValidationError, validate_sql
from tests.core.test_validation import CATALOG, SQLITE

CORPUS = yaml.safe_load((Path(__file__).parent / "data" / "hostile_sql.yaml").read_text(encoding="utf-8"))
CATALOGS = {"postgres": CATALOG, "sqlite": SQLITE}


def _refused(entry: dict) -> SqlValidationError | None:
    try:
        validate_sql(entry["sql"], CATALOGS[entry["dialect"]])
    except SqlValidationError as error:
        return error
    return None


def test_the_corpus_is_large_and_well_formed():
    assert len(CORPUS) >= 300
    assert all(set(e) == {"sql", "category", "dialect", "expect"} for e in CORPUS)
    assert {e["expect"] for e in CORPUS} == {"refused", "capped"}
    assert len({(e["sql"], e["dialect"]) for e in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("entry", CORPUS, ids=[f"{i:03d}-{e['category'][:30]}" for i, e in enumerate(CORPUS)])
def test_each_hostile_string_fails_safely(entry):
    error = _refused(entry)
    if entry["expect"] == "refused":
        assert error is not None, f"accepted: {entry['sql']!r}"
        assert error.message and "\n" not in error.message


def test_corpus_counts(capsys):
    """The counts the issue asks for; accepted-and-dangerous must be 0."""
    refused = [e for e in CORPUS if _refused(e) is not None]
    capped = [e for e in CORPUS if e["expect"] == "capped" and _refused(e) is None]
    dangerous = [e for e in CORPUS if e["expect"] == "refused" and _refused(e) is None]
    with capsys.disabled():
        print(
            f"\nhostile corpus: total {len(CORPUS)}, refused {len(refused)}, "
            f"allowed-but-capped {len(capped)}, accepted-and-dangerous {len(dangerous)}"
        )
    assert len(refused) + len(capped) == len(CORPUS)
    assert dangerous == []


def test_the_issue_probes_name_the_function():
    error = _refused(
        {"sql": 'SELECT U&"\\0070g_sleep"(3) FROM mimiciv_hosp.patients u LIMIT 1', "dialect": "postgres"}
    )
    assert error is not None and error.code == "denied_function" and "pg_sleep" in error.message
    error = _refused({"sql": "SELECT * FROM ts_stat('SELECT 1')", "dialect": "postgres"})
    assert error is not None and "ts_stat" in error.message
    error = _refused({"sql": "SELECT * FROM pg_stat_get_activity(NULL)", "dialect": "postgres"})
    assert error is not None and "pg_stat_get_activity" in error.message
