"""Evaluation pages: compare evaluations side by side, one evaluation, its HTML report.

Readable by whoever may read the audit log, or staff: evaluations show questions, SQL and
answers from the clinical source, so they are not for every researcher.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from evaluation import metrics, selectors
from evaluation.report import OUTCOME_LABELS, fmt, report_render
from evaluation.services import evaluation_start_from_files
from infra.formats import FormatError
from metadata_admin.models import ClinicalSource


def can_view_evaluations(user) -> bool:
    return bool(user.is_active and (user.is_staff or user.has_perm("askdb.view_audit")))


def evaluations_permission(view: Callable) -> Callable:
    """403 unless the user may view evaluations (like permission_required(raise_exception=True))."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs):
        if not can_view_evaluations(request.user):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapped


def _row(evaluation) -> dict:
    """An evaluation's numbers as the comparison table shows them."""
    m = evaluation.metrics or {}
    ex, ans, rs, lib = (m.get(k, {}) for k in ("execution_accuracy", "answerability", "rs", "library"))
    latency = m.get("latency_ms", {}).get("total", {})
    s = evaluation.settings or {}
    return {
        "evaluation": evaluation,
        "prompt_version": s.get("prompt_version", ""),
        "llm_model": s.get("llm_model", ""),
        "embedding_model": s.get("embedding_model", ""),
        "library_size": s.get("library_size", ""),
        "questions": fmt(m.get("counts", {}).get("questions")),
        "accuracy": fmt(ex.get("accuracy"), pct=True),
        "f1": fmt(ans.get("f1"), pct=True),
        "auc": fmt(ans.get("auc"), digits=3),
        "rs": [(c, fmt(rs.get(str(c)))) for c in metrics.RS_PENALTIES],
        "library_coverage": fmt(lib.get("coverage"), pct=True),
        "library_precision": fmt(lib.get("precision"), pct=True),
        "p50": fmt(latency.get("p50"), digits=0),
        "p95": fmt(latency.get("p95"), digits=0),
        "cost": f"${m.get('usage', {}).get('cost_usd', 0):.4f}" if m else "—",
        "gold_errors": fmt(ex.get("gold_errors")),
    }


START_PERM = "askdb.manage_users"  # admins start evaluations; auditors only read them


@require_http_methods(["GET", "POST"])
@evaluations_permission
def evaluation_list(request: HttpRequest) -> HttpResponse:
    """Evaluations side by side; admins start a new one from uploaded files (run by a worker)."""
    error = ""
    if request.method == "POST":
        if not request.user.has_perm(START_PERM):
            raise PermissionDenied
        source = ClinicalSource.objects.filter(name=request.POST.get("source", "")).first()
        questions = request.FILES.get("questions")
        if source is None or questions is None:
            error = "Choose a source and a questions file."
        else:
            try:
                limit = int(request.POST.get("limit") or 0)
                evaluation = evaluation_start_from_files(
                    source=source, questions=questions, labels=request.FILES.get("labels"),
                    name=request.POST.get("name", "").strip(), offline=bool(request.POST.get("offline")),
                    limit=max(0, limit), actor=request.user,
                )  # fmt: skip
            except (FormatError, ValueError) as exc:
                error = f"That file could not be read: {exc}"
            else:
                messages.success(request, f"Evaluation {evaluation.pk} started: a worker is asking its "
                                          f"{evaluation.items.count()} questions. This page shows it when it ends.")  # fmt: skip
                return redirect("evaluation:detail", evaluation_id=evaluation.pk)
    rows = [_row(e) for e in selectors.evaluation_list()[:200]]
    context = {"rows": rows, "penalties": metrics.RS_PENALTIES, "error": error,
               "may_start": request.user.has_perm(START_PERM), "sources": ClinicalSource.objects.order_by("name")}  # fmt: skip
    return render(request, "evaluation/list.html", context, status=400 if error else 200)


def _evaluation_or_404(evaluation_id: int):
    evaluation = selectors.evaluation_get(evaluation_id=evaluation_id)
    if evaluation is None:
        raise Http404("no such evaluation")
    return evaluation


@require_GET
@evaluations_permission
def evaluation_detail(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    evaluation = _evaluation_or_404(evaluation_id)
    failures = [
        {"item": i, "label": OUTCOME_LABELS.get(i.verdict, i.verdict)}
        for i in selectors.evaluation_failures(evaluation=evaluation, limit=50)
    ]
    outcomes = [(OUTCOME_LABELS[k], v) for k, v in (evaluation.metrics or {}).get("outcomes", {}).items()]
    return render(
        request,
        "evaluation/detail.html",
        {
            "row": _row(evaluation),
            "evaluation": evaluation,
            "failures": failures,
            "outcomes": outcomes,
            "penalties": metrics.RS_PENALTIES,
        },
    )


@require_GET
@evaluations_permission
def evaluation_report(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    """The stored report, or one rendered now from the stored metrics and items."""
    evaluation = _evaluation_or_404(evaluation_id)
    body = evaluation.report_html or report_render(evaluation=evaluation, items=list(evaluation.items.all()))
    response = HttpResponse(body, content_type="text/html; charset=utf-8")
    # The report is self-contained: it needs no script and loads nothing from anywhere.
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return response
