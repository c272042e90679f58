"""Display names for result columns: the catalog's label, an aggregate's word, or the name's words."""

from __future__ import annotations

import pytest

from core.labels import ColumnLabel, draft_label, result_labels, sql_tables

CATALOG = {
    "los": draft_label("los", "ICU length of stay in fractional days (outtime - intime).", table="icustays"),
    "anchor_age": ColumnLabel("anchor_age", "Age", "years"),
    "long_title": draft_label("long_title", table="d_icd_diagnoses"),
}


@pytest.mark.parametrize(
    ("column", "sql", "heading"),
    [
        # the example: an aggregate takes its word and the source column's label and unit
        (
            "avg_los_days",
            "SELECT AVG(los) AS avg_los_days FROM mimiciv_icu.icustays",
            "Average ICU length of stay (days)",
        ),
        ("avg_los_days", "", "Average ICU length of stay (days)"),  # from the name alone
        ("x", "SELECT ROUND(MAX(anchor_age), 1) AS x FROM mimiciv_hosp.patients", "Highest age (years)"),
        (
            "n_admissions",
            "SELECT COUNT(*) AS n_admissions FROM mimiciv_hosp.admissions",
            "Number of admissions",
        ),
        ("n", "SELECT COUNT(DISTINCT subject_id) AS n FROM mimiciv_hosp.diagnoses_icd", "Number of patients"),
        ("n", "SELECT COUNT(*) AS n FROM mimiciv_icu.icustays", "Number of ICU stays"),
        ("long_title", "SELECT long_title FROM mimiciv_hosp.d_icd_diagnoses", "Diagnosis"),
        ("anchor_age", "SELECT anchor_age FROM mimiciv_hosp.patients", "Age (years)"),
        ("first_careunit", "", "First care unit"),
        ("icd_code", "", "ICD code"),
        ("hadm_id", "", "Admission"),
    ],
)
def test_result_columns_read_as_labels(column, sql, heading):
    (label,) = result_labels([column], sql=sql, catalog=CATALOG)
    assert label.heading == heading and label.name == column


def test_a_curated_label_wins_over_the_draft_and_ids_keep_their_digits():
    catalog = {"first_careunit": ColumnLabel("first_careunit", "ICU type")}
    assert result_labels(["first_careunit"], catalog=catalog)[0].label == "ICU type"
    assert draft_label("subject_id").format == "code" and draft_label("los_hours").unit == "hours"


def test_sql_that_does_not_parse_still_gets_labels_from_names():
    assert [lb.heading for lb in result_labels(["n_patients"], sql="SELEC broken (")] == [
        "Number of patients"
    ]
    assert sql_tables(
        "SELECT 1 FROM mimiciv_hosp.admissions a JOIN mimiciv_hosp.patients p USING (subject_id)"
    ) == [
        "admissions",
        "patients",
    ]
