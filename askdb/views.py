"""askdb's pages. Thin: check permission, call a selector or service, render.

An htmx request gets only the named fragment of the same page (the run's live status, a page
of the result table); every link and form also works without JavaScript.
"""

from __future__ import annotations

import random

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required, permission_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from askdb import health, selectors
from askdb.models import Run
from askdb.services import QuestionError, question_submit, run_cancel, run_retry


def _ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


def _example_questions(limit: int = 6) -> list[str]:
    from metadata_admin.models import TableDoc

    pool = [
        q
        for qs in TableDoc.objects.filter(exists_in_source=True).values_list("example_questions", flat=True)
        for q in (qs or [])
    ]
    return random.Random(len(pool)).sample(pool, min(limit, len(pool))) if pool else []


@require_http_methods(["GET", "POST"])
@permission_required("askdb.ask_questions", raise_exception=True)
def home(request: HttpRequest) -> HttpResponse:
    """Ask: a question box with examples; submitting opens the run page."""
    text, error = request.GET.get("q", ""), ""
    if request.method == "POST":
        text = request.POST.get("question", "")
        try:
            run = question_submit(user=request.user, text=text, ip=_ip(request))
        except (QuestionError, ValueError) as exc:
            error = str(exc)
        else:
            return redirect("run_detail", run_id=run.pk)
    recent = selectors.run_list_for_user(user=request.user, mine_only=True)[:5]
    context = {"text": text, "error": error, "examples": _example_questions(), "recent": recent,
               "health_llm": health.llm()}  # fmt: skip
    return render(request, "askdb/home.html", context, status=400 if error else 200)


def _run_or_404(request: HttpRequest, run_id: int) -> Run:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("no such run")
    return run


def _run_context(request: HttpRequest, run: Run) -> dict:
    import sqlglot

    dialect = run.question.source.dialect

    def pretty(sql: str) -> str:
        try:
            return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
        except (sqlglot.errors.ParseError, IndexError, ValueError):
            return sql

    attempts = [{"attempt": a, "pretty": pretty(a.sql)} for a in run.attempts.all()]
    tables = run.retrieval.get("tables", []) if run.retrieval else []
    top = max((t.get("score") or 0 for t in tables), default=0) or 1
    return {
        "run": run,
        "stages": list(run.stages.all()),
        "attempts": attempts,
        "tables": [t | {"pct": round(100 * max(t.get("score") or 0, 0) / top)} for t in tables],
        "values": run.retrieval.get("values", [])[:10] if run.retrieval else [],
        "result": _result_page(request, run),
        "chart": selectors.run_chart_spec(run=run) if run.status == Run.Status.SUCCEEDED else None,
        "can_cancel": not run.is_terminal and _may_act(request, run),
        "can_retry": run.is_terminal and _may_act(request, run),
    }


def _may_act(request: HttpRequest, run: Run) -> bool:
    return selectors.run_may_act(user=request.user, run=run)


def _result_page(request: HttpRequest, run: Run) -> dict:
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        page = 1
    return selectors.run_result_page(
        run=run, page=page, sort=request.GET.get("sort", ""), descending=request.GET.get("desc") == "1"
    )


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page. While the run is going, htmx polls the status fragment about once a second;
    the fragment drops its polling trigger once the run has ended, which stops the polling."""
    run = _run_or_404(request, run_id)
    context = _run_context(request, run)
    if request.htmx and request.htmx.target == "run-live":
        return render(request, "askdb/partials/run_live.html", context)
    return render(request, "askdb/run.html", context)


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def run_result(request: HttpRequest, run_id: int) -> HttpResponse:
    """One page of the result table, sorted on the server (a fragment for htmx, else the run page)."""
    run = _run_or_404(request, run_id)
    if not request.htmx:
        query = request.GET.urlencode()
        return redirect(f"{reverse('run_detail', args=[run.pk])}?{query}#result")
    return render(
        request, "askdb/partials/result_table.html", {"run": run, "result": _result_page(request, run)}
    )


def _NO_RESULT() -> HttpResponse:
    return HttpResponse("This run has no result to export yet.", status=409, content_type="text/plain")


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def run_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    if not run.result_columns:
        return _NO_RESULT()
    response = StreamingHttpResponse(selectors.run_result_csv_lines(run=run), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="askdb-run-{run.pk}.csv"'
    return response


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def run_xlsx(request: HttpRequest, run_id: int) -> HttpResponse:
    import io

    from openpyxl import Workbook

    run = _run_or_404(request, run_id)
    if not run.result_columns:
        return _NO_RESULT()
    book = Workbook(write_only=True)
    sheet = book.create_sheet("result")
    sheet.append(list(run.result_columns))
    for row in run.result_rows:
        sheet.append(list(row))
    info = book.create_sheet("query")
    info.append(["question", run.question.text])
    info.append(["sql", run.sql])
    info.append(["run", run.pk])
    buffer = io.BytesIO()
    book.save(buffer)
    buffer.seek(0)
    return FileResponse(
        buffer,
        as_attachment=True,
        filename=f"askdb-run-{run.pk}.xlsx",
        content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    )


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def run_cancel_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    if not _may_act(request, run):
        raise Http404("no such run")
    if not run_cancel(run=run, user=request.user):
        messages.info(request, "The run had already ended.")
    return redirect("run_detail", run_id=run.pk)


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def run_retry_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    if not _may_act(request, run):
        raise Http404("no such run")
    new = run_retry(run=run, user=request.user, ip=_ip(request))
    return redirect("run_detail", run_id=new.pk)


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def history(request: HttpRequest) -> HttpResponse:
    search = request.GET.get("q", "").strip()
    status = request.GET.get("status", "")
    mine = request.GET.get("mine") == "1" or not request.user.has_perm("askdb.view_all_runs")
    runs = selectors.run_list_for_user(user=request.user, search=search, status=status, mine_only=mine)
    page = Paginator(runs, 25).get_page(request.GET.get("page"))
    context = {"page": page, "q": search, "status": status, "mine": mine, "statuses": Run.Status.choices}
    return render(request, "askdb/history.html", context)


@permission_required("askdb.review_runs", raise_exception=True)
def review_queue(request: HttpRequest) -> HttpResponse:
    return render(request, "askdb/review_queue.html", {"runs": []})


@permission_required("askdb.view_audit", raise_exception=True)
def audit_log(request: HttpRequest) -> HttpResponse:
    search = request.GET.get("q", "").strip()
    action = request.GET.get("action", "").strip()
    page = Paginator(selectors.audit_event_list(search=search, action=action), 50).get_page(
        request.GET.get("page")
    )
    return render(request, "askdb/audit_log.html", {"page": page, "q": search, "action": action})


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    report = health.system_health()
    return JsonResponse(report, status=200 if report["ok"] else 503)
