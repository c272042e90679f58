"""The schema catalog: clinical sources and their curated table and column documentation.

Retrieval and prompting depend on this text, so edits keep history (DocRevision) and every
embedding records the model that made it; a vector of another model or dimension is stale.
"""

from __future__ import annotations

import hashlib
import os

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from pgvector.django import VectorField

from core.labels import FORMATS


class DisclosureMode(models.TextChoices):
    SUPPRESS = "suppress", "suppress small cells"
    ROUND = "round", "round counts"
    NOISE = "noise", "add noise (i2b2-style)"
    DP = "dp", "differential privacy"


class ClinicalSource(models.Model):
    """A clinical database askdb can answer from, opened through a read-only connection."""

    class Engine(models.TextChoices):
        POSTGRESQL = "postgresql", "PostgreSQL"
        SQLITE = "sqlite", "SQLite"

    name = models.SlugField(max_length=64, unique=True)
    engine = models.CharField(max_length=16, choices=Engine.choices, default=Engine.POSTGRESQL)
    # A URL, or "env:VARIABLE" so that secrets stay in the environment, not in the database.
    url = models.CharField(max_length=500)
    dialect = models.CharField(max_length=16, default="postgres", help_text="sqlglot dialect")
    as_of = models.DateTimeField(
        null=True, blank=True, help_text="'now' for this data: MIMIC shifts dates into the future"
    )
    description = models.TextField(blank=True)
    row_level_to_llm = models.BooleanField(
        default=False, help_text="send result rows (not just schema and aggregates) to the LLM"
    )
    # Small-cell suppression: counts 0 < n < k are shown as "<k" everywhere (page, exports, API, LLM).
    min_cell_size = models.PositiveSmallIntegerField(
        default=11,
        help_text="counts below this are suppressed (11: the usual rule for patient data; 0 = off)",
    )
    aggregate_only = models.BooleanField(
        default=False, help_text="everyone gets aggregated results only on this source, whatever their role"
    )
    # Disclosure control against differencing (core/disclosure.py): how counts are
    # released beyond small-cell suppression, and how many near-identical probes a user may make.
    disclosure_mode = models.CharField(
        max_length=16, choices=DisclosureMode.choices, default=DisclosureMode.SUPPRESS,
        help_text="suppress: small cells only; round: counts to a base; noise: i2b2-style obfuscation "
        "(same answer for the same question and user); dp: differential privacy with a budget per user",
    )  # fmt: skip
    round_base = models.PositiveSmallIntegerField(
        default=5,
        validators=[MinValueValidator(1)],
        help_text="round: counts to the nearest multiple of this",
    )
    noise_kind = models.CharField(
        max_length=16, choices=[("gaussian", "Gaussian"), ("uniform", "uniform")], default="gaussian",
        help_text="noise: the distribution added to counts",
    )  # fmt: skip
    noise_scale = models.FloatField(
        default=1.5, validators=[MinValueValidator(0.1)], help_text="noise: standard deviation (Gaussian)"
    )
    noise_clip = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1)], help_text="noise: never more than ± this"
    )
    dp_epsilon = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0.001)],
        help_text="dp: privacy loss (ε) charged per answer",
    )
    dp_budget = models.FloatField(
        default=10.0, validators=[MinValueValidator(0.0)], help_text="dp: total ε per user on this source"
    )
    dp_contributions = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1)],
        help_text="dp: rows one patient can add to a count (1 for counts of distinct patients)",
    )  # fmt: skip
    differencing_limit = models.PositiveSmallIntegerField(
        default=7,
        help_text="answers refused once a user has asked this many queries differing by one condition "
        "within the window (0 = off; i2b2's lockout default is 7 in 30 days)",
    )
    differencing_window_days = models.PositiveSmallIntegerField(
        default=30, validators=[MinValueValidator(1)], help_text="the window for differencing_limit"
    )
    # Cost control per source; empty = the ASKDB_CANDIDATES / ASKDB_CONFIDENCE_THRESHOLD settings.
    candidates = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="SQL candidates sampled per question (1 = no sampling)"
    )
    confidence_threshold = models.FloatField(
        null=True, blank=True, help_text="share of candidates that must agree for one answer to be shown"
    )
    # The offline matcher's calibration (weights, threshold) fitted on held-out library questions.
    library_calibration = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def resolved_url(self) -> str:
        if self.url.startswith("env:"):
            name = self.url[4:]
            if name == "CLINICAL_DATABASE_URL":
                return settings.CLINICAL_DATABASE_URL
            return os.environ.get(name, "")
        return self.url

    def restricted_url(self) -> str:
        """The URL of the reader for users without view_sensitive, whose column privileges leave out
        the sensitive columns; "" when none is configured (then resolved_url's reader serves them).

        env:CLINICAL_DATABASE_URL pairs with CLINICAL_RESTRICTED_DATABASE_URL, env:NAME with
        NAME_RESTRICTED. A URL written out in the source has no pair: keep secrets and tiers in the
        environment. SQLite needs none (its authorizer hides the columns)."""
        if not self.url.startswith("env:"):
            return ""
        name = self.url[4:]
        if name == "CLINICAL_DATABASE_URL":
            return settings.CLINICAL_RESTRICTED_DATABASE_URL
        return os.environ.get(f"{name}_RESTRICTED", "")


class TableDoc(models.Model):
    """What one table holds, in the words researchers use, plus its embedding."""

    source = models.ForeignKey(ClinicalSource, on_delete=models.CASCADE, related_name="tables")
    schema_name = models.CharField(max_length=128, blank=True)
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True)
    purpose = models.TextField(blank=True)
    grain = models.CharField(max_length=300, blank=True)
    considerations = models.JSONField(default=list, blank=True)
    synonyms = models.JSONField(default=list, blank=True)
    example_questions = models.JSONField(default=list, blank=True)
    row_count = models.BigIntegerField(null=True, blank=True)
    exists_in_source = models.BooleanField(default=True)
    # Reference data (a code dictionary: ICD titles, lab and chart items) describes codes, not
    # patients, so aggregate-only users may read it. None: decided by the table's kind, i.e. reference
    # when none of its columns identifies a patient, admission or stay (ASKDB_IDENTIFIER_COLUMNS).
    reference = models.BooleanField(
        null=True,
        blank=True,
        help_text="Reference data (a code dictionary) that aggregate-only users may list. Unknown: yes "
        "when no column identifies a patient, admission or stay.",
    )
    # An LLM-written description waits here until an admin accepts it.
    draft_description = models.TextField(blank=True)

    embedding = VectorField(null=True, blank=True)  # no fixed dimension: providers differ
    embedding_model = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64, blank=True)  # of the text that was embedded
    embedding_error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["schema_name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["source", "schema_name", "name"], name="uniq_table_doc"),
        ]

    def __str__(self) -> str:
        return self.qualified_name

    @property
    def qualified_name(self) -> str:
        return f"{self.schema_name}.{self.name}" if self.schema_name else self.name


class ColumnDoc(models.Model):
    table = models.ForeignKey(TableDoc, on_delete=models.CASCADE, related_name="columns")
    name = models.CharField(max_length=128)
    position = models.PositiveIntegerField(default=0)
    data_type = models.CharField(max_length=64, blank=True)
    meaning = models.TextField(blank=True)
    draft_meaning = models.TextField(blank=True)
    example_values = models.TextField(blank=True)
    is_primary_key = models.BooleanField(default=False)
    is_foreign_key = models.BooleanField(default=False)
    sensitive = models.BooleanField(default=False)
    # Distinct values of this column go into the value index (value linking).
    value_index = models.BooleanField(default=False)
    # How results show this column (core/labels.py): blank = drafted from the name and meaning.
    label = models.CharField(max_length=200, blank=True, help_text="display name, e.g. “ICU length of stay”")
    unit = models.CharField(max_length=32, blank=True, help_text="unit of its values, e.g. “days”")
    display_format = models.CharField(
        max_length=16, blank=True, choices=[(f, f or "by type") for f in FORMATS],
        help_text="how values are written: integer, decimal, percent, date, code (as is) or by type",
    )  # fmt: skip

    class Meta:
        ordering = ["table", "position", "name"]
        constraints = [models.UniqueConstraint(fields=["table", "name"], name="uniq_column_doc")]

    def __str__(self) -> str:
        return f"{self.table.qualified_name}.{self.name}"


class Relationship(models.Model):
    """A foreign key or a common join, with a note the prompt shows the LLM."""

    class Kind(models.TextChoices):
        FOREIGN_KEY = "foreign_key", "foreign key"
        COMMON_JOIN = "common_join", "common join"

    from_table = models.ForeignKey(TableDoc, on_delete=models.CASCADE, related_name="relationships")
    to_table = models.ForeignKey(TableDoc, on_delete=models.CASCADE, related_name="+")
    column_pairs = models.JSONField(
        default=list
    )  # [["icd_code", "icd_code"], ["icd_version", "icd_version"]]
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.FOREIGN_KEY)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["from_table", "to_table"]

    def __str__(self) -> str:
        on = " AND ".join(f"{a} = {b}" for a, b in self.column_pairs)
        return f"{self.from_table.qualified_name} → {self.to_table.qualified_name} ON {on}"


class DocRevision(models.Model):
    """A snapshot of a table doc (with its columns) before each edit: curated text is never lost."""

    table = models.ForeignKey(TableDoc, on_delete=models.CASCADE, related_name="revisions")
    at = models.DateTimeField(auto_now_add=True)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    note = models.CharField(max_length=200, blank=True)
    snapshot = models.JSONField()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.table} @ {self.at:%Y-%m-%d %H:%M}"


class ValueEntry(models.Model):
    """One distinct value of a categorical column, for fuzzy (pg_trgm) and semantic linking."""

    source = models.ForeignKey(ClinicalSource, on_delete=models.CASCADE, related_name="values")
    table = models.ForeignKey(TableDoc, on_delete=models.CASCADE, related_name="values")
    column = models.CharField(max_length=128)
    value = models.TextField()
    code = models.CharField(max_length=200, blank=True)  # e.g. the icd_code or itemid behind a title
    frequency = models.BigIntegerField(default=0)
    embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [models.Index(fields=["source", "table", "column"])]

    def __str__(self) -> str:
        return f"{self.table.qualified_name}.{self.column} = {self.value!r}"


class LinkableValue(models.Model):
    """One distinct value of a linkable column (the matcher's value columns: drugs, lab and item
    labels, diagnosis titles, organisms…) with the number of rows holding it.

    Value linking searches these (trigram index on `value`) at question time instead of the event
    tables, which in the full MIMIC-IV hold tens of millions of rows. The loader rebuilds them
    (metadata_admin.services.linkable_values_build); a question only reads them.
    """

    source = models.ForeignKey(ClinicalSource, on_delete=models.CASCADE, related_name="linkable_values")
    table = models.CharField(max_length=200)  # as the source names it: "mimiciv_hosp.prescriptions"
    column = models.CharField(max_length=128)
    key = models.CharField(max_length=200)  # "prescriptions.drug" in lower case: what a slot names
    value = models.TextField()
    frequency = models.BigIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["source", "key", "-frequency"], name="linkable_value_key_idx")]

    def __str__(self) -> str:
        return f"{self.table}.{self.column} = {self.value!r}"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
