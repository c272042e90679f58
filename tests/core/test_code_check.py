"""Which coded filters a query has, read off its tree (core/code_check.py)."""

from __future__ import annotations

from core.code_check import code_filters


def by_kind(sql: str) -> dict:
    return {(f.kind, f.concept): f for f in code_filters(sql)}


def test_codes_titles_items_and_drugs_are_found_with_their_concept():
    found = by_kind(
        "SELECT COUNT(*) FROM mimiciv_hosp.diagnoses_icd AS di JOIN mimiciv_hosp.d_icd_diagnoses AS d "
        "ON d.icd_code = di.icd_code WHERE di.icd_code IN ('42731', 'I480') OR LOWER(d.long_title) LIKE '%sepsis%'"
    )
    assert found[("code", "diagnosis")].values == ("42731", "I480")
    assert found[("title", "diagnosis")].patterns == ("%sepsis%",)
    procedures = by_kind("SELECT * FROM mimiciv_hosp.procedures_icd AS p WHERE p.icd_code = '3893'")
    assert (
        procedures[("code", "procedure")].values == ("3893",)
        and procedures[("code", "procedure")].table == "procedures_icd"
    )
    items = by_kind("SELECT AVG(valuenum) FROM mimiciv_hosp.labevents WHERE itemid = 50912")
    assert items[("itemid", "item")].values == ("50912",)
    drugs = by_kind("SELECT COUNT(*) FROM mimiciv_hosp.prescriptions WHERE drug ILIKE 'aspirin%'")
    assert drugs[("drug", "drug")].patterns == ("aspirin%",)


def test_a_literal_on_the_left_and_a_join_condition_are_read_right():
    found = by_kind("SELECT 1 FROM mimiciv_hosp.diagnoses_icd AS d WHERE '42731' = d.icd_code")
    assert found[("code", "diagnosis")].values == ("42731",)
    # a join on codes compares two columns: not a filter
    assert (
        code_filters(
            "SELECT 1 FROM mimiciv_hosp.diagnoses_icd AS di JOIN mimiciv_hosp.d_icd_diagnoses AS d ON d.icd_code = di.icd_code"
        )
        == []
    )


def test_sql_that_does_not_parse_has_no_filters():
    assert code_filters("SELEC nonsense ((") == []
