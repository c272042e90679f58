"""Grounding events (issue 28, round 9): a question that names no attribute but an event ("when did
patient N get married", "who visited patient N", "did patient N serve in the military") is held
only when the catalog's docs say the event is recorded (not its values: "MARRIED" is a marital
status with no date), a person column's doc says who did it, or approved questions ask the same
of it. Cases from the demo set's unanswerable questions let through; the attacks are answerable
wordings that must stay grounded. No database, no encoder download."""

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
    schema_texts,
)
from tests.core.test_answerability_model import BagOfWordsEncoder

TABLES = [
    TableText(
        "hosp.admissions", "Table admissions. Also called: hospital stay, visit, marital status, died."
    ),
    TableText("hosp.prescriptions", "Table prescriptions. Also called: drugs, dose, route."),
]
COLUMNS = [
    ColumnText("hosp.admissions.admittime", "admissions.admittime: Date and time of hospital admission."),
    ColumnText("hosp.admissions.dischtime", "admissions.dischtime: Date and time of hospital discharge."),
    ColumnText("hosp.admissions.admit_provider_id",
               "admissions.admit_provider_id: De-identified id of the provider who admitted the patient."),
    ColumnText("hosp.admissions.marital_status", "admissions.marital_status: Marital status at admission.",
               "SINGLE, MARRIED, WIDOWED"),
    ColumnText("hosp.prescriptions.starttime", "prescriptions.starttime: Start time of the prescription."),
    ColumnText("hosp.prescriptions.order_provider_id",
               "prescriptions.order_provider_id: De-identified provider who ordered the medication."),
    ColumnText("hosp.emar.mar", "emar.mar: Medication administration record (MAR) entry."),
]  # fmt: skip
SCHEMA, PEOPLE, CATEGORIES = schema_texts(TABLES, COLUMNS)


def _vocabulary(approved=()) -> grounding.Vocabulary:
    return grounding.Vocabulary(
        [t.text for t in TABLES] + [f"{c.text} {c.values}" for c in COLUMNS] + list(approved),
        schema=SCHEMA,
        people=PEOPLE,
        categories=CATEGORIES,
        events={grounding.event_key(q) for q in approved} - {""},
    )


@pytest.mark.parametrize(
    ("question", "event"),
    [
        ("when did patient 10002428 get married?", ("when", "married")),
        ("in what year was patient 10020740 married?", ("when", "married")),
        ("on what day was patient 10000032 born?", ("when", "born")),
        ("when was patient 10023117's lab report faxed to the clinic?", ("when", "faxed")),
        ("who visited patient 10039708 in the hospital?", ("who", "visited")),
        ("who drove patient 10014354 home after discharge?", ("who", "drove")),
        ("did patient 10002428 serve in the military?", ("whether", "serve")),
        ("where does patient 10000032 work?", ("whether", "work")),
        ("was patient 10000032 ever arrested?", ("whether", "arrested")),
        # light verbs say something happened, not what: nothing is read, the model decides
        ("when did patient 1 leave the icu?", ("", "")),
        ("did patient 1 have a procedure?", ("", "")),
        ("has patient 10038999 experienced any surgeries?", ("", "")),  # train CV: was blocked
        ("how did patient 1 get to the hospital?", ("", "")),
        ("is patient 1 alive?", ("", "")),  # not a participle: no event
        ("when was patient 1's last lab test performed?", ("", "")),
    ],
)
def test_the_event_asked_about_is_read(question, event):
    assert grounding.asked_event(question) == event


def test_an_event_no_doc_records_is_missing_and_one_a_doc_records_is_grounded():
    v = _vocabulary()
    for question in (
        "when did patient 10002428 get married?",  # "MARRIED" is a value: no date of it
        "on what day was patient 10000032 born?",
        "did patient 10002428 serve in the military?",  # "service" is not "serve"
        "who visited patient 10039708 in the hospital?",  # "visit" is in the docs, not a person column's
        "when was patient 1 married?",  # attack: "mar" (the MAR) is no form of "married"
    ):
        g = grounding.ground(question, v)
        assert g is not None and not g.grounded, question
    for question in (
        "when was patient 1 admitted to the hospital?",
        "when was patient 1 discharged?",
        "did patient 1 die in the hospital?",  # "died" in the table's words
        "who admitted patient 1?",  # admissions.admit_provider_id
        "who ordered the medication for patient 1?",
        "was patient 1 married?",  # whether: a category says so
        "was patient 1 prescribed insulin?",  # "prescription"
    ):
        g = grounding.ground(question, v)
        assert g is not None and g.grounded, question


def test_approved_questions_ground_an_event_only_when_they_ask_the_same_of_it():
    married = "when did patient 7 get married?"
    assert not grounding.ground(married, _vocabulary(["was patient 3 married?"])).grounded
    assert grounding.ground(married, _vocabulary(["when did patient 3 get married?"])).grounded
    # knowing when it happened tells whether it did
    assert grounding.ground(
        "was patient 7 intubated?", _vocabulary(["when was patient 3 intubated?"])
    ).grounded
    assert not grounding.ground("was patient 7 intubated?", _vocabulary()).grounded


def test_without_docs_no_event_is_checked():
    # a vocabulary built from texts alone (an old caller) has nothing to check an event against
    assert grounding.ground("on what day was patient 1 born?", grounding.Vocabulary(["born"])) is None


class _Sure(Combiner):
    """A learned model that calls everything answerable: only the grounding can decline."""

    def __init__(self) -> None:
        super().__init__(np.zeros(1), 5.0, np.zeros(1), np.ones(1))


def _model(library=()) -> AnswerabilityModel:
    return AnswerabilityModel(BagOfWordsEncoder(), _Sure(), 0.5, TABLES, COLUMNS, list(library), version="v")


def test_the_decline_says_what_is_recorded_instead():
    who = _model().score("who visited patient 10039708 in the hospital?")
    assert not who.answerable and who.kind == "not_in_schema"
    assert "who admitted the patient or ordered the medication" in who.reason, who.reason
    assert "no column records who visited patient 10039708 in the hospital" in who.reason, who.reason
    born = _model().score("on what day was patient 10000032 born?")
    assert not born.answerable, born.reason
    assert (
        born.reason
        == 'No table or column in this database records "born" or its date, so askdb cannot answer this.'
    )
    serve = _model().score("did patient 10002428 serve in the military?")
    assert '"serve in the military" (whether or when it happened)' in serve.reason, serve.reason
    # the column whose categories use the word is named as what askdb can answer instead
    married = _model().score("when did patient 10002428 get married?")
    assert married.reason == (
        'The database records the marital status at admission (admissions.marital_status), not "married" or its '
        "date, so askdb cannot answer this; it can answer questions about that instead."
    ), married.reason
    assert _model().score("who admitted patient 10039708?").answerable
    assert _model().score("when was patient 1 discharged?").answerable


def test_a_when_question_is_not_held_by_a_value_and_a_rule_still_declines():
    score = _model().score("when did patient 10002428 get married?")
    assert not score.answerable and score.grounded_column == ""
    # attack: a grounded event inside a question a rule declines
    assert not _model().score("when will patient 1 be admitted to the hospital?").answerable


def test_cross_validation_grounds_an_event_only_from_other_folds():
    questions = [
        TrainQuestion(0, "when did patient 3 get married?", True),
        TrainQuestion(1, "when did patient 4 get married?", True),
        TrainQuestion(2, "what is the dose of insulin?", True),
    ]
    together = [[[0, 1], [2]]]  # a question and its paraphrase held out together
    apart = [[[0], [1], [2]]]
    assert grounding_readings(questions, TABLES, COLUMNS, (), together).ungrounded[0].tolist() == [
        True,
        True,
        False,
    ]
    assert grounding_readings(questions, TABLES, COLUMNS, (), apart).ungrounded[0].tolist() == [
        False,
        False,
        False,
    ]


def test_an_event_decline_does_not_veto_a_confident_library_answer_a_rule_does():
    from core.outcome import AnswerabilityVerdict

    score = _model().score("who visited patient 10039708 in the hospital?")
    verdict = AnswerabilityVerdict.from_json(
        {"answerable": False, "findings": [f.to_json() for f in score.findings]}
    )
    assert verdict.rule_kind == ""  # grounding, like an attribute's: a verified example that runs wins
    future = _model().score("who will visit patient 10039708 tomorrow?")
    ruled = AnswerabilityVerdict.from_json(
        {"answerable": False, "findings": [f.to_json() for f in future.findings]}
    )
    assert ruled.rule_kind == "future"
