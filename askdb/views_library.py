"""The example library's pages: browse and search verified pairs, open one, retire or restore it,
import files (JSON, YAML, the EHRSQL pair) with a validation report, export, and re-validate.

Thin like askdb/views.py: parsing is askdb/library_io.py, every write is a service in
askdb/services/ (the same ones the API and the import command call).
"""

from __future__ import annotations

from functools import wraps

import sqlglot
from celery.result import AsyncResult
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from askdb import library_io, selectors_requests
from askdb.answerability import store as answerability_store
from askdb.answerability.tasks import answerability_train_task
from askdb.models import Example, ImportJob, Review
from askdb.roles import LIBRARY_BROWSE_PERMS
from askdb.selectors import paraphrases_of, template_shares
from askdb.services.examples import example_set_status, examples_revalidate
from askdb.services.exports import ImportReport, examples_export, examples_import
from askdb.services.imports import ImportQueueUnavailable, import_is_large, import_job_submit
from askdb.services.sql import ReviewError
from infra.adapters.clinical import ExecutionError
from infra.providers.embeddings import EmbeddingError
from metadata_admin.models import ClinicalSource, TableDoc
from metadata_admin.services import source_get

BROWSE_PERMS = LIBRARY_BROWSE_PERMS  # everyone who asks may browse (askdb/roles.py says why)
EDIT_PERM = "askdb.review_runs"  # import, export, retire, restore
REVALIDATE_PERM = "askdb.curate_catalog"  # admins: it re-checks the whole library
PER_PAGE = 25


def _require_any(*perms: str):
    """Like permission_required(raise_exception=True), but any one of the permissions will do."""

    def decorator(view):
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs):
            if not any(request.user.has_perm(p) for p in perms):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


# --------------------------------------------------------------------------- reads


def examples_filtered(
    *, search: str = "", table: str = "", kind: str = "", status: str = "", source=None
) -> QuerySet[Example]:
    """The library filtered as the list page and the API filter it; retired examples are left out
    unless asked for (status "retired", or "all").

    A table is a qualified name ("mimiciv_hosp.patients") or a bare one ("patients"), which
    matches that table in any schema. Belongs in askdb/selectors.py; kept here until it moves.
    """
    qs = Example.objects.select_related("source", "approved_by").defer("embedding")
    if source is not None:
        qs = qs.filter(source=source)
    if status == "all":
        pass
    elif status in Example.Status.values:
        qs = qs.filter(status=status)
    else:
        qs = qs.exclude(status=Example.Status.RETIRED)
    if kind in Example.Kind.values:
        qs = qs.filter(kind=kind)
    table = table.strip()
    if table:
        match = Q(tables__contains=[table])
        if "." not in table:
            docs = TableDoc.objects.filter(name__iexact=table).exclude(schema_name="")
            for schema, name in docs.values_list("schema_name", "name").distinct():
                match |= Q(tables__contains=[f"{schema}.{name}"])
        qs = qs.filter(match)
    search = search.strip()
    if search:
        qs = qs.filter(
            Q(question__icontains=search) | Q(sql__icontains=search) | Q(paraphrases__icontains=search)
        )
    return qs


def _sources():
    return list(ClinicalSource.objects.order_by("name"))


def _source_named(name: str):
    """The source a form or filter names, or None (meaning every source / the default)."""
    return next((s for s in _sources() if s.name == name), None) if name else None


def _pretty(sql: str, dialect: str) -> str:
    try:
        return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
    except (sqlglot.errors.ParseError, IndexError, ValueError):
        return sql


# --------------------------------------------------------------------------- browse


@require_GET
@_require_any(*BROWSE_PERMS)
def example_list(request: HttpRequest) -> HttpResponse:
    """Search and filter the library; retired examples only when the status filter asks."""
    filters = {
        "q": request.GET.get("q", "").strip(),
        "table": request.GET.get("table", "").strip(),
        "kind": request.GET.get("kind", ""),
        "status": request.GET.get("status", ""),
        "source": request.GET.get("source", ""),
    }
    source = _source_named(filters["source"])
    examples = examples_filtered(
        search=filters["q"], table=filters["table"], kind=filters["kind"], status=filters["status"],
        source=source,
    )  # fmt: skip
    page = Paginator(examples, PER_PAGE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    shares = template_shares(page.object_list)
    answered = selectors_requests.approvals_answered_since(examples=page.object_list)
    for example in page.object_list:
        example.same_template = shares.get(example.pk, 0)
        example.answered_since = answered.get(example.pk, 0)
    known = Example.objects.filter(**({"source": source} if source else {})).values_list("tables", flat=True)
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("training", None)
    may_train, task_id = request.user.has_perm(REVALIDATE_PERM), request.GET.get("training", "")
    context = {
        "page": page,
        "filters": filters,
        "query": query.urlencode(),
        "tables": sorted({t for tables in known for t in tables or []}),
        "kinds": Example.Kind.choices,
        "statuses": Example.Status.choices,
        "sources": _sources(),
        "may_edit": request.user.has_perm(EDIT_PERM),
        "may_revalidate": may_train,
        "gate_models": [(s.name, answerability_store.current_version(s.name)) for s in _sources()],
        "training": _training(task_id) if task_id and may_train else None,
        "request_numbers": selectors_requests.request_numbers(source=source),
    }
    return render(request, "askdb/library/list.html", context)


@require_GET
@_require_any(*BROWSE_PERMS)
def example_detail(request: HttpRequest, example_id: int) -> HttpResponse:
    example = get_object_or_404(
        Example.objects.select_related("source", "approved_by", "origin_run__question"), pk=example_id
    )
    return render(request, "askdb/library/detail.html", _detail_context(request, example))


def _detail_context(request: HttpRequest, example: Example) -> dict:
    template = example.template or {}
    answered = example.answered_runs.select_related("question__user").order_by("-created_at")
    if not request.user.has_perm("askdb.view_all_runs"):  # a researcher sees only their own runs
        answered = answered.filter(question__user=request.user)
    return {
        "example": example,
        "pretty_sql": _pretty(example.sql, example.source.dialect) if example.sql else "",
        "answered_runs": answered[:50],
        "answered_count": answered.count(),
        "reviews": Review.objects.filter(example=example).select_related("reviewer", "run")[:20],
        "template_masked": next(
            (
                template[k]
                for k in ("masked_question", "masked", "question_template", "pattern")
                if template.get(k)
            ),
            "",
        ),
        "template_slots": _slots(template.get("slots")),
        "template": template,
        "paraphrases": paraphrases_of(example),
        "may_edit": request.user.has_perm(EDIT_PERM),
    }


def _slots(slots) -> list[dict]:
    """A template's slots as a reviewer reads them (what kind of value, the words in the question,
    the column it goes to), not the matcher's bookkeeping (offsets, uses, cases)."""
    if isinstance(slots, dict):
        slots = [{"name": k, "text": v} for k, v in slots.items()]
    rows = []
    for slot in slots if isinstance(slots, list) else []:
        slot = slot if isinstance(slot, dict) else {"text": slot}
        kind = str(slot.get("type") or slot.get("name") or "value").replace("_", " ")
        rows.append(
            {"kind": kind, "text": slot.get("text", slot.get("value", "")), "column": slot.get("column", "")}
        )
    return rows


# --------------------------------------------------------------------------- retire, restore


def _set_status(request: HttpRequest, example_id: int, status: str, done: str) -> HttpResponse:
    example = get_object_or_404(Example.objects.select_related("source"), pk=example_id)
    try:
        example_set_status(
            example=example, actor=request.user, status=status, note=request.POST.get("note", "").strip()
        )
    except ReviewError as exc:
        messages.error(request, f"Example {example.pk} was not {done}: {exc}")
    else:
        messages.success(request, f"Example {example.pk} {done}.")
    return redirect("library:detail", example_id=example.pk)


@require_POST
@_require_any(EDIT_PERM)
def example_retire(request: HttpRequest, example_id: int) -> HttpResponse:
    """A retired example is never used again as a few-shot example, template or gate negative."""
    return _set_status(request, example_id, Example.Status.RETIRED, "retired")


@require_POST
@_require_any(EDIT_PERM)
def example_restore(request: HttpRequest, example_id: int) -> HttpResponse:
    """Back into use, once its SQL still validates against today's catalog."""
    return _set_status(request, example_id, Example.Status.ACTIVE, "restored")


@require_POST
@_require_any(REVALIDATE_PERM)
def examples_revalidate_view(request: HttpRequest) -> HttpResponse:
    """Re-check every example of a source against the catalog (and the data, when asked)."""
    try:
        source = source_get(request.POST.get("source") or None)
    except ValueError as exc:
        messages.error(request, str(exc))
        return redirect("library:list")
    execute = request.POST.get("execute") == "1"
    report = examples_revalidate(source=source, execute=execute, actor=request.user)
    ids = [*report["broken"], *report["restored"]]
    named = {e.pk: e for e in Example.objects.filter(pk__in=ids).defer("embedding")}
    context = {
        "source": source,
        "execute": execute,
        "report": report,
        "broken": [named[pk] for pk in report["broken"] if pk in named],
        "restored": [named[pk] for pk in report["restored"] if pk in named],
    }
    return render(request, "askdb/library/revalidated.html", context)


@require_POST
@_require_any(REVALIDATE_PERM)
def answerability_train_view(request: HttpRequest) -> HttpResponse:
    """Queue training of the source's answerability gate on its library (a Celery task: a
    5,000-question library takes minutes); the new version appears on this page when done."""
    try:
        source = source_get(request.POST.get("source") or None)
    except ValueError as exc:
        messages.error(request, str(exc))
        return redirect("library:list")
    result = answerability_train_task.delay(source.pk)
    return redirect(f"{reverse('library:list')}?training={result.id}")


@require_GET
@_require_any(REVALIDATE_PERM)
def answerability_training_view(request: HttpRequest, task_id: str) -> HttpResponse:
    """How a training the admin started is going: the fragment the library page polls, without
    polling attributes once the training has ended, so the polling stops there."""
    return render(request, "askdb/library/_training.html", {"training": _training(task_id)})


def _training(task_id: str) -> dict:
    """A training task's state in words, from the Celery result backend."""
    result = AsyncResult(task_id, app=answerability_train_task.app)
    info = result.info  # read once: the task may end between two reads (a dict, then its exception)
    info = info if isinstance(info, dict) else {}
    state = {"PENDING": "waiting", "STARTED": "running", "PROGRESS": "running", "SUCCESS": "done"}
    training = {"id": task_id, "state": state.get(result.state, "failed"), "source": info.get("source", "")}
    if training["state"] == "running":
        training["line"] = info.get("line", "")
    elif training["state"] == "done":
        metrics = info.get("metrics") or {}
        training |= {"version": info.get("version", ""), "seconds": info.get("seconds"),
                     "f1": (metrics.get("unanswerable") or {}).get("f1"), "auc": metrics.get("auc")}  # fmt: skip
    elif training["state"] == "failed":
        training["error"] = str(result.info or "the worker gave no reason")
    return training


# --------------------------------------------------------------------------- import, export


@require_http_methods(["GET", "POST"])
@_require_any(EDIT_PERM)
def examples_import_view(request: HttpRequest) -> HttpResponse:
    """Upload one file (JSON or YAML), or the EHRSQL pair (data.json + label.json).

    A file that cannot be read is refused whole with what is wrong and where (400); a readable
    file is imported pair by pair, and the report lists every pair that failed with its error.
    """
    context = {"sources": _sources(), "chosen": request.POST.get("source", ""), "error": "", "report": None,
               "max_mb": library_io.MAX_UPLOAD_BYTES // 1024 // 1024}  # fmt: skip
    if request.method == "GET":
        return render(request, "askdb/library/import.html", context)
    upload, labels = request.FILES.get("file"), request.FILES.get("labels")
    try:
        if upload is None:
            raise library_io.LibraryFormatError("Choose a file to import.")
        for f in (upload, labels):
            if f is not None:
                library_io.check_size(f.size, f.name)
        if labels is not None:
            items = library_io.parse_ehrsql(upload.read(), labels.read())
        else:
            items = library_io.parse_examples(upload.read(), upload.name)
        source = source_get(request.POST.get("source") or None)
    except (library_io.LibraryFormatError, ValueError) as exc:
        context["error"] = str(exc)
        return render(request, "askdb/library/import.html", context, status=400)
    execute = request.POST.get("no_execute") != "1"
    if import_is_large(items):  # minutes of work: a worker does it, and this page follows the job
        try:
            job = import_job_submit(source=source, items=items, approved_by=request.user, execute=execute)
        except ImportQueueUnavailable as exc:
            context["error"] = str(exc)
            return render(request, "askdb/library/import.html", context, status=503)
        context.update(job=job, source=source, filename=upload.name)
        return render(request, "askdb/library/import.html", context, status=202)
    try:
        report = examples_import(source=source, items=items, approved_by=request.user, execute=execute)
    except (ExecutionError, EmbeddingError) as exc:
        # Pairs before the failure are imported (each is its own transaction); say so.
        context["error"] = (
            f"The import stopped: {exc}. Pairs checked before this were kept; fix it and import again."
        )
        return render(request, "askdb/library/import.html", context, status=503)
    context.update(report=report, report_rows=_report_rows(report), source=source, filename=upload.name)
    return render(request, "askdb/library/import.html", context)


@require_GET
@_require_any(EDIT_PERM)
def examples_import_job_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """How a large import a worker is doing is going: the fragment the import page polls, without
    polling attributes once the job has ended, so the polling stops there."""
    job = get_object_or_404(ImportJob.objects.select_related("source").defer("items"), pk=job_id)
    return render(request, "askdb/library/_import_job.html", {"job": job})


def _report_rows(report: ImportReport) -> dict:
    named = {
        e.pk: e for e in Example.objects.filter(pk__in=[*report.created, *report.merged]).defer("embedding")
    }
    return {
        "created": [named[pk] for pk in report.created if pk in named],
        "merged": [named[pk] for pk in report.merged if pk in named],
    }


@require_GET
@_require_any(EDIT_PERM)
def examples_export_view(request: HttpRequest) -> HttpResponse:
    """The library as a JSON or YAML download, in the shape the import reads."""
    fmt = request.GET.get("format", "json")
    if fmt not in library_io.FORMATS:
        return HttpResponse(
            f"Unknown format {fmt!r}; use json or yaml.", status=400, content_type="text/plain; charset=utf-8"
        )
    try:
        source = source_get(request.GET.get("source") or None)
    except ValueError as exc:
        return HttpResponse(f"{exc}.", status=400, content_type="text/plain; charset=utf-8")
    examples = examples_export(
        source=source, include_retired=request.GET.get("retired") == "1", actor=request.user
    )
    body = library_io.dump_examples(examples, fmt=fmt, source=source.name)
    content_type = "application/json" if fmt == "json" else "application/yaml"
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d")
    response["Content-Disposition"] = f'attachment; filename="askdb-examples-{source.name}-{stamp}.{fmt}"'
    return response
