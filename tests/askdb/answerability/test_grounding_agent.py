"""Who or what acts on a thing the catalog names (issue 28, round 21): "what machine analyses the hemoglobin
samples", "which company makes the heparin" ask for an agent no column records (round 20's thirteenth set let
them through). The agent is the property asked, read only to decline. Each guard beside its attack: an agent
whose words the catalog holds ("which caregiver documented the heart rate") reads nothing, so this shape never
holds a question the learned model would decline; a thing the catalog does not name ("the weather") reads
nothing; a figure asked of a thing ("which drug was prescribed the most") reads nothing."""

from __future__ import annotations

import pytest

from askdb.answerability import grounding
from askdb.answerability.data import docs_catalog
from askdb.answerability.model import holding_columns, vocabulary_texts
from metadata_admin.docs import BUNDLED_DOCS, read_docs


@pytest.fixture(scope="module")
def catalog():
    tables, columns = docs_catalog(read_docs([BUNDLED_DOCS]))
    holding, context = vocabulary_texts(tables, columns)
    return grounding.Vocabulary(holding, context=context), holding_columns(columns)


@pytest.mark.parametrize(
    ("question", "agent", "about"),
    [
        ("what machine analyses the hemoglobin samples?", "machine", "hemoglobin samples"),
        ("which company makes the heparin?", "company", "heparin"),
        ("which supplier delivered the insulin vials?", "supplier", "insulin vials"),
    ],
)
def test_an_agent_no_column_records_is_read_and_missing(catalog, question, agent, about):
    g = grounding.ground(question, catalog[0])
    assert g is not None and g.attribute == agent and g.missing == (agent,) and g.about == about, g


@pytest.mark.parametrize(
    "question",
    [
        "which caregiver documented the heart rate?",  # the catalog holds caregivers: never held by this shape
        "what lab test measures the potassium?",
        "what machine analyses the weather?",  # a thing the catalog does not name
        "which drug was prescribed the most?",  # a figure, not a thing
    ],
)
def test_an_agent_the_catalog_holds_or_a_thing_it_lacks_reads_nothing(catalog, question):
    vocabulary, own = catalog
    g = grounding.ground(question, vocabulary)
    assert g is None or not grounding.column_holding(g, own), g
    assert g is None or g.attribute not in ("caregiver", "lab test", "machine", "drug"), g
