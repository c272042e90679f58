"""The library as templates with paraphrases: calendar slots, value masking, template identity, the
meaning guard, operator agreement across paraphrases, grouped folds, the cost threshold, and "now"
as of the source (pure: no database, a bag-of-words stand-in for the embedder)."""

from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pytest
import sqlglot
from sqlglot import exp

from core import match as L
from core.asof import AsOfExecutor, apply_as_of
from core.match import bind_sql, build_template, library, mask_question, template_key
from core.match import reasons as R
from core.match.calibrate import whole_template
from core.match.features import paraphrase_missing
from core.match.index import column_readings, mine_synonyms
from core.match.operators import asks_for_name, asks_for_time, question_operators
from core.match.spans import VALUE, extract_typed_spans
from core.match.template import answer_kind
from core.match.values import value_names
from core.match.words import tokenize

NOW = "2100-12-31 23:59:00"


def literals(sql: str, dialect: str = "sqlite") -> set[str]:
    return {lit.this for lit in sqlglot.parse_one(sql, dialect=dialect).find_all(exp.Literal)}


def embed(texts: list[str]) -> np.ndarray:
    """Bag of words hashed into 256 dimensions: close wordings are close, enough for voting tests."""
    out = np.zeros((len(texts), 256), dtype=np.float32)
    for i, text in enumerate(texts):
        for token in tokenize(text.lower()):
            out[i, int(hashlib.md5(token.text.encode()).hexdigest(), 16) % 256] += 1
    return out


def index_of(items: list[tuple[str, str]], *, dialect: str = "sqlite") -> L.LibraryIndex:
    """A library of (question, SQL) pairs, numbered from 1, embedded with `embed`: the small
    libraries the composition kinds' tests build."""
    entries = [
        L.entry_for(n, q, sql, build_template(q, sql, dialect=dialect)) for n, (q, sql) in enumerate(items, 1)
    ]
    return L.LibraryIndex(entries, embed([e.template.masked_question for e in entries]))


def no_lookup(column: str, text: str):
    return []


# --- calendar slots ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("weight in 12/2100?", [("month_year", "12/2100", "2100-12")]),
        ("input on 11/23/this year.", [("month_day", "11/23", "11-23"), ("period_year", "this year", "0")]),
        ("weight in 05/this year", [("month", "05", "05"), ("period_year", "this year", "0")]),
        ("output on last month/23.", [("period_month", "last month", "1"), ("day", "23", "23")]),
        ("during the previous year", [("period_year", "previous year", "1")]),
        ("since 02/12/2100 what", [("date", "02/12/2100", "2100-02-12")]),
        ("at 2100-06-07 05:00:00 ok", [("timestamp", "2100-06-07 05:00:00", "2100-06-07 05:00:00")]),
        ("potassium chl 20 meq / 1000 ml d5 1/2 ns", [("number", "20", "20"), ("number", "1000", "1000")]),
    ],
)
def test_calendar_forms_are_typed_values(question, expected):
    assert [(s.type, s.text, s.value) for s in extract_typed_spans(question)] == expected


def test_a_month_of_this_year_is_a_slot_not_the_examples_month():
    q = "What was patient 10007795's weight during the last check in 05/this year?"
    sql = (
        "SELECT valuenum FROM chartevents WHERE subject_id = 10007795 AND datetime(charttime,'start of year') = "
        "datetime(current_time,'start of year','-0 year') AND strftime('%m',charttime) = '05'"
    )
    t = build_template(q, sql, dialect="sqlite")
    assert {s.type for s in t.slots} == {"patient_id", "month", "period_year"}
    bound = bind_sql(t, {"patient_id": "10001217", "month": "08", "period_year": "1"})
    assert {"08", "-1 year"} <= literals(bound) and not {"05", "-0 year"} & literals(bound)


def test_a_period_is_a_slot_only_where_the_sql_counts_calendar_periods_back():
    sql = "SELECT 1 FROM t WHERE datetime(x, 'start of month') = datetime(current_time, 'start of month', '-1 month')"
    t = build_template("was it given last month?", sql, dialect="sqlite")
    assert [(s.type, s.value) for s in t.slots] == [("period_month", "1")]
    assert "'-0 month'" in bind_sql(t, {"period_month": "0"})
    # "-1 year" without 'start of year' is the last 12 months, not the calendar's last year: left fixed.
    rolling = build_template(
        "was it given in the last year?",
        "SELECT 1 FROM t WHERE datetime(x) >= datetime(current_time, '-1 year')",
        dialect="sqlite",
    )
    assert rolling.slots == () and rolling.fixed_values == ("last year",)


def test_the_key_is_shared_by_other_values_and_periods_and_split_by_other_fixed_literals():
    sql = "SELECT COUNT(*) FROM admissions WHERE subject_id = {p} AND datetime(admittime,'start of year') = datetime(current_time,'start of year','{y}')"
    a = build_template(
        "how many visits did patient 10001 have this year?",
        sql.format(p=10001, y="-0 year"),
        dialect="sqlite",
    )
    b = build_template(
        "how many visits did patient 20002 have this year?",
        sql.format(p=20002, y="-0 year"),
        dialect="sqlite",
    )
    c = build_template(
        "how many visits did patient 10001 have last year?",
        sql.format(p=10001, y="-1 year"),
        dialect="sqlite",
    )
    assert template_key(a) == template_key(b) == template_key(c)  # "this year" and "last year": a value
    fixed = build_template(
        "how many visits did patient 10001 have in the year before?",
        sql.format(p=10001, y="-1 year"),
        dialect="sqlite",
    )
    assert template_key(fixed) != template_key(c)  # a literal the question does not name stays fixed
    months = build_template(
        "weight since 27 months ago",
        "SELECT 1 FROM t WHERE x >= datetime(current_time,'-27 month')",
        dialect="sqlite",
    )
    years = build_template(
        "weight since 2 years ago",
        "SELECT 1 FROM t WHERE x >= datetime(current_time,'-2 year')",
        dialect="sqlite",
    )
    assert template_key(months) != template_key(years)  # the unit is part of the template


# --- database values --------------------------------------------------------------------------------

VALUES = L.ValueIndex(
    {
        "prescriptions.drug": ["docusate sodium", "docusate sodium (liquid)", "aspirin", "nacl 0.9%"],
        "d_labitems.label": ["glucose", "creatinine"],
    }
)


def test_the_longest_contained_database_value_wins():
    q = "What is the dose of docusate sodium (liquid) given to patient 10000032?"
    assert [q[a:b] for a, b, _ in VALUES.contained(q, "mimiciv_hosp.prescriptions.drug")][-1] == (
        "docusate sodium (liquid)"
    )
    assert [q[a:b] for a, b in VALUES.spans(q)] == ["docusate sodium (liquid)"]


def test_masking_hides_values_of_every_kind_and_numbers_inside_a_value():
    q = "How much nacl 0.9% did patient 10000032 get in 05/2100?"
    assert mask_question(q, VALUES) == "How much {value} did patient {patient_id} get in {month_year}?"


# --- the meaning guard and operators across paraphrases ---------------------------------------------

AGE_SQL = "SELECT COUNT(*) FROM patients WHERE anchor_age > {n}"
COST_SQL = (
    "SELECT MAX(c) FROM (SELECT SUM(cost) AS c FROM cost WHERE hadm_id IN "
    "(SELECT hadm_id FROM prescriptions WHERE drug = '{d}') GROUP BY hadm_id)"
)


def build_index(pairs: list[tuple[str, str]]) -> L.LibraryIndex:
    entries = [
        L.entry_for(i, q, s, build_template(q, s, dialect="sqlite") if s else None)
        for i, (q, s) in enumerate(pairs)
    ]
    entries = [e for e in entries if e is not None]
    return L.LibraryIndex(entries, embed([mask_question(e.question, VALUES) for e in entries]))


def indexed(items: list[dict]) -> tuple[L.LibraryIndex, dict[str, int]]:
    """The library of `items` (question and SQL, numbered from 1) with the stand-in embedder, and
    each question's example id: the composition and order-swap tests' library."""
    entries = []
    for n, item in enumerate(items, start=1):
        sql = item.get("sql") or ""
        entry = L.entry_for(n, item["question"], sql, build_template(item["question"], sql) if sql else None)
        if entry is not None:
            entries.append(entry)
    index = L.LibraryIndex(
        entries, embed([e.template.masked_question if e.template else e.question for e in entries])
    )
    return index, {e.question: e.example_id for e in entries}


def ask_with_own_values(index: L.LibraryIndex, question: str):
    """The question matched as the corpus matches it: the library's own values, looked up (the
    composition kinds' tests: compared, retimed)."""
    from tests.core.match.corpus import lookup_in

    known: dict[str, set[str]] = {}
    for slot in (s for e in index.entries if e.template for s in e.template.slots):
        if slot.type == VALUE and slot.column:
            known.setdefault(slot.column, set()).add(slot.value)
    values = L.ValueIndex(known)
    vector = embed([mask_question(question, values)])[0]
    return L.match_library(
        question, vector, index, lookup=lookup_in({c: sorted(v) for c, v in known.items()}), values=values
    )


def ask(index: L.LibraryIndex, question: str):
    vector = embed([mask_question(question, VALUES)])[0]
    return L.match_library(question, vector, index, lookup=no_lookup, values=VALUES).best


AGES = build_index(
    [
        ("count the number of patients older than 65.", AGE_SQL.format(n=65)),
        ("how many patients are older than 80?", AGE_SQL.format(n=80)),
        ("what is the number of patients older than 50?", AGE_SQL.format(n=50)),
        ("how many patients have glucose tests?", "SELECT COUNT(DISTINCT subject_id) FROM labevents"),
    ]
)


def test_a_new_age_binds_into_the_template():
    best = ask(AGES, "count the number of patients older than 70.")
    assert best.hard_ok and "70" in literals(best.sql)


DECADE_SQL = (
    "SELECT COUNT(DISTINCT admissions.subject_id) FROM admissions WHERE admissions.age BETWEEN {lo} AND {hi}"
)
DECADES = build_index(
    [
        ("how many patients are in their 40s?", DECADE_SQL.format(lo=40, hi=49)),
        ("count the patients in their 50s.", DECADE_SQL.format(lo=50, hi=59)),
        ("what is the number of patients in their 40s?", DECADE_SQL.format(lo=40, hi=49)),
        (
            "how many patients are older than 65?",
            "SELECT COUNT(DISTINCT admissions.subject_id) FROM admissions WHERE admissions.age > 65",
        ),
    ]
)


def test_a_decade_the_library_never_shows_binds_both_bounds():
    best = ask(DECADES, "how many patients are in their 30s?")
    assert best.hard_ok and best.sql.endswith("BETWEEN 30 AND 39"), best.sql


@pytest.mark.parametrize(
    "question",
    [
        "how many patients are older than 30?",  # a threshold is no decade
        "how many patients are in their 30s or 40s?",  # two decades: one slot cannot say both
        "how many patients are not in their 30s?",  # a negation no paraphrase says
    ],
)
def test_a_decade_template_never_answers_what_is_not_one_decade(question):
    best = ask(DECADES, question)
    assert best is None or not best.hard_ok or "BETWEEN" not in best.sql, best.sql


@pytest.mark.parametrize(
    "question",
    [
        "count the number of patients older than 70 who died in the hospital.",
        "count the number of patients older than 70 with an ICU stay.",
        "how many patients over 85 had sepsis and were admitted to the ICU?",
    ],
)
def test_a_condition_no_paraphrase_says_refuses_the_template(question):
    best = ask(AGES, question)
    assert best is None or not best.hard_ok
    assert best is None or {R.WORDS_UNEXPLAINED, R.OPERATOR} & set(best.reason_codes), best.reasons


def test_operator_words_are_judged_across_paraphrases():
    index = build_index(
        [
            ("what is the maximum total hospital cost of visits with aspirin?", COST_SQL.format(d="aspirin")),
            ("what is the highest hospital cost of a visit with nacl 0.9%?", COST_SQL.format(d="nacl 0.9%")),
        ]
    )
    # "total" in one paraphrase and "highest" in the other are the same SQL: both wordings bind.
    best = ask(index, "what is the maximum hospital cost of visits with docusate sodium?")
    assert best.hard_ok, best.reasons
    assert "docusate sodium" in literals(best.sql)
    # "minimum" is no paraphrase's word.
    assert not ask(index, "what is the minimum total hospital cost of visits with aspirin?").hard_ok


def test_operator_words_must_combine_as_one_paraphrase_does():
    rank_sql = "SELECT title FROM t ORDER BY s ASC LIMIT 3"
    index = build_index(
        [
            ("what are the three diagnoses with the lowest survival rate?", rank_sql),
            ("what are the three diagnoses with the highest mortality rate?", rank_sql),
        ]
    )
    assert not ask(index, "what are the three diagnoses with the highest survival rate?").hard_ok


def test_the_first_time_in_the_last_visit_is_not_the_last_time_in_the_first_visit():
    sql = (
        "SELECT charttime FROM labevents WHERE hadm_id IN (SELECT hadm_id FROM admissions WHERE subject_id = 10001 "
        "ORDER BY admittime ASC LIMIT 1) ORDER BY charttime DESC LIMIT 1"
    )
    index = build_index(
        [("when was the last time patient 10001 had a lab test in the first hospital visit?", sql)]
    )
    assert ask(
        index, "when was the last time patient 20002 had a lab test in the first hospital visit?"
    ).hard_ok
    assert not ask(
        index, "when was the first time patient 20002 had a lab test in the last hospital visit?"
    ).hard_ok


INPUT_TIME_SQL = (
    "SELECT inputevents.starttime FROM inputevents WHERE inputevents.subject_id = {p} "
    "ORDER BY inputevents.starttime ASC LIMIT 1"
)


def test_a_question_asking_a_name_is_not_answered_with_a_time():
    """The "name of input" wrong answers: the asked-for thing must agree with what the SQL returns."""
    index = build_index(
        [
            ("when did patient 10001 first have an input?", INPUT_TIME_SQL.format(p=10001)),
            ("what was the first input time of patient 10002?", INPUT_TIME_SQL.format(p=10002)),
            ("what was the first input of patient 10004?", INPUT_TIME_SQL.format(p=10004)),
        ]
    )
    assert ask(index, "what was the first input of patient 10003?").hard_ok  # the same question
    best = ask(index, "what was the name of the first input of patient 10003?")
    assert not best.hard_ok
    assert R.ASKS_NAME in best.reason_codes, best.reasons


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("SELECT inputevents.starttime FROM inputevents ORDER BY 1 LIMIT 1", "time"),
        ("SELECT MAX(labevents.charttime) FROM labevents", "time"),
        ("SELECT d_items.label FROM d_items", "column"),
        ("SELECT COUNT(*) FROM patients", "number"),
        ("SELECT DISTINCT prescriptions.drug FROM prescriptions", "column"),
        ("SELECT AVG(cost) FROM cost", "number"),
    ],
)
def test_the_answer_kind_is_read_from_the_select(sql, kind):
    assert answer_kind(build_template("what is it?", sql, dialect="sqlite")) == kind


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("What was the name of the input patient 10001 had first?", True),
        ("What's the drug name that patient 10001 was prescribed?", True),
        ("Name the specimen test patient 10001 had last.", True),
        ("When did patient 10001 first get a drug named aspirin?", False),
        ("What was the first input time of patient 10001?", False),
    ],
)
def test_a_name_asked_for_is_told_from_a_name_mentioned(question, asks):
    assert asks_for_name(question) is asks


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("What was the last prescription time for aspirin for patient 10001?", True),
        ("What is the first input date of patient 10001?", True),
        ("When was the first time patient 10001 had an input?", False),
        ("What was the dose of aspirin given at the same time as heparin?", False),
        ("How many times was patient 10001 given aspirin?", False),
        ("What was the name of the drug prescribed for the first time to patient 10001?", False),
    ],
)
def test_a_time_asked_for_is_told_from_a_time_mentioned(question, asks):
    assert asks_for_time(question) is asks


def test_a_question_asking_a_time_is_not_answered_with_a_dose():
    sql = "SELECT dose_val_rx FROM prescriptions WHERE subject_id = {p} AND drug = '{d}' ORDER BY starttime DESC LIMIT 1"
    index = build_index(
        [
            (
                "what was the last dose of aspirin prescribed to patient 10001?",
                sql.format(p=10001, d="aspirin"),
            ),
            (
                "what was the dose of aspirin last prescribed to patient 10002?",
                sql.format(p=10002, d="aspirin"),
            ),
        ]
    )
    assert ask(index, "what was the last dose of aspirin prescribed to patient 10003?").hard_ok
    best = ask(index, "what was the last dose time of aspirin prescribed to patient 10003?")
    assert not best.hard_ok
    assert R.ASKS_TIME in best.reason_codes, best.reasons


def test_synonyms_are_words_paraphrases_swap_in_the_same_place_in_several_templates():
    swaps = [
        [["count", "patient", "sex", "slotgender"], ["count", "patient", "gender", "slotgender"]],
        [["average", "age", "sex"], ["average", "age", "gender"], ["average", "age", "gender", "mean"]],
        [["total", "dose", "drug"], ["total", "dosage", "drug"]],  # in one template only: an accident
        [["top", "lab", "happen"], ["happen", "lab", "top"]],  # the same words, another order
        [["what", "top", "event"], ["happen", "event"]],  # not in the same place
        [["what", "top", "event"], ["happen", "event"]],
    ]
    synonyms = mine_synonyms(swaps)
    assert synonyms == {"sex": {"gender"}, "gender": {"sex"}}


def test_mining_again_reads_the_same_synonyms_from_the_pairs_kept_the_first_time():
    # index._swap is kept per pair of word sequences (fold libraries ask the same pairs again): lists
    # or tuples, a first or a second reading, the synonyms are the same.
    swaps = [
        [["count", "patient", "sex", "slotgender"], ["count", "patient", "gender", "slotgender"]],
        [["average", "age", "sex"], ["average", "age", "gender"]],
    ]
    first = mine_synonyms(swaps)
    again = mine_synonyms([[tuple(words) for words in group] for group in swaps])
    assert first == again == {"sex": {"gender"}, "gender": {"sex"}}


def test_a_swap_is_also_mined_where_a_paraphrase_says_one_word_of_no_content_more():
    swaps = [
        # "what is the average cost including {value}" / "how much is the average cost associated with {value}"
        [["average", "cost", "includ", "slotvalue"], ["much", "average", "cost", "associat", "slotvalue"]],
        [
            ["total", "cost", "includ", "slotvalue", "slotyear"],
            ["total", "cost", "associat", "slotvalue", "since", "slotyear"],
        ],
        # the word said more carries content: "throughout" is no "procedure" (twice, as it would need)
        [
            ["patient", "slotvalue", "chart", "slotperiod"],
            ["patient", "treat", "slotvalue", "procedure", "slotperiod"],
        ],
        [
            ["count", "slotvalue", "chart", "slotyear"],
            ["count", "treat", "slotvalue", "procedure", "slotyear"],
        ],
        # a word moved, not swapped: "the hospital cost" / "the cost of the hospital visit"
        [["total", "hospital", "cost", "slotvalue"], ["total", "cost", "hospital", "visit", "slotvalue"]],
        [["average", "hospital", "cost", "slotvalue"], ["average", "cost", "hospital", "visit", "slotvalue"]],
    ]
    assert mine_synonyms(swaps) == {"associat": {"includ"}, "includ": {"associat"}}


def test_a_swap_with_a_word_more_explains_words_but_never_decides_what_is_library_wording():
    # Train CV: mined as a synonym of "prescribed", "administered" stopped being wording the
    # paraphrases leave out and became a subject every "most frequently administered" question had
    # to say (right answers lost). The wording is read from the swaps in the same place alone.
    from core.match.index import _mine

    swaps = [
        [["much", "cost", "administer", "slotvalue"], ["cost", "prescrib", "slotvalue"]],
        [["much", "dose", "administer", "slotvalue"], ["dose", "prescrib", "slotvalue"]],
        [["count", "patient", "sex"], ["count", "patient", "gender"]],
        [["average", "age", "sex"], ["average", "age", "gender"]],
    ]
    synonyms, wording = _mine(swaps)
    assert synonyms["administer"] == {"prescrib"} and synonyms["sex"] == {"gender"}
    assert "administer" not in wording and wording["sex"] == {"gender"}


def test_words_that_tell_two_templates_apart_are_never_mined_as_synonyms():
    swaps = [
        # paraphrases of two templates swap "level" and "measured" (an accident of their wording)…
        [
            ["last", "heart", "rate", "level", "slotpatient"],
            ["last", "heart", "rate", "measur", "slotpatient"],
        ],
        [["first", "weight", "level", "slotpatient"], ["first", "weight", "measur", "slotpatient"]],
        # …and the sex/gender swap, twice
        [["count", "patient", "sex", "slotgender"], ["count", "patient", "gender", "slotgender"]],
        [["average", "age", "sex"], ["average", "age", "gender"]],
        # two templates (one paraphrase each) that differ by "level" and "measured" only: the
        # library tells them apart by it
        [["when", "glucose", "level", "slotpatient"]],
        [["when", "glucose", "measur", "slotpatient"]],
    ]
    assert mine_synonyms(swaps) == {"sex": {"gender"}, "gender": {"sex"}}


def test_a_synonym_mined_with_a_word_more_explains_it_and_no_near_word():
    sql = "SELECT {f}(cost) FROM cost WHERE hadm_id IN (SELECT hadm_id FROM diagnoses_icd)"
    index = build_index(
        [
            ("what is the maximum hospital cost including a diagnosis?", sql.format(f="MAX")),
            ("how much is the maximum hospital cost associated with a diagnosis?", sql.format(f="MAX")),
            ("what is the total hospital cost including a diagnosis?", sql.format(f="SUM")),
            ("how much is the total hospital cost associated with a diagnosis?", sql.format(f="SUM")),
            # the average's paraphrases never say "associated"
            ("what is the average hospital cost including a diagnosis?", sql.format(f="AVG")),
            ("what is the mean hospital cost including a diagnosis?", sql.format(f="AVG")),
        ]
    )
    assert index.synonyms.get("associat") == {"includ"}
    best = ask(index, "what is the average hospital cost associated with a diagnosis?")
    assert best.hard_ok and "AVG" in best.sql, best.reasons
    # attack: a near word the library never swapped, and the word negated, are not "including"
    for question in (
        "what is the average hospital cost dissociated from a diagnosis?",
        "what is the average hospital cost excluding a diagnosis?",
        "what is the average hospital cost not associated with a diagnosis?",
    ):
        best = ask(index, question)
        assert not best.hard_ok, question


@pytest.mark.parametrize(
    ("question", "expected"),
    [("how many patients had x throughout 2100?", "in"), ("how many patients had x since 2100?", "since")],
)
def test_throughout_a_period_reads_as_in_it_and_never_as_since(question, expected):
    assert question_operators(question)["time"] == expected


def test_a_mined_synonym_explains_a_word_for_the_guard():
    index = build_index(
        [
            ("how many patients of sex f are there?", "SELECT COUNT(*) FROM patients"),
            ("how many patients of gender f are there?", "SELECT COUNT(*) FROM patients"),
            ("what is the average age by sex?", "SELECT AVG(anchor_age) FROM patients"),
            ("what is the average age by gender?", "SELECT AVG(anchor_age) FROM patients"),
            ("what is the highest age by gender?", "SELECT MAX(anchor_age) FROM patients"),
        ]
    )
    assert index.synonyms.get("sex") == {"gender"}
    best = ask(index, "what is the highest age by sex?")
    assert best.hard_ok, best.reasons


def test_words_said_only_with_the_opposite_operator_still_refuse_but_other_wording_does_not():
    rank_sql = "SELECT title FROM t ORDER BY s ASC LIMIT 3"
    index = build_index(
        [
            ("what are the three diagnoses with the lowest survival rate?", rank_sql),
            ("what are the top three diagnoses with the highest mortality rate?", rank_sql),
            ("in 2100, what are the three diagnoses with the highest mortality rate?", rank_sql),
        ]
    )
    # "top" is said with "highest" in another signature (no "in 2100"): wording, not a condition.
    assert ask(index, "in 2100, what are the top three diagnoses with the highest mortality rate?").hard_ok
    assert not ask(index, "what are the three diagnoses with the highest survival rate?").hard_ok


@pytest.mark.parametrize(
    ("question", "key", "value"),
    [
        ("Since 1 year ago, has patient 10019917 received a diagnosis?", "yes_no", True),
        ("On the first hospital stay, did patient 10005817 undergo a procedure?", "yes_no", True),
        ("In 2100, what are the top three diagnoses?", "yes_no", False),
        ("Count the ICU visits of patient 10031404 during the last year.", "time", None),
        ("Count the ICU visits of patient 10031404 in 2100.", "time", "in"),
        ("Count the ICU visits of patient 10031404 since last year.", "time", "since"),
        # "when" opening a question or a clause asks a time; inside a statement it is a condition
        ("When was patient 10001 last discharged?", "when", True),
        ("Patient 10001, when was your last blood culture test?", "when", True),
        ("What was the last instance when the heart rate of patient 10001 was above 90?", "when", True),
        ("What was the admission type when patient 10001 last entered the hospital?", "when", False),
        ("How much is the average total hospital bill when it includes a glucose lab test?", "when", False),
        # "between" and "from" are times only before a time
        ("What is the difference between weights last measured on the first visit?", "time", None),
        ("How much does patient 10001's weight differ from the last value measured?", "time", None),
        ("Count the ICU visits of patient 10031404 from last year.", "time", "from"),
        ("Count the ICU visits of patient 10031404 between 2100 and 2101.", "time", "between"),
        # "how often" is "how many times"
        ("How often was bisacodyl prescribed last year?", "aggregate", "count"),
        ("How often was bisacodyl prescribed last year?", "times", True),
    ],
)
def test_operator_words_read_as_the_library_uses_them(question, key, value):
    assert question_operators(question)[key] == value


def test_values_of_one_in_list_bind_in_any_order():
    sql = "SELECT COUNT(*) > 0 FROM prescriptions WHERE subject_id = {p} AND drug IN ('{a}', '{b}')"
    index = build_index(
        [
            (
                "was aspirin or glucose prescribed to patient 10001?",
                sql.format(p=10001, a="aspirin", b="glucose"),
            ),
            (
                "has patient 10002 been given glucose or aspirin?",
                sql.format(p=10002, a="glucose", b="aspirin"),
            ),
        ]
    )
    best = ask(index, "has nacl 0.9% or docusate sodium been prescribed to patient 10003?")
    assert best.hard_ok, best.reasons
    assert {"nacl 0.9%", "docusate sodium"} <= literals(best.sql)


def test_numbers_are_placed_by_their_unit():
    sql = (
        "SELECT title FROM (SELECT title, DENSE_RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM d "
        "WHERE datetime(t2) <= datetime(t1, '+{m} month') GROUP BY title) WHERE r <= {n}"
    )
    index = build_index([("what are the top three diagnoses within 2 months?", sql.format(m=2, n=3))])
    best = ask(index, "within 4 months, what are the top five diagnoses?")
    assert best.hard_ok, best.reasons
    assert {"+4 month", "5"} <= literals(best.sql)


def test_a_shorter_value_that_leaves_the_examples_words_around_it_wins():
    values = L.ValueIndex({"d_items.label": ["tf residual", "tf residual output", "urine"]})
    sql = (
        "SELECT SUM(value) FROM outputevents WHERE subject_id = {p} "
        "AND itemid IN (SELECT itemid FROM d_items WHERE d_items.label = '{v}')"
    )
    pairs = [("what was the total urine output of patient 10001?", sql.format(p=10001, v="urine"))]
    entries = [L.entry_for(i, q, s, build_template(q, s, dialect="sqlite")) for i, (q, s) in enumerate(pairs)]
    index = L.LibraryIndex(entries, embed([mask_question(e.question, values) for e in entries]))
    question = "what was the total tf residual output of patient 10002?"
    vector = embed([mask_question(question, values)])[0]
    best = L.match_library(question, vector, index, lookup=no_lookup, values=values).best
    assert best.hard_ok, best.reasons
    assert "tf residual" in literals(best.sql) and "tf residual output" not in literals(best.sql)


def test_values_end_in_brackets_and_start_with_percent_but_not_inside_a_hyphenated_word():
    values = L.ValueIndex(
        {
            "d_icd_diagnoses.long_title": ["palmar fascial fibromatosis [dupuytren]"],
            "d_labitems.label": ["% hemoglobin a1c", "glucose", "non"],
        }
    )
    q = "cost of palmar fascial fibromatosis [dupuytren]? a % hemoglobin a1c test, a glucose test"
    assert [q[a:b] for a, b in values.spans(q)] == [
        "palmar fascial fibromatosis [dupuytren]",
        "% hemoglobin a1c",
        "glucose",
    ]
    assert values.spans("a non-invasive test") == []
    title = (
        "surgical operation with anastomosis, bypass, or graft, with natural or artificial tissues used as implant "
        "causing abnormal patient reaction, or later complication, without mention of misadventure at time of operation"
    )
    long = L.ValueIndex({"d_icd_diagnoses.long_title": [title]})
    assert (
        long.contained(f"What is the cost of a diagnosis of {title}?", "d_icd_diagnoses.long_title")[0][2]
        == title
    )


def test_names_the_library_approves_for_a_value_bind_it_and_a_lone_or_disputed_name_does_not():
    sql = (
        "SELECT MAX(valuenum) FROM chartevents WHERE subject_id = {p} AND itemid IN "
        "(SELECT itemid FROM d_items WHERE label = '{v}')"
    )
    abp = "arterial blood pressure systolic"
    pairs = [
        ("what was the maximum systolic blood pressure of patient 10001?", sql.format(p=10001, v=abp)),
        ("tell me the highest systolic blood pressure of patient 10002.", sql.format(p=10002, v=abp)),
        ("what was the maximum heart rate of patient 10003?", sql.format(p=10003, v="heart rate")),
        ("what was the maximum pulse of patient 10004?", sql.format(p=10004, v="heart rate")),
    ]
    templates = [build_template(q, s, dialect="sqlite") for q, s in pairs]
    names = value_names(templates)
    assert names.contained("the systolic blood pressure", "d_items.label") == [(4, 27, abp)]
    assert names.contained("the pulse", "d_items.label") == []  # one question only
    disputed = value_names([*templates, build_template(
        "what was the maximum systolic blood pressure of patient 10005?", sql.format(p=10005, v="non invasive blood pressure systolic"),
        dialect="sqlite")])  # fmt: skip
    assert disputed.contained("the systolic blood pressure", "d_items.label") == []

    db = L.ValueIndex({"d_items.label": [abp, "heart rate", "non invasive blood pressure systolic"]})
    entries = [
        L.entry_for(i, q, s, t) for i, ((q, s), t) in enumerate(zip(pairs[2:], templates[2:], strict=True))
    ]
    entries.append(L.entry_for(9, *pairs[0], templates[0]))
    entries.append(L.entry_for(8, *pairs[1], templates[1]))
    index = L.LibraryIndex(entries, embed([mask_question(e.question, db) for e in entries]))
    question = "what was the maximum systolic blood pressure of patient 10009?"
    vector = embed([mask_question(question, db)])[0]
    best = L.match_library(question, vector, index, lookup=no_lookup, values=db).best
    assert best.hard_ok, best.reasons
    assert abp in literals(best.sql) and "10009" in best.sql


def test_numbers_are_placed_by_a_word_next_to_them():
    sql = (
        "SELECT title FROM (SELECT title, DENSE_RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM d WHERE "
        "hadm_id IN (SELECT hadm_id FROM admissions WHERE age >= {a}) GROUP BY title) WHERE r <= {n}"
    )
    index = build_index(
        [("For the patients with age 60 or above, what are the top five most frequent diagnoses?", sql.format(a=60, n=5))]
    )  # fmt: skip
    best = ask(
        index, "what are the top three most frequent diagnoses of patients with an age of 40 or above?"
    )
    assert best.hard_ok, best.reasons
    assert {"40", "3"} <= literals(best.sql) and "60" not in literals(best.sql)


SAME_TIME_SQL = (
    "SELECT t1.starttime FROM (SELECT subject_id, starttime FROM prescriptions WHERE subject_id = {p} AND "
    "drug = '{a}') AS t1 JOIN (SELECT subject_id, starttime FROM prescriptions WHERE subject_id = {p} AND "
    "drug = '{b}') AS t2 ON t1.subject_id = t2.subject_id WHERE t1.starttime = t2.starttime "
    "ORDER BY t1.starttime LIMIT 1"
)


@pytest.mark.parametrize(("same", "answers"), [(True, True), (False, False), (None, False)])
def test_values_the_wording_does_not_place_bind_only_if_every_order_gives_the_same_result(same, answers):
    index = build_index(
        [
            (
                "when was patient 10001 prescribed aspirin and glucose at the same time for the first time?",
                SAME_TIME_SQL.format(p=10001, a="aspirin", b="glucose"),
            )
        ]
    )
    question = (
        "when was patient 10002 prescribed docusate sodium at the same time as nacl 0.9% for the first time?"
    )
    asked: list[str] = []

    def probe(sql: str) -> bool:
        asked.append(sql)
        return bool(same)

    vector = embed([mask_question(question, VALUES)])[0]
    best = L.match_library(
        question, vector, index, lookup=no_lookup, values=VALUES, probe=None if same is None else probe
    ).best
    assert best.hard_ok is answers, best.reasons
    if same is not None:
        orders = [q for q in asked if "EXCEPT" in q]  # (value_longer asks whether the answer is empty)
        assert len(orders) == 1  # one other order, compared on the database
    if answers:
        assert {"docusate sodium", "nacl 0.9%"} <= literals(best.sql)
    else:
        assert any("goes where" in r for r in best.reasons)


def test_the_same_result_probe_returns_a_row_only_for_equal_results():
    from core.match.probes import same_result_probe

    db = sqlite3.connect(":memory:")
    db.executescript("CREATE TABLE t (x INT, y TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b'), (2, 'c');")

    def equal(a: str, b: str) -> bool:
        return bool(db.execute(same_result_probe(a, b, "sqlite")).fetchall())

    assert equal("SELECT x FROM t WHERE y IN ('a', 'b')", "SELECT x FROM t WHERE y IN ('b', 'a')")
    assert not equal("SELECT x FROM t WHERE y = 'a'", "SELECT x FROM t WHERE y = 'b'")
    assert not equal("SELECT x FROM t WHERE y = 'b'", "SELECT x FROM t WHERE y <> 'a'")  # 2 vs 2, 2
    assert equal("SELECT x FROM t WHERE y = 'z'", "SELECT x FROM t WHERE y = 'q'")  # both empty


def test_value_probes_check_fixed_categories_not_the_patient_or_the_time():
    from core.match.probes import value_probes

    sql = (
        "SELECT COUNT(*) > 0 FROM admissions WHERE admissions.subject_id = 10026255 AND "
        "admissions.admission_location = 'emergency room' AND DATETIME(admissions.admittime) "
        ">= DATETIME(CURRENT_TIME, '-1 year')"
    )
    t = build_template("Was patient 10026255 to the emergency room within a year?", sql, dialect="sqlite")
    assert {s.type for s in t.slots} == {"patient_id", "value"}
    assert value_probes(t, sql) == []  # not there within a year is the answer "no", not a misread value
    sql = (
        "SELECT SUM(amount) FROM inputevents WHERE subject_id = 10001 AND itemid IN (SELECT itemid FROM "
        "d_items WHERE d_items.label = 'foley' AND d_items.linksto = 'inputevents')"
    )
    t = build_template("what was the total foley input of patient 10001?", sql, dialect="sqlite")
    assert value_probes(t, sql) == [
        "SELECT 1 FROM d_items WHERE d_items.label = 'foley' AND d_items.linksto = 'inputevents' LIMIT 1"
    ]


def test_templates_whose_operators_fit_are_tried_before_better_voted_ones(monkeypatch):
    monkeypatch.setattr(
        library, "TEMPLATES_TRIED", 1
    )  # room for one template only: it must be the one that fits
    sql = "SELECT COUNT(*) FROM admissions WHERE subject_id = {p} AND strftime('%Y', admittime) {op} '{y}'"
    pairs = [
        (f"how many times did patient {10000 + i} visit the hospital since {2100 + i}?", sql.format(p=10000 + i, op=">=", y=2100 + i))
        for i in range(6)
    ] + [("count the number of times patient 10009 visited the hospital in 2105.", sql.format(p=10009, op="=", y=2105))]  # fmt: skip
    index = build_index(pairs)
    vector = embed(
        [mask_question("how many times did patient 10020 visit the hospital during 2101?", VALUES)]
    )[0]
    found = L.match_library(
        "how many times did patient 10020 visit the hospital during 2101?",
        vector,
        index,
        lookup=no_lookup,
        values=VALUES,
    )
    assert ">=" in found.votes[0][0]  # the vote prefers "since", which cannot apply
    assert found.best.hard_ok, found.best.reasons
    assert "= '2101'" in found.best.sql.replace('"', "'")


# --- calibration plumbing ---------------------------------------------------------------------------


def test_the_threshold_is_the_break_even_of_the_wrong_answer_cost():
    assert L.answer_threshold(10) == pytest.approx(10 / 11)
    assert L.answer_threshold(0) == 0


def test_grouped_folds_never_split_a_paraphrase_group():
    folds = L.grouped_folds(AGES.entries + AGES.entries, folds=3)
    entries = AGES.entries + AGES.entries
    where = {}
    for n, fold in enumerate(folds):
        for i in fold:
            assert where.setdefault(entries[i].group, n) == n


def test_the_sibling_pass_asks_each_question_without_its_whole_template():
    pairs = [
        ("what was the admission type of patient 10001 on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10001)),
        ("how was patient 10002 admitted on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10002)),
        ("what age was patient 10004 on the first hospital visit?", AGE_AT_VISIT_SQL.format(p=10004)),
        ("what was the age of patient 10005 on the first hospital visit?", AGE_AT_VISIT_SQL.format(p=10005)),
        ("count the number of patients older than 65.", AGE_SQL.format(n=65)),
        ("how many patients are older than 80?", AGE_SQL.format(n=80)),
        ("how tall is the moon?", ""),
    ]  # fmt: skip
    index = build_index(pairs)
    folds = L.grouped_folds(index.entries, folds=3, siblings=True)
    where = {}
    for n, fold in enumerate(folds):
        for i in fold:
            if index.entries[i].key != L.UNANSWERABLE:
                assert where.setdefault(index.entries[i].key, n) == n  # a whole template in one fold
    asked, fold_ids = [], []
    L.cross_validate(
        index, lambda held: index.matrix[held], is_correct=lambda e, b: False, lookup=no_lookup, values=VALUES,
        folds=3, siblings=True, folds_out=fold_ids, observe=lambda entry, found, train: asked.append((entry, train)),
    )  # fmt: skip
    expected = {e.question for e in index.entries if e.template and not whole_template(e.key)}
    assert {
        e.question for e, _ in asked
    } == expected  # no unanswerable one, none the ordinary folds hold out whole
    assert all(e.key not in train.families for e, train in asked)  # its template is not in the library
    assert all(f >= 3 for f in fold_ids)  # numbered after the ordinary folds


# --- now as of the source ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"),
    [
        (
            "sqlite",
            "SELECT datetime(current_time,'start of year','-1 year')",
            {"2100-12-31 23:59:00", "-1 year"},
        ),
        (
            "sqlite",
            "SELECT date('now','-1 day'), current_date, current_timestamp",
            {"2100-12-31 23:59:00", "2100-12-31"},
        ),
        (
            "postgres",
            "SELECT now() - interval '1 day', current_date, localtimestamp",
            {"2100-12-31 23:59:00", "2100-12-31"},
        ),
    ],
)
def test_now_is_the_as_of_time(dialect, sql, expected):
    out = apply_as_of(sql, dialect, NOW)
    assert expected <= literals(out, dialect)
    assert "now" not in out.lower().replace("'", "") and "current_" not in out.lower()


def test_sql_without_now_is_left_byte_for_byte():
    sql = "select  count(*) from t where x > 1"
    assert apply_as_of(sql, "sqlite", NOW) == sql
    assert apply_as_of("SELECT current_time", "sqlite", None) == "SELECT current_time"


def test_the_executor_sees_the_as_of_time():
    class Echo:
        def execute(self, sql, *, timeout_s, row_cap):
            return sqlite3.connect(":memory:").execute(sql).fetchall()

    executor = AsOfExecutor(Echo(), dialect="sqlite", as_of=NOW)
    assert executor.execute("SELECT strftime('%Y', current_time)", timeout_s=1, row_cap=1) == [("2100",)]
    assert executor.last_rewritten


def test_an_empty_library_answers_nothing():
    empty = L.LibraryIndex([], [])
    assert L.match_library("how many patients?", [1.0, 0.0], empty, lookup=no_lookup).results == []


# --- a template's subject, siblings that differ by it, and honest held-out risk ----------------------

DIAGNOSED_SQL = "SELECT COUNT(*) > 0 FROM diagnoses_icd WHERE subject_id = {p}"
ADMISSION_TYPE_SQL = "SELECT admission_type FROM admissions WHERE subject_id = {p} ORDER BY admittime LIMIT 1"
AGE_AT_VISIT_SQL = "SELECT age FROM admissions WHERE subject_id = {p} ORDER BY admittime LIMIT 1"
WORDING_SQL = "SELECT COUNT(*) FROM t{n} WHERE subject_id = {p}"


def test_a_subject_said_in_any_form_is_required_but_not_inside_a_value():
    index = build_index(
        [
            ("has patient 10001 been diagnosed with anything?", DIAGNOSED_SQL.format(p=10001)),
            ("has patient 10002 been given a diagnosis?", DIAGNOSED_SQL.format(p=10002)),
            ("did patient 10003 have any diagnoses?", DIAGNOSED_SQL.format(p=10003)),
        ]
    )
    # "diagnosed", "diagnosis", "diagnoses": three stems, one subject that every paraphrase says
    assert ask(index, "has patient 10004 been given any diagnosis?").hard_ok
    best = ask(index, "has patient 10004 undergone any procedure?")  # (subject_table says it first)
    assert not best.hard_ok and {R.WORDS_MISSING, R.SUBJECT_TABLE} & set(best.reason_codes), best.reasons
    # "diagnostic" inside a named value does not say the template's subject
    values = L.ValueIndex({"d_icd_procedures.long_title": ["excision of bile duct", "hemodialysis",
                                                           "diagnostic ultrasound of heart"]})  # fmt: skip
    after = (
        "SELECT long_title FROM d_icd_diagnoses WHERE icd_code IN (SELECT icd_code FROM diagnoses_icd WHERE "
        "hadm_id IN (SELECT hadm_id FROM procedures_icd WHERE icd_code = (SELECT icd_code FROM "
        "d_icd_procedures WHERE long_title = '{v}')))"
    )
    pairs = [
        ("what diagnoses did patients get after the procedure excision of bile duct?", after.format(v="excision of bile duct")),
        ("which diagnoses followed the procedure hemodialysis?", after.format(v="hemodialysis")),
    ]  # fmt: skip
    entries = [
        L.entry_for(i, q, sql, build_template(q, sql, dialect="sqlite")) for i, (q, sql) in enumerate(pairs)
    ]
    index = L.LibraryIndex(entries, embed([mask_question(q, values) for q, _ in pairs]))

    def best(question):
        vector = embed([mask_question(question, values)])[0]
        return L.match_library(question, vector, index, lookup=no_lookup, values=values).best

    assert best("which diagnoses followed the procedure diagnostic ultrasound of heart?").hard_ok
    refused = best("which procedures followed the procedure diagnostic ultrasound of heart?")
    # (the template returns diagnoses: subject_table says it first)
    assert not refused.hard_ok and R.SUBJECT_TABLE in refused.reason_codes, refused.reasons


def test_library_wording_that_is_another_templates_subject_is_not_explained_by_a_sibling():
    pairs = [
        ("what was the admission type of patient 10001 on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10001)),
        ("how was patient 10002 admitted on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10002)),
        ("what type of admission did patient 10003 have on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10003)),
    ]  # fmt: skip
    # "age" is wording in three templates whose paraphrases say it or leave it out…
    for n in range(3):
        pairs += [
            (f"what is the test {n} of patient 1000{n} at any age?", WORDING_SQL.format(n=n, p=10000 + n)),
            (f"what is the test {n} of patient 2000{n}?", WORDING_SQL.format(n=n, p=20000 + n)),
        ]
    age = [
        ("what age was patient 10004 on the first hospital visit?", AGE_AT_VISIT_SQL.format(p=10004)),
        ("what was the age of patient 10005 on the first hospital visit?", AGE_AT_VISIT_SQL.format(p=10005)),
        ("patient 10006's age on the first hospital visit was what?", AGE_AT_VISIT_SQL.format(p=10006)),
    ]
    without = build_index(pairs)
    assert "age" in next(iter(without.families.values())).neutral
    assert not next(iter(without.families.values())).subjects
    # …but the subject of the template about the age: the admission type's template, which never
    # says it, may not answer a question about it.
    index = build_index(pairs + age)
    admission_type = next(e.key for e in index.entries if e.question == pairs[0][0])
    assert "age" in index.families[admission_type].subjects
    question = "in the first hospital visit, what age was patient 10007?"
    found = L.match_library(
        question, embed([mask_question(question, VALUES)])[0], index, lookup=no_lookup, values=VALUES
    )
    sibling = next(r for r in found.results if r.example_question in {q for q, _ in pairs[:3]})
    assert not sibling.hard_ok and R.WORDS_UNEXPLAINED in sibling.reason_codes, sibling.reasons
    assert found.best.hard_ok and "age" in found.best.sql


def test_paraphrase_distance_counts_the_nearest_paraphrases_words_the_question_leaves_out():
    index = build_index(
        [
            ("what was the admission type of patient 10001 on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10001)),
            ("how was patient 10002 admitted on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=10002)),
        ]
    )  # fmt: skip
    assert (
        ask(index, "how was patient 10005 admitted on the first hospital visit?").features[
            "paraphrase_missing"
        ]
        == 0
    )
    family = next(iter(index.families.values()))
    assert paraphrase_missing({"patient", "hospital", "visit"}, family) == 1  # "admitt" or "type"
    # operator words count too: "how much is X?" is not "how is X taken?", though neither says more
    cost = build_index([("how much is aspirin?", COST_SQL.format(d="aspirin")),
                        ("what is the cost of docusate sodium?", COST_SQL.format(d="docusate sodium"))])  # fmt: skip
    family = next(iter(cost.families.values()))
    asked = question_operators("how is aspirin taken?")
    assert paraphrase_missing(set(), family, asked) == 1
    assert paraphrase_missing(set(), family, question_operators("how much is aspirin?")) == 0


def test_held_out_risk_is_scored_by_a_model_that_never_saw_its_fold():
    right = {"vote_share": 0.9, "member_similarity": 0.95}
    wrong = {"vote_share": 0.3, "member_similarity": 0.6}
    samples = (
        [(right, True)] * 6 + [(wrong, False)] * 3 + [({"vote_share": 0.9, "member_similarity": 0.96}, False)]
    )
    folds = [0, 1, 2, 0, 1, 2, 0, 1, 2, 3]
    scored = L.out_of_fold(samples, folds)
    risks = L.fold_risks(samples, folds)
    assert risks[3].samples == 9  # fold 3's model is fitted without fold 3's sample…
    # …so the wrong answer that looks right gets the P(correct) of a right one: the CV counts it as
    # answered and wrong, as a new question like it would be, instead of learning it away.
    assert scored[-1][0] == pytest.approx(risks[3].predict(samples[-1][0]))
    assert scored[-1][0] > scored[6][0]


def test_a_value_of_two_columns_is_read_as_the_library_reads_it():
    values = L.ValueIndex(
        {"d_items.label": ["anion gap", "heart rate"], "d_labitems.label": ["anion gap", "sodium"]}
    )
    chart = "SELECT MAX(valuenum) FROM chartevents WHERE itemid IN (SELECT itemid FROM d_items WHERE label = '{v}')"
    lab = "SELECT MAX(valuenum) FROM labevents WHERE itemid IN (SELECT itemid FROM d_labitems WHERE label = '{v}')"
    pairs = [
        ("what is the highest heart rate value measured?", chart.format(v="heart rate")),
        ("what is the highest anion gap value measured?", lab.format(v="anion gap")),
        ("what is the highest sodium value measured?", lab.format(v="sodium")),
    ]
    entries = [
        L.entry_for(i, q, sql, build_template(q, sql, dialect="sqlite")) for i, (q, sql) in enumerate(pairs)
    ]
    chart_only = L.LibraryIndex(entries[:1], embed([mask_question(pairs[0][0], values)]))
    question = "what is the highest anion gap value measured?"
    vector = embed([mask_question(question, values)])[0]
    # The library's one question naming a value of both columns means the lab item: the chart template
    # may not read 'anion gap' as a chart item…
    index = L.LibraryIndex(entries[:2], embed([mask_question(q, values) for q, _ in pairs[:2]]))
    found = L.match_library(question, vector, index, lookup=no_lookup, values=values)
    chart_result = next(r for r in found.results if r.example_question == pairs[0][0])
    assert not chart_result.hard_ok and R.VALUE_AMBIGUOUS in chart_result.reason_codes
    # …even when no lab template that could answer is in the library to compete with it: another
    # template's question taught which item such a value names.
    count = (
        "SELECT COUNT(*) FROM labevents WHERE itemid IN (SELECT itemid FROM d_labitems WHERE label = '{v}')"
    )
    taught = [pairs[0], ("how many anion gap tests were there?", count.format(v="anion gap"))]
    taught_entries = [
        L.entry_for(i, q, sql, build_template(q, sql, dialect="sqlite")) for i, (q, sql) in enumerate(taught)
    ]
    without_lab = L.LibraryIndex(taught_entries, embed([mask_question(q, values) for q, _ in taught]))
    assert not L.match_library(question, vector, without_lab, lookup=no_lookup, values=values).best.hard_ok
    # A library with no example of such a value says nothing: the chart reading stands.
    assert L.match_library(question, vector, chart_only, lookup=no_lookup, values=values).best.hard_ok
    # How the library reads such values is learnt once per library and database index, also when a
    # question's match reads the values together with the library's other names for them.
    names = L.ValueIndex({"d_labitems.label": ["anion gap"]})
    assert column_readings(index, values.with_names(names)) is column_readings(index, values)


def test_a_swap_is_asked_of_a_voted_template_one_operator_word_apart_past_the_best_voted(monkeypatch):
    """The bases a swap is tried on past the COMPOSE_VOTED best: only a template whose operator words
    differ from the question's in one word (a swap changes one), never one two words apart ("the
    maximum … since 2100" for "the last …"), never one already tried, in the vote's order."""
    monkeypatch.setattr(library, "COMPOSE_VOTED", 0)
    sql = "SELECT c.valuenum FROM chartevents c WHERE c.subject_id = {p} ORDER BY c.charttime {d} LIMIT 1"
    pairs = [
        ("what was the maximum heart rate of patient 10001 since 2100?",
         "SELECT MAX(c.valuenum) FROM chartevents c WHERE c.subject_id = 10001 AND strftime('%Y', c.charttime) >= '2100'"),
        ("what was the first heart rate of patient 10002?", sql.format(p=10002, d="ASC")),
        ("what was the first heart rate of patient 10003 in 2100?",
         "SELECT c.valuenum FROM chartevents c WHERE c.subject_id = 10003 AND strftime('%Y', c.charttime) = '2100' "
         "ORDER BY c.charttime ASC LIMIT 1"),
        ("what was the last heart rate of patient 10004 in 2100?",
         "SELECT c.valuenum FROM chartevents c WHERE c.subject_id = 10004 AND strftime('%Y', c.charttime) = '2100' "
         "ORDER BY c.charttime DESC LIMIT 1"),
    ]  # fmt: skip
    index = build_index(pairs)
    reading = L.read_question("what was the last heart rate of patient 10020?", VALUES)
    keys = {e.question: e.key for e in index.entries}
    ranked = [(keys[q], share) for (q, _), share in zip(pairs, (0.4, 0.3, 0.2, 0.1), strict=True)]
    vote = library.Vote(np.ones(len(index.entries)), np.arange(len(index.entries)), ranked)
    apart = library._one_apart(reading, index, [], vote)
    # the first heart rate (a direction swap) and the last in 2100 (its time left out), each one word
    # apart; never the maximum since 2100 nor the first in 2100 (two words apart each)
    assert [key for _, key, _ in apart] == [keys[pairs[1][0]], keys[pairs[3][0]]]
    assert [rank for rank, _, _ in apart] == [1, 3]  # the vote's ranks, for the risk features
    tried = [(1, keys[pairs[1][0]], 0.3)]
    assert [key for _, key, _ in library._one_apart(reading, index, tried, vote)] == [keys[pairs[3][0]]]
