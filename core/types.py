"""Plain, frozen data shared by the pipeline stages and the infrastructure that serves them.

The core imports neither Django nor openai: services turn models into these dataclasses, stages
turn them into other dataclasses, providers and adapters return them, and tests build them by hand.
They are here, below both the stages (core/) and infra/, so that infra never imports
the app that holds the stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class TableSchema:
    """One table of a clinical source as the validator and prompt see it."""

    schema: str  # "mimiciv_hosp"; "" for engines without schemas (SQLite)
    name: str  # "admissions"
    columns: tuple[str, ...]  # lower-case column names, in table order

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass(frozen=True)
class CatalogSchema:
    """The tables generated SQL may use, and the dialect it must be written in."""

    tables: tuple[TableSchema, ...]
    dialect: str = "postgres"  # a sqlglot dialect name: "postgres", "sqlite", "duckdb"

    def find(self, name: str, schema: str | None = None) -> list[TableSchema]:
        """Tables called `name` (case-insensitive), optionally only in `schema`."""
        name = name.lower()
        return [
            t
            for t in self.tables
            if t.name.lower() == name and (schema is None or t.schema.lower() == schema.lower())
        ]


@dataclass(frozen=True)
class ValidatedSql:
    """SQL that passed validation, with what it reads (used for review, examples and audit)."""

    sql: str  # the statement as it will be executed: generated from `tree`, without comments
    tables: tuple[str, ...] = ()  # qualified table names it reads, sorted
    columns: tuple[str, ...] = ()  # "schema.table.column" it references, sorted
    warnings: tuple[str, ...] = field(default=())
    # The parsed tree every check read (a sqlglot expression; identifiers lower case). Privacy
    # analysis and rewrites read this very tree, never a new parse of someone's text.
    tree: Any = field(default=None, compare=False, repr=False)


class LLMError(RuntimeError):
    """The LLM failed or answered garbage; `message` is one line for the user and the audit."""

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.message = message
        self.transient = transient  # timeouts, 429, 5xx: worth trying again later


@dataclass(frozen=True)
class ChatResult:
    texts: tuple[str, ...]  # one per choice (n)
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: float = 0.0

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


@dataclass(frozen=True)
class ColumnContext:
    name: str
    type: str = ""
    meaning: str = ""
    example_values: str = ""
    key: str = ""  # "PK", "FK" or ""
    sensitive: bool = False


@dataclass(frozen=True)
class TableContext:
    """A table doc as the SQL prompt shows it."""

    qualified: str
    description: str = ""
    purpose: str = ""
    grain: str = ""
    considerations: tuple[str, ...] = ()
    synonyms: tuple[str, ...] = ()
    columns: tuple[ColumnContext, ...] = ()
    joins: tuple[str, ...] = ()  # "diagnoses_icd.icd_code = d_icd_diagnoses.icd_code AND … — note"


@dataclass(frozen=True)
class ExampleContext:
    """A reviewer-approved question/SQL pair used as a few-shot example."""

    question: str
    sql: str
    score: float = 0.0
    example_id: int | None = None
    tables: tuple[str, ...] = ()  # qualified tables its SQL reads


class ChatModel(Protocol):
    model: str

    def complete(
        self, messages: list[dict], *, temperature: float = 0.0, n: int = 1, max_tokens: int | None = None
    ) -> ChatResult: ...


@dataclass(frozen=True)
class LinkedValue:
    """A database value a question's words were linked to (value linking)."""

    table: str  # qualified
    column: str
    value: str
    code: str
    score: float  # 0..1
    term: str  # the words of the question it matched
    method: str  # "fuzzy" | "semantic"
