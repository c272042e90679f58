"""A column asked for in the words its name joins or shortens (issue 28, round 21): "the normal high
value of the heart rate chart item" is d_items.highnormalvalue, "the event text of the last medication
administration" is emar.event_txt. Both were declined: no catalog text says "high" (the doc says "Upper
normal value"), and "text … patient" read as texting the patient. Each guard beside its attack: a name
that is a word, or that splits only into letters ("hadm", "gsn"), stays whole; a property no column
holds asked in the same shape is still missing; texting a patient is still declined."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding, rules
from askdb.answerability.data import docs_catalog
from askdb.answerability.model import holding_columns, vocabulary_texts
from metadata_admin.docs import BUNDLED_DOCS, read_docs


@pytest.fixture(scope="module")
def catalog():
    tables, columns = docs_catalog(read_docs([BUNDLED_DOCS]))
    holding, context = vocabulary_texts(tables, columns)
    return grounding.Vocabulary(holding, context=context), holding_columns(columns)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("highnormalvalue", "high normal value"),
        ("isopenbag", "is open bag"),
        ("event_txt", "event text"),
        ("amountuom", "amount unit of measure"),
        ("spec_type_desc", "specimen type description"),
        ("edregtime", "emergency department registration time"),
        ("ordercategoryname", "order category name"),
        ("icustays", "icu stays"),
    ],
)
def test_a_name_is_read_as_the_words_it_joins_and_shortens(name, said):
    assert grounding.name_words(name) == said


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("category", "category"),  # a word itself: never "cat ego ry"
        ("insurance", "insurance"),
        ("hadm_id", "hadm id"),  # would split only into "had" + a letter
        ("gsn", "gsn"),
        ("emar", "emar"),  # symspellpy's word_segmentation reads "e mar"
        ("hcpcs", "hcpcs"),  # and "hc pcs"
        ("ndc", "ndc"),
        ("", ""),
    ],
)
def test_a_word_or_a_name_that_splits_only_into_letters_stays_whole(name, said):
    assert grounding.name_words(name) == said


@pytest.mark.parametrize(
    ("question", "column"),
    [
        (
            "what is the normal high value of the heart rate chart item?",
            "mimiciv_icu.d_items.highnormalvalue",
        ),
        (
            "what is the low normal value of the respiratory rate chart item?",
            "mimiciv_icu.d_items.lownormalvalue",
        ),
    ],
)
def test_a_column_asked_in_its_names_words_is_held(catalog, question, column):
    vocabulary, own = catalog
    g = grounding.ground(question, vocabulary)
    assert g is not None and g.grounded, g
    assert grounding.column_holding(g, own) == column


@pytest.mark.parametrize(
    ("question", "missing"),
    [
        ("what is the alarm high value of the heart rate chart item?", ("alarm",)),
        ("what was the event font of patient 10004235's last medication administration?", ("font",)),
        ("what is the unit price of the heart rate chart item?", ("cost",)),  # a price is asked as a cost
    ],
)
def test_a_property_no_column_holds_in_the_same_shape_is_still_missing(catalog, question, missing):
    g = grounding.ground(question, catalog[0])
    assert g is not None and g.missing == missing, g


def test_the_event_text_of_an_administration_is_grounded_and_not_read_as_texting_the_patient(catalog):
    question = "what was the event text of patient 10004235's last medication administration?"
    g = grounding.ground(question, catalog[0])
    assert g is not None and g.grounded, g
    assert not rules.findings(question)
    assert not rules.findings("what is the dilution text for the last urine culture of patient 10019003?")


@pytest.mark.parametrize(
    "question",
    [
        "text the family of patient 10004235.",
        "can i text patient 10004235?",
        "how can we text patient 10004235's daughter?",
        "i want to text patient 10004235 about the results.",
        "please text her about patient 10004235's discharge.",
    ],
)
def test_texting_a_patient_or_the_family_is_still_declined(question):
    assert [f.rule for f in rules.findings(question)] == ["contact"]
