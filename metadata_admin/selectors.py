"""Catalog reads: retrieval of tables and linked values for a question, shaped for the pipeline."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Count, Prefetch, Q

from core.labels import ColumnLabel, draft_label
from core.retrieval import (
    Edge,
    LinkedValue,
    RankedTable,
    TableProfile,
    Weights,
    content_words,
    question_terms,
    rank_tables,
    value_is_mentioned,
)
from core.types import CatalogSchema, ColumnContext, TableContext, TableSchema
from infra.adapters import catalog_search
from infra.providers.embeddings import get_embedder
from metadata_admin.clinical import schema as mimic_schema
from metadata_admin.docs import table_doc_embedding_text
from metadata_admin.models import (
    ClinicalSource,
    ColumnDoc,
    LinkableValue,
    Relationship,
    TableDoc,
    content_hash,
)


@dataclass
class Retrieval:
    tables: list[RankedTable]
    values: list[LinkedValue]
    question_vector: list[float] = field(repr=False, default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def best_doc_score(self) -> float:
        return max((t.doc_score for t in self.tables), default=0.0)


# --------------------------------------------------------------------------- catalog snapshot


@dataclass(frozen=True)
class CatalogSnapshot:
    """What every question reads from a source's catalog, built once per catalog state.

    The catalog changes rarely and every question needs all of it (the schema validation checks
    against, the ranking profiles and join edges, the table contexts of the prompt), so it is
    loaded once per process and reused until `stamp` says a doc, column or relationship changed.
    """

    source_id: int
    stamp: str  # changes with any insert, update or delete of the source's catalog rows
    schema: CatalogSchema  # the tables and columns generated SQL may use
    profiles: dict[str, TableProfile]
    edges: list[Edge]
    contexts: dict[str, TableContext]  # qualified name -> the table as the prompt shows it
    schemas: tuple[str, ...]  # the source's schema names (the executor's search_path)
    version: str  # a fingerprint of the embedded documentation (a run's catalog_version)
    # qualified name (lower case) -> rows, as the last introspection counted them: how big a
    # query is before it runs, and why one ran out of time
    row_counts: dict[str, int | None] = field(default_factory=dict)

    def table_contexts(self, tables: list[str]) -> list[TableContext]:
        return [self.contexts[t] for t in tables if t in self.contexts]


_SNAPSHOTS_MAX = 16
_snapshots: dict[tuple[int, str], CatalogSnapshot] = {}
_snapshots_lock = threading.Lock()


def catalog_stamp(source: ClinicalSource) -> str:
    """One cheap query that changes whenever the source's catalog does. PostgreSQL writes every
    update as a new row version: its xmin (the writing transaction) differs from any earlier
    transaction's, and its ctid (where it is stored) from the version it replaced within the same
    transaction, so any insert, update or delete of a table doc, column doc or relationship (ORM,
    admin, bulk update or raw SQL alike) changes the digest."""
    docs, cols, rels = TableDoc._meta.db_table, ColumnDoc._meta.db_table, Relationship._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT count(*) || ':' || coalesce(md5(string_agg(k, ',' ORDER BY k)), '') FROM (
                SELECT 't' || d.id || '.' || d.xmin::text || d.ctid::text AS k FROM {docs} d WHERE d.source_id = %s
                UNION ALL
                SELECT 'c' || c.id || '.' || c.xmin::text || c.ctid::text FROM {cols} c
                  JOIN {docs} d ON d.id = c.table_id WHERE d.source_id = %s
                UNION ALL
                SELECT 'r' || r.id || '.' || r.xmin::text || r.ctid::text FROM {rels} r
                  JOIN {docs} d ON d.id = r.from_table_id WHERE d.source_id = %s
            ) rows
            """,
            [source.pk, source.pk, source.pk],
        )
        return cur.fetchone()[0]


def catalog_snapshot(source: ClinicalSource) -> CatalogSnapshot:
    """The source's catalog as of now: one stamp query when nothing changed since the last
    question in this process, a full load (five queries) when something did."""
    stamp = catalog_stamp(source)
    key = (source.pk, source.dialect)
    cached = _snapshots.get(key)
    if cached is not None and cached.stamp == stamp:
        return cached
    snapshot = _snapshot_load(source, stamp)
    with _snapshots_lock:
        if len(_snapshots) >= _SNAPSHOTS_MAX:
            _snapshots.clear()
        _snapshots[key] = snapshot
    return snapshot


def _snapshot_load(source: ClinicalSource, stamp: str) -> CatalogSnapshot:
    relationships = Prefetch(
        "relationships",
        queryset=Relationship.objects.select_related("to_table").defer("to_table__embedding"),
    )
    docs = list(
        TableDoc.objects.filter(source=source, exists_in_source=True)
        .defer("embedding")
        .prefetch_related("columns", relationships)
        .order_by("schema_name", "name")
    )
    tables, profiles, contexts = [], {}, {}
    for d in docs:
        columns = list(d.columns.all())
        tables.append(TableSchema(schema=d.schema_name, name=d.name, columns=tuple(c.name for c in columns)))
        profiles[d.qualified_name] = TableProfile(
            d.qualified_name, tuple(d.synonyms or ()), d.name.startswith("d_")
        )
        contexts[d.qualified_name] = _table_context(d, columns)
    # Join edges of every doc of the source, present or not, as ranking always read them.
    rows = Relationship.objects.filter(from_table__source=source).values_list(
        "from_table__schema_name",
        "from_table__name",
        "to_table__schema_name",
        "to_table__name",
        "column_pairs",
    )
    edges = [Edge(_q(fs, fn), _q(ts, tn), tuple(tuple(p) for p in pairs)) for fs, fn, ts, tn, pairs in rows]
    digest = hashlib.sha256("|".join(d.content_hash for d in docs).encode()).hexdigest()
    return CatalogSnapshot(
        source_id=source.pk,
        stamp=stamp,
        schema=CatalogSchema(tables=tuple(tables), dialect=source.dialect),
        profiles=profiles,
        edges=edges,
        contexts=contexts,
        schemas=tuple(sorted({d.schema_name for d in docs if d.schema_name})),
        version=digest[:12],
        row_counts={d.qualified_name.lower(): d.row_count for d in docs},
    )


def _table_context(d: TableDoc, columns: list[ColumnDoc]) -> TableContext:
    joins = []
    for r in d.relationships.all():
        on = " AND ".join(f"{d.name}.{a} = {r.to_table.name}.{b}" for a, b in r.column_pairs)
        joins.append(f"{r.to_table.qualified_name} ON {on}" + (f" — {r.note}" if r.note else ""))
    return TableContext(
        qualified=d.qualified_name,
        description=d.description,
        purpose=d.purpose,
        grain=d.grain,
        considerations=tuple(d.considerations),
        synonyms=tuple(d.synonyms),
        columns=tuple(
            ColumnContext(
                name=c.name,
                type=c.data_type,
                meaning=c.meaning,
                example_values=c.example_values,
                key="PK" if c.is_primary_key else ("FK" if c.is_foreign_key else ""),
                sensitive=c.sensitive,
            )
            for c in columns
        ),
        joins=tuple(joins),
    )


def _q(schema: str, name: str) -> str:
    return f"{schema}.{name}" if schema else name


def link_values(
    *, source: ClinicalSource, question: str, semantic: bool = True, embedder=None, stamp: str | None = None
) -> list[LinkedValue]:
    """Candidate database values the question mentions, best first, one per (table, column, value).
    `stamp`: the catalog's stamp the caller read already (catalog_stamp), for catalog_vocabulary."""
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
    common = catalog_vocabulary(source=source, stamp=stamp)
    best: dict[tuple[str, str, str], LinkedValue] = {}
    for lv in found:
        if not value_is_mentioned(question, lv, common):
            continue
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
    snapshot: CatalogSnapshot | None = None,
) -> Retrieval:
    """Top-k tables for a question (with join expansion) and the values it mentions. Pass the
    question's vector and the run's catalog snapshot when the caller already has them."""
    timings: dict[str, float] = {}
    embedder = get_embedder()
    t0 = time.perf_counter()
    vector = question_vector or embedder.embed([question])[0]
    timings["embed"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    doc_scores = catalog_search.table_similarities(source_id=source.pk, vector=vector, model=embedder.model)
    snapshot = snapshot or catalog_snapshot(source)
    profiles, edges = snapshot.profiles, snapshot.edges
    timings["tables"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    values = link_values(source=source, question=question, embedder=embedder, stamp=snapshot.stamp)
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


def reference_tables(source: ClinicalSource, identifier_columns: Iterable[str]) -> frozenset[str]:
    """Unqualified lower-case names of the source's reference tables (code dictionaries, which
    describe codes, not patients): a table's `reference` flag, or when unset its kind, i.e. none of
    its known columns is one of `identifier_columns`. A name two schemas share counts only if both are."""
    identifiers = [c.lower() for c in identifier_columns]
    tables = TableDoc.objects.filter(source=source).annotate(
        n_columns=Count("columns"), n_identifiers=Count("columns", filter=Q(columns__name__in=identifiers))
    )
    verdicts: dict[str, bool] = {}
    for doc in tables.only("name", "reference"):
        if doc.reference is None:  # a table of unknown columns is not reference data
            is_reference = doc.n_columns > 0 and doc.n_identifiers == 0
        else:
            is_reference = doc.reference
        name = doc.name.lower()
        verdicts[name] = verdicts.get(name, True) and is_reference
    return frozenset(name for name, ok in verdicts.items() if ok)


def indexed_columns(doc: TableDoc) -> frozenset[str]:
    """The columns of a MIMIC-IV table that askdb's loader indexes (leading column of a key or
    index): shown on the curation page, because a question filtering on any other column of a
    large event table reads all of it. Empty for a table outside the MIMIC-IV layout."""
    try:
        table = mimic_schema.table(doc.qualified_name)
    except KeyError:
        return frozenset()
    return mimic_schema.indexed_columns(table)


# --------------------------------------------------------------------------- linkable values


def _like_pattern(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def linkable_values_like(
    *, source: ClinicalSource, table_column: str, text: str, timeout_s: float, limit: int = 200
) -> list[tuple[str, int]] | None:
    """(value, rows) of one linkable column's kept values equal to or containing `text`: an exact
    (case-insensitive) value first, then by frequency. None when the loader keeps no values of that
    column (the caller then says so). Read from LinkableValue through its trigram index, within
    `timeout_s`; a timeout raises django.db.OperationalError (the caller reports it)."""
    table, _, column = table_column.rpartition(".")
    key = f"{table.rpartition('.')[2]}.{column}".lower()
    with transaction.atomic(), connection.cursor() as cur:
        # SET LOCAL: the limit ends with this transaction (and with its rollback on a timeout).
        cur.execute(
            "SELECT set_config('statement_timeout', %s, true)", [f"{max(1, int(timeout_s * 1000))}ms"]
        )
        cur.execute(
            "SELECT value, frequency FROM metadata_admin_linkablevalue "
            "WHERE source_id = %s AND key = %s AND value ILIKE %s "
            "ORDER BY lower(value) = lower(%s) DESC, frequency DESC, value LIMIT %s",
            [source.pk, key, _like_pattern(text.strip()), text.strip(), limit],
        )
        rows = cur.fetchall()
        if not rows and not LinkableValue.objects.filter(source=source, key=key).exists():
            return None
    return [(v, int(n)) for v, n in rows]


def linkable_values_all(*, source: ClinicalSource) -> dict[str, list[str]]:
    """Every kept value of the source's linkable columns, by "schema.table.column" (as the source
    names the table): the value index the matcher reads a question against."""
    out: dict[str, list[str]] = {}
    rows = LinkableValue.objects.filter(source=source).order_by("table", "column", "-frequency", "value")
    for table, column, value in rows.values_list("table", "column", "value").iterator(chunk_size=20_000):
        out.setdefault(f"{table}.{column}", []).append(value)
    return out


def column_labels(*, source: ClinicalSource, tables: list[str]) -> dict[str, ColumnLabel]:
    """The display label, unit and format of every column of these tables (bare table names), by
    column name: the curated ones, else the draft from the name and meaning (core/labels.py).
    A name in several tables takes the first curated label."""
    out: dict[str, ColumnLabel] = {}
    columns = (
        ColumnDoc.objects.filter(table__source=source, table__name__in=[t.lower() for t in tables])
        .select_related("table")
        .order_by("-label", "table__name", "position")
        .only("name", "meaning", "label", "unit", "display_format", "table__name")
    )
    for c in columns:
        key = c.name.lower()
        if key in out:
            continue
        draft = draft_label(c.name, c.meaning, table=c.table.name)
        # A spreadsheet reads a header starting with "=", "+", "-" or "@" as a formula: never write one.
        label = (c.label or "").lstrip("=+-@ \t\r\n") or draft.label
        out[key] = ColumnLabel(
            c.name, label, c.unit.lstrip("=+-@ ") or draft.unit, c.display_format or draft.format
        )
    return out


COMMON_IN_DOCS = 3  # docs (a table's, or a column's meaning) that use a word before it is everyday
_VOCABULARY: dict[int, tuple[str, frozenset[str]]] = {}
_VOCABULARY_LOCK = threading.Lock()


def catalog_vocabulary(*, source: ClinicalSource, stamp: str | None = None) -> frozenset[str]:
    """The words a source's documentation uses again and again (in descriptions, purposes,
    grains, synonyms, column names and meanings): the everyday words of this schema, against
    which value linking judges whether a question's word names a value or just talks about the
    data. Cached per process until the catalog changes: `stamp` is the catalog_stamp a run read
    already (it changes with any table or column doc, so no query here); without it, one query."""
    stamp = stamp or catalog_stamp(source)
    with _VOCABULARY_LOCK:
        cached = _VOCABULARY.get(source.pk)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    # A word is everyday when several docs use it ("care", "stay", "unit"); a clinical term one
    # table's doc names as an example ("sodium", "GCS") is still a term.
    seen: Counter[str] = Counter()
    for row in TableDoc.objects.filter(source=source).values_list(
        "name", "description", "purpose", "grain", "synonyms"
    ):
        seen.update(set(content_words(" ".join(str(part) for part in row).replace("_", " "))))
    for row in ColumnDoc.objects.filter(table__source=source).values_list("name", "meaning"):
        seen.update(set(content_words(" ".join(row).replace("_", " "))))
    words = {w for w, n in seen.items() if n >= COMMON_IN_DOCS}
    vocabulary = frozenset(words)
    with _VOCABULARY_LOCK:
        _VOCABULARY[source.pk] = (stamp, vocabulary)
    return vocabulary
