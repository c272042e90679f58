"""The time drop (core/match/untimed.py): a verified template's time condition left out, in every
WHERE that has it, where the question says no time at all, on EHRSQL-shaped SQLite templates with a
bag-of-words stand-in for the embedder. Which condition forms may be left out comes from the library's
own pairs of templates (one with it, one the same without), never from a list; the attacks: a time
value or a time word the question says, a negation, another operator word, a form the library never
shows left out, a paraphrase that does not say its time (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex, build_template, mask_question
from core.match.library import Vote
from core.match.reading import read_question
from core.match.untimed import TimeDrop, library_untimed, untimed_plans
from tests.core.match.test_library import ask_with_own_values, embed, index_of
from tests.core.match.test_retimed import CHART, year

C = "chartevents.charttime"
UNTIMED = CHART.replace(" AND {t}", "")  # the same chart value with no time condition


def chart(p: int, item: str, t: str | None, o: str = "DESC") -> str:
    return UNTIMED.format(p=p, item=item, o=o) if t is None else CHART.format(p=p, item=item, t=t, o=o)


ITEMS = [
    # the daily weight's last value with and without a year: the pair that shows the year left out
    ("What was the last daily weight of patient 10002495 in 2100?", chart(10002495, "daily weight", year(2100))),
    ("Tell me the last daily weight of patient 10010471 in 2100.", chart(10010471, "daily weight", year(2100))),
    ("What was the last daily weight of patient 10007795?", chart(10007795, "daily weight", None)),
    ("Tell me the last daily weight of patient 10011398.", chart(10011398, "daily weight", None)),
    # the first heart rate in a year alone: the base the question asks of all time
    ("What was the first heart rate of patient 10004235 in 2100?", chart(10004235, "heart rate", year(2100), "ASC")),
    ("Tell me the first heart rate of patient 10038081 in 2100.", chart(10038081, "heart rate", year(2100), "ASC")),
]  # fmt: skip


@pytest.fixture(scope="module")
def library():
    return index_of(ITEMS)


def plans(index, question, base=4):
    vote = Vote.of(embed([mask_question(question)])[0], index)
    return untimed_plans(read_question(question, None), index, base, vote)


def untimed(index, question):
    return [
        r
        for r in ask_with_own_values(index, question).results
        if r.hard_ok and "without in 2100" in r.composed_with
    ]


def test_the_library_shows_which_time_condition_is_left_out(library):
    # the form the daily weight's pair shows left out, with the templates that say no time (3 and 4)
    assert library_untimed(library) == {("STRFTIME('%Y', _c) = '<year>'",): (2, 3)}
    # a library with no template alike but for its time condition shows none left out
    timed = [e for e in library.entries if "2100" in e.question]
    assert library_untimed(LibraryIndex(timed, embed([e.question for e in timed]))) == {}


def test_every_copy_of_the_time_condition_is_left_out(library):
    question = "What was the first heart rate of patient 10002428?"
    (source, drop), *_ = plans(library, question)
    assert drop.phrase == "without in 2100" and "daily weight" in library.entries[source].question
    best = untimed(library, question)[0]
    assert "'%Y'" not in best.sql and "charttime" in best.sql  # the order by stays, the year goes
    assert "subject_id = 10002428" in best.sql and "'heart rate'" in best.sql
    assert "ORDER BY chartevents.charttime ASC" in best.sql  # the base's first
    assert best.features["composed"] == 1.0 and best.composed_from[0] == 5


def test_the_wording_loses_the_phrase_and_nothing_else():
    template = build_template(
        "In 2100, what was the first heart rate of patient 10004235?",
        chart(10004235, "heart rate", year(2100), "ASC"),
        dialect="sqlite",
    )
    question, sql = TimeDrop(("STRFTIME('%Y', _c) = '<year>'",), "in 2100").apply(template)
    assert question == "What was the first heart rate of patient 10004235?"
    assert "'%Y'" not in sql


@pytest.mark.parametrize(
    "question",
    [
        # a time the question says: the replacement's (retimed.py), never the drop
        "What was the first heart rate of patient 10004235 since 5 months ago?",
        "What was the first heart rate of patient 10004235 in 2101?",
        # a time word with no value: "this year", "today" and "recently" name a time
        "What was the first heart rate of patient 10004235 this year?",
        "What was the first heart rate of patient 10004235 today?",
        # a negation: "not in 2100" is another question
        "What was the first heart rate of patient 10004235 not in any year?",
        # another operator word (last for first): not a time alone
        "What was the last heart rate of patient 10004235?",
    ],
)
def test_no_drop_the_question_does_not_ask(library, question):
    assert not plans(library, question)
    assert not untimed(library, question)


# --- one template's own evidence (issue 26): no pair in the library -------------------------------

# The first heart rate in a year, each paraphrase saying the year in one phrase ("in 2100", "during
# 2100"), and the daily weight's: a small library that holds no template the same but for its time.
TIMED = [item for item in ITEMS if "2100" in item[0]] + [
    ("During 2100, what was the first heart rate of patient 10019003?", chart(10019003, "heart rate", year(2100), "ASC")),
]  # fmt: skip


@pytest.fixture(scope="module")
def timed():
    index = index_of(TIMED)
    assert library_untimed(index) == {}  # no pair: the evidence is the template's own
    return index


def test_a_template_whose_paraphrases_all_say_its_time_shows_it_left_out(timed):
    question = "What was the first heart rate of patient 10002428?"
    (source, drop), *_ = plans(timed, question, base=2)
    assert drop.phrase == "without in 2100" and "heart rate" in timed.entries[source].question
    best = untimed(timed, question)[0]
    assert "'%Y'" not in best.sql and "subject_id = 10002428" in best.sql
    assert "ORDER BY chartevents.charttime ASC" in best.sql


@pytest.mark.parametrize(
    "question",
    [
        # a time the base does not say, which the library maps to no condition: never the drop
        "What was the first heart rate of patient 10002428 in the last year?",
        "What was the first heart rate of patient 10002428 since 2 months ago?",
        # a time said in other words: "recently", "in the past", "lately" name a time of their own
        "What was the first heart rate of patient 10002428 recently?",
        "What was the first heart rate of patient 10002428 in the past?",
        "What was the first heart rate of patient 10002428 lately?",
        # a visit's scope is not a period (the visit is another operator word)
        "What was the first heart rate of patient 10002428 during the current hospital visit?",
        "What was the first heart rate of patient 10002428 on their first hospital visit?",
        "What was the first heart rate of patient 10002428 previously?",
        # a negation
        "What was the first heart rate of patient 10002428 not in 2100?",
    ],
)
def test_no_drop_from_one_template_the_question_does_not_ask(timed, question):
    assert not [r for r in ask_with_own_values(timed, question).results if r.hard_ok and r.composed_with]


def test_a_period_said_in_words_is_a_phrase_of_its_own():
    # "this year" is one value said in words (its span is the phrase): the drop leaves it out whole
    this_year = (
        "datetime(chartevents.charttime,'start of year') = datetime(current_time,'start of year','-0 year')"
    )
    index = index_of([
        ("What was the first heart rate of patient 10004235 this year?", chart(10004235, "heart rate", this_year, "ASC")),
        ("Tell me the first heart rate of patient 10038081 throughout this year.", chart(10038081, "heart rate", this_year, "ASC")),
    ])  # fmt: skip
    question = "What was the first heart rate of patient 10002428?"
    (_, drop), *_ = plans(index, question, base=0)
    assert drop.phrase == "without this year"
    best = [
        r
        for r in ask_with_own_values(index, question).results
        if r.hard_ok and r.composed_with == drop.phrase
    ]
    assert best and "start of year" not in best[0].sql and "subject_id = 10002428" in best[0].sql


def test_a_base_whose_time_phrase_is_part_of_what_is_asked_is_kept():
    # "how many days have passed since …": the question's "since" is a time word, so the base's year
    # is never left out for it, though the base's own paraphrases say the year in one phrase
    days = (
        "SELECT 1 * ( strftime('%J',current_time) - strftime('%J', chartevents.charttime) ) FROM chartevents "
        "WHERE chartevents.stay_id IN ( SELECT icustays.stay_id FROM icustays WHERE icustays.hadm_id IN ( "
        "SELECT admissions.hadm_id FROM admissions WHERE admissions.subject_id = {p} ) ) AND "
        "chartevents.itemid IN ( SELECT d_items.itemid FROM d_items WHERE d_items.label = 'heart rate' AND "
        "d_items.linksto = 'chartevents' ) AND strftime('%Y',chartevents.charttime) = '2100' "
        "ORDER BY chartevents.charttime ASC LIMIT 1"
    )
    index = index_of([
        ("How many days have passed since the first heart rate of patient 10004235 in 2100?", days.format(p=10004235)),
        ("How many days have passed since the first heart rate of patient 10038081 in 2100?", days.format(p=10038081)),
    ])  # fmt: skip
    assert not plans(
        index, "How many days have passed since the first heart rate of patient 10002428?", base=0
    )
    # (the year is one outer conjunct there, which compose.py's own condition drop may leave out: the
    # days since the first heart rate of all time, what the question asks; the time drop is not asked)


def test_a_form_the_library_never_shows_left_out_is_kept_unless_every_paraphrase_says_it():
    # one paraphrase says the year bare ("in the year 2100": the phrase is "2100", the cut would leave
    # "in the year"), so the template's own paraphrases do not show that their phrase says the year
    bare = ("What was the first heart rate of patient 10038081 in the year 2100?", chart(10038081, "heart rate", year(2100), "ASC"))  # fmt: skip
    index = index_of([TIMED[2], bare])
    assert not plans(index, "What was the first heart rate of patient 10002428?", base=0)
    # and a template whose one paraphrase says the year bare alone
    assert not plans(index_of([bare]), "What was the first heart rate of patient 10002428?", base=0)


def test_a_paraphrase_that_says_no_time_phrase_is_not_composed():
    template = build_template(
        "What was the first heart rate of patient 10004235?",
        chart(10004235, "heart rate", year(2100), "ASC"),
        dialect="sqlite",
    )
    assert TimeDrop(("STRFTIME('%Y', _c) = '<year>'",), "in 2100").apply(template) is None


def test_one_period_of_two_events_is_left_out_of_both():
    # the year said of both events ("the drug prescribed after the procedure in 2100") goes from both
    # (the library's daily weight pair shows the year's form left out: the lesson is the form's)
    from tests.core.match.test_retimed import in_year, two_events

    items = [
        *ITEMS,
        ("What drug was patient 10004235 prescribed after the procedure colonoscopy in 2100?", two_events(10004235, "colonoscopy", in_year(2100))),
        ("Which drug was patient 10038081 prescribed after the procedure colonoscopy in 2100?", two_events(10038081, "colonoscopy", in_year(2100))),
    ]  # fmt: skip
    index = index_of(items)
    question = "What drug was patient 10021118 prescribed after the procedure colonoscopy?"
    found = [r for r in ask_with_own_values(index, question).results if r.hard_ok and r.composed_with]
    assert found, [r.reasons for r in ask_with_own_values(index, question).results[:3]]
    sql = found[0].sql
    assert "'%Y'" not in sql and "10021118" in sql and "T1.charttime < T2.starttime" in sql
