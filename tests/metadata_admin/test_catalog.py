"""The schema catalog: docs import/export, introspection, embeddings, retrieval and value linking,
against the real embedded PostgreSQL and the synthetic MIMIC-IV-shaped clinical data."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from metadata_admin import checks as catalog_checks
from metadata_admin.docs import BUNDLED_DOCS, DocsError, parse_docs, read_docs
from metadata_admin.models import ClinicalSource, ColumnDoc, DocRevision, TableDoc, ValueEntry
from metadata_admin.selectors import link_values, retrieve
from metadata_admin.services import (
    docs_export,
    docs_import,
    source_introspect,
    table_doc_update,
    table_docs_reembed,
)
from tests.support.scripted_llm import ScriptedLLM

MINIMAL = """
version: 1
schema: mimiciv_hosp
tables:
  - name: patients
    description: People.
    columns:
      - {name: subject_id, type: integer, key: primary}
    relationships:
      - to: admissions
        "on": [[subject_id, subject_id]]
"""


# ---------------------------------------------------------------- docs (pure)


def test_bundled_docs_cover_every_mimic_table_with_every_column():
    from metadata_admin.clinical.schema import SCHEMAS, TABLES

    docs = {t.qualified: t for t in read_docs([BUNDLED_DOCS])}
    # Notes (mimiciv_note) are left out on purpose: generated SQL never reads note text.
    for spec in (t for t in TABLES if t.schema in SCHEMAS):
        qualified = f"{spec.schema}.{spec.name}"
        assert qualified in docs, f"{qualified} is not documented"
        assert [c.name for c in docs[qualified].columns] == [c.name for c in spec.columns], qualified
        assert docs[qualified].description and docs[qualified].example_questions


def test_broken_yaml_names_the_file_and_line():
    with pytest.raises(DocsError) as err:
        parse_docs("version: 1\ntables:\n  - name: x\n    description: [unclosed\n", where="hosp.yaml")
    assert "hosp.yaml line" in str(err.value) and "invalid YAML" in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 2\ntables: []", "unsupported docs version"),
        ("tables:\n  - description: no name", "needs a 'name'"),
        ("tables:\n  - name: a\n  - name: a", "documented twice"),
        ("tables:\n  - name: a\n    relationships:\n      - to: b", "needs 'to' and 'on'"),
        (
            "tables:\n  - name: a\n    columns:\n      - {name: c, key: secondary}",
            "key must be primary or foreign",
        ),
        ("just a string", "expected a mapping"),
    ],
)
def test_malformed_docs_get_a_clear_error(text, message):
    with pytest.raises(DocsError, match=message):
        parse_docs(text)


def test_relationships_accept_the_bare_on_key_yaml_reads_as_true():
    tables = parse_docs(MINIMAL.replace('"on"', "on"))
    assert tables[0].relationships[0].on == [["subject_id", "subject_id"]]
    assert tables[0].relationships[0].to == "mimiciv_hosp.admissions"


# ---------------------------------------------------------------- catalog services


@pytest.mark.django_db
def test_docs_import_marks_tables_missing_from_the_source_and_says_so(source):
    tables = parse_docs(MINIMAL.replace("name: patients", "name: not_a_table"))
    report = docs_import(source=source, tables=tables)
    assert any("not_a_table is documented but not in source" in w for w in report.warnings)
    doc = TableDoc.objects.get(source=source, name="not_a_table")
    assert doc.exists_in_source is False
    assert "mimiciv_hosp.not_a_table" not in {
        t.qualified for t in retrieve(source=source, question="not a table").tables
    }


@pytest.mark.django_db
def test_export_then_import_round_trips_unchanged(source, tmp_path):
    for schema, text in docs_export(source=source).items():
        (tmp_path / f"{schema}.yaml").write_text(text)
    report = docs_import(source=source, paths=[tmp_path])
    assert report.created == [] and report.updated == []
    assert len(report.unchanged) == TableDoc.objects.filter(source=source).count()


@pytest.mark.django_db
def test_reference_flag_travels_through_export_and_import(source, tmp_path):
    """An admin's "this is a code dictionary" decision survives export → edit → import; a file that
    does not state it leaves the catalog's value alone."""
    doc = TableDoc.objects.get(source=source, name="d_labitems")
    doc.reference = False
    doc.save(update_fields=["reference"])
    exported = docs_export(source=source)["mimiciv_hosp"]
    labitems = next(t for t in parse_docs(exported) if t.name == "d_labitems")
    assert labitems.reference is False
    assert all(t.reference is None for t in parse_docs(exported) if t.name != "d_labitems")

    (tmp_path / "hosp.yaml").write_text(exported.replace("reference: false", "reference: true"))
    report = docs_import(source=source, paths=[tmp_path])
    doc.refresh_from_db()
    assert doc.reference is True and "mimiciv_hosp.d_labitems" in report.updated

    unstated = [t for t in read_docs([BUNDLED_DOCS]) if t.name == "d_labitems"]
    assert unstated[0].reference is None
    docs_import(source=source, tables=unstated)
    doc.refresh_from_db()
    assert doc.reference is True


def test_reference_flag_must_be_true_or_false():
    with pytest.raises(DocsError, match="reference must be true or false"):
        parse_docs(MINIMAL.replace("  - name: patients", "  - name: patients\n    reference: maybe"))


@pytest.mark.django_db
def test_import_keeps_history_of_the_text_it_replaces(source):
    doc = TableDoc.objects.get(source=source, name="patients")
    original = doc.description
    tables = [t for t in read_docs([BUNDLED_DOCS]) if t.name == "patients"]
    tables[0].description = "Rewritten by a curator."
    docs_import(source=source, tables=tables)
    doc.refresh_from_db()
    assert doc.description == "Rewritten by a curator."
    assert DocRevision.objects.filter(table=doc).latest("at").snapshot["description"] == original


@pytest.mark.django_db
def test_reembed_touches_only_docs_whose_text_changed(source):
    assert table_docs_reembed(source=source).embedded == 0
    doc = TableDoc.objects.get(source=source, name="admissions")
    table_doc_update(doc=doc, data={"synonyms": [*doc.synonyms, "inpatient episode"]})
    report = table_docs_reembed(source=source)
    assert report.embedded == 1 and report.skipped >= 10
    assert DocRevision.objects.filter(table=doc).exists()


@pytest.mark.django_db
def test_an_embedding_provider_that_is_down_marks_docs_stale_and_they_are_retried(source, settings):
    doc = TableDoc.objects.get(source=source, name="transfers")
    table_doc_update(doc=doc, data={"description": doc.description + " Also: ward moves."})
    with ScriptedLLM() as server:
        dead_url = server.base_url  # nothing listens there once the server stops
    settings.EMBEDDING_PROVIDER, settings.EMBEDDING_BASE_URL, settings.EMBEDDING_DIMS = (
        "openai",
        dead_url,
        384,
    )
    report = table_docs_reembed(source=source)
    doc.refresh_from_db()
    assert report.failed and "embedding endpoint failed" in doc.embedding_error
    assert "Also: ward moves." in doc.description  # the edit is kept
    settings.EMBEDDING_PROVIDER, settings.EMBEDDING_DIMS = "local", 384
    report = table_docs_reembed(source=source)
    doc.refresh_from_db()
    assert doc.embedding_error == "" and doc.qualified_name not in report.failed


@pytest.mark.django_db
def test_vectors_of_another_model_are_flagged_by_a_system_check(source, settings):
    assert catalog_checks.check_embeddings_match_provider() == []
    settings.EMBEDDING_PROVIDER, settings.EMBEDDING_DIMS = "openai", 1536
    warnings = catalog_checks.check_embeddings_match_provider()
    assert [w.id for w in warnings] == ["askdb.W002"] and "reembed --all" in warnings[0].hint


@pytest.mark.django_db
def test_introspection_keeps_curated_text_and_samples_low_cardinality_values(source):
    col = ColumnDoc.objects.get(table__source=source, table__name="admissions", name="admission_type")
    col.meaning, col.example_values = "Curated meaning.", ""
    col.save()
    report = source_introspect(source=source)
    col.refresh_from_db()
    assert col.meaning == "Curated meaning."
    assert col.example_values and col.value_index
    assert "mimiciv_hosp.admissions" in report.tables_seen and not report.tables_new


# ---------------------------------------------------------------- retrieval and values


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("question", "needed"),
    [
        ("What was the average creatinine of patients diagnosed with sepsis?",
         {"mimiciv_hosp.labevents", "mimiciv_hosp.d_labitems", "mimiciv_hosp.diagnoses_icd", "mimiciv_hosp.d_icd_diagnoses"}),
        ("What was the last heart rate recorded for patient 10000032?", {"mimiciv_icu.chartevents", "mimiciv_icu.d_items"}),
        ("How many patients received vancomycin?", {"mimiciv_hosp.prescriptions"}),
        ("How many people died in hospital in 2150?", {"mimiciv_hosp.admissions"}),
    ],
)  # fmt: skip
def test_retrieval_finds_every_needed_table(source, question, needed):
    got = {t.qualified for t in retrieve(source=source, question=question, k=5).tables}
    assert needed <= got, f"missing {needed - got}"


@pytest.mark.django_db
def test_value_linking_finds_real_values_and_codes(source):
    values = link_values(source=source, question="patients with sepsis and a high lactate")
    found = {(v.table, v.column) for v in values}
    assert ("mimiciv_hosp.d_icd_diagnoses", "long_title") in found
    lactate = next(v for v in values if v.table == "mimiciv_hosp.d_labitems")
    assert lactate.value.lower().startswith("lactate") and lactate.code
    assert ValueEntry.objects.filter(source=source, embedding__isnull=False).exists()


@pytest.mark.django_db
def test_semantic_value_search_answers_every_term_in_one_statement(source, django_assert_num_queries):
    """The terms of a question are searched together (one round trip), each with the values it
    would get alone, in the order of the terms; sensitive columns stay out."""
    from infra.adapters import catalog_search
    from infra.providers.embeddings import get_embedder

    embedder = get_embedder()
    terms = ["hgb", "lactate", "vanco"]
    vectors = embedder.embed(terms)

    def search(ts, vs):
        return catalog_search.values_semantic(source_id=source.pk, terms=ts, vectors=vs, model=embedder.model,
                                              floor=0.0)  # fmt: skip

    with django_assert_num_queries(1):
        together = search(terms, vectors)
    alone = [v for term, vector in zip(terms, vectors, strict=True) for v in search([term], [vector])]
    assert together == alone and [v.term for v in together] == sorted(
        (v.term for v in together), key=terms.index
    )
    assert len(together) == 2 * len(terms)  # per_term values each
    sensitive = set(
        ColumnDoc.objects.filter(table__source=source, sensitive=True).values_list("name", flat=True)
    )
    assert not {v.column for v in together} & sensitive


@pytest.mark.django_db
def test_retrieve_command_prints_json(source):
    out = StringIO()
    call_command("retrieve", "average hemoglobin by sex", "--json", stdout=out)
    payload = json.loads(out.getvalue())
    assert payload["tables"] and {"qualified", "score", "reasons"} <= set(payload["tables"][0])
    assert set(payload["timings_ms"]) == {"embed", "tables", "values"}


# ---------------------------------------------------------------- sources


@pytest.mark.django_db
def test_add_source_refuses_an_unreachable_database_with_one_line():
    with pytest.raises(CommandError, match="cannot use"):
        call_command("add_source", "broken", "--url", "postgresql://nobody@/nowhere?host=/nonexistent")
    assert not ClinicalSource.objects.filter(name="broken").exists()


@pytest.mark.django_db
def test_a_refresh_documents_a_table_the_loader_added_and_keeps_curated_text(source):
    """The lab test counts (a summary load_mimic adds) reach a catalog made before it existed;
    the docs a curator edited are not overwritten by the bundled ones."""
    from metadata_admin.services import clinical_source_refresh

    TableDoc.objects.filter(source=source, name="labevents_item_counts").delete()
    TableDoc.objects.filter(source=source, name="labevents").update(description="curated by us")
    clinical_source_refresh()
    doc = TableDoc.objects.get(source=source, schema_name="mimiciv_hosp", name="labevents_item_counts")
    assert doc.exists_in_source and [c.name for c in doc.columns.order_by("position")] == [
        "itemid",
        "n_events",
    ]
    assert {r.to_table.name for r in doc.relationships.all()} == {"d_labitems", "labevents"}
    assert TableDoc.objects.get(source=source, name="labevents").description == "curated by us"
