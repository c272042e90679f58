"""Phenotypes found in clinical notes: definitions, runs, per-patient decisions and their evidence.

Note text is the most sensitive data askdb holds: evidence rows keep the deciding sentence so a
reviewer can check a decision, and selectors hand it only to users with `askdb.view_sensitive`.
Whether a snippet may go to an LLM is decided per source (`NotesPolicy`, off by default), and
every snippet that left is marked on its evidence row (`sent_to_llm`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from pgvector.django import VectorField

from metadata_admin.models import ClinicalSource


class Phenotype(models.Model):
    """A condition to find: its terms and synonyms, a description to rank snippets by, and codes."""

    name = models.CharField(max_length=120, unique=True)
    description = models.TextField()
    terms = models.JSONField(default=list, help_text="terms and synonyms searched in the notes")
    icd = models.JSONField(
        default=list, blank=True, help_text="ICD-9/ICD-10 code patterns without dots, % as wildcard"
    )
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class NotesPolicy(models.Model):
    """What an admin allowed for one source's notes. No row means the defaults: nothing leaves."""

    source = models.OneToOneField(ClinicalSource, on_delete=models.CASCADE, related_name="notes_policy")
    snippets_to_llm = models.BooleanField(
        default=False, help_text="send candidate note snippets to the LLM when a run asks for it"
    )

    def __str__(self) -> str:
        return f"notes policy of {self.source}"


class PhenotypeRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Judge(models.TextChoices):
        CONTEXT = "context", "ConText rules (no LLM)"
        LLM = "llm", "LLM map/reduce"

    phenotype = models.ForeignKey(Phenotype, on_delete=models.CASCADE, related_name="runs")
    source = models.ForeignKey(ClinicalSource, on_delete=models.CASCADE)
    judge = models.CharField(max_length=16, choices=Judge.choices, default=Judge.CONTEXT)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # A copy of the definition as it ran: a later edit must not change what this run means.
    definition = models.JSONField(default=dict)
    stage = models.CharField(max_length=40, blank=True)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)
    agreement = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    cohort_table = models.CharField(max_length=120, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.phenotype} on {self.source} ({self.status})"


class PatientDecision(models.Model):
    class Decision(models.TextChoices):
        PRESENT = "present"
        ABSENT = "absent"
        UNCERTAIN = "uncertain"

    run = models.ForeignKey(PhenotypeRun, on_delete=models.CASCADE, related_name="decisions")
    subject_id = models.BigIntegerField()
    decision = models.CharField(max_length=16, choices=Decision.choices)
    coded = models.BooleanField(default=False, help_text="matches the phenotype's ICD patterns")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "subject_id"], name="phenotype_decision_once")]
        ordering = ["subject_id"]

    def __str__(self) -> str:
        return f"subject {self.subject_id}: {self.decision}"


class Evidence(models.Model):
    """One candidate snippet of a patient's notes and how it was judged."""

    decision = models.ForeignKey(PatientDecision, on_delete=models.CASCADE, related_name="evidence")
    note_id = models.CharField(max_length=25)
    section = models.CharField(max_length=80, blank=True)
    text = models.TextField()
    term_start = models.PositiveIntegerField(default=0)  # the matched term, for highlighting
    term_end = models.PositiveIntegerField(default=0)
    assertion = models.CharField(max_length=16)  # affirmed negated historical family hypothetical uncertain
    score = models.FloatField(null=True, blank=True)  # similarity to the phenotype's description
    deciding = models.BooleanField(default=False)
    sent_to_llm = models.BooleanField(default=False)  # this snippet left for the LLM
    llm_assertion = models.CharField(max_length=16, blank=True)
    llm_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-deciding", "-score", "id"]

    def __str__(self) -> str:
        return f"{self.note_id}: {self.assertion}"


class Adjudication(models.Model):
    """A reviewer's check of one sampled decision: does the evidence support it?"""

    decision = models.ForeignKey(PatientDecision, on_delete=models.CASCADE, related_name="adjudications")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    agree = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["decision", "reviewer"], name="phenotype_adjudicated_once")
        ]

    def __str__(self) -> str:
        return f"{self.reviewer} {'agrees' if self.agree else 'disagrees'} on {self.decision}"


class SnippetEmbedding(models.Model):
    """Embeddings of candidate snippets only (never whole notes), by text hash and model."""

    text_hash = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    embedding = VectorField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["text_hash", "model"], name="snippet_embedding_once")]

    def __str__(self) -> str:
        return f"{self.model}:{self.text_hash[:12]}"
