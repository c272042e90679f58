"""The order swap (core/match/direction.py): a verified template with its first/last ORDER BY flipped
where the question asks for the other end, on the corpus library (the demo's seed and the hand-written
EHRSQL-shaped examples) with a bag-of-words stand-in for the embedder. What a column's first/last
means comes from the library's own pairs of templates, never from a list; the attacks: a column the
library never shows ordered both ways, a visit that is neither first nor last, both ends asked at once
(pure: no database)."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex, build_template, mask_question, match_library
from core.match.direction import OrderSwap, library_orders, order_plans, said_spans
from core.match.library import Vote
from tests.core.match.corpus import library_items
from tests.core.match.test_library import embed, indexed


@pytest.fixture(scope="module")
def library():
    return indexed(library_items())


@pytest.fixture(scope="module")
def visits(library):
    """The corpus library's hospital-visit templates alone: the vote's five best are all of them."""
    index, _ = library
    keep = [e for e in index.entries if e.template and "hospital visit" in e.question]
    vectors = embed([e.template.masked_question for e in keep])
    return LibraryIndex(keep, vectors), {e.question: e.example_id for e in keep}


def ask(index, question):
    return match_library(question, embed([mask_question(question)])[0], index, lookup=lambda c, t: [])


def composed(found):
    return [r for r in found.results if r.composed_from and r.hard_ok]


def test_the_library_shows_which_column_a_first_or_last_orders(library):
    index, _ = library
    mapping = library_orders(index).mapping
    # the library has the first and the last hospital visit's age, the first and last ICU stay's length
    assert mapping["admissions.admittime"] == ("visit", False)  # "first" is ascending
    assert mapping["icustays.intime"] == ("visit", False)
    assert mapping["labevents.charttime"] == ("order", False)  # the first lactate, the last hemoglobin
    # no pair orders the microbiology events both ways, but its own "first blood culture" template
    # says "first" and orders one column ascending: one template's evidence
    assert mapping["microbiologyevents.charttime"] == ("order", False)


def test_the_other_visit_is_composed_on_the_tree_from_the_verified_template(visits):
    index, ids = visits
    found = ask(index, "what was the marital status of patient 10037928 at the first hospital visit?")
    best = composed(found)[0]
    assert best.sql.endswith("ORDER BY a.admittime ASC LIMIT 1") and "a.marital_status" in best.sql
    base = ids["what was the marital status of patient 10037928 at the last hospital visit?"]
    assert base in best.composed_from
    assert best.composed_with == "first instead of last" and best.features["composed"] == 1.0


def test_a_verified_template_of_the_asked_end_is_never_composed(library):
    index, _ = library
    found = ask(index, "how old was patient 10035185 at the last hospital visit?")
    assert found.best.hard_ok and not found.best.composed_from


@pytest.mark.parametrize(
    "question",
    [
        # a column the library never orders with a first or last word (the charted output's time)
        "what was the last output of patient 10037861 measured?",
        # neither end: the current visit is another SQL (no discharge time), not a flipped order
        "what was the insurance of patient 10021118 at the current hospital visit?",
        # both ends at once
        "what was the insurance of patient 10021118 at the first and the last hospital visit?",
    ],
)
def test_no_order_swap_the_library_does_not_show(library, question):
    index, _ = library
    found = ask(index, question)
    swapped = [
        r
        for r in composed(found)
        if "instead of first" in r.composed_with or "instead of last" in r.composed_with
    ]
    assert not swapped, [(r.sql, r.composed_with) for r in swapped]


def test_a_paraphrase_that_says_the_end_twice_for_an_order_is_not_swapped():
    template = build_template(
        "what was the first lactate value of patient 10039708, the first one?",
        "SELECT l.valuenum FROM mimiciv_hosp.labevents AS l WHERE l.subject_id = 10039708 "
        "ORDER BY l.charttime ASC LIMIT 1",
    )
    swap = OrderSwap("order", "first", "last", "last", frozenset({("labevents.charttime", False)}))
    assert swap.apply(template) is None


def test_an_order_the_old_word_does_not_say_is_not_flipped():
    """The base paraphrase says "first" but its SQL orders the column descending: another template."""
    template = build_template(
        "what was the first lactate value of patient 10039708?",
        "SELECT l.valuenum FROM mimiciv_hosp.labevents AS l WHERE l.subject_id = 10039708 "
        "ORDER BY l.charttime DESC LIMIT 1",
    )
    swap = OrderSwap("order", "first", "last", "last", frozenset({("labevents.charttime", False)}))
    assert swap.apply(template) is None


def test_a_visit_named_twice_is_flipped_in_both_places():
    question = "what changed between the first hospital visit's value and the first hospital visit's end?"
    assert said_spans(question, "visit", "first") == [(25, 30), (62, 67)]
    assert said_spans(question, "order", "first") == []


def test_a_plan_only_where_the_question_flips_first_and_last(library):
    index, _ = library
    base = next(
        i for i, e in enumerate(index.entries) if e.question.startswith("what was the marital status")
    )
    first = "what was the marital status of patient 10037928 at the first hospital visit?"
    (source, swap), *_ = order_plans(first, index, base, Vote.of(embed([mask_question(first)])[0], index))
    assert (swap.operator, swap.old, swap.new) == ("visit", "last", "first")
    assert swap.columns == frozenset({("admissions.admittime", True)})
    assert "first" in index.entries[source].question  # a question that says the new end
    same = "what was the marital status of patient 10037928 during the latest hospital visit?"
    assert not order_plans(same, index, base, Vote.of(embed([mask_question(same)])[0], index))


def test_one_template_saying_first_teaches_the_last_of_its_column(library):
    """No pair orders the microbiology events both ways; the verified "first blood culture" template
    orders them ascending for "first", so "the last blood culture" is that SQL descending."""
    index, ids = library
    found = ask(index, "what organism was found in the last blood culture test of patient 10037861?")
    best = composed(found)[0]
    assert best.sql.endswith("ORDER BY m.charttime DESC LIMIT 1") and "BLOOD CULTURE" in best.sql
    assert (
        ids["what organism was found in the first blood culture test of patient 10037861?"]
        in best.composed_from
    )
    assert best.composed_with == "last instead of first"


_LACTATE = (
    "SELECT l.valuenum FROM mimiciv_hosp.labevents AS l WHERE l.subject_id = 10039708 AND l.itemid = 50813"
)


@pytest.mark.parametrize(
    "items",
    [
        # the end word beside an extreme: the ORDER BY is the extreme's, the end only its tie-breaker's
        [
            (
                "when was the highest lactate of patient 10039708 first measured?",
                _LACTATE.replace("l.valuenum", "l.charttime")
                + " ORDER BY l.valuenum DESC, l.charttime ASC LIMIT 1",
            )
        ],
        # two ends said by one template: which one orders the column is not shown
        [
            (
                "what was the first lactate of patient 10039708 on the last hospital visit?",
                _LACTATE + " ORDER BY l.charttime ASC LIMIT 1",
            )
        ],
        # two paraphrases of one template that say different ends
        [
            (
                "what was the first lactate of patient 10039708?",
                _LACTATE + " ORDER BY l.charttime ASC LIMIT 1",
            ),
            (
                "what was the last lactate of patient 10039708?",
                _LACTATE + " ORDER BY l.charttime ASC LIMIT 1",
            ),
        ],
        # two columns ordered for one end word (the visit's discharge, the lactate's time)
        [
            (
                "what was the first lactate of patient 10039708?",
                _LACTATE + " AND l.hadm_id = (SELECT a.hadm_id FROM mimiciv_hosp.admissions AS a"
                " WHERE a.subject_id = 10039708 ORDER BY a.dischtime ASC LIMIT 1) ORDER BY l.charttime ASC LIMIT 1",
            )
        ],
        # a list sorted for reading, no end picked: "first" is the care unit's name (corpus case 564)
        [
            (
                "what was the average lactate of patient 10039708 for each first care unit?",
                "SELECT i.first_careunit, AVG(l.valuenum) AS avg_lactate FROM mimiciv_hosp.labevents AS l JOIN"
                " mimiciv_icu.icustays AS i ON i.hadm_id = l.hadm_id WHERE l.subject_id = 10039708"
                " GROUP BY i.first_careunit ORDER BY l.charttime DESC",
            )
        ],
        # templates that disagree: neither reading reaches MAPPING_SHARE
        [
            (
                "what was the first lactate of patient 10039708?",
                _LACTATE + " ORDER BY l.charttime ASC LIMIT 1",
            ),
            (
                "what was the final lactate of patient 10039708 today?",
                _LACTATE + " ORDER BY l.charttime ASC LIMIT 1",
            ),
        ],
    ],
)
def test_one_template_teaches_nothing_it_does_not_show(items):
    from tests.core.match.test_library import index_of

    index = index_of(items, dialect="postgres")
    assert "labevents.charttime" not in library_orders(index).mapping, library_orders(index).mapping
    assert "labevents.valuenum" not in library_orders(index).mapping
