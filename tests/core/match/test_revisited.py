"""The visit swap (core/match/revisited.py): a verified template asked of another hospital visit, its
visit subquery renamed on the SQL tree, on EHRSQL-shaped SQLite templates with a bag-of-words stand-in
for the embedder. Which subquery each visit is written as comes from the library's own pairs of
templates (the same SQL but for that subquery, paraphrases that differ in the visit alone), never
from a list; the attacks: two visits named, a visit word with no visit meaning, "admission" that is
the admission type, an ICU stay for a hospital visit, a negation, another patient's first visit, a
renaming the library shows in one shape only (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex
from core.match.library import Vote
from core.match.reading import read_question
from core.match.revisited import VisitSwap, library_visits, visit_plans
from tests.core.match.test_library import ask_with_own_values, embed, index_of

FIRST = (
    "SELECT admissions.hadm_id FROM admissions WHERE admissions.subject_id = {p} AND NOT "
    "admissions.dischtime IS NULL ORDER BY admissions.admittime ASC LIMIT 1"
)
CURRENT = "SELECT admissions.hadm_id FROM admissions WHERE admissions.subject_id = {p} AND admissions.dischtime IS NULL"
EVERY = "SELECT admissions.hadm_id FROM admissions WHERE admissions.subject_id = {p}"
ICU_FIRST = (
    "SELECT icustays.stay_id FROM icustays WHERE icustays.hadm_id IN (" + EVERY + ") AND NOT "
    "icustays.outtime IS NULL ORDER BY icustays.intime ASC LIMIT 1"
)
LAB = (
    "SELECT {f}(labevents.valuenum) FROM labevents WHERE labevents.hadm_id IN ({v}) AND labevents.itemid IN "
    "(SELECT d_labitems.itemid FROM d_labitems WHERE d_labitems.label = '{item}')"
)
DRUG = "SELECT COUNT(*) > 0 FROM prescriptions WHERE prescriptions.hadm_id IN ({v}) AND prescriptions.drug = '{item}'"
CHART = (
    "SELECT MAX(chartevents.valuenum) FROM chartevents WHERE chartevents.stay_id IN ({v}) AND chartevents.itemid "
    "IN (SELECT d_items.itemid FROM d_items WHERE d_items.label = '{item}' AND d_items.linksto = 'chartevents')"
)


def lab(f: str, visit: str, p: int, item: str) -> str:
    return LAB.format(f=f, v=visit.format(p=p), item=item)


def drug(visit: str, p: int, item: str) -> str:
    return DRUG.format(v=visit.format(p=p), item=item)


ITEMS = [
    # the maximum lab value on the first visit, the current one and every visit: the pairs (shape 1)
    ("What is the maximum sodium value of patient 10002495 in the first hospital visit?", lab("MAX", FIRST, 10002495, "sodium")),
    ("What is patient 10010471's maximum sodium value in the first hospital visit?", lab("MAX", FIRST, 10010471, "sodium")),
    ("What is the maximum sodium value of patient 10007795 in the current hospital visit?", lab("MAX", CURRENT, 10007795, "sodium")),
    ("What is patient 10011398's maximum sodium value in the current hospital visit?", lab("MAX", CURRENT, 10011398, "sodium")),
    ("What is the maximum sodium value of patient 10004235?", lab("MAX", EVERY, 10004235, "sodium")),
    # a drug given on the first visit, the current one and ever: the same renamings (shape 2)
    ("Has patient 10038081 been prescribed heparin in the first hospital visit?", drug(FIRST, 10038081, "heparin")),
    ("Has patient 10018081 been prescribed heparin in the current hospital visit?", drug(CURRENT, 10018081, "heparin")),
    ("Has patient 10016742 been prescribed heparin?", drug(EVERY, 10016742, "heparin")),
    # the minimum lab value on the first visit alone: the base whose own sibling the library lacks
    ("What is the minimum glucose value of patient 10023239 in the first hospital visit?", lab("MIN", FIRST, 10023239, "glucose")),
    ("What is patient 10015931's minimum glucose value in the first hospital visit?", lab("MIN", FIRST, 10015931, "glucose")),
    ("What is the minimum glucose value of patient 10005817 in the first hospital visit?", lab("MIN", FIRST, 10005817, "glucose")),
    ("Tell me the minimum glucose value of patient 10019777 in the first hospital visit.", lab("MIN", FIRST, 10019777, "glucose")),
    # the maximum heart rate on the first ICU stay: an ICU stay, another subquery (one shape)
    ("What is the maximum heart rate of patient 10004733 in the first icu stay?", CHART.format(v=ICU_FIRST.format(p=10004733), item="heart rate")),
]  # fmt: skip
BASE = 8  # the first minimum glucose question (entries are numbered from 1, indexed from 0)


@pytest.fixture(scope="module")
def library():
    return index_of(ITEMS)


def plans(index, question, base=BASE):
    """The plans for the question on `base`, voted as the base's own question (the plan's own rules
    are what these tests read, not the bag-of-words vote)."""
    vote = Vote.of(embed([index.entries[base].template.masked_question])[0], index)
    return visit_plans(read_question(question, None), index, base, vote)


def swapped(index, question):
    return [
        r
        for r in ask_with_own_values(index, question).results
        if r.hard_ok and "instead of" in r.composed_with
    ]


def test_the_library_shows_which_subquery_each_visit_is():
    library = index_of(ITEMS)
    visits = library_visits(library)
    first, current, every = (v.format(p="slot") for v in (FIRST, CURRENT, EVERY))
    assert visits.renamings[(first, "current")] == (current, "hospital")
    assert visits.renamings[(every, "first")] == (first, "hospital")
    assert visits.renamings[(current, "")][0] == every
    assert visits.said[first] == "first" and visits.said[current] == "current" and visits.said[every] == ""
    # one shape alone shows no renaming: a template whose own sibling the library has is not enough
    one = [e for e in library.entries if "prescribed" not in e.question]
    assert library_visits(LibraryIndex(one, embed([e.question for e in one]))).renamings == {}


def test_the_current_visit_from_the_first(library):
    question = "What is the minimum glucose value of patient 10020740 in the current hospital visit?"
    (_, swap), *_ = plans(library, question)
    assert isinstance(swap, VisitSwap) and (swap.old, swap.new, swap.new_words) == (
        "first",
        "current",
        "current",
    )
    best = swapped(library, question)[0]
    assert "admissions.dischtime IS NULL" in best.sql and "ORDER BY" not in best.sql
    assert "MIN(" in best.sql and "subject_id = 10020740" in best.sql and "'glucose'" in best.sql
    assert best.features["composed"] == 1.0


def test_every_visit_from_the_first_and_its_phrase_left_out(library):
    question = "What is the minimum glucose value of patient 10020740?"
    (_, swap), *_ = plans(library, question)
    assert (swap.old, swap.new) == ("first", "")
    made = swap.apply(library.entries[BASE].template)
    assert made is not None and made[0] == "What is the minimum glucose value of patient 10023239?"
    best = swapped(library, question)[0]
    assert "dischtime" not in best.sql and "subject_id = 10020740)" in best.sql


def test_the_first_visit_from_every_visit_and_its_phrase_added(library):
    question = "Has patient 10020740 been prescribed heparin during their first hospital encounter?"
    (_, swap), *_ = plans(library, question, base=7)
    assert (swap.old, swap.new, swap.new_words) == ("", "first", "during their first hospital encounter")
    made = swap.apply(library.entries[7].template)
    assert made is not None
    assert made[0] == "Has patient 10016742 been prescribed heparin during their first hospital encounter?"
    assert "ORDER BY admissions.admittime ASC LIMIT 1" in made[1]


# --- attacks: each must compose nothing ----------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        # two visits named: which one the value is of is not read
        "What is the minimum glucose value of patient 10020740 in the current hospital visit or the last hospital visit?",
        # a visit word with no visit meaning: "visit the lab" is not every visit
        "What is the minimum glucose value of patient 10020740 when they visit the lab?",
        # "admission" that is the admission type: not every visit either
        "What is the minimum glucose value of patient 10020740 on an urgent admission?",
        # an ICU stay is no hospital visit: the library renames the hospital visit to a hospital visit
        "What is the minimum glucose value of patient 10020740 in the current icu stay?",
        # a negation
        "What is the minimum glucose value of patient 10020740 not in the current hospital visit?",
        # another operator word beside the visit
        "What is the minimum glucose value of patient 10020740 in the current hospital visit since 2100?",
    ],
)
def test_what_is_never_swapped(library, question):
    assert plans(library, question) == []


def test_another_patients_first_visit_is_not_answered(library):
    question = "What is the minimum glucose value of patient 10020740 in the current hospital visit of patient 10002495?"
    assert swapped(library, question) == []


def test_a_renaming_shown_in_one_shape_is_not_used(library):
    # the first ICU stay has no sibling anywhere: no renaming of it is learned, none planned
    question = "What is the maximum heart rate of patient 10020740 in the current icu stay?"
    assert plans(library, question, base=12) == []


def test_a_paraphrase_that_says_another_visit_is_not_reworded(library):
    swap = VisitSwap("first", "current", "x", "y", "current", "sqlite")
    assert swap.apply(library.entries[2].template) is None  # it says the current visit, not the first


# --- a period left out with the visit renamed (every visit -> one visit) ---------------------------

IN_YEAR = " AND STRFTIME('%Y', labevents.charttime) = '{y}'"
SINCE_AGO = " AND DATETIME(labevents.charttime) >= DATETIME(CURRENT_TIME, '-{n} month')"

PERIOD_ITEMS = [
    *ITEMS,
    # the maximum sodium in 2100 beside the verified every-visit one: the library shows the year left out
    ("What is the maximum sodium value of patient 10031404 in 2100?", lab("MAX", EVERY, 10031404, "sodium") + IN_YEAR.format(y=2100)),
    # the average potassium in 2100 (every visit): the base, whose visit or untimed sibling the library lacks
    ("What is the average potassium value of patient 10021487 in 2100?", lab("AVG", EVERY, 10021487, "potassium") + IN_YEAR.format(y=2100)),
    ("What is patient 10029291's average potassium value in 2100?", lab("AVG", EVERY, 10029291, "potassium") + IN_YEAR.format(y=2100)),
    ("Tell me the average potassium value of patient 10007818 in 2100.", lab("AVG", EVERY, 10007818, "potassium") + IN_YEAR.format(y=2100)),
    # the average chloride since 5 months ago: a period form the library never shows left out
    ("What is the average chloride value of patient 10021487 since 5 months ago?", lab("AVG", EVERY, 10021487, "chloride") + SINCE_AGO.format(n=5)),
    ("What is patient 10029291's average chloride value since 7 months ago?", lab("AVG", EVERY, 10029291, "chloride") + SINCE_AGO.format(n=7)),
    # the average calcium on the first visit in 2100: a base that names a visit and a period
    ("What is the average calcium value of patient 10021487 in the first hospital visit in 2100?", lab("AVG", FIRST, 10021487, "calcium") + IN_YEAR.format(y=2100)),
    ("What is patient 10029291's average calcium value in the first hospital visit in 2100?", lab("AVG", FIRST, 10029291, "calcium") + IN_YEAR.format(y=2100)),
]  # fmt: skip
POTASSIUM, CHLORIDE, CALCIUM = 14, 17, 19


@pytest.fixture(scope="module")
def periods():
    return index_of(PERIOD_ITEMS)


def test_a_period_left_out_with_every_visit_renamed_to_the_first(periods):
    question = "What is the average potassium value of patient 10020740 in the first hospital visit?"
    (_, swap), *_ = plans(periods, question, base=POTASSIUM)
    assert (swap.old, swap.new) == ("", "first") and swap.drop is not None
    assert swap.phrase == "in the first hospital visit instead of in 2100"
    made = swap.apply(periods.entries[POTASSIUM].template)
    assert made is not None
    assert made[0] == "What is the average potassium value of patient 10021487 in the first hospital visit?"
    assert "STRFTIME" not in made[1] and "ORDER BY admissions.admittime ASC LIMIT 1" in made[1]
    best = swapped(periods, question)[0]
    assert "STRFTIME" not in best.sql and "admissions.admittime ASC LIMIT 1" in best.sql
    assert "AVG(" in best.sql and "'potassium'" in best.sql and "subject_id = 10020740" in best.sql
    assert best.features["composed"] == 1.0


@pytest.mark.parametrize(
    "question",
    [
        # a period and a visit both named, the period another one: neither left out nor replaced here
        "What is the average potassium value of patient 10020740 in the first hospital visit since 5 months ago?",
        # a negation
        "What is the average potassium value of patient 10020740 not in the first hospital visit?",
        # an ICU stay is no hospital visit
        "What is the average potassium value of patient 10020740 in the first icu stay?",
        # no visit named: the period is untimed.py's to leave out, not this swap's
        "What is the average potassium value of patient 10020740?",
        # another operator word beside the visit ("maximum" for "average")
        "What is the maximum potassium value of patient 10020740 in the first hospital visit?",
        # a time value with no time word ("on 2100-05-01")
        "What is the average potassium value of patient 10020740 in the first hospital visit on 05/01/2100?",
    ],
)
def test_what_never_leaves_a_period_out(periods, question):
    assert plans(periods, question, base=POTASSIUM) == []


def test_a_period_form_the_library_never_shows_left_out_is_kept(periods):
    question = "What is the average chloride value of patient 10020740 in the first hospital visit?"
    assert plans(periods, question, base=CHLORIDE) == []


def test_a_base_that_names_a_visit_keeps_its_period(periods):
    # the first visit in 2100 is not renamed to the current visit with its year left out
    question = "What is the average calcium value of patient 10020740 in the current hospital visit?"
    assert plans(periods, question, base=CALCIUM) == []


def test_another_patients_first_visit_leaves_no_period_out(periods):
    question = "What is the average potassium value of patient 10020740 in the first hospital visit of patient 10002495?"
    assert swapped(periods, question) == []
