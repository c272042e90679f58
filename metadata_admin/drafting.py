"""LLM-drafted table descriptions and column meanings, kept apart from curated text.

An undocumented table is invisible to retrieval, so admins can ask the LLM for a first draft;
drafts live in draft_description / draft_meaning until an admin accepts them, so a model's
guess never silently becomes what the prompt tells the next model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction

from core.extraction import JsonExtractionError, extract_json_object
from core.types import LLMError
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from infra.providers.llm import get_chat_model
from metadata_admin.models import ColumnDoc, DocRevision, TableDoc
from metadata_admin.services import source_executor, table_doc_schedule_embedding, table_doc_snapshot

NO_LLM_MESSAGE = "No LLM is configured; set LLM_BASE_URL, LLM_MODEL and LLM_API_KEY to draft descriptions."
SAMPLE_VALUES = 5
BLANK = r"^\s*$"
SAMPLE_CHARS = 60  # a sample is a hint about the format, not data to copy

SYSTEM_PROMPT = """You document tables of a clinical research database (MIMIC-IV layout) for researchers who \
ask questions in plain English. From the table's DDL and sample values, write what the table holds \
(one to three sentences: what one row is, and what it is used for) and, for each column asked for, \
one short sentence on what it means, with units or codes where the samples show them. Do not invent \
facts the names and samples do not support. Reply with one JSON object and nothing else:
{"description": "...", "columns": {"column_name": "meaning", ...}}"""


@dataclass
class DraftReport:
    drafted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # nothing was missing
    failed: dict[str, str] = field(default_factory=dict)  # table → why

    def summary(self) -> str:
        return (
            f"{len(self.drafted)} drafted, {len(self.skipped)} already documented, {len(self.failed)} failed"
        )


@dataclass(frozen=True)
class _Draft:
    doc: TableDoc
    description: str
    meanings: dict[str, str]


def draft_descriptions(*, docs: Iterable[TableDoc], actor=None) -> DraftReport:
    """Ask the LLM (one request per table) to draft what is missing; a failing table is reported
    and the others go on. Raises ValueError when no LLM is configured."""
    chat = get_chat_model()
    if chat is None:
        raise ValueError(NO_LLM_MESSAGE)
    report = DraftReport()
    drafts: list[_Draft] = []
    # LLM calls first, outside any transaction: they take seconds each.
    for doc in _with_columns(docs):
        columns = list(doc.columns.all())
        want_description = not doc.description.strip()
        want_columns = [c.name for c in columns if not c.meaning.strip()]
        if not want_description and not want_columns:
            report.skipped.append(doc.qualified_name)
            continue
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": _table_prompt(doc, columns, want_description, want_columns)},
        ]
        try:
            reply = extract_json_object(chat.complete(messages).text)
            draft = _draft_from_reply(doc, reply, want_description, want_columns)
        except LLMError as exc:
            report.failed[doc.qualified_name] = exc.message
            continue
        except (JsonExtractionError, ValueError) as exc:
            report.failed[doc.qualified_name] = f"unusable reply: {exc}"
            continue
        drafts.append(draft)
        report.drafted.append(doc.qualified_name)
    with transaction.atomic():
        for draft in drafts:
            _draft_store(draft)
        audit_record(
            action="docs.drafted",
            actor=actor,
            message=report.summary(),
            detail={"drafted": report.drafted, "failed": report.failed},
        )
    return report


def drafts_accept(*, docs: Iterable[TableDoc], actor=None) -> list[str]:
    """Make accepted drafts curated text (with a revision of the text before); returns the tables."""
    accepted = []
    with transaction.atomic():
        for doc in _with_columns(docs):
            columns = [c for c in doc.columns.all() if c.draft_meaning.strip()]
            if not doc.draft_description.strip() and not columns:
                continue
            before = table_doc_snapshot(doc)
            with_description = bool(doc.draft_description.strip())
            if with_description:
                doc.description, doc.draft_description = doc.draft_description.strip(), ""
                doc.save(update_fields=["description", "draft_description", "updated_at"])
            for col in columns:
                col.meaning, col.draft_meaning = col.draft_meaning.strip(), ""
                col.save(update_fields=["meaning", "draft_meaning"])
            DocRevision.objects.create(
                table=doc,
                by=actor if getattr(actor, "pk", None) else None,
                note="before accepting LLM drafts",
                snapshot=before,
            )
            audit_record(
                action="docs.drafts_accepted",
                actor=actor,
                target=doc,
                message=f"{doc.qualified_name}: {'description and ' if with_description else ''}"
                f"{len(columns)} column meanings",
            )
            table_doc_schedule_embedding(doc)
            accepted.append(doc.qualified_name)
    return accepted


def _with_columns(docs: Iterable[TableDoc]) -> list[TableDoc]:
    # Fresh rows: an admin changelist queryset may be stale, and drafts must check current text.
    pks = [d.pk for d in docs]
    return list(
        TableDoc.objects.filter(pk__in=pks)
        .select_related("source")
        .prefetch_related("columns")
        .defer("embedding")
        .order_by("schema_name", "name")
    )


def _table_prompt(
    doc: TableDoc, columns: list[ColumnDoc], want_description: bool, want_columns: list[str]
) -> str:
    ddl = ",\n".join(f"  {c.name} {c.data_type or 'unknown'}" for c in columns)
    samples = _sample_values(doc, columns)
    lines = [f"CREATE TABLE {doc.qualified_name} (\n{ddl}\n);"]
    if doc.row_count is not None:
        lines.append(f"About {doc.row_count} rows.")
    if doc.description.strip():
        lines.append(f"Curated description (keep it; for context): {doc.description.strip()}")
    if samples:
        lines.append("Sample values:")
        lines += [f"- {name}: {values}" for name, values in samples.items()]
    lines.append(
        "Write the table description."
        if want_description
        else 'The description exists; reply "description": "".'
    )
    if want_columns:
        lines.append("Write meanings for these columns: " + ", ".join(want_columns))
    return "\n".join(lines)


def _sample_values(doc: TableDoc, columns: list[ColumnDoc]) -> dict[str, str]:
    """Documented examples plus a few distinct values per text column, read-only.

    Sensitive columns contribute nothing: their values must not reach an external LLM.
    """
    samples: dict[str, str] = {}
    executor = None
    for col in columns:
        if col.sensitive:
            continue
        values = [col.example_values.strip()] if col.example_values.strip() else []
        is_text = any(k in col.data_type.lower() for k in ("char", "text"))
        if is_text and not col.is_primary_key and doc.exists_in_source:
            try:
                executor = executor or source_executor(doc.source)
                rows = executor.distinct_values(doc.schema_name, doc.name, col.name, limit=SAMPLE_VALUES)
                values += [str(v)[:SAMPLE_CHARS] for v, _ in rows]
            except ExecutionError:
                pass  # samples are a nicety; the DDL alone still gives a draft
        if values:
            samples[col.name] = "; ".join(dict.fromkeys(values))
    return samples


def _draft_from_reply(doc: TableDoc, reply: dict, want_description: bool, want_columns: list[str]) -> _Draft:
    description = reply.get("description", "")
    meanings = reply.get("columns", {})
    if not isinstance(description, str) or not isinstance(meanings, dict):
        raise ValueError(
            f"expected {{'description': text, 'columns': {{...}}}}, got {json.dumps(reply)[:200]}"
        )
    wanted = set(want_columns)
    meanings = {
        name: text.strip()
        for name, text in meanings.items()
        if name in wanted and isinstance(text, str) and text.strip()
    }
    description = description.strip() if want_description else ""
    if not description and not meanings:
        raise ValueError("the reply drafted neither the description nor any column meaning asked for")
    return _Draft(doc=doc, description=description, meanings=meanings)


def _draft_store(draft: _Draft) -> None:
    # Only where curated text is still empty: an admin may have written it while the LLM worked.
    if draft.description:
        TableDoc.objects.filter(pk=draft.doc.pk, description__regex=BLANK).update(
            draft_description=draft.description
        )
    for name, meaning in draft.meanings.items():
        ColumnDoc.objects.filter(table=draft.doc, name=name, meaning__regex=BLANK).update(
            draft_meaning=meaning
        )
