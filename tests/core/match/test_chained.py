"""Chained compositions (core/match/chained.py): two changes at once, the second planned on the first
one's composition, on the demo library (the benchmark's train split) with a bag-of-words stand-in for
the embedder. The attacks first: a chain goes through every rule a single composition does, so a
second change the library has no verified part for, a negation or a column already read is refused
(the EHRSQL-wide attack, "… in neuro stepdown in 2100 and were older than 60", is in
test_library_adversarial.py). Pure: no database."""

from __future__ import annotations

import json

import pytest

from core.match import mask_question, match_library
from core.match.chained import _Rebased
from core.match.retimed import library_timings
from tests.core.match.test_compose import TRAIN, where
from tests.core.match.test_library import embed, indexed


@pytest.fixture(scope="module")
def demo():
    return indexed(json.loads(TRAIN.read_text()))


def ask(index, question):
    return match_library(question, embed([mask_question(question)])[0], index, lookup=lambda c, t: [])


def passed(found):
    return [r for r in found.results if r.hard_ok]


@pytest.mark.parametrize(
    "question",
    [
        "what is the minimum age of patients in the ICU?",  # a second condition no verified part says
        "what is the maximum age of patients older than 65?",  # narrows the column the base reads
        "what is the maximum age of patients who were not male?",  # a negation
        "what is the maximum age of patients next year?",  # the future
        # a condition on the column a swap then returns: "female" added to "the anchor age of
        # patient X" reads no gender, but the column swap to the gender would narrow what it returns
        "what is the gender of patient 10004235 for female patients?",
    ],
)
def test_a_chain_is_refused_where_a_change_has_no_verified_part(demo, question):
    found = ask(demo[0], question)
    assert not passed(found), [(r.sql, r.composed_with) for r in passed(found)]


def test_a_swap_and_a_condition_left_out_are_chained(demo):
    # "average age of male patients" is one change away from neither "maximum age of male
    # patients" nor "average age of patients": no single composition passes, the chain does
    index, ids = demo
    found = ask(index, "what is the maximum age of patients?")
    best = found.best
    assert best.hard_ok and best.features["chained"] == 1.0 and best.features["composed"] == 1.0
    assert "MAX(p.anchor_age)" in best.sql and where(best.sql) == set()
    assert best.composed_from[0] == ids["what is the average age of male patients?"]
    assert best.composed_with == "without male and maximum instead of average"
    assert not [r for r in found.results if r.hard_ok and not r.features.get("chained")]


def test_a_swap_and_a_time_replacement_are_chained(demo):
    index, ids = demo
    best = ask(index, "what was the minimum sodium value of patient 10014354 since 2150?").best
    assert best.hard_ok and best.features["chained"] == 1.0
    assert "MIN(l.valuenum)" in best.sql and "EXTRACT(YEAR FROM l.charttime) >= 2150" in best.sql
    assert best.composed_from[0] == ids["what was the maximum sodium value of patient 10014354 in 2148?"]


def test_no_chain_where_one_change_fits(demo):
    found = ask(demo[0], "what is the minimum age of female patients?")
    assert found.best.hard_ok and found.best.composed_from
    assert not [r for r in found.results if r.features.get("chained")]


def test_the_planners_read_the_composition_as_the_base_and_cache_on_the_library(demo):
    index, _ = demo
    base = index.entries[0]
    other = index.entries[1]
    view = _Rebased(index, 0, other)
    assert view.entries[0] is other and view.entries[1] is other and len(view.entries) == len(index.entries)
    assert view.entries[0:2] == [other, other] and view.members is index.members
    index.__dict__.pop("_compose_timings", None)
    made = library_timings(view)  # a whole-library reading: kept on the library, not on the view
    assert index._compose_timings is made and base is index.entries[0]
