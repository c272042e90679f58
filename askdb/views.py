"""askdb's pages. Thin: check permission, call a selector or service, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required, permission_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from askdb import health, selectors


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "askdb/home.html", {"health_llm": health.llm()})


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
