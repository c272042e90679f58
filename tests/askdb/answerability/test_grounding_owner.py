"""Whose attribute a question asks for, and what holds it (round 10 of issue 28): an attribute of
someone the patient has ("the marital status of patient N's daughter"), a property of a thing
given to the patient ("the lot number of the insulin"), a head noun the catalog says only in
passing (a table's prose, a category's value), and the learned model's margin for a question
naming a value the database holds. Each guard with the question that got around it before.
No database, no encoder download."""

from __future__ import annotations

import numpy as np

from askdb.answerability import grounding
from askdb.answerability.model import (
    VALUE_MARGIN,
    AnswerabilityModel,
    ColumnText,
    Combiner,
    TableText,
    gate_probability,
    holding_columns,
    names_value,
    value_phrases,
    vocabulary_texts,
)
from tests.core.test_answerability_model import BagOfWordsEncoder

TABLES = [
    TableText(
        "hosp.admissions",
        "Table admissions (hosp.admissions).\nAlso called: hospital stay, marital status, insurance.\n"
        "One row per stay; defining time windows for a cohort, with a risk score per stay.",
    ),
    TableText("hosp.omr", "Table omr (hosp.omr).\nAlso called: outpatient measurements, BMI, weight."),
    TableText("hosp.prescriptions", "Table prescriptions (hosp.prescriptions).\nAlso called: drugs, dose."),
    TableText("hosp.drgcodes", "Table drgcodes (hosp.drgcodes).\nAlso called: DRG, diagnosis related group."),
]
COLUMNS = [
    ColumnText("hosp.admissions.marital_status", "admissions.marital_status: Marital status at admission.",
               "SINGLE, MARRIED, WIDOWED"),
    ColumnText("hosp.admissions.insurance", "admissions.insurance: Insurance / payer category for the admission.",
               "Medicare, Medicaid"),
    ColumnText("hosp.admissions.admission_location", "admissions.admission_location: Where the patient came from.",
               "EMERGENCY ROOM, PHYSICIAN REFERRAL"),
    ColumnText("hosp.omr.result_name", "omr.result_name: Name of the measurement (includes its unit).",
               "Blood Pressure, Weight (Lbs), BMI (kg/m2)"),
    ColumnText("hosp.prescriptions.drug", "prescriptions.drug: Name of the drug as ordered.", "Insulin, Heparin"),
    ColumnText("hosp.prescriptions.dose_val_rx", "prescriptions.dose_val_rx: Dose of the drug ordered.", "1, 40"),
    ColumnText("hosp.prescriptions.sliding_scale", "prescriptions.sliding_scale: Y if dosed by sliding scale "
               "(e.g. insulin).", "Y, N"),
    ColumnText("hosp.drgcodes.drg_mortality", "drgcodes.drg_mortality: APR risk of mortality subclass 1-4.", "1, 2"),
]  # fmt: skip
HOLDING, CONTEXT = vocabulary_texts(TABLES, COLUMNS)
VOCABULARY = grounding.Vocabulary(HOLDING, context=CONTEXT)


class _Constant(Combiner):
    """A learned model that gives every question P(answerable) = sigmoid(logit)."""

    def __init__(self, logit: float) -> None:
        super().__init__(np.zeros(1), logit, np.zeros(1), np.ones(1))


def _model(threshold: float = 0.5, values=(), logit: float = -5.0) -> AnswerabilityModel:
    return AnswerabilityModel(
        BagOfWordsEncoder(),
        _Constant(logit),
        threshold,
        TABLES,
        COLUMNS,
        [],
        version="v",
        values=list(values),
    )


def test_an_attribute_of_someone_the_patient_has_is_not_held_by_the_patients_column():
    """Before: "of patient N's daughter" read as "of patient" (the patient pattern stopped short of
    the number), so admissions.marital_status held it and the learned model was not asked."""
    own = holding_columns(COLUMNS)
    daughter = grounding.ground("what is the marital status of patient 10004235's daughter?", VOCABULARY)
    assert daughter is not None and daughter.missing == ("daughter",) and daughter.of == "marital status"
    assert grounding.column_holding(daughter, own) == ""
    old = grounding.ground("how old was patient 10002428's mother when she died?", VOCABULARY)
    assert old is not None and not old.grounded
    # Not an attack on the patient's own attribute, nor on "of patient N's last hospital stay".
    for question in ("what is the marital status of patient 10004235?",
                     "what was the insurance of patient 7's last hospital stay?"):  # fmt: skip
        g = grounding.ground(question, VOCABULARY)
        assert g is not None and g.grounded and grounding.column_holding(g, own), question

    score = _model().score("what is the marital status of patient 10004235's daughter?")
    assert not score.answerable and score.kind == "not_in_schema"
    assert score.reason == (
        "The database records the marital status of the patient (admissions.marital_status), not of the "
        "patient's daughter, so askdb cannot answer this; it can answer that question about the patient instead."
    )
    assert _model().score("what is the marital status of patient 10004235?").answerable


def test_a_head_noun_said_only_in_passing_does_not_hold_the_attribute():
    """ "EMERGENCY ROOM" is a category of admission_location, "time windows" a table's prose: neither
    says the database records a room or windows. A thing's value ("BMI" in omr.result_name) does."""
    for question, word in (("what was the hospital room of patient 7?", "room"),
                           ("what are the windows of patient 7?", "windows")):  # fmt: skip
        g = grounding.ground(question, VOCABULARY)
        assert g is not None and g.missing == (word,), question
    bmi = grounding.ground("what is the bmi of patient 7?", VOCABULARY)
    assert bmi is not None and bmi.grounded
    # Attack on the guard: a longer phrase whose other words name a column is not declined for a
    # head noun said in passing ("score" is only in the admissions prose).
    drg = grounding.ground("what was the drg mortality score of patient 7's first admission?", VOCABULARY)
    assert drg is not None and drg.grounded


def test_a_property_of_a_thing_given_to_the_patient_is_read_and_never_held_by_the_thing():
    lot = grounding.ground("what is the lot number of the insulin administered to patient 7?", VOCABULARY)
    assert lot is not None and lot.missing == ("lot",) and lot.attribute == "lot number of the insulin"
    reason = _model().score("what is the lot number of the insulin administered to patient 7?").reason
    # The thing's word does not make a column near: "insulin" in sliding_scale's doc is not a lot number.
    assert "sliding_scale" not in reason and "lot number of the insulin" in reason
    color = grounding.ground("what color were the tablets prescribed to patient 7?", VOCABULARY)
    assert color is not None and color.missing == ("color",)
    # Attack: "the dose of the opioid given to patient 7" is grounded ("dose" is a column) but a
    # column holding doses does not hold an opioid class's dose: the learned model decides.
    opioid = grounding.ground("what is the dose of the opioid given to patient 7?", VOCABULARY)
    assert opioid is not None and opioid.grounded and opioid.thing == "opioid"
    assert grounding.column_holding(opioid, holding_columns(COLUMNS)) == ""
    assert not _model().score("what is the dose of the opioid given to patient 7?").answerable
    assert grounding.attribute_key("what is the dose of the opioid given to patient 7?") == {"dose", "opioid"}


def test_a_question_naming_a_value_needs_a_margin_for_the_model_alone_to_decline_it():
    phrases = value_phrases(["GT Flush", "IV", "Desmopressin Acetate"])
    assert "iv" not in phrases  # too short to name anything by itself
    assert names_value("Did patient 7 take a gt flush medication?", phrases)
    assert not names_value("Did patient 7 take a gt flushes medication?", phrases)  # whole words only
    assert names_value("count patients prescribed desmopressin acetate", phrases)

    p = 1 / (1 + np.exp(5.0))  # what _Constant(-5) says of every question
    threshold = p / (VALUE_MARGIN + (1 - VALUE_MARGIN) / 2)  # between p and p / VALUE_MARGIN
    gate = _model(threshold, values=["GT Flush"])
    named = gate.score("did patient 7 take a gt flush medication on 12/06/2100?")
    assert named.answerable and named.margin == VALUE_MARGIN
    assert not gate.score("did patient 7 take a mouthwash on 12/06/2100?").answerable
    # Attack: naming a value never gets past a rule or the grounding.
    assert not gate.score("should patient 7 stop taking gt flush?").answerable
    assert not gate.score("what is the lot number of the gt flush given to patient 7?").answerable
    # The CV's gate probability applies the same margin through the one threshold.
    out = gate_probability(np.array([p, p]), np.array([False, False]), None, np.array([VALUE_MARGIN, 1.0]))
    assert out[0] >= threshold > out[1]
