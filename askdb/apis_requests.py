"""The request desk's REST API: the same services as its pages (askdb/views_requests.py).

- anyone who may ask sends their own declined or failed run as a request, and reads their inbox;
- reviewers list the grouped requests, preview SQL for one (validated, run read-only with the
  asker's privacy rules, with the code check) and answer it.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from askdb import selectors_requests
from askdb.apis import ApiErrorsMixin, CanAskQuestions, CanReview, _error, _run_or_404
from askdb.models import AnswerRequest, Notification
from askdb.serializers import ErrorSerializer
from askdb.services.requests import (
    RequestError,
    notifications_mark_read,
    request_answer,
    request_create,
    request_groups,
    request_preview,
    sql_code_check,
)
from askdb.services.sql import ReviewError


class RequestInputSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class RequestSqlInputSerializer(serializers.Serializer):
    sql = serializers.CharField(max_length=20000, trim_whitespace=False)
    comment = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class AnswerRequestSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id")
    requested_by = serializers.CharField(source="requested_by.username")
    answered_by = serializers.CharField(source="answered_by.username", allow_null=True, default=None)
    answer_run = serializers.IntegerField(source="answer_run_id", allow_null=True)
    example = serializers.IntegerField(source="example_id", allow_null=True)

    class Meta:
        model = AnswerRequest
        fields = ["id", "run", "question", "note", "status", "requested_by", "created_at", "answered_by",
                  "answered_at", "answer_run", "example"]  # fmt: skip
        read_only_fields = fields


class NotificationSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id", allow_null=True)
    read = serializers.SerializerMethodField()

    class Meta:
        model = Notification
        fields = ["id", "message", "url", "run", "read", "created_at"]
        read_only_fields = fields

    def get_read(self, note: Notification) -> bool:
        return note.read_at is not None


def _request_or_404(request_id: int) -> AnswerRequest:
    found = selectors_requests.request_get(request_id=request_id)
    if found is None:
        raise exceptions.NotFound(f"There is no request {request_id}.")
    return found


class RunRequestApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanAskQuestions]

    @extend_schema(
        operation_id="questions_request",
        summary="Request an answer from the reviewers",
        description="Only for your own declined or failed run. Sending it again returns the same request.",
        request=RequestInputSerializer,
        responses={201: AnswerRequestSerializer, 400: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(request, run_id)
        data = RequestInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            created = request_create(run=run, user=request.user, note=data.validated_data["note"])
        except RequestError as exc:
            return _error(str(exc), status.HTTP_400_BAD_REQUEST)
        return Response(AnswerRequestSerializer(created).data, status=status.HTTP_201_CREATED)


class RequestQueueApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(operation_id="requests_list", summary="Pending requests, grouped, most asked first")
    def get(self, request: Request) -> Response:
        groups = [
            {"count": len(g), "lead": g[0].pk, "requests": AnswerRequestSerializer(g, many=True).data}
            for g in request_groups()
        ]
        return Response({"groups": groups})


class RequestDetailApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(operation_id="requests_retrieve", summary="One request",
                   responses={200: AnswerRequestSerializer, 404: ErrorSerializer})  # fmt: skip
    def get(self, request: Request, request_id: int) -> Response:
        return Response(AnswerRequestSerializer(_request_or_404(request_id)).data)


class RequestPreviewApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(
        operation_id="requests_preview",
        summary="Preview SQL for a request",
        description="Validated like generated SQL, run read-only with the asker's privacy rules; "
        "`code_check` lists the codes each coded filter matches and probably misses.",
        request=RequestSqlInputSerializer,
        responses={200: None, 400: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, request_id: int) -> Response:
        answer_request = _request_or_404(request_id)
        data = RequestSqlInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            validated, result = request_preview(request=answer_request, reviewer=request.user,
                                                sql=data.validated_data["sql"])  # fmt: skip
        except (RequestError, ReviewError) as exc:
            return _error(str(exc), status.HTTP_400_BAD_REQUEST)
        return Response({
            "sql": validated.sql, "columns": list(result.columns), "rows": [list(r) for r in result.rows],
            "row_count": result.row_count, "privacy": result.privacy,
            "code_check": sql_code_check(source=answer_request.source, sql=validated.sql, actor=request.user),
        })  # fmt: skip


class RequestAnswerApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanReview]

    @extend_schema(
        operation_id="requests_answer",
        summary="Answer a request with SQL",
        description="The run shows the answer, the asker is told, the pair enters the library, and the "
        "requests grouped with this one are asked again by a worker.",
        request=RequestSqlInputSerializer,
        responses={
            200: AnswerRequestSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def post(self, request: Request, request_id: int) -> Response:
        answer_request = _request_or_404(request_id)
        data = RequestSqlInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            done = request_answer(request=answer_request, reviewer=request.user, sql=data.validated_data["sql"],
                                  comment=data.validated_data["comment"])  # fmt: skip
        except (RequestError, ReviewError) as exc:
            own = answer_request.requested_by_id == request.user.pk
            return _error(str(exc), status.HTTP_403_FORBIDDEN if own else status.HTTP_400_BAD_REQUEST)
        return Response(AnswerRequestSerializer(done).data)


class InboxApi(ApiErrorsMixin, APIView):
    permission_classes = [IsAuthenticated, CanAskQuestions]

    @extend_schema(
        operation_id="inbox_list", summary="Your notifications, newest first, and the unread count"
    )
    def get(self, request: Request) -> Response:
        notes = selectors_requests.inbox_list(user=request.user)
        return Response({"unread": selectors_requests.inbox_unread_count(user=request.user),
                         "notifications": NotificationSerializer(notes, many=True).data})  # fmt: skip

    @extend_schema(operation_id="inbox_read", summary="Mark all your notifications read")
    def post(self, request: Request) -> Response:
        return Response({"marked": notifications_mark_read(user=request.user)})
