"""Plain, frozen data shared by the pipeline stages.

The pipeline core imports neither Django nor openai: services turn models into these
dataclasses, stages turn them into other dataclasses, and tests build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    sql: str  # the statement as it will be executed
    tables: tuple[str, ...] = ()  # qualified table names it reads, sorted
    columns: tuple[str, ...] = ()  # "schema.table.column" it references, sorted
    warnings: tuple[str, ...] = field(default=())
