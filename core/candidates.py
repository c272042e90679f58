"""Confidence from disagreement: group sampled SQL candidates by their results and say what splits them.

Several candidates are sampled for one question, validated and executed; candidates returning the
same answer (the EHRSQL comparison of `compare.normalize_rows`) form a group. The share of the
largest group is the confidence, and the structural part on which the groups' SQL differs most
(tables, columns, literal values, aggregates, order, grouping) is what the researcher is told.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, ScopeType, traverse_scope

from core.compare import normalize_rows
from core.types import CatalogSchema

DEFAULT_K = 5
DEFAULT_THRESHOLD = 0.6
PREVIEW_ROWS = 10

# The structural parts compared across groups, in the order that breaks ties for the "worst" part:
# a different table is a different question, a different sort order is a detail of the same one.
PARTS = ("tables", "columns", "values", "aggregates", "order", "group_by")
_PART_NOUNS = {
    "tables": "table",
    "columns": "column",
    "values": "value",
    "aggregates": "aggregate",
    "order": "order",
    "group_by": "grouping",
}
_MAX_LABEL_ITEMS = 3
_EPSILON = 1e-9


# --- structure -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Structure:
    """What a query reads and how it shapes the answer, as comparable sets of readable strings."""

    tables: frozenset[str] = frozenset()  # "mimiciv_hosp.diagnoses_icd" (as qualified as known)
    columns: frozenset[str] = frozenset()  # "mimiciv_hosp.diagnoses_icd.icd_code", or a bare "icd_code"
    values: frozenset[str] = frozenset()  # literals in WHERE/HAVING/JOIN: "'sepsis'", "65"
    aggregates: frozenset[str] = frozenset()  # "count", "count distinct", "avg", "distinct"
    order: tuple[str, ...] = ()  # outermost ORDER BY: "admissions.admittime desc"
    limit: str = ""  # outermost LIMIT: "1"
    group_by: frozenset[str] = frozenset()  # "diagnoses_icd.icd_code"

    def part(self, name: str) -> frozenset[str]:
        """The items of one part; order and limit together are one item (first vs last)."""
        if name == "order":
            return (
                frozenset({_order_item(self.order, self.limit)}) if self.order or self.limit else frozenset()
            )
        return getattr(self, name)

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": sorted(self.tables),
            "columns": sorted(self.columns),
            "values": sorted(self.values),
            "aggregates": sorted(self.aggregates),
            "order": list(self.order),
            "limit": self.limit,
            "group_by": sorted(self.group_by),
        }


def _order_item(order: tuple[str, ...], limit: str) -> str:
    text = ", ".join(order) if order else "unordered"
    return f"{text} limit {limit}" if limit else text


def sql_structure(sql: str, dialect: str = "postgres", *, catalog: CatalogSchema | None = None) -> Structure:
    """The structure of `sql`; an empty Structure when it cannot be parsed.

    Structure only explains a disagreement, so unreadable SQL must not stop a run: the candidate
    has already been validated (or has failed) by the time it is described. With a `catalog`,
    unqualified tables and columns are resolved to their qualified names, so that candidates
    writing `diagnoses_icd` and `mimiciv_hosp.diagnoses_icd` do not seem to disagree.
    """
    try:
        return _structure(sql, dialect, catalog)
    except Exception:  # a description must never fail the run it describes
        return Structure()


def _structure(sql: str, dialect: str, catalog: CatalogSchema | None) -> Structure:
    try:
        tree = sqlglot.parse_one(sql.strip().rstrip(";"), read=dialect)
    except (SqlglotError, RecursionError):
        return Structure()
    for identifier in tree.find_all(exp.Identifier):
        identifier.set("this", identifier.this.lower())
    scopes = list(traverse_scope(tree))
    if not scopes:
        return Structure()
    resolver = _Resolver(catalog, dialect)
    tables: set[str] = set()
    columns: set[str] = set()
    group_by: set[str] = set()
    for scope in scopes:
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
                tables.add(resolver.table(source))
        for column in scope.columns:
            resolved = resolver.column(column, scope)
            if resolved is not None:
                columns.add(resolved)
        group = scope.expression.args.get("group") if isinstance(scope.expression, exp.Select) else None
        for key in group.expressions if group else ():
            group_by.add(resolver.label(_dealias(key, scope.expression), scope))
    root_scope = scopes[-1]  # traverse_scope yields the outermost query last
    order, limit = _order_and_limit(root_scope, resolver)
    return Structure(
        tables=frozenset(tables),
        columns=frozenset(columns),
        values=frozenset(_condition_literals(tree)),
        aggregates=frozenset(_aggregates(tree)),
        order=order,
        limit=limit,
        group_by=frozenset(group_by),
    )


class _Resolver:
    """Names tables and columns the same way whatever aliases a candidate chose."""

    def __init__(self, catalog: CatalogSchema | None, dialect: str):
        self.catalog = catalog
        self.dialect = dialect

    def table(self, table: exp.Table) -> str:
        if not table.db and self.catalog is not None:
            matches = self.catalog.find(table.name)
            if len(matches) == 1:
                return matches[0].qualified.lower()
        return ".".join(part for part in (table.catalog, table.db, table.name) if part)

    def column(self, column: exp.Column, scope: Scope) -> str | None:
        """A column as "schema.table.column", a bare "column" when its table can't be told, or None when it reads
        a CTE or a subquery (whose own columns are counted where they read real tables)."""
        name = column.name
        if not name or not isinstance(column.this, exp.Identifier):
            return None
        source = self._source(column, scope)
        if isinstance(source, exp.Table):
            return f"{self.table(source)}.{name}"
        return None if isinstance(source, Scope) else name

    def _source(self, column: exp.Column, scope: Scope) -> exp.Table | Scope | None:
        """The FROM item a column reads: a real table, a CTE/subquery scope, or None if unknown."""
        if column.table:
            for level in _visible(scope):
                source = level.sources.get(column.table)
                if source is not None:
                    return _real(source)
            return None
        sources = [_real(source) for _, source in scope.selected_sources.values()]
        if len(sources) == 1:
            return sources[0]
        if self.catalog is not None:
            owners = [s for s in sources if isinstance(s, exp.Table) and self._has_column(s, column.name)]
            if len(owners) == 1:
                return owners[0]
        return None

    def _has_column(self, table: exp.Table, name: str) -> bool:
        assert self.catalog is not None
        matches = self.catalog.find(table.name, table.db or None)
        return len(matches) == 1 and name in matches[0].columns

    def label(self, node: exp.Expr, scope: Scope) -> str:
        """An expression as short readable SQL with its columns named by table, not by alias."""
        try:
            return self._relabel(node, scope, 0).sql(dialect=self.dialect).lower()
        except SqlglotError:
            return node.sql().lower()

    def _relabel(self, node: exp.Expr, scope: Scope, depth: int) -> exp.Expr:
        def rename(inner: exp.Expr) -> exp.Expr:
            if not isinstance(inner, exp.Column) or not inner.name:
                return inner
            source = self._source(inner, scope)
            if isinstance(source, exp.Table):
                return exp.column(inner.name, table=source.name)
            if isinstance(source, Scope) and depth < 5:
                # `ORDER BY c.n` means what the CTE computes as n, whatever the candidate named it.
                output = _output(source, inner.name)
                if output is not None:
                    inner_label = self._relabel(output, source, depth + 1)
                    atomic = isinstance(inner_label, exp.Column | exp.Func | exp.Literal)
                    return inner_label if atomic else exp.paren(inner_label, copy=False)
            return exp.column(inner.name)

        relabeled = node.copy().transform(rename)
        return relabeled.unnest() if isinstance(relabeled, exp.Paren) else relabeled


def _real(source: exp.Table | Scope) -> exp.Table | Scope | None:
    if isinstance(source, exp.Table):
        return source if isinstance(source.this, exp.Identifier) else None
    return source


def _output(scope: Scope, name: str) -> exp.Expr | None:
    query = scope.expression
    while isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    for output in query.expressions:
        if output.alias_or_name == name:
            return output.unalias()
    return None


def _visible(scope: Scope) -> Iterable[Scope]:
    yield scope
    current = scope
    while current.parent is not None and current.scope_type not in (ScopeType.CTE, ScopeType.DERIVED_TABLE):
        current = current.parent
        yield current


def _dealias(node: exp.Expr, query: exp.Expr) -> exp.Expr:
    """GROUP BY 1 / ORDER BY n mean the select expression; alias names differ between candidates."""
    if not isinstance(query, exp.Select):
        return node
    outputs = query.expressions
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        position = int(node.this)
        if 1 <= position <= len(outputs):
            return outputs[position - 1].unalias()
    if isinstance(node, exp.Column) and not node.table:
        for output in outputs:
            if isinstance(output, exp.Alias) and output.alias == node.name:
                return output.this
    return node


def _order_and_limit(scope: Scope, resolver: _Resolver) -> tuple[tuple[str, ...], str]:
    query = scope.expression
    order = query.args.get("order")
    keys: list[str] = []
    for ordered in order.expressions if order else ():
        key = ordered.this if isinstance(ordered, exp.Ordered) else ordered
        direction = "desc" if isinstance(ordered, exp.Ordered) and ordered.args.get("desc") else "asc"
        keys.append(f"{resolver.label(_dealias(key, query), scope)} {direction}")
    limit_node = query.args.get("limit")
    limit = ""
    if isinstance(limit_node, exp.Limit) and limit_node.expression is not None:
        limit = limit_node.expression.sql().lower()
    elif isinstance(limit_node, exp.Fetch) and limit_node.args.get("count") is not None:
        limit = limit_node.args["count"].sql().lower()
    return tuple(keys), limit


def _condition_literals(tree: exp.Expr) -> set[str]:
    conditions: list[exp.Expr] = list(tree.find_all(exp.Where, exp.Having))
    conditions += [join.args["on"] for join in tree.find_all(exp.Join) if join.args.get("on") is not None]
    return {_literal_text(literal) for condition in conditions for literal in condition.find_all(exp.Literal)}


def _literal_text(literal: exp.Literal) -> str:
    if literal.is_string:
        return "'" + literal.this + "'"
    try:
        number = decimal.Decimal(literal.this)
    except decimal.InvalidOperation:
        return literal.this
    # 65 and 65.0 are one value; normalize() would turn 100 into 1E+2, hence the quantize.
    return (
        str(number.quantize(decimal.Decimal(1)))
        if number == number.to_integral()
        else str(number.normalize())
    )


def _aggregates(tree: exp.Expr) -> set[str]:
    found: set[str] = set()
    for node in tree.find_all(exp.AggFunc):
        name = node.sql_name().lower() if not isinstance(node, exp.AnonymousAggFunc) else node.name.lower()
        found.add(f"{name} distinct" if isinstance(node.this, exp.Distinct) else name)
    for select in tree.find_all(exp.Select):
        if select.args.get("distinct"):
            found.add("distinct")
    return found


# --- candidates and groups -----------------------------------------------------------------------


@dataclass
class Candidate:
    """One sampled SQL and what became of it: failed (no SQL, invalid, execution error) or a result."""

    index: int
    sql: str | None  # None when no SQL could be extracted from the reply
    error: str = ""  # validation or execution message; "" when it ran
    error_code: str = ""  # "no_sql", a validation code, "timeout", "sql_error", …
    columns: Sequence[str] = ()
    rows: Sequence[Sequence[Any]] = ()  # possibly capped at the row cap
    row_count: int = 0
    duration_ms: float = 0.0

    @property
    def failed(self) -> bool:
        return self.sql is None or bool(self.error)

    @property
    def code(self) -> str:
        """The error code, never empty for a failure."""
        if self.error_code:
            return self.error_code
        if self.sql is None:
            return "no_sql"
        return "error" if self.error else ""


@dataclass(frozen=True)
class CandidateGroup:
    """Candidates that returned the same answer, shown by their shortest SQL."""

    members: tuple[int, ...]  # candidate indexes, ascending
    representative: Candidate
    structure: Structure

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def sql(self) -> str:
        return self.representative.sql or ""


@dataclass(frozen=True)
class Disagreement:
    """The part of the SQL on which the groups differ most, in words for the researcher."""

    part: str  # one of PARTS, or "failures" / "results" when no structural part differs
    phrase: str  # "candidates disagree on the column: diagnoses_icd.icd_code vs procedures_icd.icd_code"
    values: tuple[str, ...]  # the distinct readable values, majority first
    split: int = 0  # how many candidates the difference separates from the most common value


@dataclass(frozen=True)
class CandidateReport:
    k: int
    groups: tuple[CandidateGroup, ...]  # largest first, then by first member
    failures: tuple[Candidate, ...]
    confidence: float  # size of the largest group / k; 0.0 when every candidate failed
    threshold: float
    disagreements: dict[str, tuple[str, ...]]  # per part that differs: the groups' distinct labels
    disagreement: Disagreement | None  # None when all candidates agree
    distinct: tuple[str, ...] = field(default=())  # per group: its label for the disagreement part

    @property
    def majority(self) -> int | None:
        return 0 if self.groups else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict for `Run.candidates`; dates and decimals become strings."""
        chosen, ambiguous = choose_candidate(self, self.threshold)
        return {
            "k": self.k,
            "confidence": round(self.confidence, 4),
            "threshold": self.threshold,
            "ambiguous": ambiguous,
            "chosen": chosen,
            "majority": self.majority,
            "groups": [
                {
                    "members": list(group.members),
                    "representative": group.representative.index,
                    "sql": group.sql,
                    "columns": [str(c) for c in group.representative.columns],
                    "rows": [[json_safe(v) for v in row] for row in group.representative.rows[:PREVIEW_ROWS]],
                    "row_count": group.representative.row_count,
                    "structure": group.structure.to_json(),
                    "distinct": self.distinct[i] if i < len(self.distinct) else "",
                }
                for i, group in enumerate(self.groups)
            ],
            "failures": [
                {"index": c.index, "sql": c.sql or "", "error": c.error, "code": c.code}
                for c in self.failures
            ],
            "disagreement": (
                {
                    "part": self.disagreement.part,
                    "noun": _PART_NOUNS.get(self.disagreement.part, self.disagreement.part),
                    "phrase": self.disagreement.phrase,
                    "values": list(self.disagreement.values),
                }
                if self.disagreement
                else None
            ),
            "disagreements": {part: list(values) for part, values in self.disagreements.items()},
        }


def json_safe(value: Any) -> Any:
    """A result cell as a JSON value PostgreSQL's jsonb accepts (no NaN, no dates, no Decimals)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    if isinstance(value, dt.timedelta | uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    return str(value)


def group_candidates(
    candidates: list[Candidate],
    dialect: str = "postgres",
    *,
    threshold: float = DEFAULT_THRESHOLD,
    describe: Callable[[str], str] | None = None,
    catalog: CatalogSchema | None = None,
) -> CandidateReport:
    """Group executed candidates by result and find what their SQL disagrees on.

    Failed candidates are in the denominator but in no group: a candidate that could not answer
    is a vote against every answer, so three agreeing candidates out of five with two failures
    is 60%, not 100%. `describe` turns a table or column name into words for the phrase
    ("diagnosis code column"); by default the name without its schema is shown.
    """
    k = len(candidates)
    failures = tuple(c for c in candidates if c.failed)
    buckets: dict[tuple, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.failed:
            continue
        key = (len(candidate.columns), normalize_rows(candidate.rows))
        buckets.setdefault(key, []).append(candidate)
    groups = [_group(members, dialect, catalog) for members in buckets.values()]
    groups.sort(key=lambda g: (-g.size, g.members[0]))
    confidence = groups[0].size / k if groups and k else 0.0
    name = _namer(describe)
    disagreements, distinct, disagreement = _disagreement(groups, failures, k, name)
    return CandidateReport(
        k=k,
        groups=tuple(groups),
        failures=failures,
        confidence=confidence,
        threshold=threshold,
        disagreements=disagreements,
        disagreement=disagreement,
        distinct=distinct,
    )


def _group(members: list[Candidate], dialect: str, catalog: CatalogSchema | None) -> CandidateGroup:
    # The shortest SQL is the easiest for a researcher to read, and all members give its answer.
    representative = min(members, key=lambda c: (len((c.sql or "").strip()), c.index))
    return CandidateGroup(
        members=tuple(sorted(c.index for c in members)),
        representative=representative,
        structure=sql_structure(representative.sql or "", dialect, catalog=catalog),
    )


def choose_candidate(report: CandidateReport, threshold: float | None = None) -> tuple[int | None, bool]:
    """(index of the group to present, ambiguous?): the majority at or above the threshold, else none.

    A tie between the two largest groups is ambiguous whatever the threshold: presenting either
    would be a coin toss dressed up as an answer.
    """
    threshold = report.threshold if threshold is None else threshold
    if not report.groups:
        return None, True
    if len(report.groups) > 1 and report.groups[0].size == report.groups[1].size:
        return None, True
    if report.confidence + _EPSILON >= threshold:
        return 0, False
    return None, True


# --- what the groups disagree on -----------------------------------------------------------------


def _namer(describe: Callable[[str], str] | None) -> Callable[[str, str], str]:
    def name(part: str, item: str) -> str:
        if part not in ("tables", "columns"):
            return item
        if describe is not None:
            described = describe(item)
            if described:
                return described
        keep = 1 if part == "tables" else 2
        return ".".join(item.split(".")[-keep:])

    return name


def _disagreement(
    groups: list[CandidateGroup], failures: tuple[Candidate, ...], k: int, name: Callable[[str, str], str]
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...], Disagreement | None]:
    parts: dict[str, tuple[str, ...]] = {}
    best: tuple[int, str] | None = None
    labels_by_part: dict[str, list[str]] = {}
    for part in PARTS:
        items = [g.structure.part(part) for g in groups]
        if len(set(items)) < 2:
            continue
        common = frozenset.intersection(*items)
        labels = [_label(part, item - common, name) for item in items]
        labels_by_part[part] = labels
        parts[part] = tuple(dict.fromkeys(labels))
        votes: Counter[frozenset[str]] = Counter()
        for group, item in zip(groups, items, strict=True):
            votes[item] += group.size
        split = sum(votes.values()) - max(votes.values())
        if best is None or split > best[0]:
            best = (split, part)
    if best is not None:
        split, part = best
        values = parts[part]
        phrase = f"candidates disagree on the {_PART_NOUNS[part]}: {' vs '.join(values)}"
        return parts, tuple(labels_by_part[part]), Disagreement(part, phrase, values, split)
    if len(groups) > 1:
        phrase = "candidates write SQL of the same shape but return different results"
        values = tuple(f"{g.size} of {k}" for g in groups)
        return parts, ("",) * len(groups), Disagreement("results", phrase, values, k - groups[0].size)
    if failures:
        codes = tuple(dict.fromkeys(c.code for c in failures))
        phrase = f"{len(failures)} of {k} candidates failed ({', '.join(codes)})"
        return parts, ("",) * len(groups), Disagreement("failures", phrase, codes, len(failures))
    return parts, ("",) * len(groups), None


def _label(part: str, items: frozenset[str], name: Callable[[str, str], str]) -> str:
    if not items:
        return f"no {_PART_NOUNS[part]}" if part != "order" else "unordered"
    shown = sorted(name(part, item) for item in items)
    if part == "order":
        return _order_label(shown[0])
    text = ", ".join(shown[:_MAX_LABEL_ITEMS])
    return text + (f" and {len(shown) - _MAX_LABEL_ITEMS} more" if len(shown) > _MAX_LABEL_ITEMS else "")


def _order_label(item: str) -> str:
    """An order like "admissions.admittime desc limit 1" reads as the last admittime: say first or last."""
    if item.endswith(" limit 1") and ", " not in item:
        keys = item[: -len(" limit 1")]
        if keys.endswith(" desc"):
            return f"last by {keys[: -len(' desc')]} (descending, limit 1)"
        if keys.endswith(" asc"):
            return f"first by {keys[: -len(' asc')]} (ascending, limit 1)"
    return item
