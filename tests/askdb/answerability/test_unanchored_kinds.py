"""Round 14's guards, read against the bundled MIMIC-IV catalog: a period with no anchor ("recently",
"in the past"), what happened after discharge beyond a death or a later stay, what the patient said or
rated, the database itself, staff counts, an existence question read as the question it wraps, and an
attribute of the hospital or a unit. Each beside the answerable wordings that look like it and the
attacks that would get around it; a catalog that does record the thing lets it through."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding, rules
from askdb.answerability.data import column_text, docs_catalog
from askdb.answerability.model import ColumnText
from askdb.answerability.specified import Specifics
from metadata_admin.docs import BUNDLED_DOCS, read_docs
from tests.askdb.answerability.test_unrecorded_kinds import vocabulary_of


@pytest.fixture(scope="module")
def catalog():
    return docs_catalog(read_docs([BUNDLED_DOCS]))


@pytest.fixture(scope="module")
def specifics(catalog) -> Specifics:
    return Specifics(*catalog, ("chest pain, unspecified", "reopening of recent thoracotomy site", "insulin"))


def _declined_by(catalog, specifics: Specifics, question: str) -> list[str]:
    absent = rules.absent_concepts(c.text for c in catalog[1])
    found = [f for f in rules.findings(question, absent=absent) if f.decisive] + specifics.findings(question)
    return [f.rule for f in found]


@pytest.mark.parametrize(
    ("question", "rule"),
    [
        ("what was the creatinine value of patient 4 recently?", "unanchored_time"),
        ("which procedures has patient 4 undergone lately?", "unanchored_time"),
        ("what lab tests did patient 4 have around the time of the surgery?", "unanchored_time"),
        ("how many patients were prescribed furosemide recently?", "unanchored_time"),
        # Attacks: "recent past"; a "last" that names a value, not a period; "hospital" with no visit said.
        ("what drugs did patient 4 get in the recent past?", "unanchored_time"),
        ("what was the last heart rate of patient 4 recently?", "unanchored_time"),
        ("was patient 4 given insulin in the hospital lately?", "unanchored_time"),
        ("did patient 4 go back to work after the last discharge?", "after_discharge"),
        ("how well could patient 4 walk three months after discharge?", "after_discharge"),
        ("what was patient 4's blood pressure at the follow-up visit after discharge?", "after_discharge"),
        # Attacks: another form of the discharge; a discharge word left in the rest of the question.
        ("did patient 4 return to work after being discharged?", "after_discharge"),
        ("what was the post-discharge quality of life of patient 4 in the first discharge year?", "after_discharge"),
        ("how did patient 4 describe the chest pain?", "patient_words"),
        ("did patient 4 report feeling dizzy after the drug?", "patient_words"),
        ("how would patient 4 rate the doctor's communication?", "patient_words"),
        # Attacks: the patient as the sentence's subject, and "own words" with no verb of saying.
        ("patient 4 reported which symptoms on arrival?", "patient_words"),
        ("what was the pain of patient 4 like in their own words?", "patient_words"),
        ("when was this database last updated?", "about_the_database"),
        ("who maintains the database?", "about_the_database"),
        ("what version of the database is this?", "about_the_database"),
        ("how many volunteers worked at the hospital in 2100?", "staffing"),
        ("what was the nurse to patient ratio in the surgical icu in 2100?", "staffing"),
    ],
)  # fmt: skip
def test_what_the_catalog_does_not_record_is_declined(catalog, specifics, question, rule):
    assert rule in _declined_by(catalog, specifics, question)


@pytest.mark.parametrize(
    "question",
    [
        # Anchored periods, "most recent" (the last one), and "recent" inside a procedure's name.
        "what was the last creatinine value of patient 4 during the last hospital visit?",
        "what is the recently prescribed medication for patient 4 today compared to yesterday?",
        "what medication was administered to patient 4 most recently according to the emar?",
        "which drug was patient 4 prescribed within the same day after the reopening of recent thoracotomy site?",
        "which diagnoses has patient 4 been given in the past 2 years?",
        # "At some point" is "ever": any time, which the database answers.
        "was patient 4 at some point given insulin?",
        "what was patient 4's weight on the most recent icu visit?",
        # After discharge, a death and a later stay here are recorded.
        "did patient 4 die after the last hospital discharge?",
        "was patient 4 admitted to the hospital again within a year after the first discharge?",
        "how many days after the first discharge was patient 4 admitted again?",
        "where was patient 4 discharged to after the last hospital visit?",
        "did patient 4 go to a skilled nursing facility after leaving the hospital?",
        # A diagnosis or a charted value, not the patient's words; "report" said by the asker.
        "has patient 4 been diagnosed with chest pain, unspecified?",
        "can you report the last arterial blood pressure mean for patient 4 during the first icu stay?",
        # What the database records, and counts of what it records.
        "how many patients does the database hold?",
        "what does the database record about patient 4's admissions?",
        "how many patients were admitted to the medical intensive care unit in 2100?",
        "how many caregivers charted vital signs for patient 4?",
    ],
)
def test_what_the_catalog_records_in_those_words_passes(catalog, specifics, question):
    assert _declined_by(catalog, specifics, question) == []


def test_a_catalog_that_records_notes_or_nothing_after_discharge_decides(catalog, specifics):
    """The catalog decides: with notes, what the patient said can be asked; with no column that says it
    records anything after a discharge, the after-discharge guard has nothing to name and stays quiet."""
    tables, columns = catalog
    notes = [
        *columns,
        ColumnText("mimiciv_note.discharge.text", column_text("discharge", "text", "Note text."), ""),
    ]
    question = "how did patient 4 describe the chest pain?"
    assert "patient_words" in _declined_by(catalog, specifics, question)
    assert _declined_by((tables, notes), Specifics(tables, notes), question) == []
    no_dod = [c for c in columns if not c.qualified.endswith((".dod", ".discharge_location"))]
    assert Specifics(tables, no_dod).findings("did patient 4 go back to work after the last discharge?") == []
    reason = specifics.findings("did patient 4 go back to work after the last discharge?")[0].reason
    assert "patients.dod" in reason


def _vocabulary(catalog) -> grounding.Vocabulary:
    return vocabulary_of(catalog, ("emergency room", "chest pain, unspecified"))


@pytest.mark.parametrize(
    "question",
    [
        "has patient 4 ever had a tattoo?",
        "has patient 4 ever been to a dentist?",
        "is there any record that patient 4 wore a hearing aid in the icu?",
        # Attack: "evidence" for "record", and the thing before the patient.
        "is there evidence that patient 4 wore a hearing aid?",
        "what was the bed occupancy of the hospital on 01/01/2100?",
        "what is the annual budget of the hospital?",
    ],
)
def test_an_existence_or_hospital_question_about_what_no_text_names_is_not_grounded(catalog, question):
    g = grounding.ground(question, _vocabulary(catalog))
    assert g is not None and not g.grounded, g


@pytest.mark.parametrize(
    "question",
    [
        "has patient 4 been to the emergency room?",
        "is there any record that patient 4 was admitted to the icu?",
        "is there any record that patient 4 was transferred to another care unit?",
        "is there any record of a procedure for patient 4 in 2100?",
        "is there any record that patient 4 received a potassium lab test during the last hospital stay?",
        "has patient 4 ever had a lab test?",
    ],
)
def test_an_existence_question_about_what_the_catalog_records_is_grounded(catalog, question):
    g = grounding.ground(question, _vocabulary(catalog))
    assert g is None or g.grounded, g
