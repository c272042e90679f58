"""Catalog reads: retrieval of tables and linked values for a question, shaped for the pipeline."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.db.models import Count, Prefetch

from askdb.pipeline.retrieval import (
    Edge,
    LinkedValue,
    RankedTable,
    TableProfile,
    Weights,
    question_terms,
    rank_tables,
)
from infra.adapters import catalog_search
from infra.providers.embeddings import get_embedder
from metadata_admin.models import ClinicalSource, ColumnDoc, Relationship, TableDoc, content_hash
from metadata_admin.services import table_doc_embedding_text


@dataclass
class Retrieval:
    tables: list[RankedTable]
    values: list[LinkedValue]
    question_vector: list[float] = field(repr=False, default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def best_doc_score(self) -> float:
        return max((t.doc_score for t in self.tables), default=0.0)


def catalog_profiles(source: ClinicalSource) -> tuple[dict[str, TableProfile], list[Edge]]:
    docs = TableDoc.objects.filter(source=source, exists_in_source=True).only(
        "schema_name", "name", "synonyms"
    )
    profiles = {
        d.qualified_name: TableProfile(d.qualified_name, tuple(d.synonyms or ()), d.name.startswith("d_"))
        for d in docs
    }
    # values_list, not model instances: loading TableDoc rows would parse their vectors (slow).
    rows = Relationship.objects.filter(from_table__source=source).values_list(
        "from_table__schema_name",
        "from_table__name",
        "to_table__schema_name",
        "to_table__name",
        "column_pairs",
    )
    edges = [Edge(_q(fs, fn), _q(ts, tn), tuple(tuple(p) for p in pairs)) for fs, fn, ts, tn, pairs in rows]
    return profiles, edges


def _q(schema: str, name: str) -> str:
    return f"{schema}.{name}" if schema else name


def link_values(
    *, source: ClinicalSource, question: str, semantic: bool = True, embedder=None
) -> list[LinkedValue]:
    """Candidate database values the question mentions, best first, one per (table, column, value)."""
    terms = question_terms(question)
    found = catalog_search.values_fuzzy(source_id=source.pk, terms=terms)
    if semantic:
        matched = {lv.term for lv in found}
        # Only words the fuzzy search could not place: abbreviations and synonyms ("hgb", "abx").
        loose = [t for t in terms if t not in matched and " " not in t][:8]
        if loose:
            embedder = embedder or get_embedder()
            found += catalog_search.values_semantic(
                source_id=source.pk, terms=loose, vectors=embedder.embed(loose), model=embedder.model
            )
    best: dict[tuple[str, str, str], LinkedValue] = {}
    for lv in found:
        key = (lv.table, lv.column, lv.value)
        if key not in best or lv.score > best[key].score:
            best[key] = lv
    return sorted(best.values(), key=lambda lv: (-lv.score, lv.table, lv.value))[:20]


def retrieve(
    *,
    source: ClinicalSource,
    question: str,
    k: int = 5,
    question_vector: list[float] | None = None,
    example_tables: dict[str, float] | None = None,
    weights: Weights | None = None,
) -> Retrieval:
    """Top-k tables for a question (with join expansion) and the values it mentions."""
    timings: dict[str, float] = {}
    embedder = get_embedder()
    t0 = time.perf_counter()
    vector = question_vector or embedder.embed([question])[0]
    timings["embed"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    doc_scores = catalog_search.table_similarities(source_id=source.pk, vector=vector, model=embedder.model)
    profiles, edges = catalog_profiles(source)
    timings["tables"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    values = link_values(source=source, question=question, embedder=embedder)
    timings["values"] = (time.perf_counter() - t0) * 1000
    tables = rank_tables(
        question,
        doc_scores,
        profiles,
        linked_values=values,
        example_tables=example_tables,
        edges=edges,
        k=k,
        weights=weights,
    )
    return Retrieval(tables=tables, values=values, question_vector=vector, timings_ms=timings)


def current_embedding_model() -> str:
    # The embedder loads its weights lazily, so asking for its name costs nothing.
    return get_embedder().model


def table_doc_embedding_status(doc: TableDoc, *, model: str) -> str:
    """The doc's embedding: current, stale (text or model changed since embedding) or error: …"""
    if doc.embedding_error:
        return f"error: {doc.embedding_error[:120]}"
    if doc.embedding_model != model or doc.content_hash != content_hash(table_doc_embedding_text(doc)):
        return "stale"
    return "current"


@dataclass(frozen=True)
class TableRow:
    doc: TableDoc
    column_count: int
    status: str


def catalog_overview() -> list[tuple[ClinicalSource, list[TableRow]]]:
    """Every source with its documented tables, for the overview page."""
    model = current_embedding_model()
    columns = Prefetch("columns", queryset=ColumnDoc.objects.only("id", "table", "name", "position"))
    docs = TableDoc.objects.defer("embedding").prefetch_related(columns).annotate(n_columns=Count("columns"))
    out = []
    for source in ClinicalSource.objects.all():
        rows = [
            TableRow(doc=d, column_count=d.n_columns, status=table_doc_embedding_status(d, model=model))
            for d in docs.filter(source=source)
        ]
        out.append((source, rows))
    return out
