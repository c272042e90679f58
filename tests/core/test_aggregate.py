"""The safe aggregate fragment and its rewrite (core/aggregate.py), on the tree, no database."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from core import aggregate
from core.prepared import prepare_sql, protect_prepared
from core.privacy import PrivacyPolicy, PrivacyRefusal, suppression_sentence
from tests.core.test_validation import CATALOG, SQLITE

AGGREGATE_ONLY = PrivacyPolicy(
    min_cell_size=11,
    row_level=False,
    sensitive_allowed=False,
    sensitive_columns=frozenset({"patients.dod"}),
    identifier_columns=frozenset({"subject_id", "hadm_id", "stay_id"}),
)
P = "mimiciv_hosp.patients"
A = "mimiciv_hosp.admissions"

ACCEPTED = [
    f"SELECT gender, count(*) AS n FROM {P} GROUP BY gender",
    f"SELECT count(DISTINCT subject_id) FROM {A} WHERE admission_type = 'URGENT'",
    f"SELECT date_trunc('year', admittime) AS y, count(*) FROM {A} GROUP BY 1 ORDER BY 1",
    f"SELECT extract(year FROM admittime) AS y, avg(hospital_expire_flag) FROM {A} GROUP BY y",
    f"SELECT CASE WHEN anchor_age < 65 THEN 'young' ELSE 'old' END AS band, count(*) FROM {P} GROUP BY 1",
    f"SELECT gender, round(avg(anchor_age), 1) AS age, min(anchor_age), max(anchor_age) FROM {P} GROUP BY gender",
    f"SELECT a.admission_type, count(DISTINCT p.subject_id) FROM {A} a JOIN {P} p ON p.subject_id = a.subject_id "
    "WHERE p.gender = 'F' GROUP BY a.admission_type HAVING count(*) > 5",
    f"SELECT count(*) FROM (SELECT DISTINCT subject_id FROM {A} WHERE hadm_id IS NULL) s",
    f"SELECT gender, count(*) FROM {P} WHERE subject_id IN (SELECT subject_id FROM {A} WHERE admission_type = 'URGENT') "
    "GROUP BY gender",
]

REFUSED = [
    (f"SELECT max(subject_id), max(anchor_age) FROM {P} GROUP BY subject_id", "identifier"),
    (f"SELECT json_agg(subject_id) FROM {P}", "accepted aggregates"),
    (f"SELECT string_agg(gender, ',') FROM {P}", "lists individual rows"),
    (f"SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY subject_id) FROM {P}", "accepted aggregates"),
    (f"SELECT sum(subject_id) OVER () FROM {P}", "window"),
    (f"SELECT sum(CASE WHEN subject_id = 1 THEN anchor_age END) FROM {P}", "describes individuals"),
    (f"SELECT count(*) FROM {P} UNION ALL SELECT subject_id FROM {P}", "lists individual rows"),
    (f"SELECT count(*) FROM {P} UNION ALL SELECT count(*) FROM {A}", "combines queries"),
    (f"SELECT sum(CASE WHEN gender = 'F' THEN anchor_age END) FROM {P}", "aggregate one column"),
    (f"WITH t(k) AS (SELECT subject_id FROM {P}) SELECT max(k) FROM t GROUP BY k", "WITH"),
    (f"SELECT max(k) FROM (SELECT subject_id FROM {P}) AS s(k) GROUP BY k", "column list"),
    (f"SELECT max(x) FROM (SELECT subject_id AS x FROM {P}) s", "renames"),
    (f'SELECT max(U&"\\0073ubject_id") FROM {P}', "identifier"),
    (f"SELECT gender, count(*) + 0 FROM {P} GROUP BY gender", "computes with an aggregate"),
    (f"SELECT gender, -count(*) FROM {P} GROUP BY gender", "computes with an aggregate"),
    (f"SELECT gender, count(*)::text FROM {P} GROUP BY gender", "computes with an aggregate"),
    (f"SELECT count(*) FILTER (WHERE gender = 'F') FROM {P}", "FILTER"),
    (f"SELECT count(*) FROM {A} GROUP BY subject_id", "identifier"),
    (f"SELECT count(*) FROM {A} GROUP BY admission_type", "not among its output columns"),
    (f"SELECT avg(anchor_age) FROM {P} WHERE subject_id = 10000032", "given values"),
    (f"SELECT avg(anchor_age) FROM {P} WHERE 10000032 = subject_id", "given values"),
    (f"SELECT avg(anchor_age) FROM {P} WHERE subject_id BETWEEN 1 AND 10", "given values"),
    (
        f"SELECT gender, count(*) FROM {P} WHERE subject_id IN (SELECT subject_id FROM {A} WHERE hadm_id = 5) GROUP BY 1",
        "given values",
    ),
    (f"SELECT (SELECT max(anchor_age) FROM {P}) AS m, count(*) FROM {P}", "subquery"),
    # Differencing by a computed individual: "all women but the patient with the lowest id".
    (
        f"SELECT count(*) FROM {P} WHERE gender = 'F' AND subject_id <> (SELECT min(subject_id) FROM {P})",
        "identifier",
    ),
    (
        f"SELECT count(*) FROM {P} WHERE subject_id IN (SELECT subject_id FROM {A} ORDER BY admittime LIMIT 1)",
        "LIMIT",
    ),
    (f"SELECT count(*) FROM {P} WHERE subject_id + 0 = 10000032", "given values"),
    (f"SELECT DISTINCT gender FROM {P}", "DISTINCT"),
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_the_fragment_accepts_ordinary_aggregates_and_adds_the_people_count(sql):
    prepared = prepare_sql(sql, CATALOG, AGGREGATE_ONLY)
    assert prepared.people_column == aggregate.PEOPLE_COLUMN
    assert "subject_id) AS askdb_people" in prepared.sql
    # The statement sent is the validated one with the count appended to its SELECT list.
    assert prepared.sql.replace(", COUNT(DISTINCT", " COUNT(DISTINCT").count("askdb_people") == 1


@pytest.mark.parametrize(("sql", "reason"), REFUSED)
def test_the_fragment_refuses_everything_else_with_a_sentence(sql, reason):
    with pytest.raises(PrivacyRefusal) as info:
        prepare_sql(sql, CATALOG, AGGREGATE_ONLY)
    assert info.value.code in ("aggregate_fragment", "row_level")
    assert reason in info.value.message and "\n" not in info.value.message


def test_ordering_by_a_hidden_value_is_dropped():
    prepared = prepare_sql(f"SELECT gender, count(*) AS n FROM {P} GROUP BY gender ORDER BY max(subject_id), n", CATALOG,
                           AGGREGATE_ONLY)  # fmt: skip
    assert "max(subject_id)" not in prepared.sql.lower() and prepared.sql.endswith("ORDER BY n")
    assert any("ordering" in note for note in prepared.analysis.notes)


def test_the_sqlite_dialect_refuses_its_own_row_values():
    with pytest.raises(PrivacyRefusal, match="GREATEST"):  # a value of each row, not an aggregate
        prepare_sql("SELECT max(anchor_age, 0) FROM patients", SQLITE, AGGREGATE_ONLY)
    assert "askdb_people" in prepare_sql("SELECT gender, count(*) FROM patients GROUP BY gender", SQLITE,
                                         AGGREGATE_ONLY).sql  # fmt: skip


@dataclass
class _Result:
    columns: tuple
    rows: list
    truncated: bool = False
    elapsed_ms: float = 1.0


def test_rows_behind_fewer_than_k_people_are_hidden_whole_with_one_more():
    prepared = prepare_sql(f"SELECT anchor_year_group, avg(anchor_age) AS age FROM {P} GROUP BY 1", CATALOG,
                           AGGREGATE_ONLY)  # fmt: skip
    result = _Result(("anchor_year_group", "age", "askdb_people"),
                     [("a", 50.0, 40), ("b", 61.5, 2), ("c", 70.0, 13), ("d", 44.0, 30)])  # fmt: skip
    shown = protect_prepared(prepared, result, AGGREGATE_ONLY)
    assert shown.columns == ("anchor_year_group", "age")
    assert shown.rows == [["a", 50.0], ["<11", "<11"], ["<11", "<11"], ["d", 44.0]]
    assert shown.privacy["suppressed"] == 1 and shown.privacy["complementary"] == 1
    assert suppression_sentence(shown.privacy) == (
        "Rows behind fewer than 11 patients were hidden whole (1 row shown as <11; 1 more so that no total reveals it)."
    )


def test_the_sensitive_rule_comes_first_for_an_aggregate_user():
    with pytest.raises(PrivacyRefusal) as info:
        prepare_sql(f"SELECT max(dod) FROM {P}", CATALOG, AGGREGATE_ONLY)
    assert info.value.code == "sensitive_column"
