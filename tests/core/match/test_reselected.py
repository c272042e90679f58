"""The selected column swapped (core/match/reselected.py): a verified template that returns one bare
column, returning another column of the same table where the question names it, on EHRSQL-shaped
SQLite templates with a bag-of-words stand-in for the embedder. Which phrase names which column comes
from the library's own pairs of templates (the same SQL but for the column returned, paraphrases that
differ in that phrase alone), never from a list; the attacks: a phrase the library shows naming two
columns, a column of a table the base does not read, a negation, a question that names both columns,
a base whose column is aggregated or also ordered on (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex, build_template, mask_question
from core.match.library import Vote
from core.match.reading import read_question
from core.match.reselected import column_plans, library_columns, selected_column
from tests.core.match.test_library import ask_with_own_values, embed, index_of

VISIT = (
    "SELECT admissions.{c} FROM admissions WHERE admissions.subject_id = {p} "
    "AND NOT admissions.dischtime IS NULL ORDER BY admissions.admittime {o} LIMIT 1"
)
PERSON = "SELECT patients.{c} FROM patients WHERE patients.subject_id = {p}"


def visit(c: str, p: int, o: str = "DESC") -> str:
    return VISIT.format(c=c, p=p, o=o)


ITEMS = [
    # the last visit's insurance and admission type: the pair that shows each phrase's column
    ("What was the insurance of patient 10002495 on the last hospital visit?", visit("insurance", 10002495)),
    ("What was the admission type of patient 10010471 on the last hospital visit?", visit("admission_type", 10010471)),
    # the first visit's admission type alone: the base a question about the first insurance is asked of
    ("What was the admission type of patient 10004235 on the first hospital visit?", visit("admission_type", 10004235, "ASC")),
    ("Tell me the admission type of patient 10038081 on the first hospital visit.", visit("admission_type", 10038081, "ASC")),
    # a patients pair: "gender" names patients.gender, a table no admissions template reads
    ("What was the gender of patient 10007795?", PERSON.format(c="gender", p=10007795)),
    ("What was the dob of patient 10011398?", PERSON.format(c="dob", p=10011398)),
]  # fmt: skip
BASE = 3  # "What was the admission type of patient 10004235 on the first hospital visit?"


@pytest.fixture(scope="module")
def library():
    return index_of(ITEMS)


def plans(index, question, base=BASE - 1):
    vote = Vote.of(embed([mask_question(question)])[0], index)
    return column_plans(read_question(question, None), index, base, vote)


def test_the_library_shows_which_phrase_names_which_column(library):
    learnt = library_columns(library)
    assert learnt.column == {
        ("insurance",): "admissions.insurance",
        ("admission", "type"): "admissions.admission_type",
        ("gender",): "patients.gender",
        ("dob",): "patients.dob",
    }
    # a library with no two templates alike but for their column shows no phrase
    alone = [e for e in library.entries if "last" not in e.question and "patients" not in e.template.sql]
    assert library_columns(LibraryIndex(alone, embed([e.question for e in alone]))).column == {}


def test_the_column_and_its_phrase_are_swapped_on_the_base(library):
    question = "What was the insurance of patient 10002428 on the first hospital visit?"
    ((source, swap),) = plans(library, question)
    assert (swap.old, swap.new) == ("admissions.admission_type", "admissions.insurance")
    assert (
        swap.phrase == "insurance instead of admission type"
        and "insurance" in library.entries[source].question
    )
    made = swap.apply(library.entries[BASE - 1].template)
    assert made is not None
    composed_question, sql = made
    assert composed_question == "What was the insurance of patient 10004235 on the first hospital visit?"
    assert (
        sql.startswith("SELECT admissions.insurance FROM admissions")
        and "ORDER BY admissions.admittime ASC" in sql
    )
    answers = [r for r in ask_with_own_values(library, question).results if r.hard_ok and r.composed_with]
    assert answers and all("10002428" in r.sql for r in answers)
    assert any("admissions.insurance" in r.sql and "admittime ASC" in r.sql for r in answers)
    assert all(r.features["composed"] == 1.0 for r in answers)


@pytest.mark.parametrize(
    "question",
    [
        # a negation: "not the insurance" is no column to return
        "What was not the insurance of patient 10002428 on the first hospital visit?",
        # both columns named: which one to return is not known
        "What was the insurance and admission type of patient 10002428 on the first hospital visit?",
        # a column of a table the base does not read (patients.gender for an admissions template)
        "What was the gender of patient 10002428 on the first hospital visit?",
        # no column the library names for this table
        "What was the discharge location of patient 10002428 on the first hospital visit?",
    ],
)
def test_no_swap_where_the_question_does_not_name_one_other_column_of_the_base_table(library, question):
    assert plans(library, question) == []


def test_a_phrase_the_library_shows_naming_two_columns_never_swaps():
    # "insurance" says admissions.insurance in one pair and admissions.language in another
    any_visit = "SELECT admissions.{c} FROM admissions WHERE admissions.subject_id = {p}"
    items = [
        *ITEMS,
        ("What was the insurance of patient 10002495?", any_visit.format(c="language", p=10002495)),
        (
            "What was the admission type of patient 10010471?",
            any_visit.format(c="admission_type", p=10010471),
        ),
    ]
    learnt = library_columns(index_of(items))
    assert ("insurance",) not in learnt.column and ("admission", "type") in learnt.column
    assert (
        plans(index_of(items), "What was the insurance of patient 10002428 on the first hospital visit?")
        == []
    )


@pytest.mark.parametrize(
    "sql",
    [
        # an aggregate around the column: the library shows what a phrase names as a bare column only
        "SELECT MAX(admissions.age) FROM admissions WHERE admissions.subject_id = 1",
        # the column also ordered on: swapping the returned column alone would keep the old order
        "SELECT admissions.dischtime FROM admissions WHERE admissions.subject_id = 1 ORDER BY admissions.dischtime DESC LIMIT 1",
        # two columns returned
        "SELECT admissions.age, admissions.insurance FROM admissions WHERE admissions.subject_id = 1",
    ],
)
def test_a_base_that_does_not_return_one_bare_column_read_once_is_never_swapped(sql):
    template = build_template("what was it for patient 1?", sql, dialect="sqlite")
    assert selected_column(template.sql_template, template.dialect) == ("", "")
