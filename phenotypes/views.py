"""The Phenotypes pages: define, run with live progress, evidence, adjudication, cohort.

One view renders the whole page or, for htmx, the named fragment (the run's progress, polled
until the run ends; polling stops with status 286).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from metadata_admin.models import ClinicalSource
from phenotypes.models import PatientDecision, Phenotype, PhenotypeRun
from phenotypes.selectors import adjudication_sample, estimated_precision, run_access, run_result
from phenotypes.services import (
    PhenotypeError,
    adjudication_record,
    cohort_save,
    notes_policy_set,
    phenotype_define,
    phenotype_run_submit,
    snippets_may_leave,
)


@login_required
@permission_required("askdb.ask_questions", raise_exception=True)
def phenotype_list(request):
    if request.method == "POST":
        if not request.user.has_perm("askdb.review_runs"):
            return HttpResponse("Only reviewers and admins define phenotypes.", status=403)
        data = {
            "name": request.POST.get("name", ""),
            "description": request.POST.get("description", ""),
            "terms": [t.strip() for t in request.POST.get("terms", "").split(",") if t.strip()],
            "icd": [c.strip() for c in request.POST.get("icd", "").split(",") if c.strip()],
        }
        try:
            p = phenotype_define(data=data, actor=request.user)
        except PhenotypeError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Defined {p.name}.")
        return redirect("phenotypes:list")
    sources = list(ClinicalSource.objects.all())
    return render(
        request,
        "phenotypes/list.html",
        {
            "phenotypes": Phenotype.objects.all(),
            "runs": PhenotypeRun.objects.select_related("phenotype", "source")[:30],
            "sources": [(s, snippets_may_leave(s)) for s in sources],
        },
    )


@login_required
@permission_required("askdb.review_runs", raise_exception=True)
@require_POST
def phenotype_run_start(request):
    phenotype = get_object_or_404(Phenotype, pk=request.POST.get("phenotype"))
    source = get_object_or_404(ClinicalSource, pk=request.POST.get("source"))
    try:
        run = phenotype_run_submit(
            phenotype=phenotype, source=source, judge=request.POST.get("judge", "context"), actor=request.user
        )
    except PhenotypeError as exc:
        messages.error(request, str(exc))
        return redirect("phenotypes:list")
    return redirect("phenotypes:run", run_id=run.pk)


@login_required
@permission_required("askdb.curate_catalog", raise_exception=True)
@require_POST
def notes_policy(request, source_id: int):
    source = get_object_or_404(ClinicalSource, pk=source_id)
    notes_policy_set(source=source, snippets_to_llm=request.POST.get("allow") == "1", actor=request.user)
    return redirect("phenotypes:list")


@login_required
@permission_required("askdb.ask_questions", raise_exception=True)
def phenotype_run(request, run_id: int):
    run = get_object_or_404(PhenotypeRun.objects.select_related("phenotype", "source"), pk=run_id)
    finished = run.status in (PhenotypeRun.Status.DONE, PhenotypeRun.Status.FAILED)
    if request.htmx and request.GET.get("fragment") == "progress":
        response = render(request, "phenotypes/partials/progress.html", {"run": run})
        if finished:  # the page reloads once to show the result, and polling stops
            response = HttpResponseStopPolling(response.content)
            response["HX-Refresh"] = "true"
        return response
    rows_ok, text_ok = run_access(request.user)
    context = {"run": run, "finished": finished, "rows_ok": rows_ok, "text_ok": text_ok}
    if finished and run.status == PhenotypeRun.Status.DONE:
        result = run_result(run, user=request.user)
        patients = result.get("patients", [])
        context |= {
            "result": result,
            "present": [p for p in patients if p["decision"] == "present"][:200],
            "uncertain": [p for p in patients if p["decision"] == "uncertain"][:200],
            "precision": estimated_precision(run),
        }
        if rows_ok and request.user.has_perm("askdb.review_runs"):
            by_subject = {p["subject_id"]: p for p in patients}
            context["sample"] = [
                (
                    d,
                    by_subject.get(d.subject_id, {}).get("evidence", []),
                    d.adjudications.filter(reviewer=request.user).first(),
                )
                for d in adjudication_sample(run)
            ]
    return render(request, "phenotypes/run.html", context)


@login_required
@permission_required("askdb.review_runs", raise_exception=True)
@require_POST
def phenotype_adjudicate(request, run_id: int, decision_id: int):
    decision = get_object_or_404(PatientDecision, pk=decision_id, run_id=run_id)
    adjudication_record(decision=decision, reviewer=request.user, agree=request.POST.get("agree") == "1")
    return redirect("phenotypes:run", run_id=run_id)


@login_required
@permission_required("askdb.review_runs", raise_exception=True)
@require_POST
def phenotype_cohort(request, run_id: int):
    run = get_object_or_404(PhenotypeRun, pk=run_id)
    try:
        table = cohort_save(run=run, actor=request.user)
    except PhenotypeError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, f"Saved as {table}: ask questions about the {run.definition['name']} cohort."
        )
    return redirect("phenotypes:run", run_id=run_id)
