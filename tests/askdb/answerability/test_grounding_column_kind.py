"""A time column records when, never who or how much (issue 28, round 17). Why: pharmacy.verifiedtime's
doc ("time the pharmacist verified the order") held "which pharmacist verified patient N's order", so
the gate passed it past the learned model although no column records the pharmacist. Each guard beside
its attack: a time asked of the same column stays held by it. No database, no encoder download."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding

# A time column whose doc names a person and an act, as the bundled docs' pharmacy.verifiedtime does,
# and a column that does record a person.
OWN = {
    "mimiciv_hosp.pharmacy.verifiedtime": grounding.column_words(
        "verifiedtime", "Time the pharmacist verified the order.", ""
    ),
    "mimiciv_hosp.admissions.admittime": grounding.column_words(
        "admittime", "Time of hospital admission.", ""
    ),
    "mimiciv_hosp.patients.dod": grounding.column_words("dod", "Date of death of the patient.", ""),
    "mimiciv_icu.chartevents.caregiver_id": grounding.column_words(
        "caregiver_id", "Caregiver who charted the value.", ""
    ),
}


def held(attribute: str, event: str = "") -> str:
    return grounding.column_holding(grounding.Grounding(attribute, (), event=event), OWN)


@pytest.mark.parametrize("attribute", ["pharmacist", "pharmacist order", "hospital admission", "death"])
def test_a_time_column_holds_no_person_and_no_thing(attribute):
    assert held(attribute) == ""


@pytest.mark.parametrize(
    ("attribute", "event", "column"),
    [
        ("verified time", "", "mimiciv_hosp.pharmacy.verifiedtime"),
        ("date of death", "", "mimiciv_hosp.patients.dod"),
        ("verified", "when", "mimiciv_hosp.pharmacy.verifiedtime"),
    ],
)
def test_the_attack_a_time_asked_of_a_time_column_stays_held(attribute, event, column):
    assert held(attribute, event) == column


def test_the_attack_a_person_column_still_holds_its_person():
    assert held("caregiver") == "mimiciv_icu.chartevents.caregiver_id"
