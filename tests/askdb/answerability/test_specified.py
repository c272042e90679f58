"""What a question leaves unsaid that its answer depends on (askdb/answerability/specified.py and
rules.py `unnamed_test_or_drug`), read against the bundled MIMIC-IV catalog: a class of drugs no
column records, a duration of an event whose table has no end time, a test or drug asked for with
no name. Each guard beside the wordings that look like it and are answerable, and the attacks that
would get around it. Found on EHRSQL train's grouped CV (round 12)."""

from __future__ import annotations

import pytest

from askdb.answerability import rules
from askdb.answerability.data import column_text, docs_catalog
from askdb.answerability.specified import Specifics
from metadata_admin.docs import BUNDLED_DOCS, read_docs

VALUES = (
    "long-term (current) use of anticoagulants",
    "anticardiolipin antibody igg",
    "opioid abuse, episodic",
)


@pytest.fixture(scope="module")
def specifics() -> Specifics:
    tables, columns = docs_catalog(read_docs([BUNDLED_DOCS]))
    return Specifics(tables, columns, VALUES)


def _rules(specifics: Specifics, question: str) -> list[str]:
    found = specifics.findings(question) + [
        f for f in rules.findings(question) if f.rule == "unnamed_test_or_drug"
    ]
    assert all(f.decisive and f.kind == "not_in_schema" for f in found)
    return [f.rule for f in found]


@pytest.mark.parametrize(
    "question",
    [
        "What is the prescription dose of opioid for patient 31306?",
        "what is the dosage of an opioid given to patient 4469?",
        "which immunotherapies did patient 10019003 receive in 2100?",
        "what was the first anticoagulant prescribed to patient 4?",
        "when was patient 10002428 last given a beta blocker?",
        "how many patients were prescribed narcotics in 2100?",
        "what diabetic drugs did patient 4 take?",
        # Attacks: the class spelled apart, or next to a value's word that is not the value.
        "what is the dose of the anti-coagulants given to patient 4?",
        "what was the dose of opioid abused by patient 4?",
    ],
)
def test_a_class_no_column_records_is_declined(specifics, question):
    assert _rules(specifics, question) == ["unrecorded_class"]
    assert "not by class" in specifics.findings(question)[0].reason


@pytest.mark.parametrize(
    "question",
    [
        # A column's doc documents it (microbiologyevents.ab_name: the antibiotic tested).
        "which antibiotic was tested on patient 10004235's last culture?",
        # A value the question names holds the word: a diagnosis, a lab test.
        "how many patients were diagnosed with long-term (current) use of anticoagulants in 2100?",
        "what's the average total hospital cost that includes a anticardiolipin antibody igg lab test?",
        "what is the dose of furosemide last prescribed to patient 10004235?",
        "what was patient 4's last antibody test?",
        # Adjectives that end like a class and are not one.
        "how many diabetic patients were prescribed insulin in 2100?",
        "what are the three most expensive drugs prescribed last year?",
        "what active medications did patient 4 have on the last visit?",
    ],
)
def test_a_class_a_column_or_a_named_value_holds_passes(specifics, question):
    assert _rules(specifics, question) == []


@pytest.mark.parametrize(
    "question",
    [
        "How long did proximal gastrectomy take for patient 366?",
        "How long did it take to get spinal canal explor nec for patient 18877?",
        "How long took entral infus nutrit sub for patient 10855?",
        "What was the total length of excise diaphragm lesion procedure for patient 594?",
        "how long has patient 10001725 had hypertension?",
        "how long did the hemoglobin lab test of patient 10004457 take?",
        # Attack: a stay named as when it happened, not as what lasted.
        "how long did the arterial catheterization of patient 7 during the last icu stay take?",
    ],
)
def test_a_duration_of_an_event_with_no_end_time_is_declined(specifics, question):
    assert _rules(specifics, question) == ["unended_event"]
    assert "not when it ended" in specifics.findings(question)[0].reason


@pytest.mark.parametrize(
    "question",
    [
        "Tell me the duration in days of patient 10004720's last stay in the ICU.",
        "how long was patient 10004235's last hospital stay?",
        "how long was patient 10001 in the icu?",
        "how long was patient 10002495 prescribed furosemide the last time?",
        # procedureevents and inputevents have end times: their things last.
        "how long did the mechanical ventilation of patient 5 last?",
        "what was the duration of the last infusion of patient 5?",
        "how long was patient 5 on the ventilator during the first icu stay?",
        "how long was patient 5 on heparin?",
        "how long did patient 5 take furosemide in 2100?",
        "when did patient 10000032 have the arterial catheterization for the first time?",
    ],
)
def test_a_duration_of_what_a_table_with_an_end_time_records_passes(specifics, question):
    assert _rules(specifics, question) == []


@pytest.mark.parametrize(
    "question",
    [
        "what was the value of a test patient 10004720 had on the last hospital visit?",
        "how much of a medication did patient 10002930 receive in 2100?",
        "what value did a test of patient 10003046 show at the first hospital encounter?",
        "tell me the dose of some medication prescribed to patient 10002428 since 2100.",
    ],
)
def test_a_value_of_an_unnamed_test_or_drug_is_declined(specifics, question):
    assert _rules(specifics, question) == ["unnamed_test_or_drug"]


@pytest.mark.parametrize(
    "question",
    [
        "did patient 10001217 have any lab test on the last hospital visit?",
        "what was the name of the drug patient 10002495 was prescribed first?",
        "what was the value of patient 10004457's last creatinine lab test?",
        "what is the total amount of a drug named heparin given to patient 4?",
    ],
)
def test_a_test_or_drug_that_is_named_or_not_asked_for_its_value_passes(specifics, question):
    assert _rules(specifics, question) == []


def test_a_table_that_holds_the_length_itself_can_say_how_long():
    # A source whose stays table keeps the length (los_days) and no end time: "length of stay" is
    # answerable there. Its procedures table keeps neither, so a procedure's duration is still declined.
    from askdb.answerability.data import ColumnText, TableText

    tables = [TableText("stays", "Table stays. Also called: stay, ward stay"),
              TableText("procedures", "Table procedures. Also called: procedure")]  # fmt: skip
    columns = [
        ColumnText("stays.ward", column_text("stays", "ward", "the ward"), ""),
        ColumnText("stays.los_days", column_text("stays", "los_days", "days in the ward"), ""),
        ColumnText("procedures.starttime", column_text("procedures", "starttime", "when it began"), ""),
    ]
    specifics = Specifics(tables, columns)
    assert specifics.findings("What is the mean length of stay per ward?") == []
    assert [f.rule for f in specifics.findings("How long did the procedure take?")] == ["unended_event"]
    # Attack: a column whose name only contains "los" inside another word is no length.
    closed = [ColumnText("stays.closed_flag", column_text("stays", "closed_flag", "closed"), ""), columns[0]]
    assert [
        f.rule for f in Specifics(tables, closed).findings("What is the mean length of stay per ward?")
    ] == ["unended_event"]
