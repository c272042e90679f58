"""A patient the question names by id is looked up in the data: one the database does not hold is
declined with a plain reason (an empty result would read as "none"); ages are not ids; a lookup
that cannot be made never declines. The run (and the aggregate-only user, who gets no "no such
patient" oracle) is in tests/askdb/test_answerability.py."""

from __future__ import annotations

import pytest

from askdb.answerability.people import named_patients, unknown_patient


@pytest.mark.parametrize(
    ("question", "ids"),
    [
        ("what was the last drug prescribed to patient 10021487?", (10021487,)),
        ("what is patient id 4711's gender?", (4711,)),
        ("count the stays of patient no. 4711 and patient #4712", (4711, 4712)),
        ("how old is subject 4711 , and subject 4711 again", (4711,)),
        # Attacks: an age, a share or a plural next to the word is not an id.
        ("how many patients 65 or older were admitted?", ()),
        ("how many times was a patient 65 or older admitted?", ()),
        ("is there a patient 18 years old in the icu?", ()),
        ("was any patient 80+ given heparin?", ()),
        ("what share of patient 30% ...", ()),
        ("how many patients are there?", ()),
    ],
)
def test_the_ids_a_question_names(question, ids):
    assert named_patients(question) == ids


def test_only_a_patient_looked_up_and_absent_declines():
    question = "what was the last drug prescribed to patient 4711 and patient 10002428?"
    assert unknown_patient(question, lambda p: True) is None
    assert unknown_patient(question, lambda p: None) is None  # the lookup failed: never called absent
    found = unknown_patient(question, lambda p: p != 4711)
    assert found.decisive and found.rule == "unknown_patient" and "no patient 4711" in found.reason
