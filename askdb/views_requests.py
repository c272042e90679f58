"""The request desk's pages: send a declined run as a request, the reviewers' queue and SQL
editor (preview, code check, answer), and each person's inbox. Thin: permission, service, render."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from askdb import selectors, selectors_requests
from askdb.models import AnswerRequest, Notification
from askdb.services.requests import (
    RequestError,
    notifications_mark_read,
    request_answer,
    request_close,
    request_create,
    request_group_of,
    request_groups,
    request_preview,
    sql_code_check,
)
from askdb.services.sql import ReviewError


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def run_request_create(request: HttpRequest, run_id: int) -> HttpResponse:
    """ "Request an answer": a declined or failed run goes to the reviewers, with an optional note."""
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("no such run")
    try:
        request_create(run=run, user=request.user, note=request.POST.get("note", ""))
    except RequestError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, "Sent to the reviewers. You will find their answer in your inbox and on this page."
        )
    return redirect("run_detail", run_id=run.pk)


@require_GET
@permission_required("askdb.review_runs", raise_exception=True)
def request_queue(request: HttpRequest) -> HttpResponse:
    """Pending requests grouped by what they ask, the most asked first."""
    groups = [
        {"lead": g[0], "requests": g, "count": len(g), "people": len({r.requested_by_id for r in g})}
        for g in request_groups()
    ]
    answered = (
        AnswerRequest.objects.exclude(status=AnswerRequest.Status.PENDING)
        .select_related("requested_by", "answered_by", "answer_run")
        .order_by("-answered_at", "-id")[:20]
    )
    return render(request, "askdb/requests/queue.html", {"groups": groups, "answered": answered})


def _draft_sql(run, nearest: list[dict]) -> tuple[str, str]:
    """Where the editor starts: the LLM's own SQL for this run (a draft), else the nearest
    verified example's SQL, else the library's closest template."""
    dialect = run.question.source.dialect
    attempt = run.attempts.exclude(sql="").order_by("-number").first()
    if attempt is not None:
        return selectors.sql_pretty(attempt.sql, dialect), "the SQL askdb drafted for this question"
    for n in nearest:
        if n["example"].sql:
            return selectors.sql_pretty(n["example"].sql, dialect), f"verified example #{n['example'].pk}"
    match_sql = (run.library_match or {}).get("sql")
    if match_sql:
        return selectors.sql_pretty(match_sql, dialect), "the library's closest template"
    return "SELECT\nFROM\nWHERE", ""


@require_http_methods(["GET", "POST"])
@permission_required("askdb.review_runs", raise_exception=True)
def request_detail(request: HttpRequest, request_id: int) -> HttpResponse:
    """Answer a request: the SQL editor, a preview as the asker would see it, the code check."""
    answer_request = selectors_requests.request_get(request_id=request_id)
    if answer_request is None:
        raise Http404("no such request")
    run = answer_request.run
    nearest = selectors.run_nearest_examples(run=run)
    draft, draft_from = _draft_sql(run, nearest)
    action = request.POST.get("action", "") if request.method == "POST" else ""
    sql = request.POST.get("sql", draft) if request.method == "POST" else draft
    comment = request.POST.get("comment", "")
    preview, checks, error, status = None, None, "", 200
    if action in ("preview", "answer", "close"):
        try:
            if action == "close":
                request_close(request=answer_request, reviewer=request.user, comment=comment)
                messages.success(
                    request, f"Request {answer_request.pk} closed; the person who asked was told why."
                )
                return redirect("requests:queue")
            if action == "answer":
                done = request_answer(
                    request=answer_request, reviewer=request.user, sql=sql, comment=comment.strip()
                )
                messages.success(request, f"Request {done.pk} answered: the run shows the answer, the person who "
                                          "asked was told, the pair is in the library, and grouped requests are "
                                          "being asked again.")  # fmt: skip
                return redirect("requests:queue")
            validated, result = request_preview(request=answer_request, reviewer=request.user, sql=sql)
            preview = {"columns": list(result.columns), "rows": [list(r) for r in result.rows[:50]],
                       "row_count": result.row_count, "privacy": result.privacy}  # fmt: skip
            checks = sql_code_check(source=answer_request.source, sql=validated.sql, actor=request.user)
        except (RequestError, ReviewError) as exc:
            error, status = str(exc), 400
    schema = selectors_requests.editor_schema(source=answer_request.source)
    docs = schema.pop("docs")
    context = {
        "req": answer_request,
        "run": run,
        "group": request_group_of(answer_request)
        if answer_request.status == AnswerRequest.Status.PENDING
        else [],
        "nearest": nearest,
        "sql": sql,
        "draft_from": draft_from,
        "comment": comment,
        "preview": preview,
        "checks": checks,
        "error": error,
        "schema_json": json.dumps(schema),
        "docs_json": json.dumps(docs),
        "own": answer_request.requested_by_id == request.user.pk,
    }
    if request.htmx and request.htmx.target == "preview":
        return render(request, "askdb/requests/partials/preview.html", context, status=status)
    return render(request, "askdb/requests/detail.html", context, status=status)


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def inbox(request: HttpRequest) -> HttpResponse:
    return render(
        request, "askdb/requests/inbox.html", {"notes": selectors_requests.inbox_list(user=request.user)}
    )


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def inbox_open(request: HttpRequest, note_id: int) -> HttpResponse:
    """Open a notification: it is read from now on, and its run is shown."""
    note = Notification.objects.filter(pk=note_id, user=request.user).first()
    if note is None:
        raise Http404("no such notification")
    notifications_mark_read(user=request.user, ids=[note.pk])
    return redirect(note.url or "inbox")


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def inbox_read_all(request: HttpRequest) -> HttpResponse:
    notifications_mark_read(user=request.user)
    return redirect("inbox")
