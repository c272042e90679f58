"""askdb's pages. Thin: check permission, call a selector or service, render.

An htmx request gets only the named fragment of the same page (the run's live status, a page
of the result table); every link and form also works without JavaScript.
"""

from __future__ import annotations

import datetime as dt
import hmac
import io
import json
import random

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required, permission_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell

from askdb import health, selectors, selectors_requests
from askdb.models import Review, Run
from askdb.outcomes import run_outcome
from askdb.roles import ADMIN, user_role
from askdb.services.long_queries import LongQueryError, long_query_start
from askdb.services.privacy import privacy_policy
from askdb.services.requests import run_requestable
from askdb.services.reviews import review_approve, review_correct, review_flag, review_reassign
from askdb.services.runs import (
    QuestionError,
    QueueUnavailable,
    question_submit,
    run_cancel,
    run_export_record,
    run_pick_candidate,
    run_retry,
)
from askdb.services.sql import ReviewError
from core.answer import format_cell
from core.retrieval import Weights
from infra.audit.services import audit_record
from metadata_admin.models import ClinicalSource, TableDoc
from metadata_admin.services import source_get


def _ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


def _example_questions(limit: int = 6) -> list[str]:
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
    text, error, status = request.GET.get("q", ""), "", 200
    if request.method == "POST":
        text = request.POST.get("question", "")
        try:
            run = question_submit(user=request.user, text=text, ip=_ip(request))
        except (QuestionError, ValueError) as exc:
            error, status = str(exc), 400
        except QueueUnavailable as exc:  # saved, and sent when the queue is back
            error, status = str(exc), 503
        else:
            return redirect("run_detail", run_id=run.pk)
    recent = selectors.run_list_for_user(user=request.user, mine_only=True)[:5]
    try:
        source = source_get(None)
    except ValueError:  # no source yet: the page still renders, asking says why
        source = None
    suggestions = (
        selectors.library_suggestions(source=source, policy=privacy_policy(source=source, user=request.user))
        if source
        else []
    )
    # Without an LLM only library questions can be answered: the docs' examples would all be declined.
    examples = _example_questions() if not suggestions and health.llm_configured() else []
    context = {"text": text, "error": error, "suggestions": suggestions, "source": source, "examples": examples,
               "recent": recent}  # fmt: skip
    return render(request, "askdb/home.html", context, status=status)


def _run_or_404(request: HttpRequest, run_id: int) -> Run:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("no such run")
    return run


def _run_context(request: HttpRequest, run: Run) -> dict:
    dialect = run.question.source.dialect
    tables = run.retrieval.get("tables", []) if run.retrieval else []
    succeeded = run.status == Run.Status.SUCCEEDED
    stages = list(run.stages.all())
    context = {
        "run": run,
        "outcome_text": run_outcome(run),
        "stages": stages,
        # Why the result was cut (the byte cap says so; the row cap is the default wording).
        "truncated_reason": next(
            (s.detail["truncated_reason"] for s in stages if s.detail.get("truncated_reason")), ""
        ),
        "sql_groups": _sql_groups(run, dialect),
        # scores are similarities in 0..1: a bar is drawn to scale, not relative to the best table
        "tables": [t | {"pct": round(100 * min(max(t.get("score") or 0, 0), 1))} for t in tables],
        "values": _linked_values(run),
        "result": _result_page(request, run),
        "answer": (answer := selectors.run_answer(run=run)),
        "single_value": _single_value(run, answer) if succeeded else None,
        "single_label": (selectors.run_labels(run=run) or [None])[0] if succeeded else None,
        "chart": selectors.run_chart_spec(run=run) if succeeded else None,
        "changed_bindings": _changed_bindings(run),
        "can_cancel": not run.is_terminal and _may_act(request, run),
        "can_retry": run.is_terminal and _may_act(request, run),
        # A timed-out run may be run again in the background with a higher limit (long queries).
        "can_long_query": run.outcome == "timeout"
        and not selectors.long_query_allowed(run=run, user=request.user),
        "long_query": selectors.long_query_progress(run=run),
        "long_query_limit_s": settings.ASKDB_LONG_QUERY_TIMEOUT_S,
        "can_follow_up": succeeded and bool(run.sql) and _may_act(request, run),
        "thread": selectors.run_thread(run=run),
        # The request desk: send a declined run to the reviewers; who answered it.
        "answer_requests": selectors_requests.requests_for_run(run=run) if run.is_terminal else [],
        "can_request": run.is_terminal and run_requestable(run) and run.question.user_id == request.user.pk,
        "answer_review": run.reviews.filter(action=Review.Action.ANSWER).select_related("reviewer").first()
        if run.answered_by == "reviewer"
        else None,
    }
    if run.is_terminal:
        outcome = selectors.run_review_outcome(run=run)
        provenance = selectors.run_provenance(run=run)
        context |= {
            "outcome": outcome,
            "outcome_diff": _review_diff(outcome, dialect),
            "provenance": provenance,
            "methods": selectors.methods_paragraph(provenance) if run.sql else "",
            "suggestions": (
                suggestions := selectors_requests.run_did_you_mean(
                    run=run, policy=privacy_policy(source=run.question.source, user=request.user)
                )
            ),
            # The matcher's closest template is named only when it is among the suggestions.
            "closest_verified": any(
                s["id"] == (run.library_match or {}).get("example_id") for s in suggestions
            ),
        }
    return context


def _linked_values(run: Run, limit: int = 10) -> list[dict]:
    """Database values the question mentions, each once: those retrieval counted, not the fuzzy
    near-misses below its noise floor ("phone" is no "Alkaline Phosphatase")."""
    floor, seen, kept = Weights().value_floor, set(), []
    for v in (run.retrieval or {}).get("values", []):
        if (v.get("score") or 0) >= floor and v.get("value") not in seen:
            seen.add(v.get("value"))
            kept.append(v)
    return kept[:limit]


def _changed_bindings(run: Run) -> list[dict]:
    """The library match's values that differ from the example's (the same value is no change)."""
    bindings = (run.library_match or {}).get("bindings", [])
    return [b for b in bindings if str(b.get("old")) != str(b.get("value", b.get("new")))]


def _single_value(run: Run, answer: str) -> str | None:
    """A one-cell result, rounded, to show large, unless the answer sentence already says it."""
    if len(run.result_columns or []) == 1 and len(run.result_rows or []) == 1:
        value = format_cell(run.result_rows[0][0])
        return None if value in answer else value
    return None


def _sql_groups(run: Run, dialect: str) -> list[dict]:
    """The run's SQL attempts with identical SQL shown once (five sampled candidates that agree
    are one query written five times), each with how often and in which attempts it appeared."""
    groups: dict[str, dict] = {}
    for a in run.attempts.all():
        key = " ".join(a.sql.split()).rstrip(";").lower()
        group = groups.get(key)
        if group is None:
            group = groups[key] = {"pretty": selectors.sql_pretty(a.sql, dialect) if a.sql else "", "attempts": [],
                                   "valid": a.valid, "error": a.error, "origin": a.origin}  # fmt: skip
        group["attempts"].append(a.number)
        group["valid"] = group["valid"] or a.valid
    return list(groups.values())


def _review_diff(review: Review | None, dialect: str) -> list:
    """A correction's diff, both sides laid out alike so that only the real change shows."""
    if review is None or review.action != Review.Action.CORRECT:
        return []
    before, after = (
        selectors.sql_pretty(review.sql_before, dialect),
        selectors.sql_pretty(review.sql_after, dialect),
    )
    return selectors.diff_lines(
        selectors.sql_diff(before, after, fromfile="generated", tofile="corrected") or review.diff
    )


def _may_act(request: HttpRequest, run: Run) -> bool:
    return selectors.run_may_act(user=request.user, run=run)


def _result_page(request: HttpRequest, run: Run) -> dict:
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        page = 1
    result = selectors.run_result_page(
        run=run, page=page, sort=request.GET.get("sort", ""), descending=request.GET.get("desc") == "1"
    )
    # The page reads labels and formatted cells; the names stay the sort keys (and the API's).
    labels = selectors.run_labels(run=run)
    result["headings"] = list(zip(result["columns"], labels, strict=False))
    formats = [label.format for label in labels]
    result["cells"] = [list(zip(row, formats, strict=False)) for row in result["rows"]]
    return result


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
    run_export_record(run=run, user=request.user, fmt="csv", ip=_ip(request))
    response = StreamingHttpResponse(
        selectors.run_result_csv_lines(run=run, labels=True), content_type="text/csv"
    )
    response["Content-Disposition"] = f'attachment; filename="askdb-run-{run.pk}.csv"'
    return response


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def run_xlsx(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    if not run.result_columns:
        return _NO_RESULT()
    run_export_record(run=run, user=request.user, fmt="xlsx", ip=_ip(request))
    book = Workbook(write_only=True)
    sheet = book.create_sheet("result")
    sheet.append(_text_cells(sheet, [label.heading for label in selectors.run_labels(run=run)]))
    sheet.append(_text_cells(sheet, run.result_columns))  # the SQL's names, for a script that reads the sheet
    for row in run.result_rows:
        sheet.append(list(row))
    info = book.create_sheet("query")
    info.append(["question", run.question.text])
    info.append(["outcome", run_outcome(run).label])
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


def _text_cells(sheet, values) -> list[WriteOnlyCell]:
    """Header cells written as text: openpyxl writes a string starting with "=" as a formula."""
    cells = []
    for value in values:
        cell = WriteOnlyCell(sheet, value=str(value))
        cell.data_type = "s"
        cells.append(cell)
    return cells


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def run_follow_up_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """Ask a follow-up on an answered run: a new question whose context is this run's question and SQL."""
    run = _run_or_404(request, run_id)
    if not _may_act(request, run):
        raise Http404("no such run")
    try:
        new = question_submit(
            user=request.user, text=request.POST.get("question", ""), ip=_ip(request), follow_up_of=run
        )
    except (QuestionError, ValueError) as exc:
        messages.error(request, str(exc))
        return redirect("run_detail", run_id=run.pk)
    except QueueUnavailable as exc:
        messages.warning(request, str(exc))
        return redirect("run_detail", run_id=run.pk)
    return redirect("run_detail", run_id=new.pk)


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
def run_pick_candidate_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """The researcher picks the candidate that matches what they meant (re-executed, still reviewed)."""
    run = _run_or_404(request, run_id)
    if not _may_act(request, run):
        raise Http404("no such run")
    try:
        run_pick_candidate(run=run, user=request.user, group=_int(request.POST.get("group", "")))
    except ReviewError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Your choice is shown below; a reviewer will check it.")
    return redirect("run_detail", run_id=run.pk)


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def run_retry_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    if not _may_act(request, run):
        raise Http404("no such run")
    try:
        new = run_retry(run=run, user=request.user, ip=_ip(request))
    except QueueUnavailable as exc:  # the new run is saved and sent when the queue is back
        messages.warning(request, str(exc))
        return redirect("run_detail", run_id=exc.run_id)
    return redirect("run_detail", run_id=new.pk)


@require_POST
@permission_required("askdb.ask_questions", raise_exception=True)
def run_long_query_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """Run a timed-out run's SQL again in a worker with the long limit; its page follows it."""
    run = _run_or_404(request, run_id)
    try:
        new = long_query_start(run=run, user=request.user, ip=_ip(request))
    except LongQueryError as exc:
        messages.error(request, str(exc))
        return redirect("run_detail", run_id=run.pk)
    except QueueUnavailable as exc:  # saved, and sent when the queue is back
        messages.warning(request, str(exc))
        return redirect("run_detail", run_id=exc.run_id)
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


@require_GET
@permission_required("askdb.ask_questions", raise_exception=True)
def run_methods_txt(request: HttpRequest, run_id: int) -> HttpResponse:
    """The methods paragraph and the SQL it cites, as a plain-text file to keep with a paper."""
    run = _run_or_404(request, run_id)
    if not run.sql:
        return HttpResponse("This run has no SQL to cite.", status=409, content_type="text/plain")
    text = selectors.methods_text(selectors.run_provenance(run=run))
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="askdb-run-{run.pk}-methods.txt"'
    return response


# --------------------------------------------------------------------------- review


@require_GET
@permission_required("askdb.review_runs", raise_exception=True)
def review_queue(request: HttpRequest) -> HttpResponse:
    """Runs awaiting review, oldest first, filtered; evaluation runs are never here."""
    filters = {
        "status": request.GET.get("status", "pending"),
        "source": request.GET.get("source", "").strip(),
        "asked_by": request.GET.get("user", "").strip(),
        "table": request.GET.get("table", "").strip(),
        "assigned_to_me": request.GET.get("mine") == "1",
    }
    if filters["status"] not in selectors.REVIEW_QUEUE_STATUSES:
        filters["status"] = "pending"
    runs = selectors.review_queue_list(user=request.user, **filters)
    page = Paginator(runs, 25).get_page(request.GET.get("page"))
    rows = [{"run": r, "tables": selectors.run_tables(r), "own": r.question.user_id == request.user.pk}
            for r in page.object_list]  # fmt: skip
    policy, policy_text = selectors.review_policy()
    context = {
        "page": page,
        "rows": rows,
        "filters": filters,
        "filtered": any(filters[k] for k in ("source", "asked_by", "table", "assigned_to_me"))
        or filters["status"] != "pending",
        "statuses": selectors.REVIEW_QUEUE_STATUSES,
        "sources": list(ClinicalSource.objects.values_list("name", flat=True)),
        "table_choices": selectors.review_table_choices(),
        "policy": policy,
        "policy_text": policy_text,
        "policy_always": selectors.review_policy_always(),
        "not_waiting": selectors.review_not_waiting_counts() if not page.object_list else {},
    }
    return render(request, "askdb/review_queue.html", context)


REVIEW_DONE = {
    "approve": "Run {run} approved; its SQL is now a verified example.",
    "correct": "Run {run} corrected and re-run; the corrected SQL is now a verified example.",
    "flag": "Run {run} flagged as {category}.",
    "reassign": "Run {run} assigned to {assignee}.",
}


@require_http_methods(["GET", "POST"])
@permission_required("askdb.review_runs", raise_exception=True)
def run_review(request: HttpRequest, run_id: int) -> HttpResponse:
    """Review one run: everything that produced it, then approve, correct, flag (or reassign).

    Every action is a service call; a refusal is shown beside its form with what was typed kept.
    """
    run = _run_or_404(request, run_id)
    form = {
        "action": "",
        "comment": "",
        "sql": selectors.sql_pretty(run.sql, run.question.source.dialect) if run.sql else "",
        "category": "",
        "assignee": str(run.assigned_to_id or ""),
    }
    error = ""
    if request.method == "POST":
        form |= {k: request.POST.get(k, form[k]) for k in form}
        try:
            review = _review_act(request, run, form)
        except ReviewError as exc:
            error = str(exc)
        else:
            message = REVIEW_DONE[review.action].format(
                run=run.pk, category=review.get_category_display(),
                assignee=run.assigned_to.get_username() if run.assigned_to else "",
            )  # fmt: skip
            if review.action == Review.Action.FLAG and run.answered_by == "library" and run.example_id:
                message += f" Verified example #{run.example_id} is on hold: it answers nothing until a reviewer restores it."
            if review.action == Review.Action.CORRECT:
                message = format_html(
                    '{} <a href="{}#review-outcome">See the diff and the corrected result.</a>',
                    message, reverse("run_detail", args=[run.pk]),
                )  # fmt: skip
            messages.success(request, message)
            following = selectors.review_queue_next(user=request.user, after=run)
            if following is None:
                return redirect("review_queue")
            return redirect("run_review", run_id=following.pk)
    context = _run_review_context(request, run) | {"form": form, "error": error}
    context["error_at"] = _error_slot(context, form["action"]) if error else ""
    return render(request, "askdb/run_review.html", context, status=400 if error else 200)


def _review_act(request: HttpRequest, run: Run, form: dict) -> Review:
    action, user = form["action"], request.user
    if action == "approve":
        return review_approve(run=run, reviewer=user, comment=form["comment"].strip())
    if action == "correct":
        return review_correct(run=run, reviewer=user, sql=form["sql"], comment=form["comment"].strip())
    if action == "flag":
        if not form["comment"].strip():
            raise ReviewError("Say what is wrong: flagging needs a comment the researcher can act on.")
        return review_flag(run=run, reviewer=user, category=form["category"], comment=form["comment"].strip())
    if action == "reassign":
        assignee = selectors.reviewers_list().filter(pk=_int(form["assignee"])).first()
        return review_reassign(run=run, admin=user, reviewer=assignee)
    raise ReviewError("Choose approve, correct or flag.")


def _error_slot(context: dict, action: str) -> str:
    """Which form shows the error: the one submitted, or the top of the actions when that form is
    not on the page (a hand-made POST to approve one's own question, say)."""
    shown = {"approve": context["can_approve"], "correct": context["can_approve"], "flag": True,
             "reassign": context["can_reassign"]}  # fmt: skip
    return action if shown.get(action) else "top"


def _int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _run_review_context(request: HttpRequest, run: Run) -> dict:
    dialect = run.question.source.dialect
    own = run.question.user_id == request.user.pk
    answered = run.status == Run.Status.SUCCEEDED and bool(run.sql)
    reviews = list(run.reviews.select_related("reviewer"))
    return {
        "run": run,
        "stages": list(run.stages.all()),
        "attempts": [
            {"attempt": a, "pretty": selectors.sql_pretty(a.sql, dialect)} for a in run.attempts.all()
        ],
        "preview_rows": (run.result_rows or [])[:20],
        "answerability_json": json.dumps(run.answerability or {}, indent=2, sort_keys=True, default=str),
        "tables": selectors.run_tables(run),
        "nearest": selectors.run_nearest_examples(run=run),
        "reviews": [{"review": r, "diff": _review_diff(r, dialect)} for r in reviews],
        "own": own,
        "answered": answered,
        "can_approve": answered and not own,
        "can_reassign": request.user.has_perm("askdb.manage_users"),
        "reviewers": selectors.reviewers_list().exclude(pk=run.question.user_id),
        "categories": Review.Category.choices,
        "next_run": selectors.review_queue_next(user=request.user, after=run),
    }


# --------------------------------------------------------------------------- audit


def _date(value: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(value.strip()) if value.strip() else None
    except ValueError:
        return None


@require_GET
@permission_required("askdb.view_audit", raise_exception=True)
def audit_log(request: HttpRequest) -> HttpResponse:
    """The audit log, filtered; `?format=csv` streams every matching event (not just one page)."""
    filters = {
        "search": request.GET.get("q", "").strip(),
        "action": request.GET.get("action", "").strip(),
        "actor": request.GET.get("actor", "").strip(),
        "target_type": request.GET.get("target_type", "").strip(),
        "target_id": request.GET.get("target_id", "").strip(),
        "date_from": _date(request.GET.get("from", "")),
        "date_to": _date(request.GET.get("to", "")),
    }
    events = selectors.audit_event_list(**filters)
    if request.GET.get("format") == "csv":
        audit_record(action="audit.exported", actor=request.user, message="audit log CSV",
                     detail={k: str(v) for k, v in filters.items() if v})  # fmt: skip
        response = StreamingHttpResponse(
            selectors.audit_event_csv_lines(events=events), content_type="text/csv"
        )
        response["Content-Disposition"] = 'attachment; filename="askdb-audit.csv"'
        return response
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    rows = [
        {
            "event": e,
            "compact": json.dumps(e.detail, separators=(",", ":"), default=str) if e.detail else "",
            "pretty": json.dumps(e.detail, indent=2, sort_keys=True, default=str) if e.detail else "",
        }
        for e in page.object_list
    ]
    context = {
        "page": page,
        "rows": rows,
        "q": filters["search"],
        "filters": filters | {"date_from": request.GET.get("from", ""), "date_to": request.GET.get("to", "")},
        "known_actions": AUDIT_ACTIONS,
        "date_errors": [
            f"“{raw}” is not a date (write it as YYYY-MM-DD), so that filter was not applied."
            for raw in (request.GET.get("from", ""), request.GET.get("to", ""))
            if raw.strip() and _date(raw) is None
        ],
        "csv_query": _with(request, format="csv", page=None),
    }
    return render(request, "askdb/audit_log.html", context)


AUDIT_ACTIONS = (
    "auth.", "auth.login", "auth.logout", "auth.login_failed", "auth.token", "question.asked", "run.",
    "run.retried", "run.cancelled", "run.exported", "llm.call", "sql.", "sql.executed", "sql.explained",
    "review.", "review.approve", "review.correct", "review.flag", "review.reassign", "request.", "request.created", "request.answered", "request.closed", "example.", "examples.imported",
    "examples.revalidated", "docs.", "source.", "user.", "user.created", "user.changed", "user.roles_changed",
)  # fmt: skip


def _with(request: HttpRequest, **changes) -> str:
    """The current query string with some parameters replaced (None removes one)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value is not None:
            query[key] = value
    return query.urlencode()


def _may_see_health_details(request: HttpRequest) -> bool:
    """Admins, and monitoring with ASKDB_HEALTHZ_TOKEN (`Authorization: Bearer …`)."""
    if user_role(request.user) == ADMIN:
        return True
    token = settings.ASKDB_HEALTHZ_TOKEN
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Status for anyone (load balancers); each part's detail only for admins or a token."""
    report = health.system_health()
    body = report if _may_see_health_details(request) else health.public_health(report)
    return JsonResponse(body, status=200 if report["ok"] else 503)


@login_not_required
def login_locked_out(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """django-axes' page for a locked sign-in (AXES_LOCKOUT_CALLABLE): what happened, for how long."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    context = {"username": username, "minutes": minutes, "failure_limit": settings.AXES_FAILURE_LIMIT}
    return render(request, "registration/locked_out.html", context, status=429)
