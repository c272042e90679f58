"""The privacy rules on the parsed SQL and on results, without a database."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.privacy import (
    AGGREGATE,
    COUNT,
    DERIVED,
    KEY,
    VALUE,
    PrivacyPolicy,
    PrivacyRefusal,
    aggregate_question,
    analyse_output,
    check_access,
    protect,
    suppress,
    suppression_sentence,
)

POLICY = PrivacyPolicy(
    min_cell_size=11,
    sensitive_columns=frozenset({"patients.dod", "labevents.comments"}),
    identifier_columns=frozenset({"subject_id", "hadm_id", "stay_id"}),
)


def kinds(sql: str) -> list[str]:
    return [c.kind for c in analyse_output(sql, policy=POLICY).columns]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT gender, COUNT(*) AS n, AVG(anchor_age) FROM patients GROUP BY gender", [KEY, COUNT, AGGREGATE]),
        ("SELECT COUNT(DISTINCT subject_id)::int AS n FROM admissions", [COUNT]),
        ("SELECT SUM(CASE WHEN dod IS NOT NULL THEN 1 ELSE 0 END) AS died FROM patients", [COUNT]),
        ("SELECT 100.0 * SUM(CASE WHEN dod IS NULL THEN 0 ELSE 1 END) / COUNT(*) FROM patients", [DERIVED]),
        ("WITH g AS (SELECT gender, COUNT(*) AS n FROM patients GROUP BY gender) SELECT gender, n FROM g", [KEY, COUNT]),
        ("SELECT t.n FROM (SELECT COUNT(*) AS n FROM patients) AS t", [COUNT]),
        ("SELECT (SELECT COUNT(*) FROM patients) AS n", [COUNT]),
        ("SELECT subject_id, anchor_age FROM patients", [VALUE, VALUE]),
        ("SELECT gender, COUNT(*) OVER () FROM patients", [VALUE, COUNT]),
        ("SELECT g, COUNT(*) FROM patients GROUP BY g UNION ALL SELECT 'all', COUNT(*) FROM patients", [KEY, COUNT]),
    ],
)  # fmt: skip
def test_output_columns_are_classified_on_the_tree_not_by_name(sql, expected):
    assert kinds(sql) == expected


@pytest.mark.parametrize(
    ("sql", "aggregated", "why"),
    [
        ("SELECT COUNT(*) FROM patients WHERE gender = 'F'", True, ""),
        ("SELECT DISTINCT subject_id FROM diagnoses_icd", False, "one row per subject_id"),
        ("SELECT subject_id FROM patients", False, "lists individual rows"),
        ("SELECT subject_id, COUNT(*) FROM labevents GROUP BY subject_id", False, "one row per subject_id"),
        ("SELECT MAX(valuenum) FROM labevents WHERE subject_id = 10004235", False, "given values of subject_id"),
        ("SELECT COUNT(*) FROM (SELECT DISTINCT subject_id FROM diagnoses_icd) AS t", True, ""),
        ("SELECT string_agg(gender, ',') FROM patients", False, "lists individual rows"),
    ],
)  # fmt: skip
def test_an_output_is_aggregated_only_when_no_row_describes_an_individual(sql, aggregated, why):
    analysis = analyse_output(sql, policy=POLICY)
    assert analysis.aggregated is aggregated
    assert why in analysis.row_level_reason


def test_sensitive_columns_are_found_through_expressions_but_not_through_counts():
    def sensitive(sql):
        return [src for _, src in analyse_output(sql, policy=POLICY).sensitive(POLICY)]

    assert sensitive("SELECT subject_id, dod FROM patients") == ["patients.dod"]
    assert sensitive("SELECT EXTRACT(YEAR FROM p.dod) AS y FROM patients p") == ["patients.dod"]
    assert sensitive("WITH d AS (SELECT dod AS died FROM patients) SELECT died FROM d") == ["patients.dod"]
    assert sensitive("SELECT * FROM patients") == ["patients.*"]  # no catalog to expand *: assume the worst
    assert sensitive("SELECT COUNT(dod) FROM patients WHERE dod IS NOT NULL") == []


def test_refusals_say_why_and_offer_the_aggregate():
    researcher = PrivacyPolicy(sensitive_columns=POLICY.sensitive_columns, sensitive_allowed=False)
    with pytest.raises(PrivacyRefusal) as refused:
        check_access(analyse_output("SELECT dod FROM patients", policy=researcher), researcher)
    assert refused.value.code == "sensitive_column" and "patients.dod" in refused.value.message

    aggregate_only = PrivacyPolicy(row_level=False, identifier_columns=POLICY.identifier_columns)
    sql = "SELECT DISTINCT subject_id FROM diagnoses_icd WHERE icd_code = 'A419'"
    with pytest.raises(PrivacyRefusal) as refused:
        check_access(analyse_output(sql, policy=aggregate_only), aggregate_only, sql=sql,
                     question="List the patients with sepsis")  # fmt: skip
    assert refused.value.code == "row_level"
    assert refused.value.alternative["question"] == "How many patients with sepsis?"
    assert refused.value.alternative["sql"].startswith("SELECT COUNT(*) AS row_count FROM (SELECT DISTINCT")
    assert "How many patients with sepsis?" in refused.value.message
    check_access(analyse_output("SELECT COUNT(*) FROM patients", policy=aggregate_only), aggregate_only)


def test_a_listing_about_given_patients_offers_no_count_that_would_be_refused_too():
    aggregate_only = PrivacyPolicy(row_level=False, identifier_columns=POLICY.identifier_columns)
    sql = "SELECT gender FROM patients WHERE subject_id = 10004235"
    with pytest.raises(PrivacyRefusal) as refused:
        check_access(analyse_output(sql, policy=aggregate_only), aggregate_only, sql=sql,
                     question="what is the gender of patient 10004235?")  # fmt: skip
    assert refused.value.alternative == {}  # "How many rows answer: …" would be refused in turn
    assert "Its count would describe given individuals too" in refused.value.message


def test_an_aggregate_only_user_may_list_reference_tables_but_not_patients_through_them():
    aggregate_only = PrivacyPolicy(row_level=False, identifier_columns=POLICY.identifier_columns,
                                   reference_tables=frozenset({"d_icd_diagnoses", "d_labitems"}))  # fmt: skip
    for sql in [
        "SELECT icd_code, long_title FROM mimiciv_hosp.d_icd_diagnoses WHERE long_title ILIKE '%sepsis%'",
        "WITH s AS (SELECT * FROM d_icd_diagnoses) SELECT s.icd_code FROM s",
        "SELECT d.long_title, l.label FROM d_icd_diagnoses d, d_labitems l",
    ]:
        check_access(analyse_output(sql, policy=aggregate_only), aggregate_only, sql=sql)
    for sql in [
        "SELECT DISTINCT d.subject_id FROM diagnoses_icd d JOIN d_icd_diagnoses t ON t.icd_code = d.icd_code",
        "SELECT t.long_title FROM d_icd_diagnoses t WHERE t.icd_code IN (SELECT icd_code FROM diagnoses_icd)",
        "WITH d_icd_diagnoses AS (SELECT * FROM patients) SELECT * FROM d_icd_diagnoses",
        "SELECT * FROM d_icd_diagnoses, generate_series(1, 3)",
    ]:
        with pytest.raises(PrivacyRefusal) as refused:
            check_access(analyse_output(sql, policy=aggregate_only), aggregate_only, sql=sql)
        assert refused.value.code == "row_level", sql


def test_aggregate_question():
    assert (
        aggregate_question("which patients were admitted in 2150?")
        == "How many patients were admitted in 2150?"
    )
    assert (
        aggregate_question("Show me all the admissions of type URGENT")
        == "How many admissions of type URGENT?"
    )


def test_small_counts_and_their_groups_statistics_are_suppressed():
    sql = "SELECT admission_type, COUNT(*) AS n, AVG(los) AS los FROM admissions GROUP BY admission_type"
    rows = [["URGENT", 16, 4.2], ["ELECTIVE", 3, 2.0], ["EW EMER.", 58, 5.1], ["OBS", 0, None], ["X", 5, 1.5]]
    out, report = suppress(["admission_type", "n", "los"], rows, analyse_output(sql, policy=POLICY), 11)
    assert out == [["URGENT", 16, 4.2], ["ELECTIVE", "<11", "<11"], ["EW EMER.", 58, 5.1], ["OBS", 0, None],
                   ["X", "<11", "<11"]]  # fmt: skip
    assert report["suppressed"] == 2 and report["complementary"] == 0 and report["statistics"] == 2
    assert suppression_sentence(report).startswith("Counts below 11 were suppressed (2 cells shown as <11")


def test_a_total_and_all_but_one_group_cannot_reveal_the_hidden_cell():
    """One small group next to a total would be total minus the others: a second cell is hidden."""
    sql = ("SELECT grp, COUNT(*) AS n FROM patients GROUP BY grp "
           "UNION ALL SELECT 'all', COUNT(*) FROM patients")  # fmt: skip
    rows = [["a", 2], ["b", 13], ["c", 15], ["all", 30]]
    out, report = suppress(["grp", "n"], rows, analyse_output(sql, policy=POLICY), 11)
    assert out == [["a", "<11"], ["b", "<11"], ["c", 15], ["all", 30]]
    assert report["suppressed"] == 1 and report["complementary"] == 1
    shown = [n for _, n in out if isinstance(n, int)]
    assert 30 - (sum(shown) - 30) == 15  # all the arithmetic gives is the sum of the two hidden cells


def test_what_askdb_cannot_tell_it_says():
    out, report = suppress(["v"], [[3]], analyse_output("SELECT FROM WHERE", policy=POLICY), 11)
    assert out == [[3]] and any("could not" in n for n in report["notes"])
    _, report = suppress(["g", "m"], [["a", 1.5]],
                         analyse_output("SELECT g, AVG(x) AS m FROM t GROUP BY g", policy=POLICY), 11)  # fmt: skip
    assert any("does not show the group sizes behind m" in n for n in report["notes"])
    out, report = suppress(["n"], [[3]], analyse_output("SELECT COUNT(*) AS n FROM t", policy=POLICY), 0)
    assert out == [[3]] and suppression_sentence(report) == ""


def test_one_individuals_counts_are_not_cells_for_a_user_who_may_list_rows():
    sql = "SELECT COUNT(*) AS n FROM admissions WHERE subject_id = 10004235"
    analysis = analyse_output(sql, policy=POLICY)
    assert analysis.about_individuals and not analysis.aggregated
    result = SimpleNamespace(columns=("n",), rows=[(3,)], truncated=False, elapsed_ms=1.0)
    shown = protect(result, analysis, POLICY)
    assert (
        shown.rows == [[3]]
        and shown.privacy["k"] == 0
        and shown.privacy["notes"][0].startswith("Not suppressed")
    )
