"""The REST API: ask questions, follow their runs, download results, for scripts and notebooks.

Thin like the pages: each endpoint checks permission, calls the service or selector the pages
call, and shapes the answer with askdb/serializers.py. Every error answers {"error": sentence}
(validation errors add "fields"), so a script has one thing to print.

Who may do what:
- anyone with a role may ask (askdb.ask_questions) and list/open the runs they may see —
  their own, or everyone's with askdb.view_all_runs (reviewers, admins);
- a run a user may not see answers 404, exactly like a run that does not exist;
- only the person who asked, or an admin, may cancel or retry a run; a reviewer who can see
  someone else's run gets 403 (seeing a run is review, stopping or re-running it spends the
  asker's work and LLM budget). Retrying also needs askdb.ask_questions, since it asks again;
- the review queue and reviewing are for reviewers (askdb.review_runs); approving or correcting
  your own question is 403, as it is on the pages;
- the example library is readable by everyone who may ask, as on its pages
  (askdb.roles.LIBRARY_BROWSE_PERMS); retiring, restoring and importing are for reviewers
  (askdb.review_runs).

The contract (tests/askdb/test_api_contract.py, fuzzed by tests/askdb/test_api_schemathesis.py):
a call without credentials is 401 with "WWW-Authenticate: Token" (token authentication comes
first in settings); any /api/ path no route matches (a non-integer id) is a JSON 404 (ApiNotFound);
a form body nothing could be read from is a 400 before the view runs; every parameter and
constraint the server enforces is in the schema.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponsePermanentRedirect, StreamingHttpResponse
from django.urls import Resolver404, ResolverMatch, resolve, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import APIView, exception_handler

from askdb import library_io, selectors, selectors_requests
from askdb.models import Example, ImportJob, Run
from askdb.roles import LIBRARY_BROWSE_PERMS
from askdb.serializers import (
    ErrorSerializer,
    ExampleDetailSerializer,
    ExampleImportInputSerializer,
    ExampleListFilterSerializer,
    ExampleSerializer,
    ExampleStatusInputSerializer,
    ImportJobSerializer,
    ImportReportSerializer,
    QuestionSubmitInputSerializer,
    ResultPageQuerySerializer,
    ReviewInputSerializer,
    ReviewQueueFilterSerializer,
    ReviewQueueSerializer,
    ReviewSerializer,
    RunCancelSerializer,
    RunDetailSerializer,
    RunListFilterSerializer,
    RunListSerializer,
    RunQueuedSerializer,
    TokenInputSerializer,
    TokenSerializer,
)
from askdb.services.examples import example_set_status
from askdb.services.exports import examples_import
from askdb.services.imports import ImportQueueUnavailable, import_is_large, import_job_submit
from askdb.services.long_queries import LongQueryError, long_query_start
from askdb.services.privacy import privacy_policy
from askdb.services.reviews import review_approve, review_correct, review_flag
from askdb.services.runs import QuestionError, QueueUnavailable, question_submit, run_cancel, run_retry
from askdb.services.sql import ReviewError
from askdb.services.users import user_token_issue
from askdb.views_library import examples_filtered
from infra.adapters.clinical import ExecutionError
from infra.providers.embeddings import EmbeddingError
from metadata_admin.services import source_get

# --------------------------------------------------------------------------- errors


def _first_message(errors: Any) -> str:
    """The first message of a DRF validation error, prefixed by its field, as one sentence."""
    if isinstance(errors, dict):
        for field, value in errors.items():
            message = _first_message(value)
            return message if field in ("non_field_errors", "detail") else f"{field}: {message}"
    if isinstance(errors, list) and errors:
        return _first_message(errors[0])
    return str(errors)


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler, with its answers reshaped to the API's one error shape."""
    if isinstance(exc, QueueUnavailable):  # the run is saved and sent when the broker is back
        url = reverse("api:run_detail", args=[exc.run_id])
        return Response({"error": str(exc), "run": exc.run_id, "status": Run.Status.QUEUED, "url": url},
                        status=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Retry-After": "30", "Location": url})  # fmt: skip
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"error": _first_message(response.data), "fields": response.data}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"error": str(response.data["detail"])}
    return response


# A page number past the end (or not a number) is DRF's pagination NotFound: a JSON error too.
PAGE_NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such page of the list.")

_FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


def _body_unread(request: Request) -> bool:
    """True when a form body was sent but nothing could be read from it.

    Django's multipart parser reads a body without a single well-formed part as an empty form,
    so a garbage body would look like "no fields" and the change would go through with defaults.
    An empty JSON object is a real (empty) body; only form bodies are judged here.
    """
    content_type = (request.content_type or "").split(";")[0].strip().lower()
    if content_type not in _FORM_TYPES or int(request.META.get("CONTENT_LENGTH") or 0) == 0:
        return False
    return not request.data and not request.FILES


class ApiErrorsMixin:
    """The API's error shape, and bodies read before any change: an unreadable form body is a 400."""

    def get_exception_handler(self):
        return api_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request.method in ("POST", "PUT", "PATCH") and _body_unread(request):
            raise exceptions.ParseError(
                "No field could be read from the request body: send JSON (Content-Type: application/json) "
                "or a well-formed form with its fields."
            )


def resolve_or_none(path: str) -> ResolverMatch | None:
    """The route a path resolves to, or None (for the slash hint, which must not raise)."""
    try:
        return resolve(path)
    except Resolver404:
        return None


class ApiNotFound(APIView):
    """Every /api/ path no route matches (a non-integer id, a typo): the API's JSON 404,
    not Django's HTML page. A 404 reveals nothing, so it needs no credentials."""

    permission_classes: list = []
    authentication_classes: list = []
    throttle_classes: list = []
    schema = None  # not an endpoint

    def get_exception_handler(self):
        return api_exception_handler

    def _refuse(self, request: Request) -> Response | HttpResponsePermanentRedirect:
        message = f"There is no API endpoint at {request.path}."
        # What APPEND_SLASH did before this catch-all matched everything: /api/runs -> /api/runs/
        if not request.path.endswith("/"):
            match = resolve_or_none(f"{request.path}/")
            if match is not None and getattr(match.func, "view_class", None) is not ApiNotFound:
                if request.method in ("GET", "HEAD"):
                    return HttpResponsePermanentRedirect(f"{request.path}/")
                message = f"There is no API endpoint at {request.path}; did you mean {request.path}/?"
        raise exceptions.NotFound(message)

    def http_method_not_allowed(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._refuse(request)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response | HttpResponsePermanentRedirect:
        return self._refuse(request)

    post = put = patch = delete = head = options = get


def _error(message: str, code: int) -> Response:
    return Response({"error": message}, status=code)


# --------------------------------------------------------------------------- permissions


class CanAskQuestions(BasePermission):
    message = "Your account has no role that may ask questions; ask an administrator for one."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.user.has_perm("askdb.ask_questions")


class IsRunOwnerOrAdmin(BasePermission):
    """Acting on a run (cancel, retry) is for the person who asked it, or an admin."""

    message = "Only the person who asked this question, or an administrator, may do that."

    def has_object_permission(self, request: Request, view: APIView, obj: Run) -> bool:
        return selectors.run_may_act(user=request.user, run=obj)


class CanRunLongQueries(BasePermission):
    message = "Your role may not run long queries; an admin can allow it (the run_long_queries permission)."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.user.has_perm("askdb.run_long_queries")


class CanReview(BasePermission):
    message = "Only reviewers may do that; ask an administrator for the reviewer role."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.user.has_perm("askdb.review_runs")


class CanBrowseLibrary(BasePermission):
    """The same rule as the library pages (askdb.roles.LIBRARY_BROWSE_PERMS)."""

    message = "Your account has no role that may read the example library; ask an administrator for one."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return any(request.user.has_perm(p) for p in LIBRARY_BROWSE_PERMS)


class PostAnonymously(BasePermission):
    """The token endpoint takes a password, so it must accept anonymous POSTs; anything else
    on it is refused like every other API route (401/403, not 405) to anonymous clients."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.method == "POST" or bool(request.user and request.user.is_authenticated)


# --------------------------------------------------------------------------- helpers


def _client_ip(request: Request) -> str | None:
    return request.META.get("REMOTE_ADDR") or None


def _run_or_404(request: Request, run_id: int) -> Run:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)
    if run is None:  # missing and not-yours look the same, so ids reveal nothing
        raise exceptions.NotFound(f"There is no run {run_id} that you can see.")
    return run


def _queued(run: Run) -> Response:
    url = reverse("api:run_detail", args=[run.pk])
    return Response(
        {"run": run.pk, "status": run.status, "url": url},
        status=status.HTTP_202_ACCEPTED,
        headers={"Location": url},
    )


# --------------------------------------------------------------------------- questions and runs


class RunListApi(ApiErrorsMixin, GenericAPIView):
    """GET: the runs the user may see, newest first. POST: ask a question."""

    serializer_class = RunListSerializer

    def get_permissions(self):
        if self.request.method == "POST":
            return [IsAuthenticated(), CanAskQuestions()]
        return [IsAuthenticated()]

    @extend_schema(
        operation_id="questions_list",
        summary="List runs",
        description="Your runs, or everyone's for reviewers and admins; newest first.",
        parameters=[RunListFilterSerializer],
        responses={200: RunListSerializer(many=True), 400: ErrorSerializer, 404: PAGE_NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        filters = RunListFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        runs = selectors.run_list_for_user(
            user=request.user,
            search=filters.validated_data.get("search", "").strip(),
            status=filters.validated_data.get("status", ""),
            mine_only=filters.validated_data["mine"],
        )
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(RunListSerializer(page, many=True).data)

    @extend_schema(
        operation_id="questions_create",
        summary="Ask a question",
        description="Queues a run and answers at once; poll the returned url until the status has ended.",
        request=QuestionSubmitInputSerializer,
        responses={202: RunQueuedSerializer, 400: ErrorSerializer, 403: ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        data = QuestionSubmitInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            source = source_get(data.validated_data.get("source") or None)
        except ValueError as exc:  # unknown name, or no source registered at all
            return _error(f"{str(exc)[:1].upper()}{str(exc)[1:]}.", status.HTTP_400_BAD_REQUEST)
        try:
            run = question_submit(
                user=request.user,
                text=data.validated_data["question"],
                source=source,
                ip=_client_ip(request),
            )
        except QuestionError as exc:
            return _error(str(exc), status.HTTP_400_BAD_REQUEST)
        return _queued(run)


class RunDetailApi(ApiErrorsMixin, APIView):
    """One run with its stages, SQL attempts, answer and a page of its result."""

    @extend_schema(
        operation_id="questions_retrieve",
        summary="Get a run",
        description="`result` is null until the run has a stored result; page and sort it with the parameters.",
        parameters=[ResultPageQuerySerializer],
        responses={200: RunDetailSerializer, 400: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(request, run_id)
        query = ResultPageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        result = None
        if run.result_columns:
            result = selectors.run_result_page(
                run=run,
                page=query.validated_data["page"],
                per_page=query.validated_data["per_page"],
                sort=query.validated_data["sort"],
                descending=query.validated_data["desc"],
            )
        suggestions = selectors_requests.run_did_you_mean(
            run=run, policy=privacy_policy(source=run.question.source, user=request.user)
        )
        return Response(RunDetailSerializer(run, context={"result": result, "suggestions": suggestions}).data)


class JsonOnlyNegotiation(BaseContentNegotiation):
    """For the CSV download: the body is a CSV stream whatever the client accepts, so an
    `Accept: text/csv` header (or a ?format=) must not end in 406/404; errors stay JSON."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class RunResultCsvApi(ApiErrorsMixin, APIView):
    """The whole stored result as CSV, streamed (it may hold the full row cap)."""

    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnlyNegotiation

    @extend_schema(
        operation_id="questions_result_csv",
        summary="Download a run's result as CSV",
        description="Header row, then every stored row; NULL is an empty field.",
        responses={(200, "text/csv"): OpenApiTypes.STR, 404: ErrorSerializer, 409: ErrorSerializer},
    )
    def get(self, request: Request, run_id: int) -> StreamingHttpResponse | Response:
        run = _run_or_404(request, run_id)
        if not run.result_columns:
            if run.is_terminal:
                message = f"Run {run.pk} ended {run.get_status_display()} and has no result to download."
            else:
                message = (
                    f"Run {run.pk} is still {run.status}; its result can be downloaded once it is answered."
                )
            return _error(message, status.HTTP_409_CONFLICT)
        response = StreamingHttpResponse(
            selectors.run_result_csv_lines(run=run), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="askdb-run-{run.pk}.csv"'
        return response


class RunCancelApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, IsRunOwnerOrAdmin]

    @extend_schema(
        operation_id="questions_cancel",
        summary="Cancel a run",
        description="Stops a queued or running run at its next stage. Only the asker or an admin may cancel.",
        request=None,
        responses={200: RunCancelSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(request, run_id)
        self.check_object_permissions(request, run)
        return Response({"cancelled": run_cancel(run=run, user=request.user)})


class RunRetryApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanAskQuestions, IsRunOwnerOrAdmin]

    @extend_schema(
        operation_id="questions_retry",
        summary="Retry a run",
        description=(
            "Queues a new run of the same question once this one has ended (failed, cancelled, or "
            "answered). Only the asker or an admin may retry."
        ),
        request=None,
        responses={
            202: RunQueuedSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(request, run_id)
        self.check_object_permissions(request, run)
        if not run.is_terminal:  # two live runs of one question would race for the same answer
            return _error(
                f"Run {run.pk} is still {run.status}; cancel it or wait for it to end before retrying.",
                status.HTTP_409_CONFLICT,
            )
        return _queued(run_retry(run=run, user=request.user, ip=_client_ip(request)))


class RunLongQueryApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanAskQuestions, CanRunLongQueries]

    @extend_schema(
        operation_id="questions_long_query",
        summary="Run a timed-out question as a long query",
        description=(
            "Queues a new run that executes this run's SQL again in a worker with the long-query limit "
            "(ASKDB_LONG_QUERY_TIMEOUT_S). Only for a run that ran out of time (outcome timeout), by the "
            "person who asked it, holding run_long_queries; poll the new run, cancel it like any run."
        ),
        request=None,
        responses={
            202: RunQueuedSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(request, run_id)
        try:
            return _queued(long_query_start(run=run, user=request.user, ip=_client_ip(request)))
        except LongQueryError as exc:
            return _error(str(exc), status.HTTP_409_CONFLICT)


# --------------------------------------------------------------------------- review


class ReviewQueueApi(ApiErrorsMixin, GenericAPIView):
    permission_classes = [IsAuthenticated, CanReview]
    serializer_class = ReviewQueueSerializer

    @extend_schema(
        operation_id="reviews_list",
        summary="The review queue",
        description="Answered runs waiting for a reviewer, oldest first. Reviewers and admins only.",
        parameters=[ReviewQueueFilterSerializer],
        responses={
            200: ReviewQueueSerializer(many=True),
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: PAGE_NOT_FOUND,
        },
    )
    def get(self, request: Request) -> Response:
        filters = ReviewQueueFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        queue = selectors.review_queue_list(
            user=request.user, status=f["status"] or "pending", source=f["source"].strip(), asked_by=f["user"].strip(),
            table=f["table"].strip(), assigned_to_me=f["mine"],
        )  # fmt: skip
        page = self.paginate_queryset(queue)
        return self.get_paginated_response(ReviewQueueSerializer(page, many=True).data)


class RunReviewApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(
        operation_id="questions_review",
        summary="Review a run",
        description=(
            "approve: the run's SQL becomes a verified library example. correct: `sql` replaces it "
            "(validated and run first; nothing is saved if it fails). flag: `category` says what is "
            'wrong; "unanswerable" keeps the question as a negative example. Reviewing your own '
            "question's SQL (approve, correct) is refused with 403."
        ),
        request=ReviewInputSerializer,
        responses={200: ReviewSerializer, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(request, run_id)
        data = ReviewInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        action, comment = data.validated_data["action"], data.validated_data.get("comment", "")
        try:
            if action == "approve":
                review = review_approve(run=run, reviewer=request.user, comment=comment)
            elif action == "correct":
                review = review_correct(
                    run=run, reviewer=request.user, sql=data.validated_data.get("sql", ""), comment=comment
                )
            else:
                review = review_flag(
                    run=run, reviewer=request.user, category=data.validated_data.get("category", ""),
                    comment=comment,
                )  # fmt: skip
        except ReviewError as exc:
            # The service decides and words every refusal; the status code only tells a script
            # whether the request could ever succeed for this user (403) or needs fixing (400).
            own = action in ("approve", "correct") and run.question.user_id == request.user.pk
            return _error(str(exc), status.HTTP_403_FORBIDDEN if own else status.HTTP_400_BAD_REQUEST)
        return Response(ReviewSerializer(review).data)


# --------------------------------------------------------------------------- example library


def _example_or_404(example_id: int) -> Example:
    example = Example.objects.select_related("source", "approved_by").filter(pk=example_id).first()
    if example is None:
        raise exceptions.NotFound(f"There is no example {example_id}.")
    return example


def _source_or_400(name: str | None):
    try:
        return source_get(name or None)
    except ValueError as exc:
        raise exceptions.ValidationError({"source": [f"{str(exc)[:1].upper()}{str(exc)[1:]}."]}) from exc


class ExampleListApi(ApiErrorsMixin, GenericAPIView):
    permission_classes = [IsAuthenticated, CanBrowseLibrary]
    serializer_class = ExampleSerializer

    @extend_schema(
        operation_id="examples_list",
        summary="List library examples",
        description="Verified question/SQL pairs, newest approval first. Retired ones only with status=retired or all.",
        parameters=[ExampleListFilterSerializer],
        responses={
            200: ExampleSerializer(many=True),
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: PAGE_NOT_FOUND,
        },
    )
    def get(self, request: Request) -> Response:
        filters = ExampleListFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        source = _source_or_400(f["source"]) if f["source"] else None
        examples = examples_filtered(
            search=f["q"], table=f["table"], kind=f["kind"], status=f["status"], source=source
        )
        page = self.paginate_queryset(examples)
        return self.get_paginated_response(ExampleSerializer(page, many=True).data)


class ExampleDetailApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanBrowseLibrary]

    @extend_schema(
        operation_id="examples_retrieve",
        summary="Get a library example",
        responses={200: ExampleDetailSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, example_id: int) -> Response:
        return Response(ExampleDetailSerializer(_example_or_404(example_id)).data)


class _ExampleStatusApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]
    status_to = ""

    def post(self, request: Request, example_id: int) -> Response:
        example = _example_or_404(example_id)
        data = ExampleStatusInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            example_set_status(
                example=example, actor=request.user, status=self.status_to, note=data.validated_data["note"]
            )
        except ReviewError as exc:
            return _error(str(exc), status.HTTP_400_BAD_REQUEST)
        return Response(ExampleDetailSerializer(example).data)


class ExampleRetireApi(_ExampleStatusApi):
    status_to = Example.Status.RETIRED

    @extend_schema(
        operation_id="examples_retire",
        summary="Retire a library example",
        description="A retired example is never used again (few-shot, template, gate). Reviewers only.",
        request=ExampleStatusInputSerializer,
        responses={
            200: ExampleDetailSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def post(self, request: Request, example_id: int) -> Response:
        return super().post(request, example_id)


class ExampleRestoreApi(_ExampleStatusApi):
    status_to = Example.Status.ACTIVE

    @extend_schema(
        operation_id="examples_restore",
        summary="Restore a library example",
        description="Back into use; refused (400) when its SQL no longer validates against the catalog.",
        request=ExampleStatusInputSerializer,
        responses={
            200: ExampleDetailSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def post(self, request: Request, example_id: int) -> Response:
        return super().post(request, example_id)


class ExampleImportApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(
        operation_id="examples_import",
        summary="Import library examples",
        description=(
            "Each pair is validated against the catalog and (unless execute is false) run once; pairs "
            "that fail are listed with their error in `failed`, the others are added or merged into "
            "near-duplicates. More pairs than ASKDB_IMPORT_SYNC_MAX are imported by a worker: the answer is "
            "202 with a job to poll (its `url`) for progress and, once done, the same report. "
            f"Bodies over {library_io.MAX_UPLOAD_BYTES // 1024 // 1024} MB are refused (413)."
        ),
        request=ExampleImportInputSerializer,
        responses={
            200: ImportReportSerializer,
            202: ImportJobSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            413: ErrorSerializer,
            503: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        if int(request.META.get("CONTENT_LENGTH") or 0) > library_io.MAX_UPLOAD_BYTES:
            return _error(
                f"The request is larger than {library_io.MAX_UPLOAD_BYTES // 1024 // 1024} MB; import in parts.",
                status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        data = ExampleImportInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            items = library_io.items_from_list(data.validated_data["examples"], "examples", where="item")
        except library_io.LibraryFormatError as exc:
            return _error(str(exc), status.HTTP_400_BAD_REQUEST)
        source = _source_or_400(data.validated_data.get("source"))
        if import_is_large(items):  # minutes of work: a worker does it, the caller polls the job
            try:
                job = import_job_submit(
                    source=source,
                    items=items,
                    approved_by=request.user,
                    execute=data.validated_data["execute"],
                )
            except ImportQueueUnavailable as exc:
                return _error(str(exc), status.HTTP_503_SERVICE_UNAVAILABLE)
            body = ImportJobSerializer(job).data
            return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["url"]})
        try:
            report = examples_import(
                source=source, items=items, approved_by=request.user, execute=data.validated_data["execute"]
            )
        except (ExecutionError, EmbeddingError) as exc:  # the database or the embedder is down, not the data
            return _error(
                f"The import stopped: {exc}. Pairs checked before this were kept; import again once it is fixed.",
                status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response(ImportReportSerializer(report).data)


class ExampleImportJobApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(
        operation_id="examples_import_job",
        summary="Progress and report of a large import",
        responses={200: ImportJobSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = ImportJob.objects.filter(pk=job_id).first()
        if job is None:
            return _error(f"No import job {job_id}.", status.HTTP_404_NOT_FOUND)
        return Response(ImportJobSerializer(job).data)


# --------------------------------------------------------------------------- tokens


class TokenObtainApi(ApiErrorsMixin, ObtainAuthToken):
    """Username and password in, the user's API token out (the same token on every call)."""

    permission_classes = [PostAnonymously]
    serializer_class = TokenInputSerializer
    # DRF leaves this endpoint unthrottled; it checks passwords, so it gets the per-client limit
    # (by IP for anonymous callers) like the rest of the API.
    throttle_classes = [UserRateThrottle]

    @extend_schema(
        operation_id="token_create",
        summary="Get an API token",
        auth=[{}],  # no credentials needed: this is where they come from
        request=TokenInputSerializer,
        responses={200: TokenSerializer, 400: ErrorSerializer},
    )
    def post(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)  # a wrong password is audited by the auth signals
        user = serializer.validated_data["user"]
        token = user_token_issue(user=user, ip=_client_ip(request))
        return Response({"token": token.key})
