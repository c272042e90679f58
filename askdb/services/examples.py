"""The example library: add or merge verified pairs, retire or restore them, re-validate them
after catalog changes."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from askdb.adapters.library_cache import (
    LIBRARY,
    example_template,
    library_entries,
    library_version,
)
from askdb.models import Example, LibraryGeneration, Review
from askdb.services.sql import ReviewError, sql_check
from core.match import template_is_current
from infra.adapters import catalog_search
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from infra.queue import task_send
from metadata_admin.selectors import catalog_snapshot
from metadata_admin.services import source_executor


def _normalized(text: str) -> str:
    """Text compared for duplicates: case, spacing and punctuation ignored ("?" and ";" alike)."""
    return " ".join(re.sub(r"[^\w'%.*<>=!-]+", " ", text.lower()).split()).rstrip(".")


def example_upsert(
    *,
    source,
    question: str,
    sql: str,
    kind: str = "answerable",
    approved_by=None,
    origin: str = "review",
    origin_run=None,
    note: str = "",
    vector: list[float] | None = None,
    defer_embedding: bool = False,
):
    """Add a verified pair to the library, or merge it into its near-duplicate.

    `defer_embedding` (reviews in a web request): the example is saved at once without its
    vector, and a worker embeds it and merges it into a near-duplicate (`example_embed`), so no
    request ever waits for the embedding model to load. An exact duplicate is merged at once.

    A near-duplicate is the same question (normalized), or a question at least
    ASKDB_EXAMPLE_MERGE_SIMILARITY close with the same SQL: merging keeps one example (the newest
    SQL and approver) and remembers the other wording as a paraphrase, so the few-shot slots are
    not spent on one question asked three ways.
    """
    question = " ".join(question.split())
    parsed_tables: list[str] = []
    parsed_columns: list[str] = []
    if kind == Example.Kind.ANSWERABLE:
        validated, _ = sql_check(source=source, sql=sql, execute=False)
        sql, parsed_tables, parsed_columns = validated.sql, list(validated.tables), list(validated.columns)
    else:
        sql = ""
    same = Example.objects.filter(source=source, kind=kind).exclude(status=Example.Status.RETIRED)
    duplicate = next((e for e in same.filter(question__iexact=question)), None)
    model = ""
    if duplicate is None and not (defer_embedding and vector is None):
        embedder = get_embedder()
        vector, model = vector or embedder.embed([question])[0], embedder.model
        duplicate = _near_duplicate(source=source, kind=kind, sql=sql, vector=vector, model=model)
    if duplicate is not None:
        return _example_merge(duplicate, question=question, sql=sql, tables=parsed_tables, columns=parsed_columns,
                              approved_by=approved_by, note=note)  # fmt: skip
    now = timezone.now()
    example = Example(
        source=source, question=question, sql=sql, kind=kind, tables=parsed_tables, columns=parsed_columns,
        embedding=vector if model else None, embedding_model=model, origin=origin, origin_run=origin_run,
        approved_by=approved_by, approved_at=now, note=note, validated_at=now,
    )  # fmt: skip
    example.template = example_template(example)
    example.save()
    audit_record(action="example.created", actor=approved_by, target=example, message=question[:500],
                 detail={"kind": kind, "origin": origin, "tables": parsed_tables})  # fmt: skip
    if not model:
        transaction.on_commit(lambda: _embed_later(example.pk))
    return example


def _near_duplicate(
    *, source, kind: str, sql: str, vector: list[float], model: str, exclude: int | None = None
):
    """A library example this close to the question with the same SQL, or None."""
    for example_id, score in catalog_search.examples_nearest(
        source_id=source.pk, vector=vector, model=model, k=4, kinds=(kind,)
    ):
        if score < settings.ASKDB_EXAMPLE_MERGE_SIMILARITY:
            break
        if example_id == exclude:
            continue
        candidate = Example.objects.get(pk=example_id)
        if _normalized(candidate.sql) == _normalized(sql):
            return candidate
    return None


def _example_merge(
    duplicate, *, question: str, sql: str, tables: list, columns: list, approved_by, note: str
):
    _merge_fields(duplicate, question=question, sql=sql, tables=tables, columns=columns,
                  approved_by=approved_by, note=note)  # fmt: skip
    duplicate.save()
    audit_record(action="example.merged", actor=approved_by, target=duplicate, message=question[:500])
    return duplicate


def _merge_fields(
    duplicate, *, question: str, sql: str, tables: list, columns: list, approved_by, note: str
) -> None:
    """A merge, in memory: the other wording becomes a paraphrase, the newest SQL and approver win
    (a bulk import merges many before writing any)."""
    now = timezone.now()
    if _normalized(duplicate.question) != _normalized(question) and question not in duplicate.paraphrases:
        duplicate.paraphrases = [*duplicate.paraphrases, question]
    new_sql = sql != duplicate.sql
    rebuild = new_sql or not template_is_current(duplicate.template)
    duplicate.sql, duplicate.tables, duplicate.columns = sql, tables, columns
    duplicate.approved_by, duplicate.approved_at = approved_by, now
    duplicate.status, duplicate.validation_error, duplicate.validated_at = Example.Status.ACTIVE, "", now
    duplicate.note = note or duplicate.note
    if rebuild:  # the template depends only on the question and the SQL
        duplicate.template = example_template(duplicate)
    if new_sql:
        duplicate.answers_as_is = None  # what it answered was of the old SQL


def _embed_later(example_id: int) -> None:
    try:
        task_send("askdb.embed_example", example_id)  # askdb.tasks.embed_example
    except Exception:  # no broker (a management command on a stopped demo): embed inline
        example_embed(example_id=example_id)


def example_embed(*, example_id: int):
    """Embed an example saved without its vector (in the worker), then merge it into a
    near-duplicate if the library already holds one with the same SQL."""
    with transaction.atomic():
        example = Example.objects.select_for_update().filter(pk=example_id, embedding_model="").first()
        if example is None:  # embedded already, or gone
            return None
        embedder = get_embedder()
        vector = embedder.embed([example.question])[0]
        duplicate = _near_duplicate(source=example.source, kind=example.kind, sql=example.sql, vector=vector,
                                    model=embedder.model, exclude=example.pk)  # fmt: skip
        if duplicate is None:
            example.embedding, example.embedding_model = vector, embedder.model
            example.save(update_fields=["embedding", "embedding_model", "updated_at"])
            return example
        merged = _example_merge(duplicate, question=example.question, sql=example.sql, tables=example.tables,
                                columns=example.columns, approved_by=example.approved_by, note=example.note)  # fmt: skip
        Review.objects.filter(example=example).update(example=merged)
        example.answered_runs.update(example=merged)
        example.delete()
        return merged


def example_set_status(*, example, actor, status: str, note: str = ""):
    """Retire an example (never used again) or bring it back (after checking it still works)."""
    with transaction.atomic():
        return _example_set_status(example=example, actor=actor, status=status, note=note)


def _example_set_status(*, example, actor, status: str, note: str = ""):
    if status not in Example.Status.values:
        raise ReviewError(f"Unknown status {status!r}.")
    if status == Example.Status.ACTIVE and example.kind == Example.Kind.ANSWERABLE:
        sql_check(source=example.source, sql=example.sql, execute=False)
        example.validation_error = ""
    example.status = status
    example.note = note or example.note
    example.save(update_fields=["status", "note", "validation_error", "updated_at"])
    audit_record(action=f"example.{status}", actor=actor, target=example, message=note[:500])
    return example


def examples_revalidate(*, source, execute: bool = False, actor=None) -> dict:
    """Check every library example of a source against today's catalog (and data, if `execute`).

    Broken examples are marked "needs_review" rather than used; examples broken by an earlier
    change that work again are brought back. Called after every catalog or schema change.
    """
    report = {"checked": 0, "broken": [], "restored": []}
    examples = Example.objects.filter(source=source, kind=Example.Kind.ANSWERABLE).exclude(
        status=Example.Status.RETIRED
    )
    for example in examples:
        report["checked"] += 1
        try:
            sql_check(source=source, sql=example.sql, execute=execute, row_cap=1, actor=actor,
                      purpose="revalidation")  # fmt: skip
            error = ""
        except ReviewError as exc:
            error = str(exc)
        example.validated_at = timezone.now()
        if error and example.status == Example.Status.ACTIVE:
            example.status, example.validation_error = Example.Status.NEEDS_REVIEW, error
            report["broken"].append(example.pk)
        elif not error and example.status == Example.Status.NEEDS_REVIEW and example.validation_error:
            example.status, example.validation_error = Example.Status.ACTIVE, ""
            report["restored"].append(example.pk)
        example.save(update_fields=["status", "validation_error", "validated_at", "updated_at"])
    if report["broken"] or report["restored"]:
        audit_record(
            action="examples.revalidated", actor=actor, target=source,
            message=f"{len(report['broken'])} broken, {len(report['restored'])} restored of {report['checked']}",
            detail=report,
        )  # fmt: skip
    return report


def examples_revalidate_later(source) -> None:
    """Queue a re-validation after the current transaction commits (catalog and schema changes)."""

    def enqueue():
        try:
            task_send("askdb.revalidate_examples", source.pk)  # askdb.tasks.revalidate_examples
        except Exception:  # no broker (a management command on a stopped demo): check inline
            examples_revalidate(source=source)

    transaction.on_commit(enqueue)


def library_generation_bump(*, source_id: int, examples: bool = False, data: bool = False) -> None:
    """Number a change of the library (`examples`) or of the source's docs or data (`data`): every
    worker process compares the row with what it cached before its next question
    (askdb.adapters.library_cache), so the change needs no restart to be seen."""
    bumped = {"examples": F("examples") + int(examples), "data": F("data") + int(data)}
    if not LibraryGeneration.objects.filter(source_id=source_id).update(**bumped):
        try:
            with transaction.atomic():
                LibraryGeneration.objects.create(source_id=source_id, examples=int(examples), data=int(data))
        except IntegrityError:  # created meanwhile by another process: bump that row
            LibraryGeneration.objects.filter(source_id=source_id).update(**bumped)


def library_refresh(*, source, embedder=None) -> int:
    """Store what a library build had to complete in memory (templates of an older TEMPLATE_VERSION,
    template keys, masked-question vectors), so the next build in every process is one query.
    Called by the worker's warm-up and after calibration, never while a question is answered.
    Returns how many examples were updated."""
    executor = source_executor(source)
    values = LIBRARY.values(source, executor)
    _, _, changed = library_entries(source, values, embedder or get_embedder())
    if changed:
        Example.objects.bulk_update(changed, ["template", "template_key", "masked_embedding"], batch_size=500)
    return len(changed)


def library_warm_up(source, embedder) -> None:
    """Load what the first question on `source` would otherwise load in its stages: the linkable
    values (one query per column), the library index and the library's question vectors; seconds
    for a library of thousands, paid when a worker starts instead of by a researcher. Stale stored
    templates are refreshed first. Raises ExecutionError when the source cannot be reached."""
    snapshot = catalog_snapshot(source)
    executor = source_executor(source, schemas=snapshot.schemas)
    # Unreachable now: loading its values would wait on every column and keep none (the first
    # question loads them), so say so once instead.
    executor.execute("SELECT 1", timeout_s=5, row_cap=1)
    library_refresh(source=source, embedder=embedder)
    version = library_version(source)
    LIBRARY.index(source, executor, embedder, version=version)
    LIBRARY.nearest(source, [1.0] * embedder.dims, embedder.model, 1, version=version)
