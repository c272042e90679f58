"""REST API of phenotypes: define, run, results (the same services as the command and the page)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from metadata_admin.models import ClinicalSource
from phenotypes.models import Phenotype, PhenotypeRun
from phenotypes.selectors import estimated_precision, run_result
from phenotypes.services import PhenotypeError, cohort_save, phenotype_define, phenotype_run_submit


class CanRunPhenotypes(BasePermission):
    def has_permission(self, request, view) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return request.user.has_perm("askdb.ask_questions")
        return request.user.has_perm("askdb.review_runs")


def _phenotype(p: Phenotype) -> dict:
    return {"name": p.name, "description": p.description, "terms": p.terms, "icd": p.icd}


class PhenotypeListApi(APIView):
    """GET: the definitions. POST {name, description, terms, icd}: define or replace (reviewers)."""

    permission_classes = [IsAuthenticated, CanRunPhenotypes]

    def get(self, request):
        return Response([_phenotype(p) for p in Phenotype.objects.all()])

    def post(self, request):
        try:
            p = phenotype_define(data=dict(request.data), actor=request.user)
        except PhenotypeError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(_phenotype(p), status=status.HTTP_201_CREATED)


class PhenotypeRunApi(APIView):
    """POST {phenotype, source, judge}: start a run on a worker; 202 with its id (reviewers)."""

    permission_classes = [IsAuthenticated, CanRunPhenotypes]

    def post(self, request):
        phenotype = get_object_or_404(Phenotype, name=request.data.get("phenotype", ""))
        source = get_object_or_404(ClinicalSource, name=request.data.get("source", ""))
        try:
            run = phenotype_run_submit(
                phenotype=phenotype,
                source=source,
                judge=request.data.get("judge", "context"),
                actor=request.user,
            )
        except PhenotypeError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response({"run": run.pk, "status": run.status}, status=status.HTTP_202_ACCEPTED)


class PhenotypeRunDetailApi(APIView):
    """GET: the run's progress and result, shaped by what the user may see."""

    permission_classes = [IsAuthenticated, CanRunPhenotypes]

    def get(self, request, run_id: int):
        run = get_object_or_404(PhenotypeRun.objects.select_related("phenotype"), pk=run_id)
        body = run_result(run, user=request.user, evidence=request.query_params.get("evidence", "deciding"))
        body["progress"] = {"stage": run.stage, "done": run.done, "total": run.total}
        body["precision"] = estimated_precision(run)
        body["cohort_table"] = run.cohort_table
        return Response(body)


class PhenotypeCohortApi(APIView):
    """POST: save the finished run's present patients as a cohort table questions can join."""

    permission_classes = [IsAuthenticated, CanRunPhenotypes]

    def post(self, request, run_id: int):
        run = get_object_or_404(PhenotypeRun, pk=run_id)
        try:
            table = cohort_save(run=run, actor=request.user)
        except PhenotypeError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response({"cohort_table": table}, status=status.HTTP_201_CREATED)
