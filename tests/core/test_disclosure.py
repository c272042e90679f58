"""Disclosure control, pure: which queries are probes one condition apart, and what rounding,
noise and differential privacy do to counts (the differencing example of issue 24: 42 female
patients, then 41 "all but the patient with the lowest id")."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from core import disclosure, privacy
from core.disclosure import (
    DP,
    NOISE,
    ROUND,
    UNIFORM,
    DisclosurePolicy,
    DisclosureRefusal,
    DpQuery,
    check_budget,
    check_release,
    disclose,
    disclosure_sentence,
    near_identical,
    noise_seed,
    query_shape,
)
from core.types import CatalogSchema, TableSchema

FEMALE = "SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE gender = 'F'"
ALL_BUT_LOWEST = (
    "SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE gender = 'F' "
    "AND subject_id <> (SELECT MIN(subject_id) FROM mimiciv_hosp.patients WHERE gender = 'F')"
)
ALL_BUT_HIGHEST = ALL_BUT_LOWEST.replace("MIN(", "MAX(")
BY_GENDER = "SELECT gender, COUNT(*) AS n FROM mimiciv_hosp.patients GROUP BY gender"


def shape(sql: str) -> disclosure.QueryShape:
    out = query_shape(sql)
    assert out is not None
    return out


@pytest.mark.parametrize(
    "first, second",
    [
        (FEMALE, ALL_BUT_LOWEST),  # one extra condition: the probe
        (ALL_BUT_LOWEST, FEMALE),
        (ALL_BUT_LOWEST, ALL_BUT_HIGHEST),  # one condition replaced, on the same column
        (FEMALE + " AND anchor_age > 60", FEMALE + " AND anchor_age > 61"),  # one constant
        (FEMALE + " AND anchor_age > 60", FEMALE + " AND anchor_age >= 60"),
        (FEMALE, FEMALE + " AND 1 = 1"),  # a no-op condition to draw fresh noise is a probe too
        (FEMALE, FEMALE.replace("gender = 'F'", "NOT (gender <> 'F' OR subject_id = 10000032)")),  # De Morgan
        (FEMALE, "select   count(*) from MIMICIV_HOSP.PATIENTS where gender='F' and subject_id != 10000032"),
        (
            "SELECT COUNT(*) FROM mimiciv_hosp.patients p WHERE (p.gender = 'F' AND p.anchor_age > 50)",
            "SELECT COUNT(*) FROM mimiciv_hosp.patients p WHERE p.anchor_age > 50",
        ),
        # Spelling that must not make a probe look new: output aliases, table aliases, CTE names.
        (FEMALE, ALL_BUT_LOWEST.replace("COUNT(*)", "COUNT(*) AS n", 1)),
        (
            FEMALE.replace("patients", "patients AS p"),
            ALL_BUT_LOWEST.replace("gender", "q.gender").replace(
                "mimiciv_hosp.patients WHERE q.gender = 'F' AND",
                "mimiciv_hosp.patients q WHERE q.gender = 'F' AND",
                1,
            ),
        ),
        (
            "WITH f AS (SELECT subject_id FROM mimiciv_hosp.patients WHERE gender = 'F') SELECT COUNT(*) FROM f",
            "WITH g AS (SELECT subject_id FROM mimiciv_hosp.patients WHERE gender = 'F') SELECT COUNT(*) FROM g "
            "WHERE subject_id > 10000032",
        ),
        (  # the extra condition in HAVING instead of WHERE
            "SELECT gender, COUNT(*) FROM mimiciv_hosp.patients WHERE anchor_age > 50 GROUP BY gender",
            "SELECT gender, COUNT(*) FROM mimiciv_hosp.patients WHERE anchor_age > 50 GROUP BY gender "
            "HAVING MIN(subject_id) > 10000032",
        ),
        (
            "WITH f AS (SELECT subject_id FROM mimiciv_hosp.patients WHERE gender = 'F') SELECT COUNT(*) FROM f",
            "WITH f AS (SELECT subject_id FROM mimiciv_hosp.patients WHERE gender = 'F' AND subject_id > 1) "
            "SELECT COUNT(*) FROM f",
        ),
    ],
)
def test_queries_one_condition_apart_are_near_identical(first, second):
    assert near_identical(shape(first), shape(second))


@pytest.mark.parametrize(
    "first, second",
    [
        (FEMALE, FEMALE),  # the same question again is a repeat (and gets the same noise), not a probe
        (FEMALE, FEMALE.replace("'F'", "'M'").replace("COUNT(*)", "COUNT(DISTINCT subject_id)")),
        (FEMALE, "SELECT COUNT(*) FROM mimiciv_hosp.admissions WHERE gender = 'F'"),  # another table
        (FEMALE, FEMALE + " AND anchor_age > 60 AND anchor_year > 2150"),  # two conditions apart
        (FEMALE + " AND anchor_age > 60", FEMALE + " AND anchor_year > 2150"),  # another column
        (BY_GENDER, FEMALE),
    ],
)
def test_other_queries_are_not(first, second):
    assert not near_identical(shape(first), shape(second))


def test_a_shape_survives_the_ledger_json():
    s = shape(ALL_BUT_LOWEST)
    assert disclosure.QueryShape.from_json(s.to_json()) == s
    assert query_shape("SELEC nothing (") is None


def released(sql: str, rows: list[list], policy: DisclosurePolicy, *, k: int = 11, seed: bytes = b"s",
             row_level: bool = False, dp_cost: tuple[float, float] | None = None) -> privacy.ProtectedResult:  # fmt: skip
    """A result through privacy.protect (k = 0 for the perturbing modes) and then disclose."""
    analysis = privacy.analyse_output(sql, policy=privacy.PrivacyPolicy(row_level=row_level))
    columns = [c.name for c in analysis.columns]
    protect_k = 0 if policy.mode in disclosure.PERTURBING else k
    result = privacy.ProtectedResult(columns=tuple(columns), rows=rows, truncated=False, elapsed_ms=1.0)
    protected = privacy.protect(
        result, analysis, privacy.PrivacyPolicy(min_cell_size=protect_k, row_level=row_level)
    )
    return disclose(protected, analysis, replace(policy, min_cell_size=k if policy.mode in
                    disclosure.PERTURBING else 0), seed=seed, row_level=row_level, dp_cost=dp_cost)  # fmt: skip


def test_rounding_makes_the_two_probes_equal_and_still_suppresses_small_cells():
    policy = DisclosurePolicy(mode=ROUND, round_base=5)
    assert released(FEMALE, [[42]], policy).rows == [[40]]
    assert released(ALL_BUT_LOWEST, [[41]], policy).rows == [[40]]  # 42 - 41 = 1 is gone
    by_gender = released(BY_GENDER, [["F", 42], ["M", 7], ["U", 13]], policy)
    # 7 is under k on its true value; 13 hidden with it (complementary); 42 rounded.
    assert by_gender.rows == [["F", 40], ["M", "<11"], ["U", "<11"]]
    assert by_gender.privacy["suppressed"] == 1 and by_gender.privacy["complementary"] == 1
    assert disclosure_sentence(by_gender.privacy) == "Counts were rounded to the nearest 5."
    assert released(FEMALE, [[43]], policy).rows == [[45]] and released(FEMALE, [[12]], policy).rows == [[10]]


def test_noise_is_the_same_for_the_same_query_and_user_whatever_the_row_order():
    policy = DisclosurePolicy(mode=NOISE, noise_scale=1.5, noise_clip=3)
    seed = noise_seed("secret", 7, BY_GENDER)
    assert seed == noise_seed(
        "secret", 7, "select gender,  count(*) AS n from MIMICIV_HOSP.patients group by gender;"
    )
    rows = [["F", 420], ["M", 380], ["U", 150]]
    first = released(BY_GENDER, [list(r) for r in rows], policy, seed=seed).rows
    again = released(BY_GENDER, [list(r) for r in reversed(rows)], policy, seed=seed).rows
    assert sorted(first) == sorted(again)
    assert all(abs(n - dict(rows)[g]) <= 3 for g, n in first)
    others = {tuple(map(tuple, released(BY_GENDER, [list(r) for r in rows], policy,
                                        seed=noise_seed("secret", user, BY_GENDER)).rows)) for user in range(20)}  # fmt: skip
    assert len(others) > 1  # another user's noise is another draw
    assert noise_seed("another secret", 7, BY_GENDER) != seed


def test_renaming_the_output_draws_no_fresh_noise():
    """An alias, a repeated column, or another user's spelling of the same query is the same draw:
    otherwise `COUNT(*) AS a, COUNT(*) AS b, …` would average the noise away in one question."""
    policy = DisclosurePolicy(mode=NOISE, noise_scale=1.5, noise_clip=3)
    spellings = [
        "SELECT COUNT(*) AS a, COUNT(*) AS b, COUNT(*) AS c FROM mimiciv_hosp.patients WHERE gender = 'F'",
        "select count(*) as x, count(*) y, COUNT(*) from MIMICIV_HOSP.patients p where p.gender = 'F'",
    ]
    answers = set()
    for user in range(12):
        for sql in spellings:
            seed = noise_seed("secret", user, sql)
            analysis = privacy.analyse_output(sql)
            result = privacy.ProtectedResult(columns=("a", "b", "c"), rows=[[420, 420, 420]], truncated=False,
                                             elapsed_ms=1.0)  # fmt: skip
            row = disclose(result, analysis, policy, seed=seed, cell_keys=disclosure.output_keys(sql)).rows[0]
            assert len(set(row)) == 1, row
            answers.add((user, row[0]))
    assert len(answers) == 12  # one answer per user whatever the spelling


@pytest.mark.parametrize("kind", ["gaussian", UNIFORM])
def test_with_noise_the_difference_of_the_probes_does_not_reveal_the_patient(kind):
    """42 and 41 noised independently: the difference is 1 for some users, 0, 3 or -2 for others,
    so it tells nobody whether the patient left out is in the cohort."""
    policy = DisclosurePolicy(mode=NOISE, noise=kind, noise_scale=1.5, noise_clip=3)
    differences = []
    for user in range(40):
        whole = released(FEMALE, [[42]], policy, seed=noise_seed("secret", user, FEMALE)).rows[0][0]
        but_one = released(
            ALL_BUT_LOWEST, [[41]], policy, seed=noise_seed("secret", user, ALL_BUT_LOWEST)
        ).rows[0][0]
        differences.append(whole - but_one)
    assert len(set(differences)) >= 4
    assert differences.count(1) < len(differences) / 2
    assert all(-5 <= d <= 7 for d in differences)  # bounded by the clip: 1 ± 6


def test_noise_suppresses_small_cells_on_the_released_value():
    policy = DisclosurePolicy(mode=NOISE, noise_scale=1.5, noise_clip=3)
    for user in range(10):
        out = released(
            BY_GENDER, [["F", 420], ["M", 4], ["U", 380]], policy, seed=noise_seed("s", user, BY_GENDER)
        )
        counts = dict(out.rows)
        assert counts["M"] == "<11"  # 4 ± 3 is still under 11
        assert out.privacy["k"] == 11 and out.privacy["suppressed"] >= 1
        assert "Noise was added to counts" in disclosure_sentence(out.privacy)


def test_an_individuals_own_counts_are_not_perturbed_for_a_user_who_may_list_them():
    sql = "SELECT COUNT(*) FROM mimiciv_hosp.admissions WHERE subject_id = 10014354"
    policy = DisclosurePolicy(mode=NOISE)
    analysis = privacy.analyse_output(
        sql, policy=privacy.PrivacyPolicy(identifier_columns=frozenset({"subject_id"}))
    )
    assert analysis.about_individuals
    result = privacy.ProtectedResult(columns=("count",), rows=[[3]], truncated=False, elapsed_ms=1.0)
    out = disclose(result, analysis, policy, seed=b"x", row_level=True)
    assert out.rows == [[3]] and out.privacy["disclosure"]["skipped"]
    assert disclosure_sentence(out.privacy) == ""


def sqlite_patients() -> tuple[sqlite3.Connection, CatalogSchema, list[str]]:
    """100 patients, 42 of them female, 1 to 3 admissions each; and the SQL that was run on it."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE patients (subject_id INTEGER, gender TEXT, anchor_age INTEGER)")
    con.execute("CREATE TABLE admissions (hadm_id INTEGER, subject_id INTEGER, admission_type TEXT)")
    for i in range(100):
        con.execute(
            "INSERT INTO patients VALUES (?, ?, ?)", (10_000_000 + i, "F" if i < 42 else "M", 20 + i % 60)
        )
        for j in range(i % 3 + 1):
            con.execute(
                "INSERT INTO admissions VALUES (?, ?, ?)", (i * 10 + j, 10_000_000 + i, "EW" if j else "EL")
            )
    catalog = CatalogSchema(
        tables=(
            TableSchema("", "patients", ("subject_id", "gender", "anchor_age")),
            TableSchema("", "admissions", ("hadm_id", "subject_id", "admission_type")),
        ),
        dialect="sqlite",
    )
    return con, catalog, []


def executor(con: sqlite3.Connection, ran: list[str]):
    def execute(sql: str):
        ran.append(sql)
        cursor = con.execute(sql)
        return [d[0] for d in cursor.description], cursor.fetchall()

    return execute


def test_differential_privacy_answers_counts_through_smartnoise_sql():
    con, catalog, ran = sqlite_patients()
    policy = DisclosurePolicy(mode=DP, epsilon=1.0, contributions=1)
    sql = "SELECT COUNT(*) AS n FROM patients WHERE gender = 'F'"
    query = DpQuery(sql, catalog=catalog, policy=policy, execute=executor(con, ran))
    assert query.cost[0] == pytest.approx(1.0)  # one count, one ε
    assert not ran  # the cost is known before anything runs
    draws = [DpQuery(sql, catalog=catalog, policy=policy, execute=executor(con, ran)).run()[1][0][0]
             for _ in range(15)]  # fmt: skip
    assert len(set(draws)) > 1  # a fresh draw each time: a repeat is paid for from the budget
    assert abs(sum(draws) / len(draws) - 42) < 3
    # What ran is smartnoise-sql's rewrite: one sampled row per patient (the contribution bound).
    assert "ROW_NUMBER" in ran[0] and "row_num <= 1" in ran[0] and "PARTITION BY subject_id" in ran[0]

    grouped = "SELECT admission_type, COUNT(*) AS n FROM admissions GROUP BY admission_type"
    policy3 = replace(policy, contributions=3)
    columns, rows = DpQuery(grouped, catalog=catalog, policy=policy3, execute=executor(con, ran)).run()
    assert columns == ["admission_type", "n"] and sorted(r[0] for r in rows) == ["EL", "EW"]
    assert "row_num <= 3" in ran[-1]
    out = released(grouped, rows, replace(policy3, min_cell_size=11), k=11, dp_cost=(2.0, 1e-6))
    assert out.privacy["disclosure"]["epsilon_spent"] == 2.0 and out.privacy["disclosure"]["perturbed"] == 2
    assert "differential privacy" in disclosure_sentence(out.privacy)


def test_the_differencing_probe_is_not_answered_under_differential_privacy():
    con, catalog, ran = sqlite_patients()
    probe = (
        "SELECT COUNT(*) AS n FROM patients WHERE gender = 'F' "
        "AND subject_id <> (SELECT MIN(subject_id) FROM patients WHERE gender = 'F')"
    )
    with pytest.raises(DisclosureRefusal) as refused:
        DpQuery(probe, catalog=catalog, policy=DisclosurePolicy(mode=DP), execute=executor(con, ran))
    assert refused.value.code == "dp_unsupported" and "smartnoise-sql" in refused.value.message
    assert not ran


class Ledger:
    """disclosure.Ledger in memory."""

    def __init__(self):
        self.shapes: list = []
        self.spent = 0.0

    def near_identical_count(self, shape, *, window_days):
        return sum(1 for s in self.shapes if near_identical(s, shape))

    def budget_spent(self):
        return self.spent

    def record(self, *, sql, shape, epsilon, mode):
        self.shapes.append(shape)
        self.spent += epsilon


def ask(ledger: Ledger, policy: DisclosurePolicy, sql: str, *, row_level: bool = False) -> None:
    analysis = privacy.analyse_output(sql, policy=privacy.PrivacyPolicy(row_level=row_level))
    shape = check_release(ledger, policy, sql=sql, dialect="postgres", analysis=analysis, row_level=row_level)
    ledger.record(
        sql=sql, shape=shape, epsilon=policy.epsilon if policy.mode == DP else 0.0, mode=policy.mode
    )


def test_probes_past_the_limit_are_refused_but_repeats_and_other_questions_are_not():
    ledger, policy = Ledger(), DisclosurePolicy(differencing_limit=2)
    ask(ledger, policy, FEMALE)
    ask(ledger, policy, ALL_BUT_LOWEST)  # 1 earlier probe one condition apart
    ask(ledger, policy, FEMALE)  # the same question again: near-identical to ALL_BUT_LOWEST only
    with pytest.raises(DisclosureRefusal) as refused:
        ask(ledger, policy, ALL_BUT_HIGHEST)  # one condition from FEMALE twice and from ALL_BUT_LOWEST
    assert refused.value.code == "differencing" and "single condition" in refused.value.message
    ask(ledger, policy, BY_GENDER)  # another question is still answered
    ask(Ledger(), policy, ALL_BUT_HIGHEST, row_level=True)  # who may list the rows is not held to it
    ask(ledger, replace(policy, differencing_limit=0), ALL_BUT_HIGHEST)  # 0 turns it off


def test_the_dp_budget_is_spent_per_answer_and_refused_when_exhausted():
    ledger, policy = Ledger(), DisclosurePolicy(mode=DP, epsilon=0.25, budget=1.0)
    for _ in range(2):
        check_budget(ledger, policy, 0.5)
        ledger.spent += 0.5
    with pytest.raises(DisclosureRefusal) as refused:
        check_budget(ledger, policy, 0.5)
    assert refused.value.code == "budget" and "budget on this source is spent" in refused.value.message


def test_dp_releases_only_counts_to_aggregate_only_users():
    policy = DisclosurePolicy(mode=DP)
    with pytest.raises(DisclosureRefusal) as refused:
        ask(
            Ledger(),
            policy,
            "SELECT gender, AVG(anchor_age) AS age FROM mimiciv_hosp.patients GROUP BY gender",
        )
    assert refused.value.code == "dp_counts_only" and "age is not a count" in refused.value.message


def test_release_under_dp_runs_smartnoise_sql_spends_the_budget_and_records_the_answer():
    con, catalog, ran = sqlite_patients()
    policy = DisclosurePolicy(mode=DP, epsilon=1.0, budget=2.5, min_cell_size=11)
    ledger = Ledger()
    sql = "SELECT gender, COUNT(DISTINCT subject_id) AS n FROM patients GROUP BY gender"
    analysis = privacy.analyse_output(sql, "sqlite", policy=privacy.PrivacyPolicy(row_level=False))
    raw = privacy.ProtectedResult(columns=("gender", "n"), rows=[["F", 42], ["M", 58]], truncated=False,
                                  elapsed_ms=1.0)  # fmt: skip

    def answer():
        return disclosure.release(raw, analysis, policy, sql=sql, dialect="sqlite", catalog=catalog, ledger=ledger,
                                  key=b"k", row_level=False, execute=executor(con, ran))  # fmt: skip

    out = answer()
    assert out.privacy["disclosure"]["epsilon_spent"] == 1.0 and ledger.spent == 1.0
    assert {g for g, _ in out.rows} <= {"F", "M"} and ran  # smartnoise-sql's rewrite ran
    answer()
    with pytest.raises(DisclosureRefusal, match="budget"):
        answer()  # 2 of 2.5 spent, the next costs 1
    assert ledger.spent == 2.0 and len(ledger.shapes) == 2


def test_a_candidate_preview_under_dp_shows_no_count():
    sql = "SELECT gender, COUNT(*) AS n FROM mimiciv_hosp.patients GROUP BY gender"
    analysis = privacy.analyse_output(sql, policy=privacy.PrivacyPolicy(row_level=False))
    rows = disclosure.disclose_preview(
        ["gender", "n"], [["F", 42], ["M", 3]], analysis, DisclosurePolicy(mode=DP)
    )
    assert rows == [["F", disclosure.NOT_RELEASED], ["M", disclosure.NOT_RELEASED]]
    noisy = disclosure.disclose_preview(["gender", "n"], [["F", 420], ["M", 3], ["U", 40]], analysis,
                                        DisclosurePolicy(mode=NOISE, min_cell_size=11), seed=b"s")  # fmt: skip
    # 3 hidden on its noisy value, and the smallest other (complementary); 420 shown with its noise.
    assert noisy[1][1] == noisy[2][1] == "<11" and abs(noisy[0][1] - 420) <= 3
