"""Whose event a question asks about (askdb/answerability/grounding.py `_whose_event`): "did
patient N's father die" asks about the father, and the database records what happened to the
patient; "did patient N die" and "when was patient N's potassium measured" stay the patient's.
Found on the demo set's let-through list (round 11: 9 → 8, none blocked)."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding
from askdb.answerability.model import AnswerabilityModel, ColumnText, TableText
from tests.askdb.answerability.test_grounding import _Unsure
from tests.core.test_answerability_model import BagOfWordsEncoder

TABLES = [TableText("hosp.patients", "Table patients. Also called: demographics, death."),
          TableText("hosp.labevents", "Table labevents. Also called: lab results.")]  # fmt: skip
COLUMNS = [
    ColumnText("hosp.patients.dod", "patients.dod: Date of death; the patient died on this day."),
    ColumnText("hosp.labevents.label", "labevents.label: Lab test measured, such as potassium.", "Potassium"),
]
VOCABULARY = grounding.Vocabulary(
    [t.text for t in TABLES] + [c.text for c in COLUMNS],
    schema=[t.text for t in TABLES] + [c.text for c in COLUMNS],
)


def test_an_event_of_someone_the_patient_has_is_not_the_patients():
    g = grounding.ground("did patient 10004235's father die of a heart attack?", VOCABULARY)
    assert g is not None and g.whose == "father" and not g.grounded
    # Without the owner the same event is the patient's, and recorded.
    assert grounding.ground("did patient 10004235 die of a heart attack?", VOCABULARY).grounded


@pytest.mark.parametrize(
    "question",
    [
        "did the husband of patient 7 ever die in the hospital?",
        "was patient 7's grandmother measured for potassium?",
    ],
)
def test_other_shapes_of_someone_elses_event_are_not_grounded_either(question):
    g = grounding.ground(question, VOCABULARY)
    assert g is not None and not g.grounded


@pytest.mark.parametrize(
    "question",
    [
        # Attacks: the patient's own events, and what the catalog records of the patient.
        "did patient 7 die in the hospital?",
        "when was patient 7's potassium measured?",
        "did patient 7's last hospital stay end in death?",
    ],
)
def test_the_patients_own_events_stay_the_patients(question):
    g = grounding.ground(question, VOCABULARY)
    assert g is None or not g.whose


def test_the_decline_says_the_database_records_what_happened_to_the_patient():
    model = AnswerabilityModel(BagOfWordsEncoder(), _Unsure(), 0.5, TABLES, COLUMNS, [], version="v")
    score = model.score("did patient 10004235's father die of a heart attack?")
    assert not score.answerable and score.kind == "not_in_schema"
    assert score.reason == (
        "The database records what happened to the patient, not to the patient's father (\"die of a heart "
        'attack" (whether or when it happened)), so askdb cannot answer this.'
    )
