"""Round 13's guards, read against the bundled MIMIC-IV catalog: a medication "taken regularly" (a
class no prescription records), why something happened (a reason no column keeps), what an image
showed (no radiology text), care outside the hospital (at home, before arrival), what a patient died
of, and a state of the patient no catalog text names ("lonely"). Each beside the answerable wordings
that look like it and the attacks that would get around it; a catalog that does record the thing
lets it through (the catalog decides, not the words)."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding, rules
from askdb.answerability.data import column_text, docs_catalog
from askdb.answerability.model import ColumnText, schema_texts, vocabulary_texts
from askdb.answerability.specified import Specifics
from metadata_admin.docs import BUNDLED_DOCS, read_docs


@pytest.fixture(scope="module")
def catalog():
    return docs_catalog(read_docs([BUNDLED_DOCS]))


@pytest.fixture(scope="module")
def specifics(catalog) -> Specifics:
    return Specifics(*catalog, ("acute kidney failure, unspecified", "vancomycin"))


def _declined_by(catalog, specifics: Specifics, question: str) -> list[str]:
    absent = rules.absent_concepts(c.text for c in catalog[1])
    found = [f for f in rules.findings(question, absent=absent) if f.decisive] + specifics.findings(question)
    return [f.rule for f in found]


@pytest.mark.parametrize(
    ("question", "rule"),
    [
        ("When was the last time patient 32592 had a medication which should be regularly taken?",
         "regular_medication"),
        ("when did patient 4 last receive a drug that is taken daily?", "regular_medication"),
        ("list the routine medications of patient 4", "regular_medication"),
        # Attack: the class said with a comma and "every day".
        ("what was the last medicine, which must be taken every day, given to patient 4?", "regular_medication"),
        ("why was vancomycin stopped for patient 4?", "unrecorded_reason"),
        ("what was the reason patient 4 was transferred to the micu?", "unrecorded_reason"),
        ("for what reason was the heparin dose of patient 4 lowered?", "unrecorded_reason"),
        # Attack: a recorded reason's column named by one word only (the barcode), asked of something else.
        ("why was the barcode wristband of patient 4 replaced?", "unrecorded_reason"),
        # Attack: the recorded reason's column name said of another thing ("reason for no barcode" → transfer).
        ("what was the reason for no transfer of patient 4 to the micu?", "unrecorded_reason"),
        ("what was the reason for the barcode of patient 4's last dose?", "unrecorded_reason"),
        ("did the chest ct of patient 4 show a pulmonary nodule?", "imaging_findings"),
        ("was a fracture visible on patient 4's hip x-ray?", "imaging_findings"),
        ("what was the ejection fraction on the last echocardiogram of patient 4?", "imaging_findings"),
        ("did patient 4 take the prescribed metoprolol at home after discharge?", "outside_care"),
        ("what blood pressure did the paramedics measure for patient 4?", "outside_care"),
        ("did patient 4 fill the discharge prescriptions?", "outside_care"),
        ("what did patient 10039708 die of?", "cause_of_death"),
    ],
)  # fmt: skip
def test_what_the_catalog_does_not_record_is_declined(catalog, specifics, question, rule):
    assert rule in _declined_by(catalog, specifics, question)


@pytest.mark.parametrize(
    "question",
    [
        # Answerable look-alikes: a daily aggregate, a drug's own frequency, a diagnosis title's cause.
        "what was patient 10031404's daily maximum weight since 2100?",
        "how often was furosemide given to patient 4 per day?",
        "how many patients were diagnosed with other surgical procedures as the cause of abnormal reaction?",
        # When and what happened, not why; the recorded reason itself (emar_detail.reason_for_no_barcode).
        "when was vancomycin stopped for patient 4?",
        "what was the reason the barcode was not scanned for patient 4's last dose?",
        # The column's name said in words (reason_for_no_barcode), spaced either way: the column itself.
        "what was the reason for no barcode at patient 4's last medication administration?",
        "list the reasons for no bar code in patient 4's medication administrations",
        # A procedure is recorded; an imaging order's count too.
        "when did patient 4 last undergo a diagnostic ultrasound of heart procedure?",
        "how many patients had a diagnostic ultrasound of abdomen and retroperitoneum?",
        "how many radiology orders were placed for patient 4?",
        # Discharge home is a discharge location; death and its date are recorded.
        "was patient 4 discharged home after the last hospital stay?",
        "how many patients were discharged to home health care in 2100?",
        "did patient 4 die in the hospital?",
    ],
)
def test_what_the_catalog_records_in_those_words_passes(catalog, specifics, question):
    assert _declined_by(catalog, specifics, question) == []


def test_a_catalog_that_records_radiology_text_or_reasons_lets_them_through(catalog, specifics):
    """The catalog decides: with radiology reports' text, what a scan showed can be asked; with a
    column keeping why a transfer happened, why a patient was transferred can."""
    tables, columns = catalog
    more = [
        *columns,
        ColumnText("mimiciv_note.radiology.text", column_text("radiology", "text", "Radiology report text."), ""),
        ColumnText("mimiciv_hosp.transfers.transfer_reason",
                   column_text("transfers", "transfer_reason", "Why the patient was transferred."), ""),
    ]  # fmt: skip
    wider = Specifics(tables, more)
    question = "did the chest ct of patient 4 show a pulmonary nodule?"
    assert "imaging_findings" in _declined_by(catalog, specifics, question)
    assert _declined_by((tables, more), wider, question) == []
    assert wider.findings("why was patient 4 transferred to the micu?") == []
    assert specifics.findings("why was patient 4 transferred to the micu?")


def vocabulary_of(catalog, values: tuple[str, ...]) -> grounding.Vocabulary:
    """The grounding's vocabulary of a catalog with these linked values (the kinds' tests share it)."""
    tables, columns = catalog
    holding, context = vocabulary_texts(tables, columns)
    schema, people, categories = schema_texts(tables, columns)
    return grounding.Vocabulary(
        holding, context=context, schema=schema, people=people, categories=categories, values=values
    )


def _vocabulary(catalog) -> grounding.Vocabulary:
    return vocabulary_of(catalog, ("anxiety state, unspecified",))


@pytest.mark.parametrize(
    "question",
    ["was patient 10019003 lonely during the icu stay?", "did patient 4 feel bored in the icu?",
     "is patient 4 catholic?"],
)  # fmt: skip
def test_a_state_of_the_patient_no_catalog_text_names_is_not_grounded(catalog, question):
    g = grounding.ground(question, _vocabulary(catalog))
    assert g is not None and not g.grounded, g


@pytest.mark.parametrize(
    "question",
    [
        # A place, a participle, alive or dead, a recorded word: not a state the grounding reads, or held.
        "was patient 4 in the icu during the last hospital visit?",
        "was patient 4 admitted to the hospital in 2100?",
        "is patient 4 alive?",
        "was patient 4 married at the first admission?",
        "was patient 4 female?",
    ],
)
def test_a_state_the_catalog_records_or_no_state_at_all_passes(catalog, question):
    g = grounding.ground(question, _vocabulary(catalog))
    assert g is None or g.grounded, g
