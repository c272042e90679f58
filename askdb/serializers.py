"""The REST API's shapes: what a client may send, and what each endpoint answers (askdb/apis.py).

Input serializers only check the shape of a request; the rules about questions live in
askdb.services, so the pages and the API refuse the same things with the same sentences.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer

from askdb.models import Example, Review, Run, SqlAttempt, StageEvent
from askdb.outcomes import run_outcome
from askdb.selectors import REVIEW_QUEUE_STATUSES, run_answer

# --------------------------------------------------------------------------- inputs


@extend_schema_field({"type": "string", "maxLength": settings.ASKDB_QUESTION_MAX_CHARS})
class QuestionField(serializers.CharField):
    """The question's length limit stated in the schema (maxLength) and left to question_submit to
    enforce: it measures the cleaned text and says how long the question was."""


class QuestionSubmitInputSerializer(serializers.Serializer):
    # Blank and odd text is accepted here on purpose: question_submit decides what a question
    # is and says why it refuses one.
    question = QuestionField(allow_blank=True, trim_whitespace=False, help_text="Plain English.")
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


class ReviewInputSerializer(serializers.Serializer):
    # The rules (who may review, which SQL is valid, which category a flag needs) are the review
    # services'; this only checks the shape.
    action = serializers.ChoiceField(choices=["approve", "correct", "flag"])
    sql = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, help_text="The corrected SQL (correct only)."
    )
    category = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text=f"Why it is wrong (flag only): one of {', '.join(Review.Category.values)}.",
    )
    comment = serializers.CharField(required=False, allow_blank=True, default="")


class ExampleListFilterSerializer(serializers.Serializer):
    q = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Words in the question or SQL."
    )
    table = serializers.CharField(
        required=False, allow_blank=True, default="",
        help_text='A table the SQL reads: qualified ("mimiciv_hosp.patients") or bare ("patients").',
    )  # fmt: skip
    # Choice fields, so the schema lists the values the server accepts (an enum).
    kind = serializers.ChoiceField(
        choices=Example.Kind.values, required=False, allow_blank=True, default="", help_text="The example's kind.",
        error_messages={"invalid_choice": f"Use one of: {', '.join(Example.Kind.values)}."},
    )  # fmt: skip
    status = serializers.ChoiceField(
        choices=[*Example.Status.values, "all"], required=False, allow_blank=True, default="",
        help_text="Default: every status but retired.",
        error_messages={"invalid_choice": f"Use one of: {', '.join(Example.Status.values)}, all."},
    )  # fmt: skip
    source = serializers.CharField(required=False, allow_blank=True, default="", help_text="A source name.")


class ReviewQueueFilterSerializer(serializers.Serializer):
    """The review queue's filters, as askdb.selectors.review_queue_list takes them."""

    status = serializers.ChoiceField(
        choices=list(REVIEW_QUEUE_STATUSES), required=False, allow_blank=True, default="pending",
        help_text="Review status; all: every run that was for review.",
    )  # fmt: skip
    source = serializers.CharField(required=False, allow_blank=True, default="", help_text="A source name.")
    user = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Username of the asker (any case)."
    )
    table = serializers.CharField(
        required=False, allow_blank=True, default="",
        help_text='A table the SQL reads: qualified ("mimiciv_hosp.patients") or bare ("patients").',
    )  # fmt: skip
    mine = serializers.BooleanField(required=False, default=False, help_text="1: only runs assigned to me.")


class TokenInputSerializer(AuthTokenSerializer):
    """DRF's username/password check, with non-blank credentials stated in the schema."""

    username = serializers.CharField(label="Username", min_length=1, write_only=True)
    password = serializers.CharField(
        label="Password",
        min_length=1,
        style={"input_type": "password"},
        trim_whitespace=False,
        write_only=True,
    )


class ExampleStatusInputSerializer(serializers.Serializer):
    note = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Why (kept on the example)."
    )

    def validate(self, attrs: dict) -> dict:
        # Every field is optional, so a body of anything else (a garbage form "x=1", a typo'd
        # "notes") would read as "no note" and the change would go through: refuse it instead.
        unknown = sorted(set(getattr(self.initial_data, "keys", list)()) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(f"Unknown field: {', '.join(unknown)}. The only field is note.")
        return attrs


class ExampleImportInputSerializer(serializers.Serializer):
    source = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="Source name; the default source when omitted.",
    )
    # Items are checked by askdb.library_io (the same checks as a file upload), so a bad item is
    # named by its position and id in one sentence.
    examples = serializers.ListField(
        child=serializers.JSONField(),
        allow_empty=False,
        min_length=1,
        error_messages={"empty": "the list is empty; send at least one example."},
        help_text='[{"id"?, "question", "sql"}]; "sql" is "" or null for an unanswerable question.',
    )
    execute = serializers.BooleanField(
        required=False,
        default=True,
        help_text="false: only validate each SQL against the catalog, do not run it.",
    )


# --------------------------------------------------------------------------- outputs


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="A sentence the user can act on.")
    fields = serializers.DictField(required=False, help_text="Per-field messages, on validation errors only.")


class ImportJobSerializer(serializers.Serializer):
    """A large import done by a worker: how far it got and, once done, its report."""

    job = serializers.IntegerField(source="pk")
    status = serializers.CharField()
    done = serializers.IntegerField(help_text="Pairs checked so far.")
    total = serializers.IntegerField()
    report = serializers.DictField(help_text="created, merged, failed and summary, once succeeded.")
    error = serializers.CharField(help_text="Why it failed, if it did.")
    url = serializers.SerializerMethodField()

    def get_url(self, job) -> str:
        from django.urls import reverse

        return reverse("api:example_import_job", args=[job.pk])


class RunQueuedSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.CharField(help_text="Poll this for the run's progress and result.")


class RunCancelSerializer(serializers.Serializer):
    cancelled = serializers.BooleanField(help_text="False when the run had already ended.")


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text='Send as the header "Authorization: Token <token>".')


class OutcomeTextSerializer(serializers.Serializer):
    """A run's outcome in plain words, from askdb/outcomes.py (the same words the pages show)."""

    code = serializers.CharField(help_text="The outcome code, refined (e.g. read_only, candidates_failed).")
    label = serializers.CharField(help_text='A few words: "Answered", "Declined: not in this data"…')
    sentence = serializers.CharField(help_text="What happened and why.")
    next_step = serializers.CharField(help_text="What the researcher can do; empty when nothing is needed.")
    tone = serializers.CharField(help_text="ok, info, warn or error.")


class RunListSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="pk")
    outcome_text = serializers.SerializerMethodField()
    question = serializers.CharField(source="question.text")
    user = serializers.CharField(source="question.user.username")
    source = serializers.CharField(source="question.source.name")

    class Meta:
        model = Run
        fields = ["run", "question", "user", "source", "status", "outcome", "outcome_text", "created_at",
                  "finished_at", "row_count"]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(OutcomeTextSerializer)
    def get_outcome_text(self, run: Run) -> dict:
        return run_outcome(run).to_json()


class GateSerializer(serializers.Serializer):
    category = serializers.CharField(source="gate_category")
    label = serializers.CharField(source="gate_label", help_text="The category in words.")
    reason = serializers.CharField(source="gate_reason", help_text="Why, in plain words.")
    model_version = serializers.CharField(
        source="answerability_version",
        help_text="The answerability model that judged the question ('' for rules only).",
    )


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


class RunReviewSerializer(serializers.ModelSerializer):
    """A review as it appears on a run: who did what, and why."""

    reviewer = serializers.CharField(source="reviewer.username", allow_null=True, default=None)
    # Plain strings in the schema, like StageSerializer.status: no second enum named like another.
    action = serializers.CharField(help_text=f"One of: {', '.join(Review.Action.values)}.")
    category = serializers.CharField(help_text=f"Empty, or one of: {', '.join(Review.Category.values)}.")

    class Meta:
        model = Review
        fields = ["action", "category", "comment", "reviewer", "created_at"]
        read_only_fields = fields


class ReviewSerializer(RunReviewSerializer):
    """What POST /api/runs/{run_id}/review/ answers: the review, with its SQL change and the
    library example it created or strengthened."""

    run = serializers.IntegerField(source="run_id")
    example = serializers.IntegerField(source="example_id", allow_null=True, help_text="Library example id.")

    class Meta(RunReviewSerializer.Meta):
        fields = ["id", "run", *RunReviewSerializer.Meta.fields, "sql_before", "sql_after", "diff", "example"]
        read_only_fields = fields


class ReviewQueueSerializer(RunListSerializer):
    """A run waiting for review."""

    assigned_to = serializers.CharField(source="assigned_to.username", allow_null=True, default=None)

    class Meta(RunListSerializer.Meta):
        fields = [*RunListSerializer.Meta.fields, "sql", "confidence", "answered_by", "assigned_to"]
        read_only_fields = fields


class ExampleSerializer(serializers.ModelSerializer):
    source = serializers.CharField(source="source.name")
    kind = serializers.CharField(help_text=f"One of: {', '.join(Example.Kind.values)}.")
    status = serializers.CharField(help_text=f"One of: {', '.join(Example.Status.values)}.")
    tables = serializers.ListField(child=serializers.CharField())
    paraphrases = serializers.ListField(
        child=serializers.CharField(), help_text="Merged near-duplicate wordings."
    )
    approved_by = serializers.CharField(source="approved_by.username", allow_null=True, default=None)
    origin_run = serializers.IntegerField(source="origin_run_id", allow_null=True)

    class Meta:
        model = Example
        fields = ["id", "source", "question", "sql", "kind", "status", "tables", "paraphrases", "origin",
                  "origin_run", "approved_by", "approved_at", "note", "validation_error"]  # fmt: skip
        read_only_fields = fields


class ExampleDetailSerializer(ExampleSerializer):
    columns = serializers.ListField(child=serializers.CharField())
    template = serializers.JSONField(help_text="Slots for offline answering; {} when there is none.")
    answered_runs = serializers.SerializerMethodField(
        help_text="Ids of the runs answered from it, newest first."
    )

    class Meta(ExampleSerializer.Meta):
        fields = [*ExampleSerializer.Meta.fields, "columns", "template", "validated_at", "created_at",
                  "updated_at", "answered_runs"]  # fmt: skip
        read_only_fields = fields

    def get_answered_runs(self, example: Example) -> list[int]:
        return list(example.answered_runs.order_by("-created_at").values_list("pk", flat=True)[:100])


class ImportFailureSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The item's id, or its position when it had none.")
    question = serializers.CharField()
    error = serializers.CharField()


class ImportReportSerializer(serializers.Serializer):
    """askdb.services.exports.ImportReport: nothing imported silently, nothing failed silently."""

    created = serializers.ListField(child=serializers.IntegerField(), help_text="Ids of new examples.")
    merged = serializers.ListField(
        child=serializers.IntegerField(), help_text="Ids of existing examples the pairs were merged into."
    )
    failed = ImportFailureSerializer(many=True)
    summary = serializers.SerializerMethodField()

    def get_summary(self, report) -> str:
        return report.summary()


class RunDetailSerializer(RunListSerializer):
    """A run with everything that explains it: gate, retrieval, stages, SQL attempts, the
    answer, its cost, and one page of its result."""

    gate = GateSerializer(source="*")
    tokens = TokensSerializer(source="*")
    answer = serializers.SerializerMethodField(
        help_text="The answer in one sentence (the LLM's summary, or built from the question and the result)."
    )
    stages = StageSerializer(many=True)
    attempts = SqlAttemptSerializer(many=True)
    # The result page comes in through the context (key "result"): it depends on the request's
    # paging and sorting, which are not the run's.
    result = serializers.SerializerMethodField()
    # Review and provenance: whether a person checked the SQL, and what produced it.
    review_status = serializers.CharField(
        help_text=f"Empty (not for review), or one of: {', '.join(v for v in Run.Review.values if v)}."
    )
    reviews = RunReviewSerializer(many=True, help_text="Newest first.")
    answered_by = serializers.CharField(
        help_text='"llm", "library" (a verified example), "composed" (composed from verified examples, not itself '
        'verified), "reviewer" (a request a reviewer answered), or empty.'
    )
    example = serializers.IntegerField(
        source="example_id", allow_null=True, help_text="The library example a library answer came from."
    )
    examples_used = serializers.ListField(child=serializers.IntegerField(), help_text="Few-shot example ids.")
    privacy = serializers.JSONField(
        help_text='Privacy rules applied: the suppression report ("k", cells "suppressed", "complementary", '
        '"notes" where askdb could not tell), the "disclosure" mode that released the counts ("suppress", '
        '"round" with its "base", "noise", "dp" with the "epsilon_spent"), or "refused" with its "reason" '
        '(a row listing, a sensitive column, "differencing", "budget", "dp_counts_only", "dp_unsupported") and '
        'the "alternative" offered.'
    )

    suggestions = serializers.SerializerMethodField(
        help_text='"Did you mean": verified questions askdb can answer, as the run page shows them (id, question, score).'
    )
    long_query_of = serializers.IntegerField(
        source="long_query_of_id", allow_null=True,
        help_text="For a long query: the run that ran out of time, whose SQL this run executes again.",
    )  # fmt: skip
    time_limit_s = serializers.FloatField(
        allow_null=True, help_text="For a long query: its statement timeout, in seconds."
    )

    class Meta(RunListSerializer.Meta):
        fields = [*RunListSerializer.Meta.fields, "answer", "message", "started_at", "gate", "retrieval", "stages",
                  "attempts", "sql", "summary", "tokens", "cost_usd", "result", "review_status", "reviews",
                  "confidence", "answered_by", "example", "examples_used", "catalog_version", "model",
                  "privacy", "suggestions", "long_query_of", "time_limit_s"]  # fmt: skip
        read_only_fields = fields

    def get_answer(self, run: Run) -> str:
        return run_answer(run=run)

    def get_suggestions(self, run: Run) -> list[dict]:
        return self.context.get("suggestions") or []

    @extend_schema_field(ResultPageSerializer(allow_null=True))
    def get_result(self, run: Run) -> dict | None:
        """None while the run has no stored result (queued, running, declined, failed)."""
        page = self.context.get("result")
        return ResultPageSerializer(page).data if page is not None else None
