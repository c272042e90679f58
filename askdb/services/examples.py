"""The example library: add or merge verified pairs, retire or restore them, re-validate them
after catalog changes."""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from askdb.models import Example, Review
from askdb.pipeline.match import Template, build_template, template_is_current
from askdb.services.sql import ReviewError, sql_check
from infra.adapters import catalog_search
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder


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
    rebuild = sql != duplicate.sql or not template_is_current(duplicate.template)
    duplicate.sql, duplicate.tables, duplicate.columns = sql, tables, columns
    duplicate.approved_by, duplicate.approved_at = approved_by, now
    duplicate.status, duplicate.validation_error, duplicate.validated_at = Example.Status.ACTIVE, "", now
    duplicate.note = note or duplicate.note
    if rebuild:  # the template depends only on the question and the SQL
        duplicate.template = example_template(duplicate)


def _embed_later(example_id: int) -> None:
    from askdb.tasks import embed_example  # local: askdb.tasks imports this module for its task

    try:
        embed_example.delay(example_id)
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


def example_template(example) -> dict:
    """The offline-answering template of an answerable example ({} when there is none yet)."""
    if example.kind != "answerable" or not example.sql:
        return {}
    template = template_of(example.question, example.sql, dialect=example.source.dialect, label=example.pk)
    return template.to_dict() if template is not None else {}


def template_of(question: str, sql: str, *, dialect: str, label: object = None) -> Template | None:
    """The template of a question and its SQL; None when building it failed unexpectedly."""
    try:
        return build_template(question, sql, dialect=dialect)
    except Exception:  # a template is an optimisation: an example without one is still an example
        logging.getLogger(__name__).warning("no template for example %s", label, exc_info=True)
        return None


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
        from askdb.tasks import revalidate_examples  # local: askdb.tasks imports this module for its task

        try:
            revalidate_examples.delay(source.pk)
        except Exception:  # no broker (a management command on a stopped demo): check inline
            examples_revalidate(source=source)

    transaction.on_commit(enqueue)
