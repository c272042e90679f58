"""The grounding as a counterweight to the learned model (round 23 of issue 28): an attribute the
catalog holds in so many words ("the injection site", a column's doc says "site of injection") is
declined by the learned model alone only below GROUND_MARGIN × its threshold; a compound whose words
are held only apart ("room temperature": "emergency room" in one text, "temperature" in another), an
attribute said only in passing, one with a word no text holds ("marriage date") or a property of a
thing given gets no margin. No database, no encoder download."""

from __future__ import annotations

import numpy as np

from askdb.answerability import grounding
from askdb.answerability.model import (
    GROUND_MARGIN,
    VALUE_MARGIN,
    AnswerabilityModel,
    ColumnText,
    TableText,
    TrainQuestion,
    gate_probability,
    grounding_readings,
    margin_of,
    vocabulary_texts,
)
from tests.askdb.answerability.test_grounding_owner import _Constant
from tests.core.test_answerability_model import BagOfWordsEncoder

TABLES = [
    TableText(
        "hosp.admissions",
        "Table admissions (hosp.admissions).\nAlso called: hospital stay, visit, length of stay.",
    ),
    TableText("hosp.emar", "Table emar (hosp.emar).\nAlso called: medication administration, infusion."),
    TableText(
        "icu.chartevents",
        "Table chartevents (icu.chartevents).\nAlso called: vitals, heart rate, temperature.",
    ),
    TableText(
        "icu.datetimeevents",
        "Table datetimeevents (icu.datetimeevents).\nAlso called: line insertion, tubing change.",
    ),
]
COLUMNS = [
    ColumnText("hosp.admissions.marital_status", "admissions.marital_status: Marital status at admission.",
               "SINGLE, MARRIED"),
    ColumnText("hosp.admissions.admission_location", "admissions.admission_location: Where the patient came from.",
               "EMERGENCY ROOM, PHYSICIAN REFERRAL"),
    ColumnText("hosp.admissions.discharge_location", "admissions.discharge_location: Where the patient went.",
               "HOME, HOSPICE"),
    ColumnText("hosp.emar.site", "emar.site: Body site of injection or application (free text).", ""),
]  # fmt: skip
HOLDING, CONTEXT = vocabulary_texts(TABLES, COLUMNS)
APPROVED = ["count the patients admitted through the emergency room in 2100."]
VOCABULARY = grounding.Vocabulary([*HOLDING, *APPROVED], context=CONTEXT)


CATALOG = grounding.Vocabulary(HOLDING, context=CONTEXT)  # the catalog alone: no approved question


def _confident(question: str) -> bool:
    return grounding.confidently_grounded(grounding.ground(question, VOCABULARY), CATALOG)


def test_an_attribute_held_in_so_many_words_is_grounded_confidently():
    assert _confident("what was the injection site of patient 7?")
    assert _confident("what was the temperature of patient 7?")


def test_a_compound_whose_words_are_held_only_apart_is_not_grounded_confidently():
    """Attack: "room" is held by an approved question ("the emergency room") and "temperature" by
    the chartevents synonyms, "tubing" by "tubing change": each word alone, never the phrase."""
    for question, word in (
        ("what was the room temperature of patient 7?", "room"),
        ("what was the tubing length of patient 7?", "tubing"),
    ):
        g = grounding.ground(question, VOCABULARY)
        assert g is not None and g.grounded, question  # not declined by the words: the model decides
        assert grounding.apart(g.attribute, VOCABULARY) == (word,), question
        assert not _confident(question), question
    # The phrase held by one text is not apart ("injection" and "site" in emar_detail.site's doc).
    assert grounding.apart("injection site", VOCABULARY) == ()
    # No texts indexed (a vocabulary of stems alone): nothing to check, never apart.
    assert grounding.apart("room temperature", grounding.Vocabulary(stems=VOCABULARY.stems)) == ()


def test_near_a_column_but_not_held_is_not_grounded_confidently():
    """Attacks: a word no text holds ("marriage" beside marital_status), a word said only in passing
    ("EMERGENCY ROOM" is a category's value), a property of a thing given, someone else's attribute."""
    for question in (
        "what is the marriage date of patient 7?",
        "what was the hospital room of patient 7?",
        "what is the lot number of the heparin administered to patient 7?",
        "what is the marital status of patient 7's daughter?",
    ):
        assert not _confident(question), question


def _model(threshold: float, logit: float) -> AnswerabilityModel:
    return AnswerabilityModel(
        BagOfWordsEncoder(), _Constant(logit), threshold, TABLES, COLUMNS,
        [(0, APPROVED[0], True)], version="v",
    )  # fmt: skip


def test_the_learned_model_alone_declines_a_confidently_grounded_attribute_only_below_its_margin():
    """ "The temperature" is held by the chartevents synonyms, not in so many words by a column (that
    would hold it outright): the margin is the learned model's only counterweight."""
    p = 1 / (1 + np.exp(5.0))
    threshold = p / (GROUND_MARGIN + (1 - GROUND_MARGIN) / 2)  # between p and p / GROUND_MARGIN
    gate = _model(threshold, -5.0)
    temperature = gate.score("what was the temperature of patient 7?")
    assert temperature.grounded_column == "" and temperature.margin == GROUND_MARGIN
    assert temperature.answerable and temperature.gate_probability >= threshold
    # Attacks: the same model score declines what is held only word by word or not at all.
    for question in (
        "what was the room temperature of patient 7?",
        "what was the tubing length of patient 7?",
        "what is the marriage date of patient 7?",
    ):
        score = gate.score(question)
        assert not score.answerable and score.margin == 1.0, question
    # Far below the threshold the margin does not save it: the model still vetoes.
    assert (
        not _model(p / (GROUND_MARGIN * 0.9), -5.0).score("what was the temperature of patient 7?").answerable
    )
    # A rule still declines a confidently grounded attribute.
    assert not gate.score("what will the temperature of patient 7 be next year?").answerable


def test_the_margins_combine_and_the_cv_reads_the_grounding_as_scoring_does():
    assert margin_of(True, True) == min(VALUE_MARGIN, GROUND_MARGIN)
    assert margin_of(False, False) == 1.0
    assert margin_of(np.array([True, False]), np.array([False, True])).tolist() == [
        VALUE_MARGIN,
        GROUND_MARGIN,
    ]
    p = 0.5 * GROUND_MARGIN
    out = gate_probability(
        np.array([p, p]), np.array([False, True]), None, np.array([GROUND_MARGIN, GROUND_MARGIN])
    )
    assert out.tolist() == [0.5, 0.0]  # a decisive rule is never lifted
    questions = [
        TrainQuestion(0, "what was the temperature of patient 7?", True, (), "t"),
        TrainQuestion(1, "what was the room temperature of patient 7?", False, (), "t"),
        TrainQuestion(2, "what was the room temperature of patient 8?", True, (), "t"),
        TrainQuestion(3, "what is the marriage date of patient 7?", False, (), "t"),
    ]  # fmt: skip
    readings = grounding_readings(questions, TABLES, COLUMNS, [], [[[0, 1], [2, 3]]])
    # Attack: an approved question of the other fold saying "room temperature" grounds the words
    # (the learned model decides) but never makes the phrase confident: the catalog alone does.
    assert readings.confident.tolist() == [[True, False, False, False]]
    assert readings.ungrounded.tolist() == [[False, False, False, True]]
