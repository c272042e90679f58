"""The shapes of question grounding reads beyond "the X of patient N" (issue 28, round 8): someone
or something around a patient, things counted, "how tall", and phrasings that ask for an
attribute without naming it (how a drug is taken → route, what it costs → cost, male or female →
gender); and an attribute approved questions ask for is held like one a column records, so the
learned model does not veto a new wording of it. Cases from train CV's blocked answerable
questions and the demo set's unanswerable ones let through. No database, no encoder download."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding
from askdb.answerability.model import AnswerabilityModel, TrainQuestion, held_verdicts
from tests.askdb.answerability.test_grounding import COLUMNS, TABLES, VOCABULARY, _Unsure
from tests.core.test_answerability_model import BagOfWordsEncoder


@pytest.mark.parametrize(
    ("question", "attribute"),
    [
        ("which social worker was assigned to patient 10019003?", "social worker"),
        ("which radiologist signed the ct report of patient 10020740?", "radiologist"),
        ("when did the chaplain visit patient 10002428?", "chaplain"),
        ("how many elevators does the hospital building have?", "elevators"),
        ("how many copies of patient 10015860's records were printed?", "copies"),
        ("how many windows did patient 10037928's hospital room have?", "windows"),
        ("how tall is patient 10000032?", "height"),
        ("How is nifedipine typically consumed?", "route"),
        ("In what ways can nystatin cream be ingested?", "route"),
        ("What are the methods for taking caphosol?", "route"),
        ("Avapro - How much does it cost?", "cost"),
        ("Can you tell me how much fentanyl patch costs?", "cost"),
        ("What are the charges for a procedure called replacement of stent?", "cost"),
        ("how much did patient 10039708 pay out of pocket?", "cost"),
        ("Is the patient 10009049 a male or female?", "gender"),
        # answerable shapes read as what they ask for, or as nothing
        ("what drug was prescribed to patient 10004235 in 2100?", "drug"),
        ("what was the first drug prescribed to patient 1?", ""),
        ("how many patients were diagnosed with sepsis?", ""),
        ("how many days did patient 1 stay in the icu?", ""),
    ],
)
def test_more_shapes_of_question_name_the_attribute(question, attribute):
    assert grounding.asked_attribute(question) == attribute


def test_people_and_objects_around_a_patient_are_not_grounded_what_the_catalog_holds_is():
    for question in (
        "which social worker was assigned to patient 10019003?",
        "when did the chaplain visit patient 10002428?",
        "how many elevators does the hospital building have?",
        "how much did patient 10039708 pay out of pocket?",  # no cost column in this catalog
    ):
        g = grounding.ground(question, VOCABULARY)
        assert g is not None and not g.grounded, question
    for question in ("How is nifedipine typically consumed?", "What methods are used to ingest lisinopril?"):
        g = grounding.ground(question, VOCABULARY)
        assert g is not None and g.grounded, question  # prescriptions.route


def _model(library=()) -> AnswerabilityModel:
    return AnswerabilityModel(
        BagOfWordsEncoder(), _Unsure(), 0.5, TABLES, COLUMNS, list(library), version="v"
    )


def test_a_route_asked_without_the_word_is_held_by_the_route_column_and_not_vetoed():
    score = _model().score("How is trazodone typically taken?")
    assert (
        score.probability < 0.5 and score.answerable and score.grounded_column == "hosp.prescriptions.route"
    )


def test_an_attribute_approved_questions_ask_for_is_held_but_a_rule_or_a_flag_is_not_overruled():
    approved = [(1, "how much does the drug insulin cost?", True)]
    price = "What is the price for felodipine?"
    assert not _model().score(price).answerable  # no column and no approved question: the model decides
    score = _model(approved).score(price)
    assert score.answerable and score.grounded_column == "approved questions"
    # Attack: wrap the held attribute in a question a rule declines.
    future = _model(approved).score("how much will felodipine cost next year?")
    assert not future.answerable and future.kind == "future"
    # a flagged question asks for nothing the model must trust
    assert not _model([(1, "how much does the drug insulin cost?", False)]).score(price).answerable


def test_cross_validation_never_lets_a_held_out_question_hold_its_own_attribute():
    questions = [
        TrainQuestion("1", "how much does insulin cost?", True, sql="SELECT 1"),
        TrainQuestion("2", "what is the price for heparin?", True, sql="SELECT 2"),
        TrainQuestion("3", "how much does a parking ticket cost?", False),
    ]
    # both cost questions held out together: nothing else asks for the cost
    assert held_verdicts(questions, TABLES, COLUMNS, [], [[[0, 1, 2]]]).tolist() == [[False, False, False]]
    # apart, each holds the other, and the unanswerable one is held too (the rules must catch it)
    assert held_verdicts(questions, TABLES, COLUMNS, [], [[[0], [1, 2]]]).tolist() == [[True, True, True]]


@pytest.mark.parametrize(
    ("question", "attribute"),
    [
        # Round 11: a past tense that does not end in -ed (new-kinds set's let-through list).
        ("which taxi company took patient 10037928 to the hospital?", "taxi company"),
        ("which nurse gave patient 7 the insulin?", "nurse"),
        # Attack: "is" is never part of the attribute ("what font is used in" read "font is").
        ("what font is used in patient 10014354's discharge instructions?", "discharge instructions"),
    ],
)
def test_someone_or_something_that_did_a_thing_to_the_patient_in_an_irregular_past(question, attribute):
    assert grounding.asked_attribute(question) == attribute
