"""A time returned in place of a value (core/match/timed.py): a verified template that returns one bare
column, returning the time column of the same table that the question names, on EHRSQL-shaped SQLite
templates with a bag-of-words stand-in for the embedder. Which word names which time column comes from
the library's templates that read it as a time ("discharged" for admissions.dischtime, "admitted" for
admissions.admittime), never from a list; the attacks: a question naming two times, a time of a table
the base does not read, a negation, the value and the time both asked, a duration, no time asked, a
base that returns a time already (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import mask_question
from core.match.library import Vote
from core.match.reading import read_question
from core.match.timed import library_times, time_plans, timed_columns
from tests.core.match.test_library import ask_with_own_values, embed, index_of

VISIT = (
    "SELECT admissions.{c} FROM admissions WHERE admissions.subject_id = {p} "
    "AND NOT admissions.dischtime IS NULL ORDER BY admissions.admittime {o} LIMIT 1"
)
COUNT = "SELECT COUNT(DISTINCT {t}.subject_id) FROM {t} WHERE STRFTIME('%Y', {t}.{c}) {op} '{y}'"


def visit(c: str, p: int, o: str = "ASC") -> str:
    return VISIT.format(c=c, p=p, o=o)


def count(t: str, c: str, op: str, y: int) -> str:
    return COUNT.format(t=t, c=c, op=op, y=y)


ITEMS = [
    # the base: a first visit's age, and a template of the same SQL returning another column
    ("How old was patient 10004235 on the first hospital visit?", visit("age", 10004235)),
    ("Can you tell me how old patient 10038081 was on the first hospital visit?", visit("age", 10038081)),
    ("What was the insurance of patient 10002495 on the first hospital visit?", visit("insurance", 10002495)),
    # times read as a time condition: "discharged" and "admitted" name admissions' two time columns
    ("How many patients were discharged from the hospital in 2100?", count("admissions", "dischtime", "=", 2100)),
    ("How many patients were discharged from the hospital since 2100?", count("admissions", "dischtime", ">=", 2100)),
    ("How many patients were admitted to the hospital in 2100?", count("admissions", "admittime", "=", 2100)),
    ("How many patients were admitted to the hospital since 2100?", count("admissions", "admittime", ">=", 2100)),
    # a time of another table: "transferred" names transfers.intime
    ("How many patients were transferred in 2100?", count("transfers", "intime", "=", 2100)),
    ("How many patients were transferred since 2100?", count("transfers", "intime", ">=", 2100)),
]  # fmt: skip
BASE = 1  # "How old was patient 10004235 on the first hospital visit?"


@pytest.fixture(scope="module")
def library():
    return index_of(ITEMS)


def plans(index, question, base=BASE - 1):
    vote = Vote.of(embed([mask_question(question)])[0], index)
    return time_plans(read_question(question, None), index, base, vote)


def test_the_library_shows_which_word_names_which_time_column(library):
    learnt = library_times(library)
    assert learnt.words == {
        "admissions.dischtime": frozenset({"discharg"}),
        "admissions.admittime": frozenset({"admitt"}),
        "transfers.intime": frozenset({"transferr"}),
    }
    base_key = library.entries[BASE - 1].key
    assert learnt.own_words[base_key] == frozenset({"old"})  # "insurance" is the other template's
    # ordered on or checked for NULL is no time read: every "first hospital visit" template does both
    assert timed_columns(visit("age", 1), "sqlite") == frozenset()


def test_the_time_is_returned_in_place_of_the_value_on_the_base(library):
    question = "When was patient 10002428 discharged from the hospital on the first hospital visit?"
    ((source, swap),) = plans(library, question)
    assert (swap.old, swap.new) == ("admissions.age", "admissions.dischtime")
    assert "discharged" in library.entries[source].question
    composed_question, sql = swap.apply(library.entries[BASE - 1].template)
    assert composed_question == "When discharged was patient 10004235 on the first hospital visit?"
    assert sql.startswith("SELECT admissions.dischtime FROM admissions") and "admittime ASC" in sql
    answers = [r for r in ask_with_own_values(library, question).results if r.hard_ok and r.composed_with]
    assert answers and all("10002428" in r.sql and "admissions.dischtime" in r.sql for r in answers)
    assert all(r.features["composed"] == 1.0 for r in answers)


@pytest.mark.parametrize(
    "question",
    [
        # two times named: which one to return is not known
        "When was patient 10002428 admitted and discharged on the first hospital visit?",
        # a time of a table the base does not read
        "When was patient 10002428 transferred on the first hospital visit?",
        # a negation
        "When was patient 10002428 not discharged from the hospital on the first hospital visit?",
        # the value and the time both asked
        "How old was patient 10002428 and when was the patient discharged on the first hospital visit?",
        # a duration is no time
        "How many days until patient 10002428 was discharged on the first hospital visit?",
        # no time asked
        "Was patient 10002428 discharged from the hospital on the first hospital visit?",
        # no time the library names
        "When did patient 10002428 leave the hospital on the first hospital visit?",
    ],
)
def test_no_time_returned_unless_the_question_asks_one_time_of_the_base_table(library, question):
    assert plans(library, question) == []


def test_a_base_returning_a_time_or_a_number_is_never_swapped():
    items = [
        *ITEMS,
        ("How many patients were admitted on the first hospital visit?",
         "SELECT COUNT(*) FROM admissions WHERE admissions.subject_id = 1"),
    ]  # fmt: skip
    index = index_of(items)
    question = "When was patient 10002428 discharged from the hospital on the first hospital visit?"
    assert plans(index, question, base=len(items) - 1) == []


def test_a_word_said_for_two_time_columns_names_neither():
    # "hospital" is said by the discharged and the admitted templates alike: it names no time column
    learnt = library_times(index_of(ITEMS))
    assert all("hospit" not in words and "hospital" not in words for words in learnt.words.values())


@pytest.mark.parametrize(
    "question",
    [
        "When was patient 10002428's first discharge?",
        "When was patient 10002428 discharged from the hospital for the first time?",
        "What was the first time patient 10002428 was discharged from the hospital?",
        "When was patient 10002428 first discharged?",
    ],
)
def test_the_first_discharge_is_the_first_visit_s_discharge_time(library, question):
    # "the first discharge" is the first visit (operators._DISCHARGE), whose nouns ("hospital visit")
    # the question need not say: the base's first visit with its discharge time returned
    answers = [r for r in ask_with_own_values(library, question).results if r.hard_ok and r.composed_with]
    assert answers, question
    assert all("admissions.dischtime" in r.sql and "admittime ASC" in r.sql for r in answers)
    assert all("10002428" in r.sql for r in answers)


@pytest.mark.parametrize(
    "question",
    [
        # the last discharge is not the first visit
        "When was patient 10002428's last discharge?",
        # an ICU discharge: "icu" is no visit noun, so the base's words still miss it
        "When was patient 10002428's first discharge from the icu?",
        # a discharge location: a value the base has no place for
        "When was the first time patient 10002428 was discharged to home?",
    ],
)
def test_no_first_visit_discharge_time_for_another_discharge(library, question):
    answers = [r for r in ask_with_own_values(library, question).results if r.hard_ok]
    assert not any("admittime ASC" in (r.sql or "") and "dischtime" in (r.sql or "") for r in answers), (
        question
    )
