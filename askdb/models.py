"""askdb's records: questions, runs, reviews, the example library, and the role permissions every page checks."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from pgvector.django import VectorField

from core.prompts import CATEGORY_LABELS


class Access(models.Model):
    """Holds the global permissions the roles are made of; it has no table of its own."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("ask_questions", "Can ask questions"),
            ("review_runs", "Can review generated SQL"),
            ("view_all_runs", "Can see every user's questions and runs"),
            ("view_audit", "Can read the audit log"),
            ("curate_catalog", "Can curate schema documentation"),
            ("manage_users", "Can manage users and roles"),
            ("view_row_level", "Can see row-level results (not only aggregates)"),
            ("view_sensitive", "Can see columns the catalog marks sensitive"),
            ("run_long_queries", "Can run a timed-out question's SQL again as a long query"),
        ]

    def __str__(self) -> str:
        return "askdb access"


class Question(models.Model):
    """What a user asked, of which source. Runs are the attempts to answer it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="questions")
    source = models.ForeignKey(
        "metadata_admin.ClinicalSource", on_delete=models.PROTECT, related_name="questions"
    )
    text = models.TextField()
    # Where it came from. Evaluation questions are kept out of history and the review queue.
    channel = models.CharField(max_length=16, default="web", db_index=True)  # web | api | cli | evaluation
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # A follow-up on an earlier answer: that run's question and SQL are this question's context.
    follow_up_of = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="follow_ups"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.text[:80]


class Run(models.Model):
    """One pass of the pipeline over a question; every stage leaves a StageEvent."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "answered"
        DECLINED = "declined", "not answerable"  # the gate stopped it, politely, with a reason
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"

    TERMINAL = (Status.SUCCEEDED, Status.DECLINED, Status.FAILED, Status.CANCELLED)

    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    # Why it ended as it did, machine-readable: answered, no_rows, no_data, out_of_scope, non_medical,
    # future_data, private_data, no_llm, sql_invalid, execution_error, llm_error, worker_lost, cancelled,
    # privacy_row_level, privacy_sensitive_column (the user may not see that output; see `privacy`)…
    outcome = models.CharField(max_length=32, blank=True)
    message = models.TextField(blank=True)  # the human sentence shown to the user

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    deliveries = models.PositiveIntegerField(default=0)  # how often a worker picked it up
    worker = models.CharField(max_length=200, blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    # A long query: the timed-out run whose validated SQL this run executes again in the
    # background, with the higher limit it had (askdb.services.long_queries).
    long_query_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="long_queries"
    )
    time_limit_s = models.FloatField(null=True, blank=True)

    gate_category = models.CharField(max_length=32, blank=True)
    gate_reason = models.TextField(blank=True)
    retrieval = models.JSONField(default=dict, blank=True)  # tables with scores, linked values

    sql = models.TextField(blank=True)  # the SQL that ran
    result_columns = models.JSONField(default=list, blank=True)
    result_rows = models.JSONField(default=list, blank=True)
    result_truncated = models.BooleanField(default=False)
    row_count = models.IntegerField(null=True, blank=True)
    summary = models.TextField(blank=True)

    # Provenance: what produced the answer, so it can be cited and reproduced.
    prompt_version = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=200, blank=True)  # the LLM that wrote the SQL ("" for none)
    catalog_version = models.CharField(max_length=64, blank=True)  # hash of the docs retrieval saw
    answered_by = models.CharField(max_length=16, blank=True)  # "llm" | "library" | "reviewer" | ""
    example = models.ForeignKey(  # the verified example a library answer was built from
        "Example", null=True, blank=True, on_delete=models.SET_NULL, related_name="answered_runs"
    )
    examples_used = models.JSONField(default=list, blank=True)  # few-shot example ids in the prompt
    # The offline matcher's best verified template: example id, confidence, threshold, bindings
    # (the values that changed) and its SQL, kept even when it did not answer (for calibration).
    library_match = models.JSONField(default=dict, blank=True)
    confidence = models.FloatField(null=True, blank=True)  # 0..1; agreement of sampled candidates
    candidates = models.JSONField(default=list, blank=True)  # sampled SQL candidates, grouped
    answerability = models.JSONField(default=dict, blank=True)  # score, threshold, per-table relevance
    # The privacy rules applied to this run's result: the suppression report (k, cells hidden,
    # notes where askdb could not tell), or the refusal with its reason and the aggregate offered.
    privacy = models.JSONField(default=dict, blank=True)

    # Review: every successful run waits for a reviewer unless the policy says otherwise.
    class Review(models.TextChoices):
        NONE = "", "not for review"
        PENDING = "pending", "awaiting review"
        APPROVED = "approved", "approved"
        CORRECTED = "corrected", "corrected"
        FLAGGED = "flagged", "flagged"

    review_status = models.CharField(max_length=16, choices=Review.choices, blank=True, db_index=True)
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    tokens_prompt = models.IntegerField(default=0)
    tokens_completion = models.IntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=10, decimal_places=6, default=0)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def gate_label(self) -> str:
        """The gate's decision in words (never the raw category code)."""
        return CATEGORY_LABELS.get(self.gate_category, self.gate_category.replace("_", " "))

    @property
    def outcome_label(self) -> str:
        """The outcome in words: a gate category by its label, anything else without underscores."""
        if self.outcome == self.gate_category and self.outcome in CATEGORY_LABELS:
            return CATEGORY_LABELS[self.outcome]
        return self.outcome.replace("_", " ")

    @property
    def answerability_version(self) -> str:
        return (self.answerability or {}).get("version", "")


class StageEvent(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running", "running"
        OK = "ok", "ok"
        FAILED = "failed", "failed"
        SKIPPED = "skipped", "skipped"
        STOPPED = "stopped", "stopped the run"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stages")
    name = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "started_at", "id"]

    def __str__(self) -> str:
        return f"{self.name} {self.status}"


class SqlAttempt(models.Model):
    """Every SQL the run produced, valid or not, with the error that was fed back."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    sql = models.TextField()
    origin = models.CharField(max_length=16, default="llm")  # llm | repair | example
    valid = models.BooleanField(default=False)
    error_code = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="uniq_attempt_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of run {self.run_id}"


class LlmCall(models.Model):
    """A request to the LLM: prompt, response, tokens and estimated cost, for audit and replay."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, null=True, blank=True, related_name="llm_calls")
    purpose = models.CharField(max_length=32)  # gate | generate | repair | summarize
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=32, blank=True)
    messages = models.JSONField(default=list)
    response = models.TextField(blank=True)
    prompt_tokens = models.IntegerField(default=0)
    completion_tokens = models.IntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=10, decimal_places=6, default=0)
    duration_ms = models.FloatField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.purpose} via {self.model}"


class Example(models.Model):
    """A reviewer-verified question/SQL pair: a few-shot example, a template, a gate negative.

    Only verified pairs live here (unverified ones measurably hurt accuracy). `kind` says whether
    the question is answerable (it has SQL) or a question reviewers judged unanswerable, kept as a
    negative example for the answerability gate.
    """

    class Kind(models.TextChoices):
        ANSWERABLE = "answerable", "answerable"
        UNANSWERABLE = "unanswerable", "unanswerable"

    class Status(models.TextChoices):
        ACTIVE = "active", "active"
        NEEDS_REVIEW = "needs_review", "needs review"  # broke after a catalog or schema change
        RETIRED = "retired", "retired"

    source = models.ForeignKey(
        "metadata_admin.ClinicalSource", on_delete=models.CASCADE, related_name="examples"
    )
    question = models.TextField()
    sql = models.TextField(blank=True)  # "" for unanswerable examples
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ANSWERABLE, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE, db_index=True)
    tables = models.JSONField(default=list, blank=True)  # qualified tables the SQL reads (sqlglot)
    columns = models.JSONField(default=list, blank=True)  # "schema.table.column" it references
    paraphrases = models.JSONField(default=list, blank=True)  # merged near-duplicate questions
    embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    template = models.JSONField(default=dict, blank=True)  # slots for offline answering, rebuilt on change
    # The template's identity (hash of templates.template_key): examples sharing it are paraphrases
    # of one template. The masked question's vector is what template retrieval compares.
    template_key = models.CharField(max_length=16, blank=True, db_index=True)
    masked_embedding = VectorField(null=True, blank=True)
    origin = models.CharField(max_length=16, default="review")  # review | correction | import | demo
    # Asked as it stands on its source, does it return an answer a person can read (rows, not all
    # withheld as small cells)? None: not checked. Only a True example is offered as a suggestion
    # once any is checked (askdb.services.calibration.library_suggestions_check).
    answers_as_is = models.BooleanField(null=True, blank=True)
    origin_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="library_examples"
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)  # why it is unanswerable, or what it was corrected for
    validation_error = models.TextField(blank=True)  # set when re-validation against the catalog fails
    validated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-approved_at", "-id"]
        indexes = [models.Index(fields=["source", "status", "kind"])]

    def __str__(self) -> str:
        return f"example {self.pk}: {self.question[:60]}"

    @property
    def usable(self) -> bool:
        return self.status == self.Status.ACTIVE


class Review(models.Model):
    """One reviewer action on a run: approve, correct (with the SQL diff), flag, or reassign."""

    class Action(models.TextChoices):
        APPROVE = "approve", "approved"
        CORRECT = "correct", "corrected"
        FLAG = "flag", "flagged"
        REASSIGN = "reassign", "reassigned"
        ANSWER = "answer", "answered a request"  # a reviewer wrote the SQL of a declined question

    class Category(models.TextChoices):
        WRONG_LOGIC = "wrong_logic", "wrong logic"
        WRONG_TABLE = "wrong_table", "wrong table"
        WRONG_VALUES = "wrong_values", "wrong values"
        AMBIGUOUS = "ambiguous", "ambiguous"
        UNANSWERABLE = "unanswerable", "unanswerable"
        UNSAFE = "unsafe", "unsafe"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="reviews"
    )
    action = models.CharField(max_length=16, choices=Action.choices)
    category = models.CharField(max_length=16, choices=Category.choices, blank=True)
    comment = models.TextField(blank=True)
    sql_before = models.TextField(blank=True)
    sql_after = models.TextField(blank=True)
    diff = models.TextField(blank=True)  # unified diff of a correction
    example = models.ForeignKey(Example, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} of run {self.run_id}"


class LibraryGeneration(models.Model):
    """What a question reads of a source, numbered: `examples` moves when the example library
    changes, `data` when the source's documentation or data does. Every worker process checks the
    row once per question, so a change made in one process reaches the caches of all of them
    (askdb.adapters.library_cache) without a restart."""

    source = models.OneToOneField(
        "metadata_admin.ClinicalSource", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    examples = models.PositiveBigIntegerField(default=0)
    data = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"library of source {self.source_id}: examples {self.examples}, data {self.data}"


class ImportJob(models.Model):
    """A large example import, done by a worker (askdb.tasks.import_examples), not by the web
    process: 20,000 pairs took minutes in the request. The API answers 202 with this job's URL;
    `done` of `total` says how far it got, `report` what came of it."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"

    source = models.ForeignKey("metadata_admin.ClinicalSource", on_delete=models.CASCADE, related_name="+")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    execute = models.BooleanField(default=True)
    items = models.JSONField(default=list, blank=True)  # the pairs to import; emptied once imported
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"import {self.pk}: {self.done} of {self.total} ({self.status})"


class Release(models.Model):
    """One answer released to a user on a source: the ledger that disclosure control reads.

    Near-identical queries (one condition apart) are counted from these rows to refuse a series of
    differencing probes, and the differential-privacy budget a user has spent is their epsilon's sum.
    Rows are only ever added (the budget must not be refundable by deleting history)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    source = models.ForeignKey("metadata_admin.ClinicalSource", on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="releases")
    sql_sha256 = models.CharField(max_length=64)
    shape = models.JSONField(default=dict, blank=True)  # disclosure.QueryShape.to_json(); {} unparsed
    mode = models.CharField(max_length=16)
    epsilon = models.FloatField(default=0.0)
    near_identical = models.PositiveIntegerField(default=0)  # earlier probes one condition apart
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["user", "source", "created_at"])]

    def __str__(self) -> str:
        return f"release {self.pk} ({self.mode}, ε {self.epsilon:g})"


class AnswerRequest(models.Model):
    """A person asking reviewers for the answer askdb could not give (a declined or failed run).

    Requests that ask the same thing are grouped by the masked question's vector (the matcher's own
    reading), so one answer closes every one of them; the masked vector is computed by a worker."""

    class Status(models.TextChoices):
        PENDING = "pending", "waiting for a reviewer"
        ANSWERED = "answered", "answered"
        CLOSED = "closed", "closed without an answer"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="answer_requests")
    source = models.ForeignKey(
        "metadata_admin.ClinicalSource", on_delete=models.CASCADE, related_name="answer_requests"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="answer_requests"
    )
    question = models.TextField()
    note = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    masked_question = models.TextField(blank=True)
    masked_embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    # The run that carries the answer: the original run (answered by the reviewer) or a new run of
    # the same question answered from the library once the reviewer's example was in it.
    answer_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    example = models.ForeignKey(
        Example, null=True, blank=True, on_delete=models.SET_NULL, related_name="answered_requests"
    )
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["source", "status"])]

    def __str__(self) -> str:
        return f"request {self.pk}: {self.question[:60]}"


class Notification(models.Model):
    """A line in a person's inbox (an answered request); read once opened."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    message = models.TextField()
    url = models.CharField(max_length=300, blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    read_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "read_at"])]

    def __str__(self) -> str:
        return f"to {self.user_id}: {self.message[:60]}"
