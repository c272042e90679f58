"""The time-period replacement (core/match/retimed.py): a verified template's time condition replaced, in
every WHERE that has it, by the condition another verified template writes for the question's time
phrase, on EHRSQL-shaped SQLite templates with a bag-of-words stand-in for the embedder. Which
condition a phrase writes comes from the library's own pairs of templates, never from a list; the
attacks: two time phrases, a time about another event than the one the condition filters, a negation,
a phrase the library never shows, a condition whose value is used elsewhere too (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex, build_template, entry_for, mask_question
from core.match.library import Vote
from core.match.reading import read_question
from core.match.retimed import (
    TimeReplace,
    _condition_trees,
    _conditions,
    _rewritten,
    library_timings,
    period_plans,
    template_timing,
)
from tests.core.match.test_library import ask_with_own_values, embed

# The last (or first) chart value of an item: the time condition is in the outer WHERE and in the
# subquery that picks the row, as EHRSQL writes it.
CHART = (
    "SELECT chartevents.valuenum FROM chartevents WHERE chartevents.stay_id IN ( SELECT icustays.stay_id "
    "FROM icustays WHERE icustays.hadm_id IN ( SELECT admissions.hadm_id FROM admissions WHERE "
    "admissions.subject_id = {p} ) ) AND chartevents.itemid IN ( SELECT d_items.itemid FROM d_items WHERE "
    "d_items.label = '{item}' AND d_items.linksto = 'chartevents' ) AND {t} AND chartevents.charttime = ( "
    "SELECT DISTINCT chartevents.charttime FROM chartevents WHERE chartevents.stay_id IN ( SELECT "
    "icustays.stay_id FROM icustays WHERE icustays.hadm_id IN ( SELECT admissions.hadm_id FROM admissions "
    "WHERE admissions.subject_id = {p} ) ) AND chartevents.itemid IN ( SELECT d_items.itemid FROM d_items "
    "WHERE d_items.label = '{item}' AND d_items.linksto = 'chartevents' ) AND {t} ORDER BY "
    "chartevents.charttime {o} LIMIT 1 )"
)
C = "chartevents.charttime"


def ago(n: int) -> str:
    return f"datetime({C}) >= datetime(current_time,'-{n} month')"


def this_year(month: str) -> str:
    return f"datetime({C},'start of year') = datetime(current_time,'start of year','-0 year') AND strftime('%m',{C}) = '{month}'"


def year(y: int) -> str:
    return f"strftime('%Y',{C}) = '{y}'"


def chart(p: int, item: str, t: str, o: str = "DESC") -> str:
    return CHART.format(p=p, item=item, t=t, o=o)


ITEMS = [
    # the daily weight's last value three ways: the pairs that show which condition each phrase writes
    ("What was the last daily weight of patient 10002495 since 19 months ago?", chart(10002495, "daily weight", ago(19))),
    ("Tell me the last daily weight of patient 10010471 since 27 months ago.", chart(10010471, "daily weight", ago(27))),
    ("What was the last daily weight of patient 10007795 in 05/this year?", chart(10007795, "daily weight", this_year("05"))),
    ("Tell me the last daily weight of patient 10011398 in 12/this year.", chart(10011398, "daily weight", this_year("12"))),
    ("What was the last daily weight of patient 10038081 in 2100?", chart(10038081, "daily weight", year(2100))),
    # the first heart rate in a year alone: the base the question asks another period of
    ("What was the first heart rate of patient 10004235 in 2100?", chart(10004235, "heart rate", year(2100), "ASC")),
]  # fmt: skip


@pytest.fixture(scope="module")
def library():
    entries = []
    for n, (question, sql) in enumerate(ITEMS, start=1):
        entries.append(entry_for(n, question, sql, build_template(question, sql, dialect="sqlite")))
    return LibraryIndex(entries, embed([e.template.masked_question for e in entries]))


ask = ask_with_own_values


def plans(index, question, base=5):
    vote = Vote.of(embed([mask_question(question)])[0], index)
    return period_plans(read_question(question, None), index, base, vote)


def retimed(index, question):
    return [r for r in ask(index, question).results if r.hard_ok and "instead of in 2100" in r.composed_with]


def test_the_library_shows_which_condition_a_time_phrase_writes(library):
    forms = library_timings(library).forms
    assert forms[("since", "<number>", "months", "ago")] == (
        "DATETIME(_c) >= DATETIME(CURRENT_TIME, '-<number> month')",
    )
    assert forms[("in", "<month>", "/", "<period_year>")] == (
        "DATETIME(_c, 'start of year') = DATETIME(CURRENT_TIME, 'start of year', '-<period_year> year')",
        "STRFTIME('%m', _c) = '<month>'",
    )
    assert forms[("in", "<year>")] == ("STRFTIME('%Y', _c) = '<year>'",)
    # with no two templates alike but for their time condition, a template alone maps the phrase its
    # every paraphrase says (its own evidence: the phrase made of exactly its condition's slots)
    lone = [e for e in library.entries if "heart rate" in e.question]
    assert library_timings(LibraryIndex(lone, embed([e.question for e in lone]))).forms == {
        ("in", "<year>"): ("STRFTIME('%Y', _c) = '<year>'",)
    }
    # …never where one paraphrase says the year bare ("in the year 2100": the phrase is "2100" alone)
    bare = "What was the first heart rate of patient 10038081 in the year 2100?"
    lone.append(entry_for(9, bare, chart(10038081, "heart rate", year(2100), "ASC"), build_template(bare, chart(10038081, "heart rate", year(2100), "ASC"), dialect="sqlite")))  # fmt: skip
    assert library_timings(LibraryIndex(lone, embed([e.question for e in lone]))).forms == {}


# One template alone says each phrase (no pair in the library): the daily weight since N months ago,
# the first heart rate in a year.
SINGLE = [
    ("What was the last daily weight of patient 10002495 since 19 months ago?", chart(10002495, "daily weight", ago(19))),
    ("Tell me the last daily weight of patient 10010471 since 27 months ago.", chart(10010471, "daily weight", ago(27))),
    ("What was the first heart rate of patient 10004235 in 2100?", chart(10004235, "heart rate", year(2100), "ASC")),
    ("Tell me the first heart rate of patient 10038081 in 2100.", chart(10038081, "heart rate", year(2100), "ASC")),
]  # fmt: skip


def test_a_phrase_one_template_alone_says_replaces_the_time_of_another():
    from tests.core.match.test_library import index_of

    index = index_of(SINGLE)
    question = "What was the first heart rate of patient 10002428 since 5 months ago?"
    best = retimed(index, question)[0]
    assert best.sql.count("DATETIME(chartevents.charttime) >= DATETIME(CURRENT_TIME, '-5 month')") == 2
    assert "'%Y'" not in best.sql and "ORDER BY chartevents.charttime ASC" in best.sql
    # a phrase neither template says, a time in other words, two phrases: never
    for other in (
        "What was the first heart rate of patient 10002428 since 5 weeks ago?",
        "What was the first heart rate of patient 10002428 in the last year?",
        "What was the first heart rate of patient 10002428 in 03/this year since 5 months ago?",
        "What was the first heart rate of patient 10002428 not since 5 months ago?",
    ):
        assert not retimed(index, other), other


def test_every_copy_of_the_time_condition_is_replaced(library):
    question = "What was the first heart rate of patient 10002428 since 5 months ago?"
    (source, swap), *_ = plans(library, question)
    assert swap.phrase == "since 5 months ago instead of in 2100"
    assert "months ago" in library.entries[source].question
    best = retimed(library, question)[0]
    assert best.sql.count("DATETIME(chartevents.charttime) >= DATETIME(CURRENT_TIME, '-5 month')") == 2
    assert "'%Y'" not in best.sql and "subject_id = 10002428" in best.sql and "'heart rate'" in best.sql
    assert "ORDER BY chartevents.charttime ASC" in best.sql  # the base's first, not the source's last
    assert best.features["composed"] == 1.0 and best.composed_from[0] == 6


def test_the_conditions_parsed_once_are_never_changed_by_the_bases_they_are_written_into():
    # the source's conditions are parsed once per process and shared (_condition_trees): writing them
    # into a base renames their column and qualifies it, which must happen on copies, or the next base
    # (another table's time column) would get this one's column
    conditions = ("DATETIME(charttime) >= DATETIME(CURRENT_TIME, '-5 month')",)
    before = [c.sql(dialect="sqlite") for c in _condition_trees(conditions, "sqlite")]
    lab = "SELECT labevents.valuenum FROM labevents WHERE labevents.subject_id = 1 AND STRFTIME('%Y', labevents.charttime) = '2100'"
    drug = "SELECT prescriptions.drug FROM prescriptions WHERE prescriptions.subject_id = 1 AND STRFTIME('%Y', prescriptions.starttime) = '2100'"
    for sql, column in ((lab, "charttime"), (drug, "starttime")):
        written = _rewritten(sql, "sqlite", (2,), (column,), conditions)  # the year literal
        table = sql.split()[1].split(".")[0]
        assert f"DATETIME({table}.{column}) >= DATETIME(CURRENT_TIME, '-5 month')" in written
        assert "'%Y'" not in written
    assert [c.sql(dialect="sqlite") for c in _condition_trees(conditions, "sqlite")] == before


def test_a_condition_of_two_parts_takes_the_place_of_one(library):
    best = retimed(library, "What was the first heart rate of patient 10002428 in 03/this year?")[0]
    assert best.sql.count("STRFTIME('%m', chartevents.charttime) = '03'") == 2
    assert best.sql.count("'start of year', '-0 year'") == 2 and "'%Y'" not in best.sql


@pytest.mark.parametrize(
    "question",
    [
        # two time phrases: which one replaces the condition is not one answer
        "What was the first heart rate of patient 10004235 in 03/this year since 5 months ago?",
        # a negation: "not since" is another question
        "What was the first heart rate of patient 10004235 not since 5 months ago?",
        # a phrase the library never shows ("weeks ago")
        "What was the first heart rate of patient 10004235 since 5 weeks ago?",
        # a time about another event than the heart rate the condition filters
        "What was the first heart rate of patient 10004235 who was admitted since 5 months ago?",
    ],
)
def test_no_replacement_the_question_does_not_ask(library, question):
    assert not retimed(library, question)


def test_the_plans_refuse_before_anything_is_built(library):
    # the question's other operator words differ from the base's (last for first): not a time alone
    assert not plans(library, "What was the last heart rate of patient 10004235 since 5 months ago?")
    # the base's own phrase: a verified question, not a replacement
    assert not plans(library, "What was the first heart rate of patient 10004235 in 2101?")
    assert not plans(
        library, "What was the first heart rate of patient 10004235 in 03/this year since 5 months ago?"
    )


def test_a_condition_whose_value_is_used_elsewhere_is_no_time_condition():
    """The year also filters the admission: replacing the chart's copies alone would change one of two."""
    sql = chart(10004235, "heart rate", year(2100)).replace(
        "admissions.subject_id = 10004235 )", "admissions.subject_id = 10004235 AND strftime('%Y',admissions.admittime) = '2100' )", 1
    )  # fmt: skip
    template = build_template(
        "What was the last heart rate of patient 10004235 in 2100?", sql, dialect="sqlite"
    )
    assert template_timing(template) is None


def test_a_paraphrase_that_says_no_time_phrase_is_not_composed(library):
    template = build_template(
        "What was the first heart rate of patient 10004235?",
        chart(10004235, "heart rate", year(2100), "ASC"),
        dialect="sqlite",
    )
    swap = TimeReplace(
        ("STRFTIME('%Y', _c) = '<year>'",), "in 2100", "since 19 months ago", "since 5 months ago",
        ("DATETIME(charttime) >= DATETIME(CURRENT_TIME, '-19 month')",),
    )  # fmt: skip
    assert swap.apply(template) is None


def test_a_sources_conditions_read_once_are_keyed_by_which_literals_hold_its_values():
    # _conditions is cached per SQL (the nearest source is the same entry question after question): the
    # key holds which literals are slots, so a paraphrase whose year is no slot (it says no year)
    # never gets the conditions read for one whose year is a slot
    sql = "SELECT labevents.valuenum FROM labevents WHERE labevents.subject_id = 1 AND STRFTIME('%Y', labevents.charttime) = '2100'"
    said = build_template("what was the value of patient 1 in 2100?", sql, dialect="sqlite")
    unsaid = build_template("what was the value of patient 1?", sql, dialect="sqlite")
    assert [s.type for s in said.slots] == ["patient_id", "year"] and [s.type for s in unsaid.slots] == [
        "patient_id"
    ]
    first = _conditions(said, ("charttime",))
    assert first == ("STRFTIME('%Y', charttime) = '2100'",) and _conditions(said, ("charttime",)) is first
    assert _conditions(unsaid, ("charttime",)) == ()  # "charttime = '2100'" holds no slot's value here


def test_replacements_that_differ_in_the_shown_phrase_alone_make_one_composition():
    """A replacement's `shown` (the question's own phrase) is display alone: two that differ only in it
    are equal and compose one entry, made once (composing.composed_entry); the attacks: a replacement
    that writes another condition or another phrase, or a condition added in other words (no swap:
    its wording is what it writes), is never served another's entry."""
    import dataclasses

    import sqlglot
    from sqlglot import exp

    from core.match import composing
    from core.match.conditions import Condition

    question = "What was the last heart rate of patient 10004235 in 2100?"
    sql = chart(10004235, "heart rate", year(2100))
    base = entry_for(1, question, sql, build_template(question, sql, dialect="sqlite"))
    timing = template_timing(base.template)
    assert timing is not None
    ago19 = ("DATETIME(charttime) >= DATETIME(CURRENT_TIME, '-19 month')",)
    ago5 = ("DATETIME(charttime) >= DATETIME(CURRENT_TIME, '-5 month')",)
    first = TimeReplace(timing.form, "in 2100", "since 19 months ago", "since 5 months ago", ago19)
    second = TimeReplace(timing.form, "in 2100", "since 19 months ago", "in the last 5 months", ago19)
    assert first == second and hash(first) == hash(second) and first.phrase != second.phrase
    other_sql = TimeReplace(timing.form, "in 2100", "since 19 months ago", "since 5 months ago", ago5)
    other_text = TimeReplace(timing.form, "in 2100", "since 5 months ago", "since 5 months ago", ago19)
    assert first != other_sql and first != other_text

    def wording(swap: TimeReplace) -> Condition:
        return Condition(2, "", exp.true(), "aggregate", swap.phrase)

    made = composing.composed_entry(base, wording(first), drop=False, swap=first)
    assert made is not None and "since 19 months ago" in made.question and "-19 month" in made.template.sql
    assert composing.composed_entry(base, wording(second), drop=False, swap=second) is made
    assert first.apply(base.template) == second.apply(base.template) == (made.question, made.template.sql)
    for other in (other_sql, other_text):
        entry = composing.composed_entry(base, wording(other), drop=False, swap=other)
        assert entry is not None and entry is not made
        assert (entry.question, entry.template.sql) == other.apply(base.template)
    # a condition added (no swap) is keyed by its wording and SQL, as before
    older = "SELECT COUNT(*) FROM patients WHERE patients.anchor_age > 65"
    plain = entry_for(4, "How many patients are older than 65?", older,
                      build_template("How many patients are older than 65?", older, dialect="sqlite"))  # fmt: skip
    gender = sqlglot.parse_one("gender = 'F'", dialect="sqlite")
    female = Condition(3, "patients", gender, "gender", "who are female", ident="g", sql="gender = 'F'")
    women = dataclasses.replace(female, phrase="who are women")
    one, other = (composing.composed_entry(plain, c, drop=False) for c in (female, women))
    assert one is not None and other is not None and one is not other
    assert one.question.endswith("who are female?") and other.question.endswith("who are women?")


def test_a_sources_kept_conditions_write_what_a_fresh_parse_writes():
    """_condition_trees keeps the conditions without the parser's positions and empty comment lists
    (cheaper copies): the SQL written from them and into a base is the same, a real comment stays."""
    import sqlglot

    conditions = (
        "DATETIME(charttime) >= DATETIME(CURRENT_TIME, '-19 month')",
        "STRFTIME('%m', charttime) = '03' /* kept */",
    )
    kept = _condition_trees(conditions, "sqlite")
    fresh = [sqlglot.parse_one(c, dialect="sqlite") for c in conditions]
    assert [k.sql(dialect="sqlite") for k in kept] == [f.sql(dialect="sqlite") for f in fresh]
    assert [k.copy().sql(dialect="sqlite") for k in kept] == [f.copy().sql(dialect="sqlite") for f in fresh]
    assert kept == tuple(fresh) and "kept" in kept[1].sql(dialect="sqlite")
    assert all(node.meta == {} and node.comments != [] for k in kept for node in k.walk())


# Two events side by side, one period said of both (EHRSQL's "the drug prescribed after the procedure
# in 2100": each event's own SELECT has the period on its own time column, T1 JOIN T2).
TWO_EVENTS = (
    "SELECT T2.drug FROM ( SELECT procedures_icd.subject_id, procedures_icd.charttime FROM procedures_icd "
    "WHERE procedures_icd.subject_id = {p} AND procedures_icd.icd_code = ( SELECT d_icd_procedures.icd_code FROM d_icd_procedures WHERE d_icd_procedures.long_title = '{code}' ) AND {t1} ) AS T1 JOIN ( "
    "SELECT prescriptions.subject_id, prescriptions.drug, prescriptions.starttime FROM prescriptions WHERE "
    "prescriptions.subject_id = {p} AND {t2} ) AS T2 ON T1.subject_id = T2.subject_id "
    "WHERE T1.charttime < T2.starttime"
)


def two_events(p: int, code: str, when) -> str:
    """`when(column)`: the period's condition on one event's time column."""
    return TWO_EVENTS.format(
        p=p, code=code, t1=when("procedures_icd.charttime"), t2=when("prescriptions.starttime")
    )


def in_year(y: int):
    return lambda column: f"strftime('%Y',{column}) = '{y}'"


def months_ago(n: int):
    return lambda column: f"datetime({column}) >= datetime(current_time,'-{n} month')"


def test_one_period_of_two_events_is_replaced_on_both():
    base = "What drug was patient 10004235 prescribed after the procedure colonoscopy in 2100?"
    template = build_template(base, two_events(10004235, "colonoscopy", in_year(2100)), dialect="sqlite")
    timing = template_timing(template)
    assert timing is not None and timing.columns == ("charttime", "starttime")
    assert timing.form == ("STRFTIME('%Y', _c) = '<year>'",)
    items = [
        *ITEMS,
        (base, two_events(10004235, "colonoscopy", in_year(2100))),
        ("What drug was patient 10002428 prescribed after the procedure biopsy of kidney in 2100?", two_events(10002428, "biopsy of kidney", in_year(2100))),
    ]  # fmt: skip
    entries = [
        entry_for(n, q, sql, build_template(q, sql, dialect="sqlite")) for n, (q, sql) in enumerate(items, 1)
    ]
    index = LibraryIndex(entries, embed([e.template.masked_question for e in entries]))
    question = "What drug was patient 10021118 prescribed after the procedure colonoscopy since 5 months ago?"
    found = [r for r in ask(index, question).results if r.hard_ok and r.composed_with]
    assert found, [r.reasons for r in ask(index, question).results[:3]]
    sql = found[0].sql
    # the question's period on both events' times, the base's year on neither
    assert "DATETIME(procedures_icd.charttime) >= DATETIME(CURRENT_TIME, '-5 month')" in sql
    assert "DATETIME(prescriptions.starttime) >= DATETIME(CURRENT_TIME, '-5 month')" in sql
    assert "'%Y'" not in sql and "10021118" in sql


def test_two_events_with_two_periods_are_no_one_time_condition():
    # the procedure in 2100, the drug since 5 months ago: which one a phrase says is not known
    sql = TWO_EVENTS.format(
        p=10004235, code="colonoscopy", t1=in_year(2100)("procedures_icd.charttime"), t2=months_ago(5)("prescriptions.starttime")
    )  # fmt: skip
    template = build_template(
        "What drug was patient 10004235 prescribed since 5 months ago after the procedure colonoscopy in 2100?",
        sql,
        dialect="sqlite",
    )
    assert template_timing(template) is None
