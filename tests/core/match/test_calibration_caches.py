"""The caches that make a calibration cheaper must not change a decision: the remembered validation
verdict is validate_sql's (a refused SQL stays refused when asked again, and a verdict is never
carried to another catalog), and a composition's one-parse template is the two-parse one."""

from __future__ import annotations

import pickle

import pytest

from core.match.build import build_template
from core.match.checked import validation_error
from core.match.composing import _template
from core.types import CatalogSchema, TableSchema
from core.validation import SqlValidationError, validate_sql

PATIENTS = TableSchema("mimiciv_hosp", "patients", ("subject_id", "gender", "anchor_age"))
ADMISSIONS = TableSchema("mimiciv_hosp", "admissions", ("subject_id", "hadm_id", "admission_type"))
GOOD = "SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE gender = 'F'"
NO_TABLE = "SELECT COUNT(*) FROM mimiciv_hosp.admissions WHERE admission_type = 'URGENT'"
WRITES = "DELETE FROM mimiciv_hosp.patients"


def _refusal(sql: str, catalog: CatalogSchema) -> str | None:
    try:
        validate_sql(sql, catalog)
    except SqlValidationError as error:
        return error.message
    return None


@pytest.mark.parametrize("sql", [GOOD, NO_TABLE, WRITES, "SELECT FROM WHERE", "SELECT 1; SELECT 2"])
def test_the_remembered_verdict_is_validate_sqls_every_time(sql):
    catalog = CatalogSchema(tables=(PATIENTS,))
    expected = _refusal(sql, catalog)
    assert validation_error(sql, catalog) == expected
    assert validation_error(sql, catalog) == expected  # asked again: remembered, the same
    assert (expected is None) == (sql == GOOD)


def test_a_verdict_is_never_carried_to_another_catalog():
    """Attack: a SQL accepted on a catalog that has the table must still be refused on one that
    lacks it (a source whose tables changed gets a new catalog), and the other way round."""
    wide, narrow = CatalogSchema(tables=(PATIENTS, ADMISSIONS)), CatalogSchema(tables=(PATIENTS,))
    assert validation_error(NO_TABLE, wide) is None
    assert validation_error(NO_TABLE, narrow) is not None
    assert validation_error(NO_TABLE, CatalogSchema(tables=(PATIENTS, ADMISSIONS))) is None
    assert wide == CatalogSchema(tables=(PATIENTS, ADMISSIONS))  # the memo is no field: equality holds


def test_a_catalog_with_verdicts_pickles_and_keeps_them_right():
    """A calibration hands its catalog to worker processes by pickle."""
    catalog = CatalogSchema(tables=(PATIENTS,))
    validation_error(NO_TABLE, catalog)
    copy = pickle.loads(pickle.dumps(catalog))
    assert validation_error(NO_TABLE, copy) == _refusal(NO_TABLE, copy)
    assert validation_error(GOOD, copy) is None


@pytest.mark.parametrize(
    ("question", "sql"),
    [
        ("how many female patients older than 65?",
         "SELECT COUNT(*) FROM mimiciv_hosp.patients AS p WHERE p.gender = 'F' AND p.anchor_age > 65"),
        # not sqlglot's own writing (case, spacing, a trailing semicolon): the two-parse path decides
        ("how many female patients older than 65?",
         "select count(*) from mimiciv_hosp.patients p where p.gender='F' and p.anchor_age>65;"),
        ("how many urgent admissions in 2150?",
         "SELECT COUNT(*) FROM mimiciv_hosp.admissions AS a WHERE a.admission_type = 'URGENT' "
         "AND STRFTIME('%Y', a.admittime) = '2150'"),
        ("what is it?", "SELECT FROM WHERE"),  # unusable either way, with the same error
    ],
)  # fmt: skip
@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_a_compositions_template_is_the_one_the_general_path_builds(question, sql, dialect):
    general = build_template(question, sql, dialect=dialect)
    assert build_template(question, sql, dialect=dialect, generated=True) == general
    assert _template(question, sql, dialect) == general
