"""A linked value grounds an attribute only where the attribute names it in full (issue 28, session 24):
linked values (ICD titles, drug names, lab labels) hold nearly every English word, so "what car does
patient N drive" was grounded by the diagnosis title "Car driver injured in collision …" and left to the
learned model. A value's words now hold the attribute only when the attribute says the whole value
(its head before a comma, without its parentheses: "Anion Gap", "Glucose (whole blood)",
"Anxiety state, unspecified"); a word a column's doc or an approved question says is held as before.
No database, no encoder download."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding
from askdb.answerability.model import (
    ColumnText,
    TableText,
    TrainQuestion,
    grounding_readings,
    held_by_column,
    vocabulary_texts,
)

TABLES = [
    TableText("hosp.labevents", "Table labevents (hosp.labevents).\nAlso called: lab results, lab tests."),
    TableText("hosp.diagnoses_icd", "Table diagnoses_icd (hosp.diagnoses_icd).\nAlso called: diagnoses."),
    TableText("hosp.prescriptions", "Table prescriptions (hosp.prescriptions).\nAlso called: drugs, dose."),
]
COLUMNS = [
    ColumnText("hosp.d_labitems.label", "d_labitems.label: Name of the lab test.", ""),
    ColumnText("hosp.labevents.valuenum", "labevents.valuenum: Numeric result of the lab test.", ""),
    ColumnText("hosp.d_icd_diagnoses.long_title", "d_icd_diagnoses.long_title: Title of the diagnosis.", ""),
    ColumnText("hosp.prescriptions.drug", "prescriptions.drug: Name of the drug as ordered.", ""),
]
VALUES = (
    "Car driver injured in collision with pedestrian in traffic accident",
    "Problems related to education and school",
    "Need for legal guardian, unspecified",
    "Anion Gap",
    "Glucose (whole blood)",
    "Anxiety state, unspecified",
    "Normal Saline",
    "Abnormal findings noted on examination of blood",
)
HOLDING, CONTEXT = vocabulary_texts(TABLES, COLUMNS)


def _vocabulary(approved: tuple[str, ...] = ()) -> grounding.Vocabulary:
    return grounding.Vocabulary([*HOLDING, *approved], context=CONTEXT, values=VALUES)


@pytest.mark.parametrize(
    ("question", "missing"),
    [
        # Attacks: each word is a word of some linked value, none of them names the attribute.
        ("what car does patient 4 drive?", ("car",)),
        ("which school did patient 4 attend?", ("school",)),
        ("who is the legal guardian of patient 4?", ("legal", "guardian")),
        ("what pedestrian did patient 4 hit?", ("pedestrian",)),
    ],
)
def test_a_word_only_a_longer_value_says_does_not_ground_the_attribute(question, missing):
    g = grounding.ground(question, _vocabulary())
    assert g is not None and g.missing == missing, g


@pytest.mark.parametrize(
    "question",
    [
        "what is the anion gap of patient 4?",  # "Anion Gap" named whole
        "what was the last glucose of patient 4?",  # "Glucose (whole blood)" without its parentheses
        "what was patient 4's anxiety state at admission?",  # the head before the comma
        "what was the total amount of the last normal saline of patient 4?",
    ],
)
def test_an_attribute_naming_a_value_in_full_is_grounded(question):
    g = grounding.ground(question, _vocabulary())
    assert g is not None and g.grounded, g


def test_a_participle_only_values_say_qualifies_the_attribute_and_is_not_needed_named():
    """Precision: "noted" (a value's word) says how the glucose was recorded, not what is asked; the
    value rule leaves it to the plain reading, or "the last glucose noted for patient N" is declined."""
    g = grounding.ground("what was the last glucose noted for patient 4?", _vocabulary())
    assert g is not None and g.grounded, g


def test_a_word_an_approved_question_or_a_doc_says_is_held_whatever_the_values():
    approved = ("what car did patient 7 drive to the hospital?",)
    assert grounding.ground("what car does patient 4 drive?", _vocabulary(approved)).grounded
    # "diagnosis" is a word of a column's doc as well as of values: held as before.
    assert grounding.ground("what is the diagnosis of patient 4?", _vocabulary()).grounded


def test_the_cross_validation_reads_values_as_the_scorer_does():
    """The CV's fold vocabularies (built from stems) must apply the same rule: the held-out attack is
    declined, and a word an approved question of another fold says still holds."""
    questions = [
        TrainQuestion(1, "what car does patient 4 drive?", False),
        TrainQuestion(2, "what was the last glucose of patient 5?", True),
        TrainQuestion(3, "which school did patient 6 attend?", False),
        TrainQuestion(4, "which school has patient 8 attended?", True),
    ]
    dealings = [[[0, 3], [1, 2]]]
    readings = grounding_readings(questions, TABLES, COLUMNS, VALUES, dealings)
    assert readings.ungrounded[0, 0]  # "car": only a longer value says it
    assert not readings.ungrounded[0, 1]  # "Glucose (whole blood)" named whole
    assert not readings.ungrounded[0, 2]  # "school": the approved question of the other fold says it


def test_held_by_column_still_reads_the_values():
    held = held_by_column(["what is the drug of patient 4?"], TABLES, COLUMNS, VALUES)
    assert held.tolist() == [True]
