"""Grounding an asked-for attribute by meaning (askdb/answerability/model.py `MeaningGrounding`):
a synonym no catalog text has ("matrimonial status") is grounded by the column whose doc is close
to it, and named; the guards that keep meaning from grounding what the data does not hold: a
catalog word that alone makes the phrase close ("insurance card"), a faint likeness, a person's
name, someone else's attribute, a property of a thing given, an event. No database, no download:
an encoder that knows one synonym stands in for MiniLM."""

from __future__ import annotations

import re
import zlib

import numpy as np

from askdb.answerability import grounding
from askdb.answerability.model import (
    GROUND_SIMILARITY,
    MEANING_GAIN,
    AnswerabilityModel,
    Combiner,
    MeaningGrounding,
    TrainQuestion,
    grounding_readings,
)
from tests.askdb.answerability.test_grounding import COLUMNS, TABLES, VOCABULARY
from tests.core.test_answerability_model import BagOfWordsEncoder


class SynonymEncoder(BagOfWordsEncoder):
    """Bag of words that reads "matrimonial" as "marital", as an embedding knows they mean one thing."""

    SAME = {"matrimonial": "marital", "matrimonially": "marital"}

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.DIMS, dtype=np.float32)
        for word in re.findall(r"[a-z]+", text.lower()):
            if len(word) > 3:
                v[zlib.crc32(self.SAME.get(word, word).encode()) % self.DIMS] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v


class _Fixed(Combiner):
    """A learned model with one answer for every question."""

    def __init__(self, logit: float) -> None:
        super().__init__(np.zeros(1), logit, np.zeros(1), np.ones(1))


def _model(logit: float = -5.0) -> AnswerabilityModel:
    return AnswerabilityModel(SynonymEncoder(), _Fixed(logit), 0.5, TABLES, COLUMNS, [], version="v")


def _ungrounded(score) -> bool:
    return any(f.rule == "ungrounded_attribute" for f in score.findings)


def test_a_synonym_no_catalog_text_has_is_grounded_by_the_column_close_in_meaning():
    asked = grounding.ground("what was the matrimonial status of patient 7?", VOCABULARY)
    assert asked is not None and asked.missing == ("matrimonial",)  # the words alone decline it
    sure = _model(5.0).score("what was the matrimonial status of patient 7?")
    assert sure.answerable and not _ungrounded(sure)
    assert sure.meaning_column == "hosp.admissions.marital_status"
    assert sure.to_json()["meaning_column"] == "hosp.admissions.marital_status"
    # Meaning only lifts the grounding's decline: it does not hold the attribute against the model.
    unsure = _model(-5.0).score("what was the matrimonial status of patient 7?")
    assert not unsure.answerable and not _ungrounded(unsure) and unsure.grounded_column == ""


def test_a_catalog_word_that_alone_makes_the_phrase_close_grounds_nothing():
    """Attack: "insurance card" is as close to admissions.insurance as GROUND_SIMILARITY, by the word
    "insurance" alone; the missing word "card" adds no meaning of the column."""
    meaning = _model().meaning
    card = grounding.ground("what is the number on patient 7's insurance card?", VOCABULARY)
    column, similarity, held = meaning.nearest(card)
    assert column == "hosp.admissions.insurance" and similarity >= GROUND_SIMILARITY
    assert similarity - held < MEANING_GAIN and meaning.column(card) == ""
    score = _model(5.0).score("what is the number on patient 7's insurance card?")
    assert not score.answerable and _ungrounded(score) and "(admissions.insurance)" in score.reason


def test_a_faint_likeness_grounds_nothing():
    """Attack: one word of a long phrase means a column's word: below GROUND_SIMILARITY."""
    score = _model(5.0).score("what was the matrimonial history timeline summary of patient 7?")
    assert not score.answerable and _ungrounded(score) and score.meaning_column == ""


def test_meaning_never_grounds_a_name_someone_elses_attribute_a_thing_or_an_event():
    """Attacks: the phrase is close to marital_status in each, but what is asked is not held."""
    model = _model(5.0)
    for question in (
        "what is the name of patient 7's matrimonial partner?",  # a person's name
        "what was the matrimonial status of patient 7's daughter?",  # the daughter's, not the patient's
        "what is the matrimonial status of the nurse assigned to patient 7?",  # someone around the patient
        "when did patient 7 get matrimonially joined?",  # an event with a date
    ):
        score = model.score(question)
        assert not score.answerable and score.meaning_column == "", question
    thing = grounding.ground("what was the matrimonial label of the insulin given to patient 7?", VOCABULARY)
    assert thing is not None and thing.thing and model.meaning.column(thing) == ""


def test_the_cross_validation_grounds_by_meaning_as_the_gate_does():
    questions = [
        TrainQuestion("1", "what was the matrimonial status of patient 7?", True, sql="SELECT 1"),
        TrainQuestion("2", "what is the number on patient 7's insurance card?", False),
        TrainQuestion("3", "what is the insulin dose of patient 9?", True, sql="SELECT 2"),
    ]
    dealings = [[[0, 1], [2]]]
    assert grounding_readings(questions, TABLES, COLUMNS, [], dealings).ungrounded.tolist() == [
        [True, True, False]
    ]
    meaning = MeaningGrounding(
        SynonymEncoder(), COLUMNS, SynonymEncoder().encode_docs([c.text for c in COLUMNS])
    )
    assert grounding_readings(questions, TABLES, COLUMNS, [], dealings, meaning).ungrounded.tolist() == [
        [False, True, False]
    ]
