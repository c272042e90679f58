"""The REST API's shapes: what a client may send, and what each endpoint answers (askdb/apis.py).

Input serializers only check the shape of a request; the rules about questions live in
askdb.services, so the pages and the API refuse the same things with the same sentences.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from askdb.models import Run, SqlAttempt, StageEvent

# --------------------------------------------------------------------------- inputs


class QuestionSubmitInputSerializer(serializers.Serializer):
    # Blank and odd text is accepted here on purpose: question_submit decides what a question
    # is and says why it refuses one.
    question = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="Plain English.")
    source = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="Name of the clinical source to ask; the default source when omitted.",
    )


class RunListFilterSerializer(serializers.Serializer):
    search = serializers.CharField(
        required=False, allow_blank=True, help_text="Words in the question text or the SQL."
    )
    status = serializers.ChoiceField(choices=Run.Status.choices, required=False, allow_blank=True)
    mine = serializers.BooleanField(
        required=False, default=False, help_text="1: only my runs (for reviewers and admins, who see all)."
    )


class ResultPageQuerySerializer(serializers.Serializer):
    page = serializers.IntegerField(required=False, default=1, min_value=1, help_text="Page of result rows.")
    per_page = serializers.IntegerField(required=False, default=50, min_value=1, max_value=500)
    sort = serializers.CharField(
        required=False, default="", allow_blank=True, help_text="A column name; unknown names keep the order."
    )
    desc = serializers.BooleanField(required=False, default=False, help_text="1: sort descending.")


# --------------------------------------------------------------------------- outputs


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="A sentence the user can act on.")
    fields = serializers.DictField(required=False, help_text="Per-field messages, on validation errors only.")


class RunQueuedSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.CharField(help_text="Poll this for the run's progress and result.")


class RunCancelSerializer(serializers.Serializer):
    cancelled = serializers.BooleanField(help_text="False when the run had already ended.")


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text='Send as the header "Authorization: Token <token>".')


class RunListSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="pk")
    question = serializers.CharField(source="question.text")
    user = serializers.CharField(source="question.user.username")
    source = serializers.CharField(source="question.source.name")

    class Meta:
        model = Run
        fields = ["run", "question", "user", "source", "status", "outcome", "created_at", "finished_at",
                  "row_count"]  # fmt: skip
        read_only_fields = fields


class GateSerializer(serializers.Serializer):
    category = serializers.CharField(source="gate_category")
    reason = serializers.CharField(source="gate_reason")


class TokensSerializer(serializers.Serializer):
    prompt = serializers.IntegerField(source="tokens_prompt")
    completion = serializers.IntegerField(source="tokens_completion")


class StageSerializer(serializers.ModelSerializer):
    # A plain string in the schema: a second enum named "status" beside the run's would get a
    # hashed component name.
    status = serializers.CharField(help_text=f"One of: {', '.join(StageEvent.Status.values)}.")

    class Meta:
        model = StageEvent
        fields = ["name", "status", "started_at", "duration_ms", "detail"]
        read_only_fields = fields


class SqlAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = SqlAttempt
        fields = ["number", "sql", "origin", "valid", "error_code", "error"]
        read_only_fields = fields


class ResultPageSerializer(serializers.Serializer):
    """One page of a run's stored result, paged and sorted on the server."""

    # Mirrors the dict selectors.run_result_page returns.
    columns = serializers.ListField(child=serializers.CharField())
    rows = serializers.ListField(child=serializers.ListField(child=serializers.JSONField()))
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    per_page = serializers.IntegerField()
    total = serializers.IntegerField(help_text="Rows stored for the run.")
    sort = serializers.CharField(help_text="The column sorted on, or empty.")
    descending = serializers.BooleanField()
    truncated = serializers.BooleanField(help_text="True when the row cap cut the result short.")


class RunDetailSerializer(RunListSerializer):
    """A run with everything that explains it: gate, retrieval, stages, SQL attempts, the
    answer, its cost, and one page of its result."""

    gate = GateSerializer(source="*")
    tokens = TokensSerializer(source="*")
    stages = StageSerializer(many=True)
    attempts = SqlAttemptSerializer(many=True)
    # The result page comes in through the context (key "result"): it depends on the request's
    # paging and sorting, which are not the run's.
    result = serializers.SerializerMethodField()

    class Meta(RunListSerializer.Meta):
        fields = [*RunListSerializer.Meta.fields, "message", "started_at", "gate", "retrieval", "stages",
                  "attempts", "sql", "summary", "tokens", "cost_usd", "result"]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(ResultPageSerializer(allow_null=True))
    def get_result(self, run: Run) -> dict | None:
        """None while the run has no stored result (queued, running, declined, failed)."""
        page = self.context.get("result")
        return ResultPageSerializer(page).data if page is not None else None
