"""The Django admin for the schema catalog: where admins curate the docs retrieval depends on.

Saving here follows the service rules (a revision of the text before, an audit row, re-embedding
only when the embedded text changed), so an admin edit and an import cannot disagree.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import pluralize
from django.utils.html import format_html

from infra.audit.services import audit_record
from metadata_admin import drafting
from metadata_admin.models import (
    ClinicalSource,
    ColumnDoc,
    DocRevision,
    Relationship,
    TableDoc,
    ValueEntry,
)
from metadata_admin.selectors import current_embedding_model, table_doc_embedding_status
from metadata_admin.services import table_doc_schedule_embedding, table_doc_snapshot, table_docs_reembed
from metadata_admin.signals import catalog_changed


def url_without_password(url: str) -> str:
    """A connection URL safe to show: the password (if any) replaced by ***."""
    if url.startswith("env:"):
        return url
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class ReadOnlyAdmin(admin.ModelAdmin):
    """Browse and search only: these rows are derived or historical."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(ClinicalSource)
class ClinicalSourceAdmin(admin.ModelAdmin):
    list_display = (
        "name", "engine", "dialect", "as_of", "table_count", "min_cell_size", "disclosure_mode", "safe_url"
    )  # fmt: skip
    search_fields = ("name", "description")

    def save_model(self, request: HttpRequest, obj: ClinicalSource, form, change: bool) -> None:
        """Audited: a source's privacy settings (min_cell_size, row_level_to_llm, the disclosure mode
        and its parameters) are governance."""
        super().save_model(request, obj, form, change)
        changed = [f for f in form.changed_data if f != "url"] + (
            ["url"] if "url" in form.changed_data else []
        )
        audit_record(
            action="source.changed" if change else "source.created", actor=request.user, target=obj,
            message=", ".join(changed)[:500],
            detail={f: str(form.cleaned_data.get(f)) for f in changed if f != "url"},  # a URL may hold a password
        )  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(_table_count=Count("tables"))

    @admin.display(description="tables", ordering="_table_count")
    def table_count(self, obj: ClinicalSource) -> int:
        return obj._table_count

    @admin.display(description="URL")
    def safe_url(self, obj: ClinicalSource) -> str:
        return url_without_password(obj.url)


class LinesField(forms.CharField):
    """A JSON list of strings edited as one item per line."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 80})

    def prepare_value(self, value):
        if isinstance(value, list | tuple):
            return "\n".join(str(v) for v in value)
        return value

    def to_python(self, value) -> list[str]:
        if isinstance(value, list | tuple):
            return [str(v) for v in value]
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


class TableDocForm(forms.ModelForm):
    considerations = LinesField(required=False, help_text="One per line: pitfalls the SQL writer must know.")
    synonyms = LinesField(required=False, help_text="One per line: words researchers use for this table.")
    example_questions = LinesField(required=False, help_text="One question per line.")

    class Meta:
        model = TableDoc
        fields = (
            "source",
            "schema_name",
            "name",
            "exists_in_source",
            "row_count",
            "reference",
            "description",
            "purpose",
            "grain",
            "considerations",
            "synonyms",
            "example_questions",
            "draft_description",
        )


class ColumnDocInline(admin.TabularInline):
    model = ColumnDoc
    extra = 0
    fields = (
        "position",
        "name",
        "data_type",
        "meaning",
        "draft_meaning",
        "example_values",
        "is_primary_key",
        "is_foreign_key",
        "sensitive",
        "value_index",
    )
    formfield_overrides = {
        # Tabular rows stay scannable: short boxes that grow when typed into.
        models.TextField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 40})},
    }


class RelationshipInline(admin.TabularInline):
    model = Relationship
    fk_name = "from_table"
    extra = 0
    fields = ("to_table", "column_pairs", "kind", "note")
    autocomplete_fields = ("to_table",)


@admin.register(TableDoc)
class TableDocAdmin(admin.ModelAdmin):
    form = TableDocForm
    inlines = (ColumnDocInline, RelationshipInline)
    list_display = (
        "qualified_name",
        "source",
        "exists_in_source",
        "row_count",
        "embedding_status",
        "has_draft",
    )
    list_filter = ("source", "schema_name", "exists_in_source")
    search_fields = ("name", "description", "synonyms")
    readonly_fields = ("embedding_model", "content_hash", "embedding_error", "updated_at")
    actions = ("reembed_selected", "draft_missing_descriptions", "accept_drafts")
    fieldsets = (
        (None, {"fields": ("source", "schema_name", "name", "exists_in_source", "row_count", "reference")}),
        (
            "Curated documentation",
            {
                "fields": (
                    "description",
                    "purpose",
                    "grain",
                    "considerations",
                    "synonyms",
                    "example_questions",
                )
            },
        ),
        ("LLM draft (waits for “Accept drafts”)", {"fields": ("draft_description",)}),
        ("Embedding", {"fields": ("embedding_model", "content_hash", "embedding_error", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # Vectors are never shown; loading them would parse hundreds of floats per row.
        return (
            super()
            .get_queryset(request)
            .select_related("source")
            .prefetch_related("columns")
            .defer("embedding")
        )

    @admin.display(description="table", ordering="name")
    def qualified_name(self, obj: TableDoc) -> str:
        return obj.qualified_name

    @admin.display(description="embedding")
    def embedding_status(self, obj: TableDoc) -> str:
        return table_doc_embedding_status(obj, model=current_embedding_model())

    @admin.display(description="draft", boolean=True)
    def has_draft(self, obj: TableDoc) -> bool:
        return bool(obj.draft_description.strip()) or any(c.draft_meaning.strip() for c in obj.columns.all())

    # Saving: the snapshot must be of the database row, since the form already changed `obj`.

    def save_model(self, request: HttpRequest, obj: TableDoc, form, change: bool) -> None:
        obj._snapshot_before = table_doc_snapshot(TableDoc.objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        # Re-read: the prefetched columns of form.instance predate the inline formsets' changes.
        doc = TableDoc.objects.prefetch_related("columns").defer("embedding").get(pk=form.instance.pk)
        before = getattr(form.instance, "_snapshot_before", None)
        if change:
            if not form.has_changed() and not any(fs.has_changed() for fs in formsets):
                return
            if before != table_doc_snapshot(doc):
                DocRevision.objects.create(
                    table=doc, by=request.user, note="edited in the admin", snapshot=before
                )
            audit_record(
                action="docs.edited",
                actor=request.user,
                target=doc,
                message=f"{doc.qualified_name} (admin: {', '.join(form.changed_data) or 'columns'})",
            )
        else:
            audit_record(action="docs.created", actor=request.user, target=doc, message=doc.qualified_name)
        table_doc_schedule_embedding(doc)
        if _sensitive_columns(before) != _sensitive_columns(table_doc_snapshot(doc)):
            # The restricted reader's column privileges follow the flags (metadata_admin.receivers).
            catalog_changed.send(sender=ClinicalSource, source=doc.source)

    def delete_model(self, request: HttpRequest, obj: TableDoc) -> None:
        audit_record(action="docs.deleted", actor=request.user, target=obj, message=obj.qualified_name)
        super().delete_model(request, obj)
        catalog_changed.send(sender=ClinicalSource, source=obj.source)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for doc in queryset:
            audit_record(action="docs.deleted", actor=request.user, target=doc, message=doc.qualified_name)
        sources = {doc.source for doc in queryset}
        super().delete_queryset(request, queryset)
        for source in sources:
            catalog_changed.send(sender=ClinicalSource, source=source)

    # Actions: each one calls a service, so the command line and the admin agree.

    @admin.action(description="Re-embed selected docs")
    def reembed_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        sources = ClinicalSource.objects.filter(pk__in=queryset.values("source"))
        embedded = skipped = 0
        failed: list[str] = []
        for source in sources:
            report = table_docs_reembed(source=source)
            embedded, skipped = embedded + report.embedded, skipped + report.skipped
            failed += report.failed
        self.message_user(
            request, f"Re-embedded {embedded} doc{pluralize(embedded)}; {skipped} already current."
        )
        if failed:
            self.message_user(
                request,
                f"{len(failed)} could not be embedded (see their embedding error): {', '.join(failed[:10])}",
                messages.ERROR,
            )

    @admin.action(description="Draft missing descriptions with the LLM")
    def draft_missing_descriptions(self, request: HttpRequest, queryset: QuerySet) -> None:
        try:
            report = drafting.draft_descriptions(docs=queryset, actor=request.user)
        except ValueError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        self.message_user(
            request,
            f"LLM drafts: {report.summary()}. Review them, then use “Accept drafts”.",
            messages.SUCCESS if not report.failed else messages.WARNING,
        )
        for table, reason in report.failed.items():
            self.message_user(request, f"{table}: {reason}", messages.ERROR)

    @admin.action(description="Accept drafts")
    def accept_drafts(self, request: HttpRequest, queryset: QuerySet) -> None:
        accepted = drafting.drafts_accept(docs=queryset, actor=request.user)
        if accepted:
            self.message_user(request, f"Accepted drafts for {len(accepted)} tables: {', '.join(accepted)}.")
        else:
            self.message_user(request, "None of the selected tables has a draft.", messages.WARNING)


@admin.register(DocRevision)
class DocRevisionAdmin(ReadOnlyAdmin):
    """History is written by the services only."""

    list_display = ("table", "at", "by", "note")
    list_filter = ("table__source",)
    search_fields = ("table__name", "note")
    list_select_related = ("table", "by")
    fields = ("table", "at", "by", "note", "snapshot_pretty")
    readonly_fields = fields

    @admin.display(description="snapshot")
    def snapshot_pretty(self, obj: DocRevision) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.snapshot, indent=2, ensure_ascii=False))

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).defer("table__embedding")


@admin.register(ValueEntry)
class ValueEntryAdmin(ReadOnlyAdmin):
    """The index is rebuilt from the data (value_index_build), never edited by hand."""

    list_display = ("table", "column", "value", "code", "frequency", "embedding_model")
    list_filter = ("source", "column")
    search_fields = ("value", "code", "column")
    list_select_related = ("table",)
    exclude = ("embedding",)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).defer("embedding", "table__embedding")


def _sensitive_columns(snapshot: dict | None) -> set[str]:
    return {c["name"] for c in (snapshot or {}).get("columns", []) if c.get("sensitive")}
