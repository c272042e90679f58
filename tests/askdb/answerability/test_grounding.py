"""Grounding the asked-for attribute in the catalog (askdb/answerability/grounding.py and its use
by the model): which attribute a question asks for, whether any catalog text, linked value or
approved question can hold it, the decline's sentence, and the column that keeps the learned
model from vetoing an attribute the catalog records. No database, no encoder download."""

from __future__ import annotations

import numpy as np
import pytest

from askdb.answerability import grounding
from askdb.answerability.model import (
    AnswerabilityModel,
    ColumnText,
    Combiner,
    TableText,
    TrainQuestion,
    grounding_readings,
    held_by_column,
    holding_columns,
)
from tests.core.test_answerability_model import BagOfWordsEncoder

TABLES = [
    TableText(
        "hosp.admissions", "Table admissions. Also called: hospital stay, marital status, insurance, race."
    ),
    TableText("hosp.omr", "Table omr. Also called: outpatient measurements, BMI, weight, height."),
    TableText("hosp.prescriptions", "Table prescriptions. Also called: drugs, dose, route."),
]
COLUMNS = [
    ColumnText("hosp.admissions.subject_id", "admissions.subject_id: Patient identifier."),
    ColumnText("hosp.admissions.marital_status", "admissions.marital_status: Marital status at admission; may be NULL.",
               "SINGLE, MARRIED, WIDOWED, DIVORCED"),
    ColumnText("hosp.admissions.insurance", "admissions.insurance: Insurance / payer category for the admission.",
               "Medicare, Medicaid, Other"),
    ColumnText("hosp.admissions.race", "admissions.race: Self-reported race recorded for the admission.", "WHITE, ASIAN"),
    ColumnText("hosp.admissions.admission_location", "admissions.admission_location: Where the patient came from.",
               "EMERGENCY ROOM, PHYSICIAN REFERRAL"),
    ColumnText("hosp.omr.result_name", "omr.result_name: Name of the measurement (includes its unit).",
               "Blood Pressure, Weight (Lbs), BMI (kg/m2), Height (Inches)"),
    ColumnText("hosp.prescriptions.drug", "prescriptions.drug: Name of the drug as ordered.", "Insulin, Heparin"),
    ColumnText("hosp.prescriptions.route", "prescriptions.route: Route of administration.", "PO, IV"),
]  # fmt: skip
VOCABULARY = grounding.Vocabulary([t.text for t in TABLES] + [f"{c.text} {c.values}" for c in COLUMNS])


@pytest.mark.parametrize(
    ("question", "attribute"),
    [
        ("what is the wedding date of patient 10014354?", "wedding date"),
        ("What was patient 10002428's discharge letter addressed to?", "discharge letter"),
        ("what religion does patient 10020740 practice?", "religion"),
        ("how many children does patient 10039708 have?", "children"),
        ("does patient 10037928 have any grandchildren?", "grandchildren"),
        ("what was the name of the nurse who cared for patient 10037928 in the icu?", "name of the nurse"),
        ("what is the name of patient 10039708's spouse?", "name of spouse"),
        ("how many hospital admissions did patient 10004235 have?", "hospital admissions"),
        ("when did patient 10002428 get married?", ""),
    ],
)
def test_the_attribute_asked_for_is_read_from_the_usual_shapes(question, attribute):
    assert grounding.asked_attribute(question) == attribute


def test_an_attribute_no_catalog_text_uses_is_missing_and_one_it_uses_is_grounded():
    wedding = grounding.ground("what is the wedding date of patient 10014354?", VOCABULARY)
    assert wedding is not None and wedding.missing == ("wedding",)  # "date" says how, not what
    assert grounding.ground("what is the marital status of patient 10014354?", VOCABULARY).grounded
    # only words that say how, not what: nothing to ground, the learned model decides
    assert grounding.ground("how many hospital admissions did patient 10004235 have?", VOCABULARY) is None
    assert grounding.ground("what is the route of the heparin of patient 7?", VOCABULARY).grounded
    # words of linked values and of approved questions ground too (a reviewer saw SQL answer them)
    assert not grounding.ground("what is the lipase value of patient 7?", VOCABULARY).grounded
    assert grounding.ground(
        "what is the lipase value of patient 7?", grounding.Vocabulary(["Lipase"])
    ).grounded


def test_a_name_is_missing_when_asked_of_a_person_and_grounded_for_a_drug():
    """Attack: 'nurse' and 'provider' may be in the docs, but no text says a person has a name."""
    catalog = grounding.Vocabulary(
        [*(c.text for c in COLUMNS), "caregiver_id: the nurse or doctor who charted it"]
    )
    nurse = grounding.ground("what is the name of the nurse of patient 10037928?", catalog)
    assert nurse is not None and nurse.missing == ("name",)
    assert grounding.ground("what is the name of the drug of patient 10037928?", catalog).grounded
    assert grounding.ground("what was the name of the insurance of patient 10037928?", catalog).grounded


def test_a_column_that_records_the_attribute_in_so_many_words_holds_it():
    own = holding_columns(COLUMNS)
    assert grounding.column_holding(grounding.ground("what is the race of patient 7?", VOCABULARY), own) == (
        "hosp.admissions.race"
    )
    assert grounding.column_holding(grounding.ground("what is the bmi of patient 7?", VOCABULARY), own) == (
        "hosp.omr.result_name"
    )
    # Attack: "room" is a word of the value "EMERGENCY ROOM", which does not record rooms.
    room = grounding.ground("what was the room of patient 7?", VOCABULARY)
    assert room is not None and room.grounded and grounding.column_holding(room, own) == ""
    # Attack: a key column records no attribute ("patient identifier" does not hold "the patient").
    assert "hosp.admissions.subject_id" not in own


class _Unsure(Combiner):
    """A learned model that calls everything unanswerable (the library lacks these kinds)."""

    def __init__(self) -> None:
        super().__init__(np.zeros(1), -5.0, np.zeros(1), np.ones(1))


def _model(library=()) -> AnswerabilityModel:
    return AnswerabilityModel(
        BagOfWordsEncoder(), _Unsure(), 0.5, TABLES, COLUMNS, list(library), version="v"
    )


def test_the_gate_declines_an_ungrounded_attribute_naming_the_column_that_shares_its_words():
    model = _model()
    card = model.score("what is the member id on patient 10015860's insurance card?")
    assert not card.answerable and card.kind == "not_in_schema"
    assert card.findings[0].rule == "ungrounded_attribute" and card.findings[0].decisive
    assert card.reason == (
        "The database records the insurance / payer category for the admission (admissions.insurance), not insurance "
        "card, so askdb cannot answer this; it can answer questions about that instead."
    )
    wedding = model.score("what is the wedding date of patient 10014354?")
    assert (
        wedding.reason == "No column in this database records the wedding date, so askdb cannot answer this."
    )
    nurse = model.score("what is the name of the drug of patient 7?")
    assert not any(f.rule == "ungrounded_attribute" for f in nurse.findings)


def test_an_attribute_a_column_records_is_not_vetoed_by_the_model_but_a_rule_still_declines():
    model = _model()
    race = model.score("what is the race of patient 10037928?")
    assert race.probability < 0.5 and race.answerable and race.grounded_column == "hosp.admissions.race"
    assert race.to_json()["grounded_column"] == "hosp.admissions.race"
    # Attack: wrap a recorded attribute in a question the rules decline.
    future = model.score("what will the race of patient 10037928 be next year?")
    assert not future.answerable and future.kind == "future"
    # an approved question grounds its words for the next one
    lipase = "what is the lipase value of patient 7?"
    assert any(f.rule == "ungrounded_attribute" for f in model.score(lipase).findings)
    assert not any(
        f.rule == "ungrounded_attribute"
        for f in _model([(1, "lipase of patient 9", True)]).score(lipase).findings
    )
    # a flagged question grounds nothing
    assert any(
        f.rule == "ungrounded_attribute"
        for f in _model([(1, "lipase of patient 9", False)]).score(lipase).findings
    )


def test_cross_validation_never_lets_a_held_out_question_ground_itself():
    questions = [
        TrainQuestion("1", "what is the lipase value of patient 7?", True, sql="SELECT 1"),
        TrainQuestion("2", "what is the lipase value of patient 8?", True, sql="SELECT 1"),
        TrainQuestion("3", "what is the insulin dose of patient 9?", True, sql="SELECT 2"),
    ]
    # both lipase questions in one fold: nothing else says "lipase", so the CV counts them declined
    verdicts = grounding_readings(questions, TABLES, COLUMNS, [], [[[0, 1], [2]]]).ungrounded
    assert verdicts.tolist() == [[True, True, False]]
    # split across folds, each grounds the other; linked values ground them too
    assert grounding_readings(questions, TABLES, COLUMNS, [], [[[0], [1, 2]]]).ungrounded.tolist() == [
        [False, False, False]
    ]
    assert grounding_readings(
        questions, TABLES, COLUMNS, ["Lipase"], [[[0, 1], [2]]]
    ).ungrounded.tolist() == [[False] * 3]
    held = held_by_column(
        ["what is the race of patient 1?", "what is the room of patient 1?"], TABLES, COLUMNS, []
    )
    assert held.tolist() == [True, False]


def test_a_grounding_decline_does_not_veto_a_confident_library_answer_but_a_rule_does():
    """Issue 28 item 2: a verified example that binds and runs shows the database holds what is
    asked; only the rule kinds (future, advice, private, out of scope, absent concepts) still
    decline it."""
    from core.outcome import AnswerabilityVerdict

    model = _model()
    wedding = AnswerabilityVerdict.from_json(model.score("what is the wedding date of patient 7?").to_json())
    assert not wedding.answerable and wedding.category == "not_in_schema" and wedding.rule_kind == ""
    future = AnswerabilityVerdict.from_json(
        model.score("what will the wedding date of patient 7 be?").to_json()
    )
    assert future.rule_kind == "future"
