"""Catalog pages for admins: an overview of what is documented and embedded, and a retrieval
playground that shows why a question finds the tables it finds (the Django admin holds the forms)."""

from __future__ import annotations

import contextlib

from django import forms
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from infra.providers.embeddings import EmbeddingError
from metadata_admin import selectors
from metadata_admin.models import ClinicalSource
from metadata_admin.services import source_get

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
