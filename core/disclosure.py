"""Disclosure control against differencing: per-source modes applied to a result's counts after
the small-cell rules (round to a base, i2b2-style noise seeded per user and query, or differential
privacy with a per-user budget), and the "near-identical query" test that audits probes.

Small-cell suppression alone leaks by subtraction: 42 female patients, then 41 "all but the
patient with the lowest id", and one patient's sex is known. Rounding makes both 40; noise makes
the difference meaningless; a budget bounds what any series of questions can learn. Framework-free:
the policy comes in as a frozen dataclass, and the per-user state (earlier queries, the budget)
through the narrow `Ledger` protocol that the services implement on the database.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import numpy as np
import sqlglot
from sqlglot import exp

from core import privacy
from core.types import CatalogSchema

SUPPRESS, ROUND, NOISE, DP = "suppress", "round", "noise", "dp"
MODES = (SUPPRESS, ROUND, NOISE, DP)
PERTURBING = frozenset({NOISE, DP})  # small cells are judged on the perturbed count, not the true one
GAUSSIAN, UNIFORM = "gaussian", "uniform"
DP_CENSORED = (
    "Differential privacy left out every group of this answer: each had too few patients to be released "
    "without revealing whether one person is in it. Ask about a larger group."
)
NOT_RELEASED = "(not released)"  # a DP count that was not paid for (a candidate's preview)


@dataclass(frozen=True)
class DisclosurePolicy:
    """How one source releases counts to one user."""

    mode: str = SUPPRESS
    # k for the perturbing modes: suppression runs after the noise, on the value that is released
    # (suppressing on the true count would itself tell which cells are small).
    min_cell_size: int = 0
    round_base: int = 5  # ROUND: counts to the nearest multiple
    noise: str = GAUSSIAN  # NOISE: GAUSSIAN (sd noise_scale) or UNIFORM (integers in ±noise_clip)
    noise_scale: float = 1.5
    noise_clip: int = 3  # NOISE: |noise| never exceeds this (i2b2 shows counts as "n ± 3")
    epsilon: float = 0.5  # DP: privacy loss charged per answered query (split over its count columns)
    contributions: int = 1  # DP: rows one person can add to a count (the Laplace sensitivity)
    budget: float = 10.0  # DP: total epsilon per user per source
    delta: float = 1e-6  # DP: smartnoise-sql's delta (its thresholding of small groups needs one > 0)
    person_column: str = "subject_id"  # DP: the column that identifies the person protected
    differencing_limit: int = 7  # near-identical earlier queries allowed within the window; 0 = off
    differencing_window_days: int = 30

    def to_json(self) -> dict:
        out: dict[str, Any] = {"mode": self.mode}
        if self.mode == ROUND:
            out["base"] = self.round_base
        elif self.mode == NOISE:
            out |= {"noise": self.noise, "scale": self.noise_scale, "clip": self.noise_clip}
        elif self.mode == DP:
            out |= {
                "epsilon": self.epsilon,
                "contributions": self.contributions,
                "budget": self.budget,
                "delta": self.delta,
            }
        return out


class DisclosureRefusal(privacy.PrivacyRefusal):
    """The answer is withheld to protect individuals from differencing (code "differencing") or
    because the user's privacy budget on this source is spent (code "budget")."""


# --------------------------------------------------------------------------- query shapes


@dataclass(frozen=True)
class QueryShape:
    """A query read for differencing: everything but its WHERE conditions (the skeleton), and the
    conditions as AND-ed conjuncts, each with the columns it reads."""

    skeleton: str
    conditions: tuple[tuple[str, tuple[str, ...]], ...]  # (conjunct SQL, columns it reads), sorted

    def to_json(self) -> dict:
        return {"skeleton": self.skeleton, "conditions": [[c, list(cols)] for c, cols in self.conditions]}

    @classmethod
    def from_json(cls, data: dict) -> QueryShape:
        return cls(
            skeleton=str(data.get("skeleton", "")),
            conditions=tuple((str(c), tuple(cols)) for c, cols in data.get("conditions") or []),
        )


def _top_level_conditions(tree: exp.Expr) -> list[exp.Where | exp.Having]:
    """WHERE and HAVING clauses not nested in another one (a probe's subquery belongs to its
    conjunct), in the CTEs and subqueries of the FROM clause too."""
    out = []
    for clause in tree.find_all(exp.Where, exp.Having):
        parent = clause.parent
        while parent is not None and not isinstance(parent, exp.Where | exp.Having):
            parent = parent.parent
        if parent is None:
            out.append(clause)
    return out


def _respell(tree: exp.Expr) -> None:
    """Drop what is only spelling, so that it cannot make a probe look new: table aliases and column
    qualifiers (`patients p … p.gender`), output aliases (`COUNT(*) AS n`), CTE names (numbered in
    order). A shape only compares queries; it never runs."""
    names = {}
    for i, cte in enumerate(tree.find_all(exp.CTE)):
        names[cte.alias_or_name.lower()] = f"cte{i}"
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(f"cte{i}")))
    for table in tree.find_all(exp.Table):
        table.set("alias", None)
        if not table.args.get("db") and table.name.lower() in names:
            table.set("this", exp.to_identifier(names[table.name.lower()]))
    for column in tree.find_all(exp.Column):
        column.set("table", None)
    for alias in list(tree.find_all(exp.Alias)):
        if isinstance(alias.parent, exp.Select):
            alias.replace(alias.this)


def _conjuncts(cond: exp.Expr) -> list[exp.Expr]:
    """`a AND (b AND c)` as [a, b, c]."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if isinstance(cond, exp.And):
        return [*_conjuncts(cond.left), *_conjuncts(cond.right)]
    return [cond]


def query_shape(sql: str, dialect: str = "postgres") -> QueryShape | None:
    """The shape of `sql`, or None when it cannot be parsed (such SQL never reaches execution)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return None
    if tree is None:
        return None
    _respell(tree)
    conditions = []
    for clause in _top_level_conditions(tree):
        for part in _conjuncts(clause.this):
            columns = sorted({c.name.lower() for c in part.find_all(exp.Column)})
            conditions.append((part.sql(dialect=dialect, normalize=True), tuple(columns)))
        clause.pop()
    return QueryShape(
        skeleton=tree.sql(dialect=dialect, normalize=True), conditions=tuple(sorted(conditions))
    )


def near_identical(a: QueryShape, b: QueryShape) -> bool:
    """Whether `b` probes the same population as `a` but one condition apart: the same tables and
    output (skeleton), and WHERE conditions that differ by one extra conjunct ("… and not the
    patient with the lowest id") or by one conjunct replaced by another that reads any of its
    columns (one constant changed, `<` for `<=`, MIN for MAX, a condition rewritten with De Morgan
    around an extra one). Identical shapes are a repeat, not a probe."""
    if a.skeleton != b.skeleton:
        return False
    left, right = Counter(a.conditions), Counter(b.conditions)
    only_a, only_b = list((left - right).elements()), list((right - left).elements())
    if len(only_a) + len(only_b) == 1:
        return True
    if len(only_a) != 1 or len(only_b) != 1:
        return False
    before, after = set(only_a[0][1]), set(only_b[0][1])
    # The same columns, or more of them: `NOT (gender <> 'F' OR subject_id = …)` for `gender = 'F'`.
    return before == after or bool(before & after)


def normalised_sql(sql: str, dialect: str = "postgres") -> str:
    """The SQL as askdb compares it: its shape (sqlglot's writing, with case, spacing, quoting,
    aliases and CTE names settled), so that the same query typed twice, or with its aliases
    renamed, gets the same noise; collapsed whitespace when it cannot be parsed."""
    shape = query_shape(sql, dialect)
    if shape is None:
        return " ".join(sql.split()).rstrip(";")
    return repr((shape.skeleton, shape.conditions))


def output_keys(sql: str, dialect: str = "postgres") -> list[str]:
    """Each output column's expression as written back, without its alias: the per-cell noise key,
    so that `COUNT(*) AS a, COUNT(*) AS b` are one draw, not two to average ([] when unknown)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return []
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    if not isinstance(tree, exp.Select) or any(isinstance(e, exp.Star) for e in tree.expressions):
        return []
    _respell(tree)
    return [e.unalias().sql(dialect=dialect, normalize=True) for e in tree.expressions]


def noise_seed(secret: str | bytes, user: object, sql: str, dialect: str = "postgres") -> bytes:
    """HMAC(secret, user, normalised SQL): the same question by the same user always gets the same
    noise (asking again averages nothing away), another user gets other noise, and nobody without
    the server's secret can compute it."""
    key = secret.encode() if isinstance(secret, str) else secret
    message = f"{user}\x00{normalised_sql(sql, dialect)}".encode()
    return hmac.new(key, message, hashlib.sha256).digest()


# --------------------------------------------------------------------------- the ledger


class Ledger(Protocol):
    """A user's earlier answered queries and privacy budget on one source (the services keep it)."""

    def near_identical_count(self, shape: QueryShape, *, window_days: int) -> int: ...
    def budget_spent(self) -> float: ...
    def record(self, *, sql: str, shape: QueryShape | None, epsilon: float, mode: str) -> None: ...


def check_release(ledger: Ledger | None, policy: DisclosurePolicy, *, sql: str, dialect: str,
                  analysis: privacy.OutputAnalysis | None = None, row_level: bool = False) -> QueryShape | None:  # fmt: skip
    """Refuse (DisclosureRefusal) before an answer is released when it would be one probe too many,
    or when differential privacy cannot protect it (a statistic other than a count). Returns the
    query's shape for `ledger.record`.

    Users who may see row-level results are not held to these: they can list the rows."""
    shape = query_shape(sql, dialect)
    if policy.mode == DP and not row_level and analysis is not None:
        statistics = [c.name for c in analysis.columns if c.kind in privacy.STATISTIC_KINDS]
        if statistics or not analysis.understood:
            what = ", ".join(statistics) if statistics else "this result"
            raise DisclosureRefusal(
                "dp_counts_only",
                f"askdb did not show this answer: this source releases only counts, with differential "
                f"privacy, and {what} {'are' if len(statistics) > 1 else 'is'} not a count. Ask how many "
                "patients (or admissions, stays) instead.",
            )
    if ledger is None:
        return shape
    limit = policy.differencing_limit
    if limit > 0 and shape is not None and not row_level:
        seen = ledger.near_identical_count(shape, window_days=policy.differencing_window_days)
        if seen >= limit:
            raise DisclosureRefusal(
                "differencing",
                f"askdb did not show this answer: you have asked {seen} queries within "
                f"{policy.differencing_window_days} days that differ from this one by a single condition, "
                "and comparing such answers can reveal one patient. An admin can review the audit log "
                "and reset the limit.",
                alternative={"near_identical": seen, "limit": limit},
            )
    return shape


def check_budget(ledger: Ledger | None, policy: DisclosurePolicy, cost: float) -> None:
    """Refuse (DisclosureRefusal "budget") an answer whose ε the user's remaining budget cannot pay."""
    if ledger is not None:
        spent = ledger.budget_spent()
        if spent + cost > policy.budget + 1e-9:
            raise DisclosureRefusal(
                "budget",
                f"askdb did not show this answer: your privacy budget on this source is spent "
                f"(ε {spent:g} of {policy.budget:g} used; this answer would cost ε {cost:g}). "
                "Ask an admin for more budget.",
                alternative={"spent": spent, "budget": policy.budget, "cost": cost},
            )


# --------------------------------------------------------------------------- release


def _cell_rng(seed: bytes, column: str, key: Sequence) -> np.random.Generator:
    """One generator per cell, from the query's seed, its column and its row's group keys: the
    noise does not depend on the order the database returned the rows in."""
    digest = hmac.new(seed, repr((column, [str(v) for v in key])).encode(), hashlib.sha256).digest()
    return np.random.default_rng(struct.unpack("<4Q", digest))


def _round_to(value: float, base: int) -> int:
    return int(base * math.floor(value / base + 0.5))


class DpQuery:
    """One query answered with differential privacy by OpenDP's smartnoise-sql: it rewrites the
    query to bound what one person contributes (at most `contributions` rows each, sampled at
    random), runs the rewritten SQL through `execute` (askdb's validated, audited, read-only path),
    adds calibrated noise to each count and drops groups too small to release (its `censor_dims`).

    `cost` (ε, δ) is known before anything runs, so the budget is checked first. Raises
    DisclosureRefusal("dp_unsupported") for SQL smartnoise-sql cannot answer privately."""

    def __init__(self, sql: str, *, catalog: CatalogSchema, policy: DisclosurePolicy,
                 execute: Callable[[str], tuple[Sequence[str], Sequence[Sequence]]]):  # fmt: skip
        # smartnoise-sql (pandas, antlr, the OpenDP library) loads in seconds: only DP sources need it
        from snsql import Privacy
        from snsql.sql.private_reader import PrivateReader

        self.sql = sql
        reader = _reader_class(catalog.dialect)(execute)
        # Groups too small to release are dropped (censor_dims) only where there are groups: the one
        # row of an ungrouped count exists whatever the data, so dropping it would only lose the answer.
        metadata = dp_metadata(catalog, policy, censor_dims=_grouped(sql, catalog.dialect))
        self.reader = PrivateReader(
            reader, metadata, privacy=Privacy(epsilon=policy.epsilon, delta=policy.delta)
        )
        try:
            epsilon, delta = self.reader.get_privacy_cost(sql)
        except Exception as exc:  # its parser and rewriter raise ValueError, TypeError, AttributeError…
            raise _unsupported(exc) from exc
        self.cost = (float(epsilon), float(delta))

    def run(self) -> tuple[list[str], list[list]]:
        try:
            header, *rows = self.reader.execute(self.sql)
        except _Escaped as escaped:  # askdb's own failure (a refusal, a timeout): not smartnoise-sql's
            raise escaped.error from escaped.error.__cause__
        except Exception as exc:
            raise _unsupported(exc) from exc
        return list(header), [[_plain(v) for v in row] for row in rows]


class _Escaped(Exception):
    """An error of askdb's executor carried through smartnoise-sql unchanged."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _plain(value):
    """numpy scalars from smartnoise-sql as the plain Python numbers the rest of askdb stores."""
    return value.item() if isinstance(value, np.generic) else value


def _unsupported(exc: BaseException) -> DisclosureRefusal:
    reason = " ".join(str(exc).split())[:300] or type(exc).__name__
    return DisclosureRefusal(
        "dp_unsupported",
        "askdb did not show this answer: this source releases counts with differential privacy "
        "(smartnoise-sql), which cannot answer this query privately "
        f"({reason}). Ask a simpler count: one table, no subquery, grouped by a few columns.",
    )


def _reader_class(dialect: str):
    """A smartnoise-sql reader that sends the rewritten SQL through askdb's executor (its SQL
    flavour picked by the source's dialect) instead of opening a connection of its own."""
    # local, as in DpQuery: smartnoise-sql is loaded only by sources in the DP mode
    from snsql.sql.reader.postgres import PostgresReader
    from snsql.sql.reader.sqlite import SQLiteReader

    base = SQLiteReader if dialect == "sqlite" else PostgresReader

    class Reader(base):  # type: ignore[misc, valid-type]
        def __init__(self, execute):
            super().__init__(conn=object())  # never used: execute() below is the only way out
            self._execute = execute

        def execute(self, query, *ignore, accuracy: bool = False):
            try:
                columns, rows = self._execute(str(query))
            except Exception as exc:
                raise _Escaped(exc) from exc
            return [tuple(columns), *[tuple(r) for r in rows]]

    return Reader


def _grouped(sql: str, dialect: str) -> bool:
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return True
    return tree is None or tree.find(exp.Group) is not None


def dp_metadata(catalog: CatalogSchema, policy: DisclosurePolicy, *, censor_dims: bool = True) -> dict:
    """smartnoise-sql's metadata from the catalog: a table with the person column is protected per
    person (at most `contributions` rows each), any other table per row. Columns are typed as
    strings: askdb releases only counts under DP, which need no bounds."""
    schemas: dict[str, dict] = {}
    for table in catalog.tables:
        person = policy.person_column in table.columns
        spec: dict[str, Any] = {
            "row_privacy": not person,
            "max_ids": policy.contributions,
            "censor_dims": censor_dims,
        }
        for column in table.columns:
            spec[column] = {"type": "string"}
        if person:
            spec[policy.person_column] = {"type": "int", "private_id": True}
        schemas.setdefault(table.schema, {})[table.name] = spec
    return {"": schemas}


def _left_as_is(analysis: privacy.OutputAnalysis, policy: DisclosurePolicy, *, row_level: bool,
                dp_cost: tuple[float, float] | None) -> str | None:  # fmt: skip
    """Why a result is released with its counts as they are, or None when they are rounded or
    perturbed: "" for plain suppression (nothing to say), else the reason the report shows, so a
    reader knows no count was changed on purpose (rows this user may see anyway)."""
    mode = policy.mode
    if mode == SUPPRESS:
        return ""
    if analysis.about_individuals and row_level:
        return "about given individuals, whose rows this user may see"
    if mode == DP and dp_cost is None:
        if analysis.about_individuals:
            return "about given individuals, whose rows this user may see"
        return "row-level data this user may see"
    return None


def _noise(rng: np.random.Generator, policy: DisclosurePolicy) -> int:
    """The integer added to one count in the noise mode: uniform on ±clip, or Gaussian clipped to
    ±clip, so no count moves further than the policy says."""
    if policy.noise == UNIFORM:
        return int(rng.integers(-policy.noise_clip, policy.noise_clip + 1))
    return round(float(np.clip(rng.normal(0.0, policy.noise_scale), -policy.noise_clip, policy.noise_clip)))


def _released_count(n: float, policy: DisclosurePolicy, rng: Callable[[], np.random.Generator]) -> int:
    """One count as the mode releases it. `rng` is called only in the noise mode: the cell's
    generator costs a hash, which the other modes do not need."""
    if policy.mode == ROUND:
        return _round_to(n, policy.round_base)
    if policy.mode == NOISE:
        return max(0, round(n) + _noise(rng(), policy))
    return max(0, round(n))  # DP: smartnoise-sql's noisy count, already released


def _perturb_counts(rows: list[list], analysis: privacy.OutputAnalysis, policy: DisclosurePolicy, *,
                    seed: bytes, cell_keys: Sequence[str]) -> int:  # fmt: skip
    """Rounds or perturbs every count cell of `rows` in place and says how many it changed. Each
    cell's noise is keyed by its column's computation (`cell_keys`, when they fit the row) and its
    row's group keys, so the same question gives the same noise whatever the row order."""
    kinds = [c.kind for c in analysis.columns]
    counts = [j for j, kind in enumerate(kinds) if kind == privacy.COUNT]
    keys = [j for j, kind in enumerate(kinds) if kind == privacy.KEY]
    perturbed = 0
    for row in rows:
        for j in counts:
            n = privacy._number(row[j])
            if n is None:
                continue  # "<k" and NULL stay as they are
            column = cell_keys[j] if len(cell_keys) == len(row) else str(j)
            row[j] = _released_count(n, policy, partial(_cell_rng, seed, column, [row[i] for i in keys]))
            perturbed += 1
    return perturbed


def _suppress_released(report: dict, columns: Sequence[str], rows: list[list], analysis: privacy.OutputAnalysis,
                       policy: DisclosurePolicy, dp_cost: tuple[float, float] | None) -> list[list]:  # fmt: skip
    """What follows the perturbation: under DP, what it cost (and a note when smartnoise-sql
    censored every group); for the perturbing modes, small cells suppressed on the released values,
    since the true counts were never suppressed (k = 0). Updates `report`; returns the rows."""
    if policy.mode == DP and dp_cost is not None:
        report["disclosure"] |= {"epsilon_spent": round(dp_cost[0], 6), "delta_spent": dp_cost[1]}
        if not rows:
            report["disclosure"]["censored"] = True
            report["notes"] = [*report.get("notes", []), DP_CENSORED]
    if policy.mode in PERTURBING and policy.min_cell_size > 0:
        rows, suppressed = privacy.suppress(list(columns), rows, analysis, policy.min_cell_size)
        for key in ("k", "suppressed", "complementary", "statistics", "count_columns"):
            report[key] = suppressed[key]
        report["notes"] = list(dict.fromkeys([*report.get("notes", []), *suppressed["notes"]]))
    return rows


def disclose(result: privacy.ProtectedResult, analysis: privacy.OutputAnalysis, policy: DisclosurePolicy, *,
             seed: bytes = b"", row_level: bool = False, dp_cost: tuple[float, float] | None = None,
             cell_keys: Sequence[str] = ()) -> privacy.ProtectedResult:  # fmt: skip
    """The released result: counts rounded or perturbed by the source's mode, then (for the
    perturbing modes) small cells suppressed on the released values. `result` has already been
    through privacy.protect (with k = 0 for the perturbing modes: the services arrange that); in
    the DP mode it is DpQuery's output already, and `dp_cost` what it cost (None: not released
    with DP, because its rows are an individual's or a listing this user may see). `cell_keys`
    (output_keys of the SQL) key each column's noise by what it computes, not by its name.

    An aggregate about given individuals, for a user who may list their rows, is left as it is:
    perturbing it would hide nothing they cannot see."""
    report = dict(result.privacy) | {"disclosure": policy.to_json() | {"perturbed": 0}}
    skipped = _left_as_is(analysis, policy, row_level=row_level, dp_cost=dp_cost)
    if skipped is not None:
        if skipped:
            report["disclosure"]["skipped"] = skipped
        return replace(result, privacy=report)
    if not analysis.understood or len(analysis.columns) != len(result.columns):
        report["disclosure"]["skipped"] = "askdb could not tell which columns are counts"
        report["notes"] = [*report.get("notes", []), "No count was rounded or perturbed: askdb could not "
                           "tell which columns are counts; check small numbers before sharing."]  # fmt: skip
        return replace(result, privacy=report)
    rows = [list(r) for r in result.rows]
    report["disclosure"]["perturbed"] = _perturb_counts(
        rows, analysis, policy, seed=seed, cell_keys=cell_keys
    )
    rows = _suppress_released(report, result.columns, rows, analysis, policy, dp_cost)
    return replace(result, rows=rows, privacy=report)


def release(result: privacy.ProtectedResult, analysis: privacy.OutputAnalysis, policy: DisclosurePolicy, *,
            sql: str, dialect: str, catalog: CatalogSchema, ledger: Ledger | None, key: bytes, row_level: bool,
            execute: Callable[[str], tuple[Sequence[str], Sequence[Sequence]]]) -> privacy.ProtectedResult:  # fmt: skip
    """An answer as it leaves askdb, the one way every answer does (the engine's, a reviewer's
    correction, a picked candidate): refused (DisclosureRefusal) when it would be one differencing
    probe too many, when DP cannot answer it or the budget cannot pay for it; else its counts
    rounded or perturbed by the mode (under DP answered again by smartnoise-sql through `execute`,
    askdb's checked, audited path), and recorded in the user's ledger.

    `result` has been through privacy.protect; `key` is the user's noise key."""
    if policy.mode == SUPPRESS and ledger is None:  # evaluation: nothing to check, change or record
        return disclose(result, analysis, policy)
    shape = check_release(ledger, policy, sql=sql, dialect=dialect, analysis=analysis, row_level=row_level)
    dp = None
    if policy.mode == DP and analysis.aggregated and not (row_level and analysis.about_individuals):
        try:
            dp = DpQuery(sql, catalog=catalog, policy=policy, execute=execute)
        except DisclosureRefusal:
            if not row_level:
                raise
            # who may list the rows gets what smartnoise-sql cannot answer as it is
    if dp is not None:
        check_budget(ledger, policy, dp.cost[0])
        columns, rows = dp.run()
        columns = list(result.columns) if len(columns) == len(result.columns) else columns
        result = replace(result, columns=tuple(columns), rows=rows, truncated=False)
    noisy = policy.mode == NOISE  # only the noise needs the seed and the cells' keys (two more parses)
    released = disclose(result, analysis, policy, seed=noise_seed(key, "", sql, dialect) if noisy else b"",
                        row_level=row_level, dp_cost=dp.cost if dp is not None else None,
                        cell_keys=output_keys(sql, dialect) if noisy else ())  # fmt: skip
    if ledger is not None:
        ledger.record(sql=sql, shape=shape, epsilon=dp.cost[0] if dp is not None else 0.0, mode=policy.mode)
    return released


def disclose_preview(columns: Sequence[str], rows: Sequence[Sequence], analysis: privacy.OutputAnalysis,
                     policy: DisclosurePolicy, *, seed: bytes = b"", row_level: bool = False,
                     cell_keys: Sequence[str] = ()) -> list[list]:  # fmt: skip
    """The same release for a preview (a candidate's first rows shown side by side). Under DP a
    preview would cost budget, so its counts are not shown (the chosen answer is released)."""
    shown = privacy.ProtectedResult(columns=tuple(columns), rows=[list(r) for r in rows], truncated=False,
                                    elapsed_ms=0.0, privacy={})  # fmt: skip
    if policy.mode == DP and not (row_level and (analysis.about_individuals or not analysis.aggregated)):
        counts = {j for j, c in enumerate(analysis.columns) if c.kind == privacy.COUNT}
        return [[NOT_RELEASED if j in counts or not analysis.understood else v for j, v in enumerate(row)]
                for row in shown.rows]  # fmt: skip
    return disclose(shown, analysis, policy, seed=seed, row_level=row_level, cell_keys=cell_keys).rows


def disclosure_sentence(report: dict) -> str:
    """One sentence for the provenance panel and the methods paragraph ("" for plain suppression)."""
    info = report.get("disclosure") or {}
    mode = info.get("mode", SUPPRESS)
    if mode == SUPPRESS or info.get("skipped"):
        return ""
    if mode == ROUND:
        return f"Counts were rounded to the nearest {info.get('base')}."
    if mode == NOISE:
        kind = "Gaussian" if info.get("noise") == GAUSSIAN else "uniform"
        spread = f"standard deviation {info.get('scale')}, " if info.get("noise") == GAUSSIAN else ""
        return (
            f"Noise was added to counts ({kind}, {spread}at most ±{info.get('clip')}; the same for the "
            "same question and user), so small differences between answers mean nothing."
        )
    return (
        f"Counts were released with differential privacy (OpenDP smartnoise-sql: at most "
        f"{info.get('contributions')} row(s) per patient, noise for ε {info.get('epsilon')} per count; this "
        f"answer cost ε {info.get('epsilon_spent')} of a budget of {info.get('budget')} per user)."
    )
