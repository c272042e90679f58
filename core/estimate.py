"""How big a query is before (or after) it runs, in words a researcher reads: the rows of the
tables it reads (the catalog's sizes) and, on PostgreSQL, the planner's expectation.

A query that ran out of time is reported by its size ("reads about 118 million rows of
labevents"), never as a decline; a large one is announced before it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


def about(n: float) -> str:
    """A row count as a person says it: 3,412; 450 thousand; 2.5 million; 118 million; 27 billion."""
    n = max(float(n), 0.0)
    for size, word in ((1e9, "billion"), (1e6, "million"), (1e3, "thousand")):
        if n >= size and (word != "thousand" or n >= 100_000):
            value = n / size
            text = f"{value:.1f}" if value < 10 else f"{value:,.0f}"
            return f"{text.removesuffix('.0')} {word}"
    return f"{round(n):,}"


def _short(table: str) -> str:
    return table.rpartition(".")[2]


@dataclass(frozen=True)
class QueryEstimate:
    """What a query reads: (table, rows) largest first, from the catalog's table sizes, and the
    planner's largest row count over the plan and its total cost when the database gave one."""

    tables: tuple[tuple[str, int], ...] = ()
    planner_rows: float | None = None  # the most rows any step of the plan handles (a join's output)
    planner_cost: float | None = None  # the planner's total cost (its own units)

    @classmethod
    def from_sizes(
        cls, tables: tuple[str, ...] | list[str], sizes: Mapping[str, int | None]
    ) -> QueryEstimate:
        """The tables a validated query reads with their known sizes (lower-case qualified names)."""
        known = {t: int(sizes[t]) for t in tables if sizes.get(t) is not None}
        return cls(tables=tuple(sorted(known.items(), key=lambda p: (-p[1], p[0]))))

    def planned(self, rows: float, cost: float) -> QueryEstimate:
        return QueryEstimate(self.tables, planner_rows=float(rows), planner_cost=float(cost))

    @property
    def rows_read(self) -> int:
        return sum(rows for _, rows in self.tables)

    @property
    def known(self) -> bool:
        return bool(self.tables) or self.planner_rows is not None

    def is_large(self, *, rows: int, cost: float) -> bool:
        """Large by the planner's cost when there is one (an indexed single-patient lookup on a
        huge table is small), else by the rows of the tables read."""
        if self.planner_cost is not None:
            return self.planner_cost >= cost
        return self.rows_read >= rows

    def reads(self) -> str:
        """ "reads about 118 million rows of labevents (and 2 other tables), which the planner
        expects to become about 27 billion rows"; "" when nothing is known."""
        parts = []
        if self.tables:
            table, rows = self.tables[0]
            others = len(self.tables) - 1
            more = f" and {others} other table{'s' if others > 1 else ''}" if others else ""
            parts.append(f"reads about {about(rows)} rows of {_short(table)}{more}")
        if self.planner_rows is not None and self.planner_rows > max(self.rows_read, 1) * 2:
            verb = "which the planner expects to become" if parts else "makes the planner expect"
            parts.append(f"{verb} about {about(self.planner_rows)} rows")
        return ", ".join(parts)

    def before_sentence(self) -> str:
        """Shown while a large query runs."""
        return f"This question {self.reads()}: it may take a while." if self.known else ""

    def to_json(self) -> dict:
        return {
            "tables": [[t, rows] for t, rows in self.tables],
            "rows_read": self.rows_read,
            "planner_rows": self.planner_rows,
            "planner_cost": self.planner_cost,
            "basis": "planner" if self.planner_cost is not None else "table sizes",
        }


def timed_out_message(
    timeout_s: float, estimate: QueryEstimate | None = None, limit: str = "the statement timeout"
) -> str:
    """What a researcher reads when the question's query ran out of time: how big it is (when
    askdb knows), the limit it hit, and that the query's size, not the question's meaning,
    stopped it."""
    size = estimate.reads() if estimate is not None and estimate.known else ""
    head = (
        f"This question {size} and needed more than {timeout_s:g} s ({limit}), so it was stopped"
        if size
        else f"This question's query needed more than {timeout_s:g} s ({limit}) and was stopped"
    )
    return f"{head}: it reads more rows than fit in that time. This says nothing about whether the data can answer it."
