"""Grouping sampled SQL candidates by result, and naming what splits them (no database needed)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from types import SimpleNamespace

import pytest
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.test import RequestFactory
from django.urls import path

from core.candidates import (
    Candidate,
    choose_candidate,
    group_candidates,
    sql_structure,
)
from core.types import CatalogSchema, TableSchema

H = "mimiciv_hosp"
DIAG = f"SELECT COUNT(DISTINCT d.subject_id) FROM {H}.diagnoses_icd d WHERE d.icd_code LIKE 'A41%'"
PROC = f"SELECT COUNT(DISTINCT p.subject_id) FROM {H}.procedures_icd p WHERE p.icd_code LIKE 'A41%'"


def ok(index: int, sql: str, rows, columns=("n",)) -> Candidate:
    rows = [list(r) for r in rows]
    return Candidate(index=index, sql=sql, columns=list(columns), rows=rows, row_count=len(rows))


def failed(index: int, sql: str | None, error: str, code: str) -> Candidate:
    return Candidate(index=index, sql=sql, error=error, error_code=code)


# --- structure -----------------------------------------------------------------------------------


def test_structure_resolves_aliases_to_tables_and_reads_the_parts():
    s = sql_structure(
        f"SELECT a.subject_id, COUNT(DISTINCT d.icd_code) AS n FROM {H}.admissions AS a "
        f"JOIN {H}.diagnoses_icd d ON d.hadm_id = a.hadm_id AND d.icd_version = 10 "
        "WHERE a.admission_type = 'URGENT' GROUP BY 1 HAVING COUNT(*) > 2.0 ORDER BY n DESC LIMIT 1"
    )
    assert s.tables == {f"{H}.admissions", f"{H}.diagnoses_icd"}
    assert s.columns == {
        f"{H}.admissions.subject_id",
        f"{H}.admissions.hadm_id",
        f"{H}.admissions.admission_type",
        f"{H}.diagnoses_icd.icd_code",
        f"{H}.diagnoses_icd.hadm_id",
        f"{H}.diagnoses_icd.icd_version",
    }
    assert s.values == {"10", "'URGENT'", "2"}  # 2.0 and 2 are one value
    assert s.aggregates == {"count distinct", "count"}
    # the output alias `n` and the ordinal `1` mean expressions, named by table, not by alias
    assert s.order == ("count(distinct diagnoses_icd.icd_code) desc",)
    assert s.limit == "1"
    assert s.group_by == {"admissions.subject_id"}


def test_structure_is_the_same_whatever_aliases_and_formatting():
    a = sql_structure(f"select x.subject_id from {H}.patients x where x.gender = 'F' order by x.anchor_age")
    b = sql_structure(
        f"SELECT\n  patients.subject_id\nFROM {H}.PATIENTS\nWHERE patients.gender = 'F'\nORDER BY anchor_age ASC;"
    )
    assert a == b


def test_structure_follows_cte_outputs_and_ignores_cte_names():
    s = sql_structure(
        f"WITH per AS (SELECT subject_id, COUNT(*) AS k FROM {H}.admissions GROUP BY subject_id) "
        "SELECT per.subject_id FROM per WHERE per.k > 3 ORDER BY per.k DESC"
    )
    assert s.tables == {f"{H}.admissions"}  # the CTE is not a table
    assert s.columns == {f"{H}.admissions.subject_id"}
    assert s.order == ("count(*) desc",)
    assert s.values == {"3"}


def test_structure_uses_the_catalog_for_unqualified_names():
    catalog = CatalogSchema(
        tables=(
            TableSchema(H, "admissions", ("subject_id", "hadm_id", "admittime")),
            TableSchema(H, "patients", ("subject_id", "gender")),
        )
    )
    s = sql_structure(
        "SELECT gender FROM admissions a JOIN patients p ON p.subject_id = a.subject_id", catalog=catalog
    )
    assert s.tables == {f"{H}.admissions", f"{H}.patients"}
    assert f"{H}.patients.gender" in s.columns
    # without the catalog an unqualified column of a join can't be placed, and is kept bare
    assert "gender" in sql_structure("SELECT gender FROM admissions a JOIN patients p ON true").columns


def test_unparseable_sql_has_an_empty_structure():
    assert sql_structure("SELECT FROM WHERE (").tables == frozenset()


# --- grouping ------------------------------------------------------------------------------------


def test_all_agreeing_candidates_are_one_group_with_full_confidence():
    sqls = [
        DIAG,
        DIAG.lower(),
        f"select count(distinct x.subject_id) as patients from {H}.diagnoses_icd as x where x.icd_code like 'A41%';",
        DIAG.replace(" d ", " dx ").replace("d.", "dx."),
        DIAG,
    ]
    report = group_candidates([ok(i, s, [(17,)]) for i, s in enumerate(sqls)])
    assert report.k == 5
    assert len(report.groups) == 1
    assert report.groups[0].members == (0, 1, 2, 3, 4)
    assert report.confidence == 1.0
    assert report.disagreement is None
    assert report.groups[0].sql == min(sqls, key=len)  # the shortest SQL represents the group
    assert choose_candidate(report, 0.6) == (0, False)
    assert report.to_json()["groups"][0]["representative"] == sqls.index(min(sqls, key=len))


def test_same_sql_shape_with_different_results_is_still_a_disagreement():
    q = f"SELECT subject_id FROM {H}.patients ORDER BY random() LIMIT 1"
    report = group_candidates([ok(0, q, [(1,)]), ok(1, q, [(1,)]), ok(2, q, [(8,)])])
    assert report.disagreement.part == "results"
    assert report.confidence == pytest.approx(2 / 3)


def test_three_two_split_on_the_table_names_it():
    cands = [ok(0, DIAG, [(17,)]), ok(1, PROC, [(4,)]), ok(2, DIAG, [(17,)]), ok(3, PROC, [(4,)])]
    cands.append(ok(4, DIAG + " ", [(17.0,)]))
    report = group_candidates(cands)
    assert report.confidence == pytest.approx(0.6)
    assert [g.members for g in report.groups] == [(0, 2, 4), (1, 3)]
    # tables and columns split the same candidates; a different table is named first
    assert report.disagreement.part == "tables"
    assert report.disagreement.phrase == "candidates disagree on the table: diagnoses_icd vs procedures_icd"
    assert report.disagreement.split == 2
    assert report.disagreements["columns"] == (
        "diagnoses_icd.icd_code, diagnoses_icd.subject_id",
        "procedures_icd.icd_code, procedures_icd.subject_id",
    )
    assert "values" not in report.disagreements  # both filter on 'A41%'
    assert choose_candidate(report, 0.6) == (0, False)
    assert choose_candidate(report, 0.8) == (None, True)


def test_column_split_within_one_table_is_named_as_columns_with_described_names():
    a = f"SELECT COUNT(*) FROM {H}.admissions WHERE admission_type = 'URGENT'"
    b = f"SELECT COUNT(*) FROM {H}.admissions WHERE admission_location = 'URGENT'"
    names = {f"{H}.admissions.admission_type": "admission type column"}
    report = group_candidates(
        [ok(0, a, [(5,)]), ok(1, a, [(5,)]), ok(2, a, [(5,)]), ok(3, b, [(1,)]), ok(4, b, [(1,)])],
        describe=lambda name: names.get(name, ""),
    )
    assert report.disagreement.part == "columns"
    assert report.disagreement.phrase == (
        "candidates disagree on the column: admission type column vs admissions.admission_location"
    )
    assert report.distinct == ("admission type column", "admissions.admission_location")


def test_split_on_a_literal_value():
    base = f"SELECT COUNT(*) FROM {H}.d_icd_diagnoses WHERE long_title = '{{}}'"
    cands = [ok(i, base.format("sepsis"), [(3,)]) for i in (0, 1, 2)]
    cands += [ok(i, base.format("severe sepsis"), [(1,)]) for i in (3, 4)]
    report = group_candidates(cands)
    assert report.disagreement.part == "values"
    assert report.disagreement.phrase == "candidates disagree on the value: 'sepsis' vs 'severe sepsis'"


def test_count_versus_count_distinct():
    a = f"SELECT COUNT(subject_id) FROM {H}.admissions"
    b = f"SELECT COUNT(DISTINCT subject_id) FROM {H}.admissions"
    report = group_candidates([ok(0, a, [(90,)]), ok(1, a, [(90,)]), ok(2, b, [(40,)])])
    assert report.disagreement.part == "aggregates"
    assert report.disagreement.phrase == "candidates disagree on the aggregate: count vs count distinct"


def test_first_versus_last():
    q = f"SELECT hadm_id FROM {H}.admissions WHERE subject_id = 7 ORDER BY admittime {{}} LIMIT 1"
    report = group_candidates(
        [ok(0, q.format("DESC"), [(2,)]), ok(1, q.format("DESC"), [(2,)]), ok(2, q.format("ASC"), [(1,)])]
    )
    assert report.disagreement.part == "order"
    assert report.disagreement.values == (
        "last by admissions.admittime (descending, limit 1)",
        "first by admissions.admittime (ascending, limit 1)",
    )


def test_worst_part_is_the_one_splitting_most_candidates():
    # groups of 2, 2 and 1: the aggregate separates two candidates from three, the value only one
    a = f"SELECT COUNT(subject_id) FROM {H}.admissions WHERE admission_type = 'URGENT'"
    b = f"SELECT COUNT(DISTINCT subject_id) FROM {H}.admissions WHERE admission_type = 'URGENT'"
    c = f"SELECT COUNT(subject_id) FROM {H}.admissions WHERE admission_type = 'EW EMER.'"
    report = group_candidates(
        [ok(0, a, [(9,)]), ok(1, b, [(4,)]), ok(2, a, [(9,)]), ok(3, b, [(4,)]), ok(4, c, [(2,)])]
    )
    assert set(report.disagreements) == {"values", "aggregates"}
    assert report.disagreement.part == "aggregates"
    assert report.disagreement.split == 2
    assert report.distinct == ("count", "count distinct", "count")
    assert choose_candidate(report, 0.1) == (None, True)  # 2 vs 2 is a tie


def test_failures_count_in_k_but_are_never_grouped():
    cands = [
        ok(0, DIAG, [(17,)]),
        failed(1, None, "the reply contained no SQL", "no_sql"),
        ok(2, DIAG, [(17,)]),
        failed(3, "SELECT nope FROM x", "table `x` does not exist", "unknown_table"),
        failed(4, DIAG, "canceling statement due to statement timeout", "timeout"),
    ]
    report = group_candidates(cands)
    assert report.k == 5
    assert [g.members for g in report.groups] == [(0, 2)]
    assert [f.index for f in report.failures] == [1, 3, 4]
    assert report.confidence == pytest.approx(0.4)
    assert report.disagreement.part == "failures"
    assert report.disagreement.phrase == "3 of 5 candidates failed (no_sql, unknown_table, timeout)"
    assert choose_candidate(report, 0.6) == (None, True)
    data = report.to_json()
    assert data["failures"][0] == {
        "index": 1,
        "sql": "",
        "error": "the reply contained no SQL",
        "code": "no_sql",
    }
    assert data["groups"][0]["members"] == [0, 2]


def test_all_failed_means_no_confidence_and_no_majority():
    report = group_candidates([failed(i, "SELECT 1", "boom", "sql_error") for i in range(3)])
    assert report.confidence == 0.0
    assert report.groups == ()
    assert report.majority is None
    assert choose_candidate(report, 0.0) == (None, True)
    data = report.to_json()
    assert data["majority"] is None and data["ambiguous"] is True and data["chosen"] is None


def test_a_tie_is_ambiguous_whatever_the_threshold():
    a = f"SELECT COUNT(*) FROM {H}.patients WHERE gender = 'F'"
    b = f"SELECT COUNT(*) FROM {H}.patients WHERE gender = 'M'"
    report = group_candidates(
        [ok(0, a, [(20,)]), ok(1, b, [(20.5,)]), ok(2, b, [(20.5,)]), ok(3, a, [(20,)])]
    )
    assert report.confidence == 0.5
    assert [g.members for g in report.groups] == [(0, 3), (1, 2)]  # tie broken by first index
    assert choose_candidate(report, 0.1) == (None, True)
    assert report.to_json()["ambiguous"] is True


def test_numbers_are_grouped_after_rounding_and_column_names_ignored():
    q = f"SELECT AVG(anchor_age) FROM {H}.patients"
    report = group_candidates(
        [
            ok(0, q, [(decimal.Decimal("3.0001"),)], columns=("avg",)),
            ok(1, q, [(3.0,)], columns=("mean_age",)),
            ok(2, q, [("3",)]),
        ]
    )
    assert len(report.groups) == 1 and report.confidence == 1.0


def test_different_column_counts_are_different_answers():
    q = f"SELECT subject_id FROM {H}.patients"
    report = group_candidates([ok(0, q, [(1,)]), ok(1, q, [(1, 1)], columns=("a", "b"))])
    assert len(report.groups) == 2


def test_row_order_does_not_split_unordered_results():
    q = f"SELECT subject_id FROM {H}.patients"
    report = group_candidates([ok(0, q, [(1,), (2,)]), ok(1, q, [(2,), (1,)])])
    assert len(report.groups) == 1


def test_json_is_dumpable_with_dates_decimals_and_capped_preview():
    first = (dt.date(2150, 1, 1), decimal.Decimal("1.50"), dt.datetime(2150, 1, 1, 8), float("nan"), None)
    rows = [first] + [(dt.date(2150, 2, i + 1), decimal.Decimal(i), None, 1.0, True) for i in range(14)]
    q = f"SELECT admittime::date, 1.5, admittime, 0, NULL FROM {H}.admissions"
    columns = ("d", "x", "t", "f", "n")
    report = group_candidates([ok(0, q, rows, columns=columns), ok(1, q, rows[::-1], columns=columns)])
    back = json.loads(json.dumps(report.to_json(), allow_nan=False))
    group = back["groups"][0]
    assert group["members"] == [0, 1]
    assert group["columns"] == list(columns)
    assert group["rows"][0] == ["2150-01-01", "1.50", "2150-01-01T08:00:00", "nan", None]
    assert group["rows"][1] == ["2150-02-01", "0", None, 1.0, True]
    assert len(group["rows"]) == 10 and group["row_count"] == 15
    assert back["k"] == 2 and back["confidence"] == 1.0 and back["majority"] == 0
    assert group["structure"]["tables"] == [f"{H}.admissions"]


# --- the run-page partial ------------------------------------------------------------------------


def _view(request, **kwargs):
    return HttpResponse("")


urlpatterns = [
    path("", _view, name="home"),
    path("runs/<int:run_id>/pick/", _view, name="run_pick_candidate"),
]


def _render(report) -> str:
    run = SimpleNamespace(pk=42, question=SimpleNamespace(text="how many sepsis patients?"))
    context = {"candidates": report.to_json(), "run": run}
    return render_to_string("askdb/partials/candidates.html", context, request=RequestFactory().post("/"))


@pytest.mark.urls(__name__)
def test_partial_shows_ambiguous_candidates_side_by_side_with_pick_forms():
    cands = [ok(0, DIAG, [(17,)]), ok(1, PROC, [(4,)]), ok(2, DIAG, [(17,)]), ok(3, PROC, [(4,)])]
    cands.append(failed(4, "SELECT 1 FROM nope", "table `nope` does not exist", "unknown_table"))
    html = _render(group_candidates(cands))
    assert "askdb is not sure what this question means" in html and "at most 2 of 5 agree" in html
    assert "candidates disagree on the table: diagnoses_icd vs procedures_icd" in html.lower()
    assert html.count('action="/runs/42/pick/"') == 2
    assert 'name="group" value="0"' in html and 'name="group" value="1"' in html
    assert html.count('name="csrfmiddlewaretoken"') == 2
    assert html.count("2 of 5 candidates") == 2
    assert 'href="/?q=how%20many%20sepsis%20patients%3F"' in html
    assert "table `nope` does not exist" in html and "1 of 5 candidates failed" in html
    assert 'class="language-sql"' in html


@pytest.mark.urls(__name__)
def test_partial_shows_confidence_and_hides_the_minority_behind_a_disclosure():
    cands = [ok(i, DIAG, [(17,)]) for i in range(4)] + [ok(4, PROC, [(4,)])]
    html = _render(group_candidates(cands))
    assert "4 of 5 queries askdb wrote give this answer" in html and "(80% agreement)" in html
    assert "does not prove the answer is right" in html
    assert "<details>" in html and "1 other answer" in html
    # only the minority answer is offered, as the group with index 1
    assert html.count('name="group"') == 1 and 'name="group" value="1"' in html
    assert "not sure what this question means" not in html


@pytest.mark.urls(__name__)
def test_partial_is_one_line_when_all_agree_and_empty_without_sampling():
    html = _render(group_candidates([ok(i, DIAG, [(17,)]) for i in range(3)]))
    assert "All 3 queries askdb wrote give this answer" in html and "(100% agreement)" in html
    assert "Use this answer" not in html
    assert _render(group_candidates([ok(0, DIAG, [(17,)])])).strip() == ""


@pytest.mark.urls(__name__)
def test_partial_when_every_candidate_failed_offers_only_rephrasing():
    html = _render(group_candidates([failed(i, "SELECT 1", f"error {i}", "sql_error") for i in range(3)]))
    assert "No query askdb wrote could run" in html and "None of the 3 queries askdb wrote" in html
    assert "Use this answer" not in html and "Rephrase" in html
    assert "3 of 3 candidates failed" in html and "error 2" in html
