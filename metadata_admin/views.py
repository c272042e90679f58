"""Catalog pages for admins: an overview of what is documented and embedded, a curation page
per table (description, columns, synonyms, joins, with its history and re-embedding status), and
a retrieval playground that shows why a question finds the tables it finds."""

from __future__ import annotations

import contextlib

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from core.labels import FORMATS, draft_label
from infra.providers.embeddings import EmbeddingError
from metadata_admin import selectors
from metadata_admin.models import ClinicalSource, Relationship, TableDoc
from metadata_admin.services import source_get, table_doc_update

# --------------------------------------------------------------------------- pages


@require_GET
@permission_required("askdb.curate_catalog", raise_exception=True)
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "metadata_admin/overview.html", {"sources": selectors.catalog_overview()})


class PlaygroundForm(forms.Form):
    source = forms.ChoiceField(required=False)
    q = forms.CharField(
        label="Question",
        max_length=500,
        widget=forms.TextInput(attrs={"placeholder": "average creatinine of patients with sepsis"}),
    )
    k = forms.IntegerField(label="Tables (k)", min_value=1, max_value=20, initial=5, required=False)

    def __init__(self, *args, sources: list[ClinicalSource], **kwargs):
        super().__init__(*args, **kwargs)
        self.sources = {s.name: s for s in sources}
        self.fields["source"].choices = [(s.name, s.name) for s in sources]
        # Several sources and none is the default: the first is preselected.
        with contextlib.suppress(ValueError):
            self.fields["source"].initial = source_get(None).name

    def clean_source(self) -> ClinicalSource | None:
        name = self.cleaned_data.get("source")
        if name:
            return self.sources[name]  # ChoiceField already refused unknown names
        default = self.fields["source"].initial
        return self.sources.get(default) or next(iter(self.sources.values()), None)


@require_GET
@permission_required("askdb.curate_catalog", raise_exception=True)
def playground(request: HttpRequest) -> HttpResponse:
    sources = list(ClinicalSource.objects.all())
    form = PlaygroundForm(request.GET if "q" in request.GET else None, sources=sources)
    retrieval, error = None, ""
    if form.is_bound and form.is_valid() and form.cleaned_data["source"] is not None:
        try:
            retrieval = selectors.retrieve(
                source=form.cleaned_data["source"],
                question=form.cleaned_data["q"],
                k=form.cleaned_data["k"] or 5,
            )
        except EmbeddingError as exc:
            error = f"The question could not be embedded: {exc}"
    context = {
        "form": form,
        "sources": sources,
        "retrieval": retrieval,
        "bars": _score_bars(retrieval) if retrieval else [],
        "error": error,
    }
    template = (
        "metadata_admin/partials/playground_results.html"
        if request.htmx
        else "metadata_admin/playground.html"
    )
    return render(request, template, context)


def _score_bars(retrieval: selectors.Retrieval) -> list[dict]:
    """Each ranked table with its bar width: a share of the best score (combined scores exceed 1)."""
    top = max((t.score for t in retrieval.tables), default=0.0) or 1.0
    return [{"table": t, "width": max(0, min(100, round(t.score / top * 100)))} for t in retrieval.tables]


# --------------------------------------------------------------------------- curation


def _format(value: str) -> str:
    return value if value in FORMATS else ""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _pairs(text: str, doc: TableDoc, to: TableDoc) -> list[list[str]]:
    """ "a = b, c = d" → [["a", "b"], ["c", "d"]], each column checked against its table."""
    pairs = []
    for part in [p for p in text.replace(" and ", ",").replace(" AND ", ",").split(",") if p.strip()]:
        left, eq, right = (s.strip().rpartition(".")[2] for s in part.partition("="))
        if not eq or not left or not right:
            raise ValueError(f"“{part.strip()}” is not a pair of columns; write it as column = other_column.")
        for table, column in ((doc, left), (to, right)):
            if not table.columns.filter(name=column).exists():
                raise ValueError(f"{table.qualified_name} has no column “{column}”.")
        pairs.append([left, right])
    if not pairs:
        raise ValueError(f"Say which columns join {doc.qualified_name} to {to.qualified_name}.")
    return pairs


@require_http_methods(["GET", "POST"])
@permission_required("askdb.curate_catalog", raise_exception=True)
def table_doc_edit(request: HttpRequest, doc_id: int) -> HttpResponse:
    """Curate one table's documentation: what the LLM and retrieval read about it."""
    doc = get_object_or_404(TableDoc.objects.select_related("source").defer("embedding"), pk=doc_id)
    tables = list(
        TableDoc.objects.filter(source=doc.source).defer("embedding").order_by("schema_name", "name")
    )
    columns = list(doc.columns.all())
    joins = [{"to": r.to_table_id, "on": ", ".join(f"{a} = {b}" for a, b in r.column_pairs), "kind": r.kind,
              "note": r.note} for r in doc.relationships.all()]  # fmt: skip
    errors: list[str] = []
    if request.method == "POST":
        post = request.POST
        joins, relationships = [], []
        by_id = {t.pk: t for t in tables}
        for i in range(int(post.get("rel-count", "0") or 0) + 1):
            row = {"to": post.get(f"rel-{i}-to", ""), "on": post.get(f"rel-{i}-on", "").strip(),
                   "kind": post.get(f"rel-{i}-kind", ""), "note": post.get(f"rel-{i}-note", "").strip()}  # fmt: skip
            if post.get(f"rel-{i}-delete") or not (row["to"] or row["on"]):
                continue
            row["to"] = int(row["to"]) if row["to"].isdigit() else None
            joins.append(row)
            to = by_id.get(row["to"])
            if to is None:
                errors.append(f"Choose the table that join {i + 1} leads to.")
                continue
            try:
                relationships.append({"to_table": to, "column_pairs": _pairs(row["on"], doc, to),
                                      "kind": row["kind"] or Relationship.Kind.FOREIGN_KEY, "note": row["note"]})  # fmt: skip
            except ValueError as exc:
                errors.append(f"Join {i + 1}: {exc}")
        data = {
            "description": post.get("description", "").strip(),
            "purpose": post.get("purpose", "").strip(),
            "grain": post.get("grain", "").strip()[:300],
            "synonyms": _lines(post.get("synonyms", "")),
            "considerations": _lines(post.get("considerations", "")),
            "example_questions": _lines(post.get("example_questions", "")),
            "columns": {
                c.name: {
                    "meaning": post.get(f"col-{c.name}-meaning", c.meaning).strip(),
                    "example_values": post.get(f"col-{c.name}-example_values", c.example_values).strip(),
                    "sensitive": bool(post.get(f"col-{c.name}-sensitive")),
                    "label": post.get(f"col-{c.name}-label", c.label).strip()[:200],
                    "unit": post.get(f"col-{c.name}-unit", c.unit).strip()[:32],
                    "display_format": _format(post.get(f"col-{c.name}-display_format", c.display_format)),
                }
                for c in columns
            },
            "relationships": relationships,
        }
        if not errors:
            note = post.get("note", "").strip()[:200] or "edited on the curation page"
            table_doc_update(doc=doc, data=data, actor=request.user, note=note)
            messages.success(request, f"Saved {doc.qualified_name}. Retrieval uses the new text once it is re-embedded "
                                      "(in the background, usually seconds).")  # fmt: skip
            return redirect("catalog:table", doc_id=doc.pk)
        for key in ("description", "purpose", "grain", "synonyms", "considerations", "example_questions"):
            setattr(doc, key, data[key])
        for c in columns:
            for key, value in data["columns"][c.name].items():
                setattr(c, key, value)
    for c in columns:  # what a blank label shows: the draft from the name and meaning (core/labels.py)
        c.draft = draft_label(c.name, c.meaning, table=doc.name)
    context = {
        "doc": doc,
        "columns": columns,
        "formats": FORMATS,
        "joins": joins,
        "new_join": len(joins),
        "tables": tables,
        "kinds": Relationship.Kind.choices,
        "errors": errors,
        "revisions": doc.revisions.select_related("by")[:20],
        "embedding": selectors.table_doc_embedding_status(doc, model=selectors.current_embedding_model()),
        "indexed": selectors.indexed_columns(doc),
    }
    return render(request, "metadata_admin/table_doc.html", context, status=400 if errors else 200)
