"""A property asked of a thing the catalog names, not of a patient (issue 28, round 20): "what is the
storage temperature of the heparin vials", "list the customer service hours of each insurance", "what
turnaround time does the insulin order have", "which insurance has the highest deductible". The
attribute is the property, grounded in the catalog; a property a column holds ("the route of the
heparin") stays grounded. Each guard beside its attack: the thing must be one the catalog names (not
"the capital of france"), a patient keeps the plain reading, a property of words that say how
("the number of", "the value of") reads nothing, and without the catalog (an approved question's
key) nothing is read. The decline names the thing and what the database holds about it."""

from __future__ import annotations

import numpy as np
import pytest

from askdb.answerability import grounding
from askdb.answerability.model import AnswerabilityModel, Combiner, feature_names
from tests.askdb.answerability.test_grounding import COLUMNS, TABLES, VOCABULARY
from tests.test_benchmark_gate_causes import BagOfWords


@pytest.mark.parametrize(
    ("question", "attribute", "about"),
    [
        ("what is the storage temperature of the heparin vials?", "storage temperature", "heparin vials"),
        ("list the customer service hours of each insurance.", "customer service hours", "insurance"),
        ("what turnaround time does the insulin order have?", "turnaround time", "insulin order"),
        ("which insurance has the highest deductible?", "deductible", "insurance"),
        ("what reagent kit is used for the heparin assay?", "reagent kit", "heparin assay"),
        ("who is the nurse manager of the emergency room?", "nurse manager", "emergency room"),
        ("what is the molecular weight of insulin?", "molecular weight", "insulin"),
    ],
)
def test_a_property_of_a_thing_the_catalog_names_is_read_and_not_held(question, attribute, about):
    g = grounding.ground(question, VOCABULARY)
    assert g is not None and g.attribute == attribute and not g.grounded and g.about == about, g


@pytest.mark.parametrize(
    "question",
    [
        "what is the route of the heparin?",
        "what is the marital status of the medicare admissions?",
        "which insurance has the highest race?",  # odd, but every word is the catalog's
    ],
)
def test_a_property_a_column_holds_stays_grounded(question):
    g = grounding.ground(question, VOCABULARY)
    assert g is not None and g.grounded, g


@pytest.mark.parametrize(
    "question",
    [
        "what is the capital of france?",  # no word of the thing is the catalog's
        "what is the number of the heparin orders?",  # words that say how, not what
        "what is the value of the insulin?",
        # a statistic over the thing's rows is computed, not held; the quantity is often one phrase cut
        # at its "of" (round 20's CI: a ward table with los_days was declined "no column records the
        # mean length")
        "what is the mean length of stay per admission?",
        "what is the average price of the heparin?",
        "what was the total volume of the insulin?",
    ],
)
def test_no_property_is_read_of_what_the_catalog_does_not_name_or_of_no_content(question):
    g = grounding.ground(question, VOCABULARY)
    assert g is None or not g.about, g


def test_a_patient_keeps_the_plain_reading_and_an_approved_question_keeps_its_key():
    g = grounding.ground("what is the shoe size of patient 10014354?", VOCABULARY)
    assert g is not None and g.attribute == "shoe size" and not g.about
    # attribute_key reads without the catalog: a library question's key (held_verdicts) is unchanged.
    assert grounding.attribute_key("what is the storage temperature of the heparin vials?") == frozenset()


def test_the_decline_names_the_thing_and_what_the_database_holds_about_it():
    encoder = BagOfWords()
    names = feature_names(64)
    n = len(names)
    combiner = Combiner(weights=np.zeros(n), bias=5.0, mean=np.zeros(n), std=np.ones(n), feature_names=names)
    library = [
        (1, "what insurance did patient 7 have?", True),
        (2, "what is patient 7's favourite song?", False),
    ]
    gate = AnswerabilityModel(encoder, combiner, 0.5, TABLES, COLUMNS, library, version="t")
    score = gate.score("which insurance has the highest deductible?")
    assert not score.answerable and score.kind == "not_in_schema"
    assert "deductible of insurance" in score.reason and "admissions.insurance" in score.reason, score.reason
    assert "marital_status" in score.reason  # what else the table holds about an admission's insurance
    assert gate.score("what is the route of the heparin?").answerable  # the learned model passes it


def test_a_rank_of_a_figure_is_computed_not_a_property_the_catalog_lacks():
    """The attack from the train CV: "the percentile ranking of a glucose test value of 176.0 for
    patients of the same age as patient N" is answerable (a rank SQL computes), not a property."""
    g = grounding.ground(
        "what is the percentile ranking of a heparin value of 176.0 for patients of the same age as patient 7?",
        VOCABULARY,
    )
    assert g is None or not g.about, g


OWNED = grounding.Vocabulary(
    [t.text for t in TABLES]
    + [f"{c.text} {c.values}" for c in COLUMNS]
    + ["pharmacy.order: Pharmacy order of a drug.", "diagnoses_icd.icd_code: Diagnosis code."]
)


@pytest.mark.parametrize(
    ("question", "attribute"),
    [
        (
            "what was the pharmacy queue length at patient 10004235's last pharmacy order?",
            "pharmacy queue length",
        ),
        ("what was the prognosis given with patient 10002428's first diagnosis?", "prognosis"),
    ],
)
def test_a_property_at_or_after_what_the_patient_has_is_the_property_not_the_thing(question, attribute):
    g = grounding.ground(question, OWNED)
    assert g is not None and g.attribute == attribute and not g.grounded, g


def test_a_held_property_at_what_the_patient_has_stays_grounded():
    g = grounding.ground("what was the route at patient 10004235's last pharmacy order?", OWNED)
    assert g is not None and g.attribute == "route" and g.grounded, g
