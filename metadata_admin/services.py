"""Schema catalog use cases: sources, curated docs, introspection, embeddings, the value index.

Views, admin actions, Celery tasks and management commands call these functions, so they
cannot disagree. Writes record an audit event in the same transaction; embedding (slow, may
call a remote provider) always happens outside any transaction.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.asof import AsOfExecutor
from core.match.template import DEFAULT_VALUE_COLUMNS
from core.types import CatalogSchema
from infra.adapters.clinical import ExecutionError, LiveTable, SqlExecutor, executor_for
from infra.audit.services import audit_record
from infra.providers.embeddings import EmbeddingError, get_embedder
from infra.queue import task_send
from metadata_admin.clinical import loader, synthetic
from metadata_admin.clinical import schema as clinical_schema
from metadata_admin.docs import (
    BUNDLED_DOCS,
    VALUE_COLUMNS,
    DocColumn,
    DocRelationship,
    DocTable,
    dump_docs,
    read_docs,
    table_doc_embedding_text,
)
from metadata_admin.models import (
    ClinicalSource,
    ColumnDoc,
    DocRevision,
    LinkableValue,
    Relationship,
    TableDoc,
    ValueEntry,
    content_hash,
)
from metadata_admin.signals import catalog_changed, docs_embedded, source_data_changed

log = logging.getLogger(__name__)

MIMIC_SCHEMAS = ("mimiciv_hosp", "mimiciv_icu")


# --------------------------------------------------------------------------- sources


def source_register(
    *,
    name: str,
    url: str,
    as_of: dt.datetime | None = None,
    description: str = "",
    actor=None,
    replace: bool = True,
) -> ClinicalSource:
    """Register (or update) a clinical source; the connection is tested before it is saved.

    replace=False refuses a name already registered (ValueError with the sentence to show): the
    `add_source` command asks for --replace, so a typo cannot silently repoint a live source."""
    if not replace and ClinicalSource.objects.filter(name=name).exists():
        raise ValueError(
            f"a clinical source named {name!r} already exists; pass --replace to point it at {url!r}"
            " (its catalog, library and history stay with it)"
        )
    engine = ClinicalSource.Engine.SQLITE if url.startswith("sqlite:") else ClinicalSource.Engine.POSTGRESQL
    probe = ClinicalSource(name=name, url=url, engine=engine)
    executor_for(probe.resolved_url(), engine=engine).ping()  # raises ExecutionError with a clear line
    with transaction.atomic():
        source, created = ClinicalSource.objects.update_or_create(
            name=name,
            defaults={
                "url": url,
                "engine": engine,
                "dialect": "sqlite" if engine == ClinicalSource.Engine.SQLITE else "postgres",
                "description": description,
                **({"as_of": as_of} if as_of else {}),
            },
        )
        audit_record(
            action="source.registered" if created else "source.updated",
            actor=actor,
            target=source,
            message=f"{name} ({engine})",
        )
    return source


def source_get(name: str | None = None) -> ClinicalSource:
    """The named source, or the default one (CLINICAL_SOURCE_NAME, else the only one)."""
    if name:
        try:
            return ClinicalSource.objects.get(name=name)
        except ClinicalSource.DoesNotExist:
            known = ", ".join(ClinicalSource.objects.values_list("name", flat=True)) or "none"
            raise ValueError(f"no clinical source named {name!r} (known: {known})") from None
    source = ClinicalSource.objects.filter(name=settings.CLINICAL_SOURCE_NAME).first()
    if source is None:
        sources = list(ClinicalSource.objects.all()[:2])
        if len(sources) != 1:
            raise ValueError(
                "no clinical source is registered; run `make demo` or `python manage.py add_source NAME --url URL`"
            )
        source = sources[0]
    return source


def source_schemas(source: ClinicalSource) -> tuple[str, ...]:
    names = TableDoc.objects.filter(source=source, exists_in_source=True).values_list(
        "schema_name", flat=True
    )
    return tuple(sorted({n for n in names if n}))


def source_executor(
    source: ClinicalSource,
    *,
    schemas: tuple[str, ...] | None = None,
    sensitive: bool = True,
    sensitive_columns: frozenset[str] | None = None,
) -> SqlExecutor:
    """The source's read-only executor. Every statement askdb runs on a source goes through it, so
    this is where "now" becomes the source's as-of time (core.asof). `schemas` (its
    search_path) when the caller knows them.

    `sensitive`: the access tier. True is the reader that may read every column (askdb's own reads,
    users with view_sensitive). False is the tier without view_sensitive, where the database itself
    refuses the catalog's sensitive columns: on PostgreSQL the restricted reader's login (column
    privileges, see source_reader_grants), on SQLite the authorizer. `sensitive_columns`: the
    "table.column" names the caller read from the catalog for this run (a run's privacy policy),
    so the SQLite tier is not read again; empty or None reads them (with the bundled docs' flags
    for a catalog without docs)."""
    search_path = source_schemas(source) if schemas is None else schemas
    url, hidden = source.resolved_url(), ()
    if not sensitive:
        if source.engine == ClinicalSource.Engine.SQLITE:
            hidden = tuple(sensitive_columns or (f"{t}.{c}" for _, t, c in source_sensitive_columns(source)))
        else:
            url = source.restricted_url() or url  # none configured: askdb.W011 says so
    executor = executor_for(url, engine=source.engine, search_path=search_path, hidden_columns=hidden)
    return AsOfExecutor(executor, dialect=source.dialect, as_of=source.as_of)


def source_sensitive_columns(source: ClinicalSource | None) -> list[tuple[str, str, str]]:
    """(schema, table, column) the catalog marks sensitive; for no source yet (data loaded before
    its docs), the bundled MIMIC-IV docs' flags, so the restricted tier is never granted them even
    for a moment."""
    if source is not None:
        rows = ColumnDoc.objects.filter(table__source=source, sensitive=True).values_list(
            "table__schema_name", "table__name", "name"
        )
        found = sorted((s, t, c) for s, t, c in rows)
        # One statement per question when the catalog marks any column: only a catalog that marks
        # none is asked whether it has docs at all.
        if found or ColumnDoc.objects.filter(table__source=source).exists():
            return found
    return sorted(
        (t.schema, t.name, c.name) for t in read_docs([BUNDLED_DOCS]) for c in t.columns if c.sensitive
    )


def source_reader_grants(source: ClinicalSource | None = None) -> dict[str, int]:
    """Grant each access tier's reader exactly its columns of the default clinical database: the
    reader of CLINICAL_DATABASE_URL every column, the one of CLINICAL_RESTRICTED_DATABASE_URL every
    column but the catalog's sensitive ones. Run at every data load and whenever the catalog's
    sensitive flags may have changed (the catalog_changed signal). Needs CLINICAL_ADMIN_DATABASE_URL
    (without it, or for another source, the DBA runs the README's grants). Returns role -> number
    of hidden columns; {} when there was nothing it could do."""
    admin_url = settings.CLINICAL_ADMIN_DATABASE_URL
    if source is not None and (
        source.engine != ClinicalSource.Engine.POSTGRESQL or source.url != "env:CLINICAL_DATABASE_URL"
    ):
        return {}
    full = urlparse(settings.CLINICAL_DATABASE_URL).username
    restricted = (
        urlparse(settings.CLINICAL_RESTRICTED_DATABASE_URL).username
        if settings.CLINICAL_RESTRICTED_DATABASE_URL
        else ""
    )
    if not admin_url or not full:
        return {}
    hidden = [f"{s}.{t}.{c}" for s, t, c in source_sensitive_columns(source)]
    tiers: dict[str, list[str]] = {full: []}
    if restricted and restricted != full:
        tiers[restricted] = hidden
    loader.grant_tiers(admin_url, tiers)
    return {role: len(cols) for role, cols in tiers.items()}


def source_catalog_schema(source: ClinicalSource) -> CatalogSchema:
    """The tables and columns generated SQL may use: what exists in the source and is documented."""
    from metadata_admin.selectors import catalog_snapshot  # local: selectors import this module

    return catalog_snapshot(source).schema


# --------------------------------------------------------------------------- docs


@dataclass
class DocsReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
            f"{len(self.warnings)} warnings"
        )


def table_doc_snapshot(doc: TableDoc) -> dict:
    return {
        "description": doc.description,
        "purpose": doc.purpose,
        "grain": doc.grain,
        "considerations": doc.considerations,
        "synonyms": doc.synonyms,
        "example_questions": doc.example_questions,
        "reference": doc.reference,
        "columns": [
            {
                "name": c.name,
                "type": c.data_type,
                "meaning": c.meaning,
                "example_values": c.example_values,
                "primary": c.is_primary_key,
                "foreign": c.is_foreign_key,
                "sensitive": c.sensitive,
                "value_index": c.value_index,
                "label": c.label,
                "unit": c.unit,
                "display_format": c.display_format,
            }
            for c in doc.columns.all()
        ],
    }


def _live_tables(source: ClinicalSource) -> dict[str, LiveTable] | None:
    try:
        return {t.qualified: t for t in source_executor(source).tables()}
    except ExecutionError as exc:
        log.warning("cannot read the live catalog of %s: %s", source.name, exc)
        return None


def docs_import(
    *,
    source: ClinicalSource,
    paths: Iterable[Path] | None = None,
    actor=None,
    tables: list[DocTable] | None = None,
) -> DocsReport:
    """Import curated YAML docs into the catalog. Curated text from the file wins; history is kept.

    A documented table that the live database lacks is kept but marked absent (retrieval skips
    it) and reported, so loading the data later needs no re-import. Raises DocsError for a
    broken file before anything is written.
    """
    tables = tables if tables is not None else read_docs(list(paths or [BUNDLED_DOCS]))
    live = _live_tables(source)
    report = DocsReport()
    with transaction.atomic():
        docs_by_name: dict[str, TableDoc] = {}
        for t in tables:
            exists = live is None or t.qualified in live
            if not exists:
                report.warnings.append(f"{t.qualified} is documented but not in source {source.name}")
            elif live is not None:
                live_cols = {c.name for c in live[t.qualified].columns}
                unknown = [c.name for c in t.columns if c.name not in live_cols]
                if unknown:
                    report.warnings.append(
                        f"{t.qualified}: documented columns not in the database: {', '.join(unknown)}"
                    )
            doc, created = TableDoc.objects.get_or_create(source=source, schema_name=t.schema, name=t.name)
            before = None if created else table_doc_snapshot(doc)
            doc.description, doc.purpose, doc.grain = t.description, t.purpose, t.grain
            doc.considerations, doc.synonyms, doc.example_questions = (
                t.considerations,
                t.synonyms,
                t.example_questions,
            )
            if t.reference is not None:
                doc.reference = t.reference
            doc.exists_in_source = exists
            if live is not None and exists:
                doc.row_count = live[t.qualified].row_estimate
            doc.save()
            _columns_apply(doc, t.columns, live[t.qualified] if live and exists else None)
            after = table_doc_snapshot(doc)
            if created:
                report.created.append(t.qualified)
            elif before != after:
                DocRevision.objects.create(
                    table=doc,
                    by=actor if getattr(actor, "pk", None) else None,
                    note="before import",
                    snapshot=before,
                )
                report.updated.append(t.qualified)
            else:
                report.unchanged.append(t.qualified)
            docs_by_name[t.qualified] = doc
        for t in tables:
            _relationships_apply(source, docs_by_name[t.qualified], t.relationships, report)
        audit_record(
            action="docs.imported",
            actor=actor,
            target=source,
            message=report.summary(),
            detail={"warnings": report.warnings[:50]},
        )
        catalog_changed.send(sender=ClinicalSource, source=source)
    return report


def _columns_apply(doc: TableDoc, columns: list[DocColumn], live: LiveTable | None) -> None:
    existing = {c.name: c for c in doc.columns.all()}
    order = [c.name for c in live.columns] if live else [c.name for c in columns]
    documented = {c.name: c for c in columns}
    live_types = {c.name: c.data_type for c in live.columns} if live else {}
    pk = set(live.primary_key) if live else set()
    for position, name in enumerate(order + [n for n in documented if n not in order]):
        dc = documented.get(name)
        col = existing.get(name) or ColumnDoc(table=doc, name=name)
        col.position = position
        col.data_type = live_types.get(name) or (dc.type if dc else col.data_type)
        if dc:
            col.meaning = dc.meaning or col.meaning
            col.example_values = dc.example_values or col.example_values
            col.is_primary_key = "primary" in dc.key or name in pk
            col.is_foreign_key = "foreign" in dc.key
            col.sensitive = dc.sensitive
            col.value_index = dc.value_index or col.value_index
        else:
            col.is_primary_key = name in pk
        col.save()


def _relationships_apply(
    source, doc: TableDoc, relationships: list[DocRelationship], report: DocsReport
) -> None:
    doc.relationships.all().delete()
    for rel in relationships:
        schema, _, name = rel.to.rpartition(".")
        target = TableDoc.objects.filter(source=source, schema_name=schema, name=name).first()
        if target is None:
            report.warnings.append(f"{doc.qualified_name}: relationship to unknown table {rel.to} ignored")
            continue
        Relationship.objects.create(
            from_table=doc, to_table=target, column_pairs=rel.on, kind=rel.kind, note=rel.note
        )


def docs_export(*, source: ClinicalSource) -> dict[str, str]:
    """YAML text per schema, in the bundled format (so export → edit → import round-trips)."""
    by_schema: dict[str, list[DocTable]] = {}
    docs = TableDoc.objects.filter(source=source).prefetch_related("columns", "relationships__to_table")
    for doc in docs:
        by_schema.setdefault(doc.schema_name, []).append(
            DocTable(
                schema=doc.schema_name,
                name=doc.name,
                description=doc.description,
                purpose=doc.purpose,
                grain=doc.grain,
                considerations=list(doc.considerations),
                synonyms=list(doc.synonyms),
                example_questions=list(doc.example_questions),
                columns=[
                    DocColumn(
                        name=c.name,
                        type=c.data_type,
                        meaning=c.meaning,
                        example_values=c.example_values,
                        key=", ".join(
                            k
                            for k, on in (("primary", c.is_primary_key), ("foreign", c.is_foreign_key))
                            if on
                        ),
                        sensitive=c.sensitive,
                        value_index=c.value_index,
                    )
                    for c in doc.columns.all()
                ],
                relationships=[
                    DocRelationship(to=r.to_table.qualified_name, on=r.column_pairs, kind=r.kind, note=r.note)
                    for r in doc.relationships.all()
                ],
                reference=doc.reference,
            )
        )
    return {schema or "main": dump_docs(tables) for schema, tables in by_schema.items()}


COLUMN_FIELDS = {"meaning": str, "example_values": str, "sensitive": bool, "label": str, "unit": str,
                 "display_format": str}  # fmt: skip


@transaction.atomic
def table_doc_update(*, doc: TableDoc, data: dict, actor=None, note: str = "edited") -> TableDoc:
    """Edit a table doc's curated fields, and optionally its columns' curated fields
    (`columns`: {name: {meaning, example_values, sensitive}}) and its joins (`relationships`:
    [{to_table: TableDoc, column_pairs: [[a, b], …], kind, note}], replacing the old ones).

    The previous text is kept as a revision; the doc is re-embedded in the worker when its
    embedded text changed; a change of joins is announced as a catalog change.
    """
    before = table_doc_snapshot(doc)
    for key in ("description", "purpose", "grain", "considerations", "synonyms", "example_questions"):
        if key in data:
            setattr(doc, key, data[key])
    doc.save()
    for column in doc.columns.all() if "columns" in data else ():
        changes = {k: kind(v) for k, v in (data["columns"].get(column.name) or {}).items()
                   if (kind := COLUMN_FIELDS.get(k)) is not None}  # fmt: skip
        if any(getattr(column, k) != v for k, v in changes.items()):
            for key, value in changes.items():
                setattr(column, key, value)
            column.save(update_fields=list(changes))
    joins_changed = "relationships" in data and _relationships_replace(doc, data["relationships"])
    DocRevision.objects.create(
        table=doc, by=actor if getattr(actor, "pk", None) else None, note=note, snapshot=before
    )
    audit_record(action="docs.edited", actor=actor, target=doc, message=doc.qualified_name,
                 detail={"joins_changed": joins_changed} if joins_changed else None)  # fmt: skip
    table_doc_schedule_embedding(doc)
    if joins_changed:
        catalog_changed.send(sender=ClinicalSource, source=doc.source)
    return doc


def _relationships_replace(doc: TableDoc, relationships: list[dict]) -> bool:
    """Replace a doc's joins; True when they changed."""

    def key(to_id, pairs, kind, note):
        return (to_id, tuple(tuple(p) for p in pairs), kind, note.strip())

    old = {key(r.to_table_id, r.column_pairs, r.kind, r.note) for r in doc.relationships.all()}
    new = {key(r["to_table"].pk, r["column_pairs"], r.get("kind") or Relationship.Kind.FOREIGN_KEY, r.get("note", ""))
           for r in relationships}  # fmt: skip
    if old == new:
        return False
    doc.relationships.all().delete()
    for to_id, pairs, kind, note in sorted(new, key=str):
        Relationship.objects.create(from_table=doc, to_table_id=to_id, column_pairs=[list(p) for p in pairs],
                                    kind=kind, note=note)  # fmt: skip
    return True


def table_doc_schedule_embedding(doc: TableDoc) -> None:
    """Re-embed in the worker after commit, and only when the embedded text changed."""
    if doc.content_hash == content_hash(table_doc_embedding_text(doc)) and not doc.embedding_error:
        return
    transaction.on_commit(lambda: task_send("metadata_admin.embed_table_doc", doc.pk))


# --------------------------------------------------------------------------- introspection


@dataclass
class IntrospectReport:
    tables_new: list[str] = field(default_factory=list)
    tables_seen: list[str] = field(default_factory=list)
    tables_gone: list[str] = field(default_factory=list)
    columns_new: int = 0

    def summary(self) -> str:
        return (
            f"{len(self.tables_seen)} tables ({len(self.tables_new)} new, {len(self.tables_gone)} no longer present), "
            f"{self.columns_new} new columns"
        )


LOW_CARDINALITY = 50  # text columns with at most this many distinct values get example values


def source_introspect(
    *,
    source: ClinicalSource,
    sample_values: bool = True,
    exact_counts: bool = False,
    actor=None,
    progress: Callable[[str], None] | None = None,
) -> IntrospectReport:
    """Read the live catalog into docs without overwriting curated text."""
    executor = executor_for(source.resolved_url(), engine=source.engine)
    live = executor.tables()
    if source.engine == ClinicalSource.Engine.POSTGRESQL:
        live = [t for t in live if t.schema != "public" or not any(x.schema != "public" for x in live)]
    report = IntrospectReport()
    samples: dict[tuple[str, str], str] = {}
    counts: dict[str, int | None] = {}
    for t in live:
        if progress:
            progress(t.qualified)
        counts[t.qualified] = (
            executor.count_rows(t.schema, t.name)
            if exact_counts or t.row_estimate in (None, 0)
            else t.row_estimate
        )
        if sample_values:
            samples.update(_low_cardinality_samples(executor, t))
    with transaction.atomic():
        seen = set()
        for t in live:
            doc, created = TableDoc.objects.get_or_create(source=source, schema_name=t.schema, name=t.name)
            (report.tables_new if created else report.tables_seen).append(t.qualified)
            if created:
                report.tables_seen.append(t.qualified)
            doc.exists_in_source = True
            doc.row_count = counts.get(t.qualified)
            doc.save()
            seen.add(doc.pk)
            report.columns_new += _columns_introspected(doc, t, samples)
            _foreign_keys_introspected(source, doc, t)
        gone = TableDoc.objects.filter(source=source, exists_in_source=True).exclude(pk__in=seen)
        report.tables_gone = [d.qualified_name for d in gone]
        gone.update(exists_in_source=False)
        audit_record(action="source.introspected", actor=actor, target=source, message=report.summary())
        catalog_changed.send(sender=ClinicalSource, source=source)
    return report


def _low_cardinality_samples(executor, t: LiveTable) -> dict[tuple[str, str], str]:
    """Example values of the table's text columns that hold few distinct values."""
    samples = {}
    for col in t.columns:
        if not any(k in col.data_type for k in ("char", "text")) or col.name in t.primary_key:
            continue
        try:
            values = executor.distinct_values(t.schema, t.name, col.name, limit=LOW_CARDINALITY + 1)
        except ExecutionError:
            continue
        if 0 < len(values) <= LOW_CARDINALITY:
            samples[(t.qualified, col.name)] = ", ".join(str(v)[:60] for v, _ in values[:12])
    return samples


def _columns_introspected(doc: TableDoc, t: LiveTable, samples: dict[tuple[str, str], str]) -> int:
    """The live table's columns onto the doc's (curated text kept); returns how many are new."""
    existing = {c.name: c for c in doc.columns.all()}
    fk_cols = {c for cols, _, _ in t.foreign_keys for c in cols}
    new = 0
    for position, col in enumerate(t.columns):
        cd = existing.get(col.name)
        if cd is None:
            cd = ColumnDoc(table=doc, name=col.name)
            new += 1
        cd.position, cd.data_type = position, col.data_type
        cd.is_primary_key = cd.is_primary_key or col.name in t.primary_key
        cd.is_foreign_key = cd.is_foreign_key or col.name in fk_cols
        sample = samples.get((t.qualified, col.name))
        if sample:
            cd.value_index = True
            if not cd.example_values:
                cd.example_values = sample
        cd.save()
    return new


def _foreign_keys_introspected(source: ClinicalSource, doc: TableDoc, t: LiveTable) -> None:
    """The database's foreign keys as relationships of the doc (those not documented yet)."""
    for cols, ref, ref_cols in t.foreign_keys:
        r_schema, _, r_name = ref.rpartition(".")
        target = TableDoc.objects.filter(source=source, schema_name=r_schema, name=r_name).first()
        pairs = [list(p) for p in zip(cols, ref_cols, strict=False)]
        if target and not doc.relationships.filter(to_table=target, column_pairs=pairs).exists():
            Relationship.objects.create(
                from_table=doc,
                to_table=target,
                column_pairs=pairs,
                kind=Relationship.Kind.FOREIGN_KEY,
                note="foreign key in the database",
            )


# --------------------------------------------------------------------------- embeddings


@dataclass
class ReembedReport:
    embedded: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)


def table_docs_reembed(
    *,
    source: ClinicalSource | None = None,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ReembedReport:
    """Embed docs whose text, model or dimension changed (all with force). Failures are kept
    on the doc (embedding_error) and retried next time, never lost."""
    embedder = get_embedder()
    docs = TableDoc.objects.prefetch_related("columns")
    if source is not None:
        docs = docs.filter(source=source)
    report = ReembedReport()
    pending = []
    for doc in docs:
        text = table_doc_embedding_text(doc)
        digest = content_hash(text)
        stale = (
            force
            or doc.embedding is None
            or doc.content_hash != digest
            or doc.embedding_model != embedder.model
        )
        if stale or doc.embedding_error:
            pending.append((doc, text, digest))
        else:
            report.skipped += 1
    for start in range(0, len(pending), 32):
        batch = pending[start : start + 32]
        try:
            vectors = embedder.embed([text for _, text, _ in batch])
        except EmbeddingError as exc:
            for doc, _, _ in batch:
                TableDoc.objects.filter(pk=doc.pk).update(embedding_error=str(exc)[:1000])
                report.failed.append(doc.qualified_name)
            continue
        for (doc, _, digest), vector in zip(batch, vectors, strict=True):
            TableDoc.objects.filter(pk=doc.pk).update(
                embedding=vector, embedding_model=embedder.model, content_hash=digest, embedding_error=""
            )
            report.embedded += 1
        if progress:
            progress(len(batch))
    sources = (
        [source] if source is not None else ClinicalSource.objects.filter(tables__isnull=False).distinct()
    )
    for s in sources:
        docs_embedded.send(sender=ClinicalSource, source=s)
    return report


def embeddings_mismatched() -> dict[str, int]:
    """Vectors made by another model or of another dimension than the configured provider's."""
    embedder_model = settings.EMBEDDING_MODEL or (
        "all-MiniLM-L6-v2" if settings.EMBEDDING_PROVIDER == "local" else "text-embedding-3-small"
    )
    dims = settings.EMBEDDING_DIMS
    out = {}
    with connection.cursor() as cur:
        for label, table in (
            ("table docs", "metadata_admin_tabledoc"),
            ("values", "metadata_admin_valueentry"),
        ):
            cur.execute(
                f"SELECT count(*) FROM {table} WHERE embedding IS NOT NULL "
                "AND (embedding_model <> %s OR vector_dims(embedding) <> %s)",
                [embedder_model, dims],
            )
            out[label] = cur.fetchone()[0]
    return out


# --------------------------------------------------------------------------- value index


@dataclass
class ValueIndexReport:
    columns: list[str] = field(default_factory=list)
    values: int = 0
    embedded: int = 0
    linkable: LinkableValuesReport | None = None


def value_index_build(
    *,
    source: ClinicalSource,
    per_column_limit: int = 20000,
    embed_limit: int = 3000,
    progress: Callable[[str], None] | None = None,
) -> ValueIndexReport:
    """Rebuild the distinct-value index of value-indexed columns (fuzzy for all, vectors for the
    most frequent `embed_limit` per column, which keeps CPU embedding time bounded)."""
    executor = source_executor(source)
    embedder = get_embedder()
    report = ValueIndexReport()
    columns = ColumnDoc.objects.filter(
        table__source=source, table__exists_in_source=True, value_index=True, sensitive=False
    )  # a sensitive column's values are never linked to questions nor put in a prompt
    for col in columns.select_related("table"):
        doc = col.table
        if progress:
            progress(f"{doc.qualified_name}.{col.name}")
        code_col = (
            VALUE_COLUMNS.get(doc.name, ("", ""))[1]
            if VALUE_COLUMNS.get(doc.name, ("",))[0] == col.name
            else ""
        )
        try:
            if code_col:
                rows = _values_with_code(executor, doc, col.name, code_col, per_column_limit)
            else:
                rows = [
                    (str(v), "", n)
                    for v, n in executor.distinct_values(
                        doc.schema_name, doc.name, col.name, limit=per_column_limit
                    )
                ]
        except ExecutionError as exc:
            log.warning("value index: %s.%s skipped: %s", doc.qualified_name, col.name, exc)
            continue
        rows = [(v.strip(), c, n) for v, c, n in rows if v and v.strip() and len(v) <= 300]
        vectors: list = []
        top = rows[:embed_limit]
        try:
            for start in range(0, len(top), 256):
                vectors.extend(embedder.embed([v for v, _, _ in top[start : start + 256]]))
        except EmbeddingError as exc:
            log.warning("value index: no vectors for %s.%s: %s", doc.qualified_name, col.name, exc)
            vectors = []
        with transaction.atomic():
            ValueEntry.objects.filter(source=source, table=doc, column=col.name).delete()
            ValueEntry.objects.bulk_create(
                [
                    ValueEntry(
                        source=source,
                        table=doc,
                        column=col.name,
                        value=v,
                        code=str(c or "")[:200],
                        frequency=n,
                        embedding=vectors[i] if i < len(vectors) else None,
                        embedding_model=embedder.model if i < len(vectors) else "",
                    )
                    for i, (v, c, n) in enumerate(rows)
                ],
                batch_size=2000,
            )
        report.columns.append(f"{doc.qualified_name}.{col.name}")
        report.values += len(rows)
        report.embedded += len(vectors)
    report.linkable = linkable_values_build(source=source)
    source_data_changed.send(sender=ClinicalSource, source=source)
    return report


@dataclass
class LinkableValuesReport:
    columns: list[str] = field(default_factory=list)
    values: int = 0
    failed: list[str] = field(default_factory=list)  # "table.column: why", the old values kept

    def summary(self) -> str:
        text = f"linkable values: {self.values:,} of {len(self.columns)} column(s)"
        return text + "".join(f"; NOT refreshed {f}" for f in self.failed)


def linkable_values_build(
    *, source: ClinicalSource, progress: Callable[[str], None] | None = None
) -> LinkableValuesReport:
    """Refresh the distinct values (with their row counts) of the source's linkable columns, the
    table value linking reads at question time instead of scanning the event tables.

    One GROUP BY per column, at load time, through the source's reader (PostgreSQL or SQLite alike).
    A column that fails keeps its previous values and is named in the report (and the log)."""
    executor = source_executor(source)
    report = LinkableValuesReport()
    docs = TableDoc.objects.filter(source=source, exists_in_source=True).defer("embedding")
    # Only columns the catalog knows the table has (SQLite reads an unknown "column" as a string).
    known = {
        (str(t), c.lower())
        for t, c in ColumnDoc.objects.filter(table__in=docs).values_list("table_id", "name")
    }
    for doc in docs.order_by("schema_name", "name"):
        wanted = (c for t, c in DEFAULT_VALUE_COLUMNS if t == doc.name.lower() and (str(doc.pk), c) in known)
        for column in sorted(wanted):
            label = f"{doc.qualified_name}.{column}"
            if progress:
                progress(label)
            try:
                rows = executor.distinct_values(
                    doc.schema_name, doc.name, column, limit=settings.ASKDB_LINKABLE_VALUES_MAX
                )
            except ExecutionError as exc:
                log.warning("linkable values: %s not refreshed: %s", label, exc.message)
                report.failed.append(f"{label}: {exc.message}")
                continue
            key = f"{doc.name}.{column}".lower()
            with transaction.atomic():
                LinkableValue.objects.filter(source=source, key=key).delete()
                LinkableValue.objects.bulk_create(
                    [
                        LinkableValue(
                            source=source,
                            table=doc.qualified_name,
                            column=column,
                            key=key,
                            value=str(v),
                            frequency=n,
                        )
                        for v, n in rows
                        if v is not None and str(v).strip()
                    ],
                    batch_size=5000,
                )
            report.columns.append(label)
            report.values += len(rows)
    return report


def _values_with_code(
    executor, doc: TableDoc, column: str, code_col: str, limit: int
) -> list[tuple[str, str, int]]:
    """Dictionary tables: each label with its code (itemid, icd_code); frequency is 1 per row."""
    sql = (
        f'SELECT "{column}", string_agg(DISTINCT "{code_col}"::text, \',\'), count(*) FROM '
        f'{doc.qualified_name} WHERE "{column}" IS NOT NULL GROUP BY "{column}" ORDER BY count(*) DESC LIMIT {int(limit)}'
    )
    if executor.dialect == "sqlite":
        sql = sql.replace("string_agg(DISTINCT", "group_concat(DISTINCT").replace("::text, ','", "")
    result = executor.execute(sql, timeout_s=120, row_cap=limit)
    return [(str(v), str(c)[:200] if c is not None else "", int(n)) for v, c, n in result.rows]


# --------------------------------------------------------------------------- demo data


def clinical_demo_ensure(*, stdout=None, patients: int = 100, seed: int = 42) -> str:
    """Make the demo source answerable: data loaded, docs imported, embeddings and values indexed.

    Loads real MIMIC-IV from MIMIC_DIR when set, else deterministic synthetic data. Each step is
    skipped when already done, so a second `make demo` is quick.
    """
    write = (lambda s: stdout.write(s)) if stdout else (lambda s: None)
    admin_url = settings.CLINICAL_ADMIN_DATABASE_URL
    if not admin_url:
        raise ValueError(
            "CLINICAL_ADMIN_DATABASE_URL is needed to load demo data into an external clinical database"
        )
    loaded = loader.loaded_tables(admin_url)
    mimic_dir = os.environ.get("MIMIC_DIR")
    if not any(n.startswith("mimiciv_hosp.") and rows for n, rows in loaded.items()):
        if mimic_dir:
            write(f"loading MIMIC-IV from {mimic_dir} …")
            release = Path(mimic_dir)
            as_of = None
        else:
            release = settings.ASKDB_HOME / "demo-data"
            write(f"generating synthetic MIMIC-IV-shaped data ({patients} patients, seed {seed}) …")
            result = synthetic.generate(release, patients=patients, seed=seed)
            as_of = getattr(result, "as_of", None) or synthetic.AS_OF
            if as_of is not None and as_of.tzinfo is None:
                as_of = as_of.replace(tzinfo=dt.UTC)
        report = clinical_release_load(release, dsn=admin_url, progress=False)
        if report.failed:
            raise ValueError(
                "demo data failed to load: " + "; ".join(f"{r.name}: {r.message}" for r in report.failed)
            )
    else:
        as_of = None
    return clinical_source_refresh(
        as_of=as_of,
        description="MIMIC-IV" if mimic_dir else "Synthetic MIMIC-IV-shaped demo data",
        stdout=stdout,
    )


def clinical_source_refresh(
    *, as_of: dt.datetime | None = None, description: str = "", force_values: bool = False, stdout=None
) -> str:
    """After data changed: register the default source if needed, import the bundled docs where
    there are none (else refresh which tables exist), embed stale docs, (re)build the value index."""
    write = (lambda s: stdout.write(s)) if stdout else (lambda s: None)
    source = ClinicalSource.objects.filter(name=settings.CLINICAL_SOURCE_NAME).first()
    if source is None:
        source = source_register(
            name=settings.CLINICAL_SOURCE_NAME, url="env:CLINICAL_DATABASE_URL", description=description
        )
    if source.as_of is None or as_of:
        source.as_of = as_of or _latest_event(source) or timezone.now()
        source.save(update_fields=["as_of"])
    if not TableDoc.objects.filter(source=source).exists():
        write("importing curated table documentation …")
        docs_import(source=source)
    else:
        present = {t.qualified for t in source_executor(source).tables()}
        changed = _bundled_docs_of_new_tables(source, present, write)
        for doc in TableDoc.objects.filter(source=source):
            if doc.exists_in_source != (doc.qualified_name in present):
                TableDoc.objects.filter(pk=doc.pk).update(exists_in_source=doc.qualified_name in present)
                changed = True
        if changed:  # the schema changed under the library: check its examples still hold
            catalog_changed.send(sender=ClinicalSource, source=source)
    if TableDoc.objects.filter(source=source, embedding__isnull=True).exists():
        write("embedding table documentation …")
        table_docs_reembed(source=source)
    if force_values or not ValueEntry.objects.filter(source=source).exists():
        write("indexing values for value linking …")
        linkable = value_index_build(source=source).linkable
    else:  # the data may have changed: the values questions link to follow it
        linkable = linkable_values_build(source=source)
    problems = f"\n{linkable.summary()}" if linkable is not None and linkable.failed else ""
    source_reader_grants(source)  # the docs' sensitive flags are known now
    source_data_changed.send(sender=ClinicalSource, source=source)
    tables = TableDoc.objects.filter(source=source, exists_in_source=True).count()
    return f"source {source.name}: {tables} tables, as of {source.as_of:%Y-%m-%d}{problems}"


def _bundled_docs_of_new_tables(source: ClinicalSource, present: set[str], write) -> bool:
    """Import the bundled documentation of tables the catalog has never documented that the data now
    has (a summary the loader added after the catalog was made), leaving curated docs untouched."""
    known = {f"{s}.{n}" for s, n in TableDoc.objects.filter(source=source).values_list("schema_name", "name")}
    new = [t for t in read_docs([BUNDLED_DOCS]) if t.qualified not in known and t.qualified in present]
    if new:
        write(f"importing the documentation of {', '.join(t.qualified for t in new)} …")
        docs_import(source=source, tables=new)
    return bool(new)


def clinical_release_load(
    path: Path,
    *,
    dsn: str,
    replace: bool = False,
    progress: bool = True,
    tables: list[str] | None = None,
    out=None,
):
    """Load a MIMIC-IV-layout release and let the read-only role read what was loaded.

    Returns the loader's report; a failed table is in `report.failed`, nothing of it kept.
    Raises loader.LoadError when the release itself is unusable."""
    report = loader.load_release(path, dsn=dsn, replace=replace, progress=progress, tables=tables,
                                 out=out or (lambda s: None))  # fmt: skip
    source = ClinicalSource.objects.filter(url="env:CLINICAL_DATABASE_URL").first()
    if dsn != settings.CLINICAL_ADMIN_DATABASE_URL or not source_reader_grants(source):
        loader.grant_read(dsn, urlparse(settings.CLINICAL_DATABASE_URL).username or "askdb_reader")
    return report


def clinical_indexes_build(*, dsn: str, tables: list[str] | None = None, out=None) -> list:
    """`load_mimic --indexes-only`: the indexes and summaries a database loaded by other means lacks.
    A summary it creates is a new relation: the reader may read it, and the default source's
    catalog documents it (so the library's SQL that reads it validates)."""
    results = loader.build_indexes(dsn, tables=tables, out=out or (lambda s: None))
    summaries = {s.name for s in clinical_schema.SUMMARIES}
    if any(r.status == "created" and r.name in summaries for r in results):
        default = dsn == settings.CLINICAL_ADMIN_DATABASE_URL
        if default and ClinicalSource.objects.filter(url="env:CLINICAL_DATABASE_URL").exists():
            clinical_source_refresh()  # imports the new table's docs, then grants by its sensitive flags
        else:
            loader.grant_read(dsn, urlparse(settings.CLINICAL_DATABASE_URL).username or "askdb_reader")
    return results


def _latest_event(source: ClinicalSource) -> dt.datetime | None:
    """MIMIC's 'now': the last discharge in the data (dates are shifted per patient)."""
    try:
        result = source_executor(source).execute(
            "SELECT max(dischtime) FROM mimiciv_hosp.admissions", timeout_s=30, row_cap=1
        )
    except ExecutionError:
        return None
    value = result.rows[0][0] if result.rows else None
    if not value:
        return None
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
