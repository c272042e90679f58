"""An evaluation: a benchmark question file run through the real pipeline, item by item, with
its metrics, its settings snapshot (the git-free "version") and its HTML report."""

from __future__ import annotations

from django.db import models


class Evaluation(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running", "running"
        FINISHED = "finished", "finished"
        INTERRUPTED = "interrupted", "interrupted"  # stopped part way; resumable
        FAILED = "failed", "failed"

    source = models.ForeignKey(
        "metadata_admin.ClinicalSource", on_delete=models.PROTECT, related_name="evaluations"
    )
    name = models.CharField(max_length=200, blank=True)
    questions_file = models.CharField(max_length=500)
    labels_file = models.CharField(max_length=500, blank=True)
    out_dir = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING, db_index=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # What produced these numbers: prompt version, LLM, embedding model, library size, K,
    # thresholds. `version` is a short, stable name for that snapshot, so runs compare by it.
    settings = models.JSONField(default=dict, blank=True)
    version = models.CharField(max_length=64, blank=True, db_index=True)
    metrics = models.JSONField(default=dict, blank=True)
    report_html = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.pk} {self.name or self.questions_file}"


class EvaluationItem(models.Model):
    """One benchmark question, its run, and how its answer compared with the gold answer."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()  # order in the question file
    item_id = models.CharField(max_length=200)
    question = models.TextField()
    gold_sql = models.TextField(blank=True)  # "" = unanswerable
    category = models.CharField(max_length=64, blank=True)
    metadata = models.JSONField(default=dict, blank=True)  # the file's other keys

    done = models.BooleanField(default=False, db_index=True)  # scored; skipped on resume
    run = models.ForeignKey("askdb.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    run_status = models.CharField(max_length=16, blank=True)
    outcome = models.CharField(max_length=32, blank=True)  # the run's outcome (answered, no_data…)
    verdict = models.CharField(max_length=32, blank=True)  # metrics.outcome: correct, wrong, missed…
    predicted_sql = models.TextField(blank=True)
    abstained = models.BooleanField(null=True)
    correct = models.BooleanField(null=True)
    gold_error = models.TextField(blank=True)  # the gold SQL failed: excluded from accuracy and RS
    predicted_error = models.TextField(blank=True)
    why = models.TextField(blank=True)  # one line on what went wrong, for the failure list
    latency_ms = models.FloatField(null=True, blank=True)  # sum of the run's stage durations
    tokens_prompt = models.IntegerField(default=0)
    tokens_completion = models.IntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=10, decimal_places=6, default=0)
    # abstention_score, answerability probability, confidence, answered_by, library confidence
    # and correctness, per-stage milliseconds: what the metrics are computed from.
    scores = models.JSONField(default=dict, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["evaluation", "position"]
        constraints = [models.UniqueConstraint(fields=["evaluation", "item_id"], name="uniq_evaluation_item")]

    def __str__(self) -> str:
        return f"{self.item_id}: {self.question[:60]}"

    @property
    def answerable(self) -> bool:
        return bool(self.gold_sql)
