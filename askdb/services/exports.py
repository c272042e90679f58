"""The library in and out of files: import verified pairs in bulk, export them."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from askdb.models import Example
from askdb.services.examples import example_upsert
from askdb.services.sql import ReviewError, sql_check
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder


@dataclass
class ImportReport:
    """What an example import did: nothing is imported silently, and nothing fails silently."""

    created: list[int] = field(default_factory=list)
    merged: list[int] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)  # {"id", "question", "error"}

    @property
    def total(self) -> int:
        return len(self.created) + len(self.merged) + len(self.failed)

    def summary(self) -> str:
        return f"{len(self.created)} added, {len(self.merged)} merged into existing examples, {len(self.failed)} failed"


def examples_import(
    *,
    source,
    items: list[dict],
    approved_by=None,
    execute: bool = True,
    origin: str = "import",
    progress=None,
) -> ImportReport:
    """Add verified pairs in bulk (a file, the EHRSQL format, the demo seed).

    Each item is {"id"?, "question", "sql"} with sql "" or None for an unanswerable question.
    Every SQL is validated against the catalog and, with `execute`, run read-only (one row), so a
    pair that does not work is reported with its error instead of entering the library. Each
    item is its own transaction: one bad pair does not lose the good ones.
    """
    report = ImportReport()
    questions = [" ".join(str(item.get("question") or "").split()) for item in items]
    embedder = get_embedder()
    vectors = embedder.embed([q or "-" for q in questions]) if items else []
    before = set(Example.objects.filter(source=source).values_list("pk", flat=True))
    for n, (item, question, vector) in enumerate(zip(items, questions, vectors, strict=True), start=1):
        ident = str(item.get("id") or n)
        sql = item.get("sql")
        sql = "" if sql is None or str(sql).strip().lower() in ("", "null") else str(sql)
        try:
            if len(question) < 3:
                raise ReviewError("the question is empty")
            if sql and execute:
                sql_check(source=source, sql=sql, row_cap=1, actor=approved_by, purpose="import")
            with transaction.atomic():
                example = example_upsert(
                    source=source, question=question, sql=sql, approved_by=approved_by, origin=origin,
                    kind=Example.Kind.ANSWERABLE if sql else Example.Kind.UNANSWERABLE, vector=vector,
                    note=str(item.get("note") or ""),
                )  # fmt: skip
                extra = [
                    p
                    for p in item.get("paraphrases") or []
                    if isinstance(p, str) and p not in example.paraphrases
                ]
                if extra:  # an export carries them; an import must not lose them
                    example.paraphrases = [*example.paraphrases, *extra]
                    example.save(update_fields=["paraphrases"])
        except ReviewError as exc:
            report.failed.append({"id": ident, "question": question[:300], "error": str(exc)})
        else:
            (report.merged if example.pk in before else report.created).append(example.pk)
            before.add(example.pk)
        if progress:
            progress(n)
    audit_record(action="examples.imported", actor=approved_by, target=source, message=report.summary(),
                 detail={"failed": report.failed[:50]})  # fmt: skip
    return report


def examples_export(*, source, include_retired: bool = False, actor=None) -> list[dict]:
    """The library as plain data (the same shape examples_import reads), oldest first; audited."""
    audit_record(action="examples.exported", actor=actor, target=source,
                 message="retired included" if include_retired else "")  # fmt: skip
    qs = Example.objects.filter(source=source).select_related("approved_by").order_by("id")
    if not include_retired:
        qs = qs.exclude(status=Example.Status.RETIRED)
    return [
        {
            "id": e.pk, "question": e.question, "sql": e.sql, "kind": e.kind, "status": e.status,
            "tables": e.tables, "paraphrases": e.paraphrases, "note": e.note,
            "approved_by": e.approved_by.username if e.approved_by else "",
            "approved_at": e.approved_at.isoformat() if e.approved_at else "",
        }
        for e in qs
    ]  # fmt: skip
