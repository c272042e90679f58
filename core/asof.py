""" "Now" as of the source: a clinical database is a snapshot, so its present is its as-of time.

Why: "this year", "last month" and "N days ago" must mean the snapshot's year, month and days, not
the wall clock's. A source stores its as-of timestamp; every SQL askdb executes on it (generated,
library-bound, a reviewer's correction, gold SQL in evaluation) has each reference to the current
time replaced by that timestamp, on the parsed tree (sqlglot), for each dialect:

- SQLite: CURRENT_TIME / CURRENT_TIMESTAMP (as EHRSQL writes them: the full timestamp),
  CURRENT_DATE, and the 'now' argument of date(), time(), datetime(), julianday(), strftime(),
  unixepoch().
- PostgreSQL: now(), CURRENT_TIMESTAMP, LOCALTIMESTAMP, CURRENT_DATE, CURRENT_TIME,
  transaction_timestamp(), statement_timestamp(), clock_timestamp(), and 'now'::timestamp.

SQL without any of these is returned unchanged (byte for byte); SQL that does not parse too (the
executor reports its error as usual).
"""

from __future__ import annotations

import datetime as dt

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

_NOW_FUNCTIONS = {"now", "transaction_timestamp", "statement_timestamp", "clock_timestamp"}
_SQLITE_TIME_FUNCTIONS = {"date", "time", "datetime", "julianday", "strftime", "unixepoch", "timediff"}


def normalise_as_of(as_of: str | dt.datetime | None) -> str:
    """ "YYYY-MM-DD HH:MM:SS" for a timestamp or text; "" for none. Raises ValueError on nonsense."""
    if not as_of:
        return ""
    if isinstance(as_of, str):
        as_of = dt.datetime.fromisoformat(as_of.strip().replace("Z", "+00:00"))
    if isinstance(as_of, dt.date) and not isinstance(as_of, dt.datetime):
        as_of = dt.datetime.combine(as_of, dt.time())
    return as_of.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S")


def apply_as_of(sql: str, dialect: str, as_of: str | dt.datetime | None) -> str:
    """`sql` with every reference to the current time replaced by `as_of` (see the module doc)."""
    stamp = normalise_as_of(as_of)
    if not stamp or not sql:
        return sql
    lowered = sql.lower()
    if not any(w in lowered for w in ("current_", "now", "localtimestamp", "_timestamp")):
        return sql  # the common case, without a parse
    try:
        statements = sqlglot.parse(sql.strip().rstrip(";"), dialect=dialect)
    except (SqlglotError, RecursionError):
        return sql
    changed = False
    out = []
    for tree in statements:
        if tree is None:
            continue
        tree, n = _rewrite(tree, dialect, stamp)
        changed = changed or n
        out.append(tree.sql(dialect=dialect, copy=False))  # parsed here: nobody else holds the tree
    return ";\n".join(out) if changed else sql


def _rewrite(tree: exp.Expr, dialect: str, stamp: str) -> tuple[exp.Expr, bool]:
    sqlite = dialect == "sqlite"
    date, time = stamp[:10], stamp[11:]
    changed = False

    def typed(value: str, kind: str) -> exp.Expr:
        return exp.Literal.string(value) if sqlite else exp.cast(exp.Literal.string(value), kind)

    def visit(node: exp.Expr) -> exp.Expr:
        nonlocal changed
        replacement: exp.Expr | None = None
        if isinstance(node, (exp.CurrentTimestamp, exp.Localtimestamp)):
            replacement = typed(stamp, "timestamp")
        elif isinstance(node, exp.CurrentTime):
            # EHRSQL's SQLite "current_time" means the whole timestamp; PostgreSQL's is a time of day.
            replacement = typed(stamp, "timestamp") if sqlite else typed(time, "time")
        elif isinstance(node, exp.CurrentDate):
            replacement = typed(date, "date")
        elif (
            isinstance(node, exp.Anonymous)
            and str(node.this).lower() in _NOW_FUNCTIONS
            and not node.expressions
        ):
            replacement = typed(stamp, "timestamp")
        elif (
            isinstance(node, exp.Literal)
            and node.is_string
            and node.this.strip().lower() == "now"
            and _is_time_argument(node, sqlite)
        ):
            replacement = exp.Literal.string(stamp)
        if replacement is not None:
            changed = True
            return replacement
        return node

    tree = tree.transform(visit, copy=False)  # the caller's own parse: changed in place, not copied
    return tree, changed


def _is_time_argument(node: exp.Literal, sqlite: bool) -> bool:
    parent = node.parent
    if sqlite:
        if isinstance(parent, exp.Anonymous):
            return str(parent.this).lower() in _SQLITE_TIME_FUNCTIONS
        return isinstance(parent, (exp.Func,)) and parent.key in ("timetostr", "strtotime", "date", "time")
    return isinstance(parent, exp.Cast)  # 'now'::timestamp


class AsOfExecutor:
    """An executor whose every statement sees "now" as the source's as-of time (see the module doc).

    Wraps any executor with `execute(sql, …)` and `explain(sql, …)`; everything else is delegated.
    `last_as_of` says whether the last statement was rewritten, for provenance.
    """

    def __init__(self, executor, *, dialect: str, as_of: str | dt.datetime | None):
        self._executor = executor
        self.dialect = dialect
        self.as_of = normalise_as_of(as_of)
        self.last_rewritten = False

    def rewrite(self, sql: str) -> str:
        out = apply_as_of(sql, self.dialect, self.as_of)
        self.last_rewritten = out != sql
        return out

    def execute(self, sql: str, **kwargs):
        return self._executor.execute(self.rewrite(sql), **kwargs)

    def explain(self, sql: str, **kwargs):
        return self._executor.explain(self.rewrite(sql), **kwargs)

    def plan(self, sql: str, **kwargs):
        return self._executor.plan(apply_as_of(sql, self.dialect, self.as_of), **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._executor, name)
