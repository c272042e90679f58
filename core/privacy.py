"""Privacy rules read off the parsed SQL and applied to its result: which output columns are
counts, group statistics, sensitive or row-level; refusals by the user's rights; small-cell
suppression with complementary suppression.

A data-governance board signs off rules it can read, so every decision here is made on the
sqlglot tree (what an output column *is*), never on column names, and where the tree does not
tell, the result says so. Framework-free: the policy comes in as a frozen dataclass that the
services build from the catalog and the user's role.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from core.types import CatalogSchema
from core.validation import SqlValidationError, parse_query

# What an output column is. "key": a group key or a constant of an aggregated output;
# "value": a value of individual rows (the output is a row listing).
COUNT, AGGREGATE, DERIVED, KEY, VALUE = "count", "aggregate", "derived", "key", "value"
AGGREGATED_KINDS = frozenset({COUNT, AGGREGATE, DERIVED, KEY})
STATISTIC_KINDS = frozenset({AGGREGATE, DERIVED})  # hidden with their group when its size is hidden
# Aggregates that list the values of their rows: their output is a row listing in disguise.
LISTING_AGGREGATES = (exp.ArrayAgg, exp.GroupConcat)


@dataclass(frozen=True)
class PrivacyPolicy:
    """The rules for one user on one source."""

    min_cell_size: int = 0  # k: counts 0 < n < k are shown as "<k"; 0 turns suppression off
    row_level: bool = True  # may see row-level results; else only aggregated outputs are accepted
    sensitive_allowed: bool = True  # may output the catalog's sensitive columns
    sensitive_columns: frozenset[str] = frozenset()  # "table.column", lower case, table unqualified
    # Column names that identify one person, admission or stay: an aggregate grouped by one, or
    # filtered to one value of one, is about that individual and so is row-level.
    identifier_columns: frozenset[str] = frozenset()
    # Tables (lower case, unqualified) that describe codes, not patients (ICD titles, lab items): a
    # query reading only these is not patient data, so an aggregate-only user may list its rows.
    reference_tables: frozenset[str] = frozenset()

    def to_json(self) -> dict:
        return {"min_cell_size": self.min_cell_size, "row_level": self.row_level,
                "sensitive_allowed": self.sensitive_allowed}  # fmt: skip


@dataclass(frozen=True)
class OutputColumn:
    name: str
    kind: str  # COUNT | AGGREGATE | DERIVED | KEY | VALUE
    sources: frozenset[str] = frozenset()  # "table.column" whose values reach it (not merely counted)


@dataclass(frozen=True)
class OutputAnalysis:
    """What a query outputs, column by column, and whether its rows are aggregates."""

    columns: tuple[OutputColumn, ...] = ()
    aggregated: bool = False
    row_level_reason: str = ""  # why the output is row-level ("" when aggregated)
    understood: bool = True  # False: askdb could not analyse the SQL, and says so
    # An aggregate about given individuals (grouped by, or filtered to values of, an identifier):
    # its counts are those individuals' row-level data, not cells of a population table.
    about_individuals: bool = False
    notes: tuple[str, ...] = ()
    tables: frozenset[str] = frozenset()  # the tables it reads (lower case, unqualified; CTEs excluded)
    # Every "table.column" it reads anywhere, "table.*" for a * or a whole row ("?" for a table
    # askdb could not place): what a user without the right to see a column may not touch at all.
    references: frozenset[str] = frozenset()
    whole_rows: frozenset[str] = frozenset()  # tables (or CTEs) whose whole row is used as a value

    def reads_only(self, tables: frozenset[str]) -> bool:
        """Whether every table this query reads is one of `tables` (and it reads any)."""
        return bool(self.tables) and self.tables <= tables

    def sensitive_references(self, policy: PrivacyPolicy) -> list[str]:
        """The sensitive columns this query reads anywhere (outputs, filters, joins, subqueries)."""
        return sorted({s for s in policy.sensitive_columns for ref in self.references if _reads(ref, s)})

    def sensitive(self, policy: PrivacyPolicy) -> list[tuple[int, str]]:
        """(output position, sensitive source column) pairs: sensitive data this query outputs."""
        out = []
        for j, col in enumerate(self.columns):
            for src in sorted(col.sources):
                if _is_sensitive(src, policy.sensitive_columns):
                    out.append((j, src))
        return out


class PrivacyRefusal(Exception):
    """The user may not see this output; `message` says why and `alternative` what they can have."""

    def __init__(self, code: str, message: str, *, alternative: dict | None = None):
        super().__init__(message)
        self.code = code  # "sensitive_column" | "row_level"
        self.message = message
        self.alternative = alternative or {}

    def to_json(self) -> dict:
        return {"refused": self.code, "reason": self.message, "alternative": self.alternative}


@dataclass(frozen=True)
class ProtectedResult:
    """A query result after the privacy rules: what every consumer sees, and the report of it."""

    columns: tuple[str, ...]
    rows: list[list]
    truncated: bool
    elapsed_ms: float
    privacy: dict = field(default_factory=dict)

    @property
    def row_count(self) -> int:
        return len(self.rows)


class _Unknown(Exception):
    pass


# --------------------------------------------------------------------------- analysis


def analyse_output(sql: str | exp.Expr, dialect: str = "postgres", *, policy: PrivacyPolicy | None = None,
                   catalog: CatalogSchema | None = None) -> OutputAnalysis:  # fmt: skip
    """Classify every output column of `sql` and decide whether its rows are aggregates.

    `sql` is the validated tree (ValidatedSql.tree) or a text, which is read exactly as validation
    reads it (canonical text: escapes decoded, comments gone), never by a parse of its own."""
    policy = policy or PrivacyPolicy()
    tables: frozenset[str] = frozenset()
    references: frozenset[str] = frozenset()
    try:
        tree = sql if isinstance(sql, exp.Expr) else parse_query(sql, dialect)
        tables = _tables_read(tree)
        references = _references(tree, catalog)
        analyser = _Analyser(tree, catalog)
        columns, aggregated, reason = analyser.query(tree)
    except (sqlglot.errors.SqlglotError, SqlValidationError, _Unknown, RecursionError) as exc:
        note = "askdb could not tell which output columns are counts or aggregates"
        detail = f" ({exc})" if isinstance(exc, _Unknown) and str(exc) else ""
        return OutputAnalysis(understood=False, row_level_reason=note + detail, notes=(note + detail + ".",),
                              tables=tables, references=references or frozenset({"?.*"}))  # fmt: skip
    individuals = False
    if aggregated:
        reason = _identifier_reason(tree, columns, policy.identifier_columns)
        individuals = bool(reason)
        aggregated = not reason
    return OutputAnalysis(columns=tuple(columns), aggregated=aggregated, row_level_reason=reason,
                          notes=tuple(analyser.notes), about_individuals=individuals, tables=tables,
                          references=references, whole_rows=_whole_rows(tree, catalog))  # fmt: skip


def _visible_sources(scope: Scope) -> dict[str, Any]:
    """alias -> Table node or Scope, for a scope and the scopes a correlated column may reach."""
    out: dict[str, Any] = {}
    current: Scope | None = scope
    while current is not None:
        for name, source in current.sources.items():
            out.setdefault(name, source)
        current = current.parent
    return out


def _table_of(catalog: CatalogSchema | None, table: exp.Table) -> tuple[str, list[str] | None]:
    name = table.name.lower()
    found = catalog.find(name, table.db.lower() or None) if catalog is not None else []
    return name, (list(found[0].columns) if len(found) == 1 else None)


def _scan_references(tree: exp.Expr, catalog: CatalogSchema | None) -> tuple[set[str], set[str]]:
    """Every table column the query reads anywhere (select list, WHERE, joins, subqueries, CTE
    bodies: a filter on a column discloses it as surely as an output does), as "table.column";
    "table.*" for a * or a whole-row reference. And the tables referenced whole (`row_to_json(p)`,
    `p::text`, `(p).dod`, `count(p)`): a table alias used as a value."""
    refs: set[str] = set()
    whole: set[str] = set()
    for scope in traverse_scope(tree):
        sources = _visible_sources(scope)
        tables = {a: _table_of(catalog, s) for a, s in sources.items() if isinstance(s, exp.Table)}
        for column in scope.columns:
            if isinstance(column.this, exp.Star):
                continue
            name, qualifier = column.name.lower(), column.table.lower()
            if qualifier:
                if qualifier in tables:
                    refs.add(f"{tables[qualifier][0]}.{name}")
                continue
            owners = [t for t, cols in tables.values() if cols is None or name in cols]
            if owners:
                refs.update(f"{t}.{name}" for t in owners)
            elif name in tables:  # no table has this column, but a table has this alias: a whole row
                whole.add(tables[name][0])
            elif name in sources:  # a CTE's or subquery's whole row: its body's columns are read above
                whole.add(name)
            elif not any(isinstance(s, Scope) for s in sources.values()):
                refs.add(f"?.{name}")
        for star in scope.expression.find_all(exp.Star):
            parent = star.parent
            if isinstance(parent, exp.Count) or (
                isinstance(parent, exp.Column) and isinstance(parent.parent, exp.Count)
            ):
                continue  # count(*) counts rows; it reads no column
            qualifier = parent.table.lower() if isinstance(parent, exp.Column) else ""
            for alias, (table, _) in tables.items():
                if not qualifier or alias == qualifier:
                    refs.add(f"{table}.*")
    return refs, whole


def _references(tree: exp.Expr, catalog: CatalogSchema | None) -> frozenset[str]:
    refs, whole = _scan_references(tree, catalog)
    return frozenset(refs | {f"{t}.*" for t in whole})


def _whole_rows(tree: exp.Expr, catalog: CatalogSchema | None) -> frozenset[str]:
    return frozenset(_scan_references(tree, catalog)[1])


def _tables_read(tree: exp.Expr) -> frozenset[str]:
    """Every table the query reads, anywhere in it (joins, subqueries, CTE bodies), not the CTEs
    themselves; a function or VALUES in FROM reads no catalogued table and counts as "?"."""
    ctes = {cte.alias.lower() for cte in tree.find_all(exp.CTE)}
    names = {t.name.lower() or "?" for t in tree.find_all(exp.Table) if t.db or t.name.lower() not in ctes}
    for node in tree.find_all(exp.From, exp.Join):
        if not isinstance(node.this, exp.Table | exp.Subquery):
            names.add("?")
    return frozenset(names)


def _identifier_reason(tree: exp.Expr, columns: list[OutputColumn], identifiers: frozenset[str]) -> str:
    """An aggregate about one individual is row-level data: grouped by, or filtered to one value
    of, a column that identifies a patient, admission or stay."""
    if not identifiers:
        return ""
    for col in columns:
        if col.kind == KEY:
            for src in sorted(col.sources):
                if src.rpartition(".")[2] in identifiers:
                    return f"it has one row per {src.rpartition('.')[2]} (column {col.name}), an individual's identifier"
    for node in tree.find_all(exp.EQ, exp.In):
        sides = [node.this, *(node.expressions or [node.expression])]
        named = [s for s in sides if isinstance(s, exp.Column) and s.name.lower() in identifiers]
        if named and any(isinstance(s, exp.Literal) for s in sides):
            return f"it is restricted to given values of {named[0].name.lower()}, so it describes individuals"
    return ""


class _Analyser:
    def __init__(self, tree: exp.Expr, catalog: CatalogSchema | None):
        self.catalog = catalog
        self.ctes = {cte.alias.lower(): cte.this for cte in tree.find_all(exp.CTE)}
        self.memo: dict[int, tuple[list[OutputColumn], bool, str]] = {}
        self.notes: list[str] = []

    def query(self, node: exp.Expr) -> tuple[list[OutputColumn], bool, str]:
        while isinstance(node, exp.Subquery | exp.Paren):
            node = node.this
        key = id(node)
        if key not in self.memo:
            if isinstance(node, exp.SetOperation):
                self.memo[key] = self._set_operation(node)
            elif isinstance(node, exp.Select):
                self.memo[key] = self._select(node)
            else:
                raise _Unknown(f"a {type(node).__name__.lower()} where a query was expected")
        return self.memo[key]

    def _set_operation(self, node: exp.SetOperation):
        left, left_agg, left_reason = self.query(node.this)
        right, right_agg, right_reason = self.query(node.expression)
        if len(left) != len(right):
            raise _Unknown("the branches of a set operation have different column counts")
        merged = []
        for a, b in zip(left, right, strict=True):
            kinds = {a.kind, b.kind}
            kind = next(k for k in (COUNT, VALUE, DERIVED, AGGREGATE, KEY) if k in kinds)
            merged.append(OutputColumn(a.name, kind, a.sources | b.sources))
        return merged, left_agg and right_agg, left_reason or right_reason

    def _select(self, select: exp.Select):
        scope = self._scope(select)
        grouped = (
            bool(select.args.get("group"))
            or bool(select.args.get("distinct"))
            or any(_has_aggregate(e) for e in select.expressions)
        )
        columns: list[OutputColumn] = []
        for projection in select.expressions:
            star = projection if isinstance(projection, exp.Star) else (
                projection if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star) else None
            )  # fmt: skip
            if star is not None:
                columns.extend(self._star(star, scope))
                continue
            kind, sources = self._kind(projection.unalias(), scope, grouped)
            name = projection.alias or (
                projection.name if isinstance(projection, exp.Column) else projection.sql()
            )
            columns.append(OutputColumn(name[:80], kind, sources))
        aggregated = bool(columns) and all(c.kind in AGGREGATED_KINDS for c in columns)
        reason = ""
        if not aggregated:
            listed = next((c.name for c in columns if c.kind not in AGGREGATED_KINDS), "")
            reason = f"it lists individual rows (column {listed} is not a count or other aggregate)"
        return columns, aggregated, reason

    def _scope(self, select: exp.Select) -> dict[str, tuple[str, Any]]:
        """alias → ("table", name) or ("query", node) for everything in FROM and JOIN."""
        scope: dict[str, tuple[str, Any]] = {}
        relations = [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]
        for rel in relations:
            if rel is None:
                continue
            node = rel.this
            if isinstance(node, exp.Table):
                name = node.name.lower()
                alias = (node.alias or node.name).lower()
                if not node.db and name in self.ctes:
                    scope[alias] = ("query", self.ctes[name])
                else:
                    scope[alias] = ("table", name)
            elif isinstance(node, exp.Subquery):
                scope[(node.alias or f"_sub{len(scope)}").lower()] = ("query", node.this)
            elif isinstance(node, exp.Lateral) and isinstance(node.this, exp.Subquery):
                scope[(node.alias or f"_sub{len(scope)}").lower()] = ("query", node.this.this)
            else:  # VALUES, UNNEST, a set-returning function: its columns come from no catalogued table
                scope[(node.alias or f"_rel{len(scope)}").lower()] = ("table", "?")
        return scope

    def _table_columns(self, table: str) -> list[str] | None:
        if self.catalog is None:
            return None
        found = self.catalog.find(table)
        return list(found[0].columns) if found else None

    def _star(self, star: exp.Expr, scope) -> list[OutputColumn]:
        qualifier = star.table.lower() if isinstance(star, exp.Column) else ""
        out: list[OutputColumn] = []
        for alias, (what, ref) in scope.items():
            if qualifier and alias != qualifier:
                continue
            if what == "query":
                out.extend(self.query(ref)[0])
                continue
            names = self._table_columns(ref)
            if names is None:
                out.append(OutputColumn(f"{ref}.*", VALUE, frozenset({f"{ref}.*"})))
            else:
                out.extend(OutputColumn(n, VALUE, frozenset({f"{ref}.{n}"})) for n in names)
        if not out:
            raise _Unknown("a * askdb could not expand")
        return out

    def _column(self, column: exp.Column, scope, grouped: bool) -> tuple[str, frozenset[str]]:
        name, qualifier = column.name.lower(), column.table.lower()
        candidates = [(a, s) for a, s in scope.items() if not qualifier or a == qualifier]
        for _, (what, ref) in candidates:  # a subquery's or CTE's output of that name first
            if what == "query":
                for out in self.query(ref)[0]:
                    if out.name.lower() == name:
                        kind = KEY if grouped and out.kind == VALUE else out.kind
                        return kind, out.sources
        tables = [ref for _, (what, ref) in candidates if what == "table"]
        owners = [t for t in tables if name in (self._table_columns(t) or [name])]
        sources = frozenset(f"{t}.{name}" for t in (owners or tables)) or frozenset({f"?.{name}"})
        return (KEY if grouped else VALUE), sources

    def _kind(self, node: exp.Expr, scope, grouped: bool) -> tuple[str, frozenset[str]]:
        while isinstance(node, exp.Cast | exp.Paren | exp.Alias):
            node = node.this
        if isinstance(node, exp.Count):
            return COUNT, frozenset()  # what is counted is not output
        if isinstance(node, exp.Window):
            kind, sources = self._kind(node.this, scope, True)
            return (kind if isinstance(node.this, exp.AggFunc) else VALUE), sources
        if isinstance(node, LISTING_AGGREGATES):
            return VALUE, self._sources(node, scope)
        if isinstance(node, exp.Sum | exp.Max | exp.Min):
            kind, sources = self._kind(node.this, scope, True)
            if kind == COUNT or (isinstance(node, exp.Sum) and _is_indicator(node.this)):
                return COUNT, frozenset()  # a sum of counts or of 0/1 flags is a count
            return AGGREGATE, sources
        if isinstance(node, exp.AggFunc):
            return AGGREGATE, self._sources(node, scope)
        if isinstance(node, exp.Column):
            return self._column(node, scope, grouped)
        if isinstance(node, exp.Subquery):  # a scalar subquery
            return self._scalar(node)
        if isinstance(node, exp.Coalesce):
            parts = [self._kind(e, scope, grouped) for e in node.iter_expressions()]
            if all(k in (COUNT, KEY) for k, _ in parts) and any(k == COUNT for k, _ in parts):
                return COUNT, frozenset()
        return self._combined(node, scope, grouped)

    def _scalar(self, node: exp.Subquery) -> tuple[str, frozenset[str]]:
        outs, aggregated, _ = self.query(node.this)
        if len(outs) != 1:
            raise _Unknown("a scalar subquery with several columns")
        kind = outs[0].kind
        return (kind if kind in (COUNT, DERIVED) else AGGREGATE if aggregated else VALUE), outs[0].sources

    def _combined(self, node: exp.Expr, scope, grouped: bool) -> tuple[str, frozenset[str]]:
        """An expression of other outputs: the kind of its strongest part."""
        children = [self._kind(e, scope, grouped) for e in node.iter_expressions()]
        kinds = {k for k, _ in children}
        sources = frozenset().union(*(s for _, s in children)) if children else frozenset()
        if kinds & {COUNT, DERIVED}:
            return DERIVED, sources  # a rate or percentage computed from counts
        for kind in (AGGREGATE, VALUE):
            if kind in kinds:
                return kind, sources
        return KEY if grouped or not isinstance(node, exp.Column) else VALUE, sources

    def _sources(self, node: exp.Expr, scope) -> frozenset[str]:
        out: set[str] = set()
        for column in node.find_all(exp.Column):
            if isinstance(column.this, exp.Star):
                continue
            out |= self._column(column, scope, True)[1]
        return frozenset(out)


def _has_aggregate(node: exp.Expr) -> bool:
    """An aggregate of this SELECT (not of a window, not of a subquery inside it)."""
    for agg in node.find_all(exp.AggFunc):
        parent = agg.parent
        nested = False
        while parent is not None and parent is not node.parent:
            if isinstance(parent, exp.Window | exp.Subquery | exp.Select):
                nested = True
                break
            parent = parent.parent
        if not nested:
            return True
    return False


def _is_indicator(node: exp.Expr) -> bool:
    """1, or a CASE/IF whose every branch is the literal 0 or 1 (or NULL): SUM of it counts rows."""
    while isinstance(node, exp.Cast | exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal):
        return node.name in ("1", "1.0")
    if isinstance(node, exp.Case):
        branches = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
    elif isinstance(node, exp.If):
        branches = [node.args.get("true"), node.args.get("false")]
    else:
        return False
    return all(
        b is None or isinstance(b, exp.Null) or (isinstance(b, exp.Literal) and b.name in ("0", "1"))
        for b in branches
    )


def _reads(reference: str, sensitive: str) -> bool:
    """Whether a reference ("t.c", "t.*", "?.c", "?.*") reads the sensitive column "table.column"."""
    table, _, column = reference.rpartition(".")
    s_table, _, s_column = sensitive.rpartition(".")
    return (table in (s_table, "?")) and (column in (s_column, "*"))


def _is_sensitive(source: str, sensitive: frozenset[str]) -> bool:
    table, _, column = source.rpartition(".")
    if column == "*":  # a * over a table whose columns askdb does not know
        return any(s.startswith(f"{table}.") for s in sensitive)
    if table == "?":  # a column askdb could not place: sensitive if any table's column of that name is
        return any(s.endswith(f".{column}") for s in sensitive)
    return source in sensitive


# --------------------------------------------------------------------------- access


def check_access(analysis: OutputAnalysis, policy: PrivacyPolicy, *, sql: str = "",
                 question: str = "", dialect: str = "postgres") -> None:  # fmt: skip
    """Refuse an output the user may not see: sensitive columns without the permission, and
    anything but an aggregate for an aggregate-only user (with the aggregate they may have, when
    there is one: the count of a listing about given individuals describes them too). A query that
    reads only reference tables (code dictionaries) is not patient data: any user may list it."""
    if not policy.sensitive_allowed:
        hits = sorted(
            {src for _, src in analysis.sensitive(policy)} | set(analysis.sensitive_references(policy))
        )
        if hits:
            listed = ", ".join(hits)
            raise PrivacyRefusal(
                "sensitive_column",
                f"This query reads sensitive data ({listed}), which your role may not see. "
                "Ask without those columns, or ask an admin for the permission to see sensitive columns.",
            )
    if not policy.row_level and not analysis.aggregated and not analysis.reads_only(policy.reference_tables):
        alternative = {"question": aggregate_question(question)} if question else {}
        if sql and analysis.understood:
            alternative["sql"] = f"SELECT COUNT(*) AS row_count FROM ({sql.strip().rstrip(';')}) AS listing"
            if not analyse_output(alternative["sql"], dialect, policy=policy).aggregated:
                alternative = {}  # restricted to given patients: their count is theirs too
        if alternative.get("question"):
            offer = f' askdb can give you the aggregate instead: "{alternative["question"]}"'
        elif sql and analysis.understood:
            offer = " Its count would describe given individuals too, so askdb has no aggregate to offer."
        else:
            offer = ""
        raise PrivacyRefusal(
            "row_level",
            "Your role may see only aggregated results (counts, averages and other statistics over groups) "
            f"on this source, and this query's output is row-level: {analysis.row_level_reason}.{offer}",
            alternative=alternative,
        )


_LISTING_OPENERS = re.compile(
    r"^\s*(?:please\s+)?(?:can you\s+|could you\s+)?(?:list|show(?:\s+me)?|give(?:\s+me)?|find|get|display|"
    r"which|what\s+are|who\s+are|name)\s+(?:all\s+)?(?:of\s+)?(?:the\s+)?",
    re.IGNORECASE,
)


def aggregate_question(question: str) -> str:
    """The "how many" form of a listing question: "list the patients with sepsis" → "How many
    patients with sepsis?". A suggestion for the user to ask, never an answer askdb gives itself."""
    text = question.strip().rstrip("?.! ")
    rest = _LISTING_OPENERS.sub("", text, count=1)
    if rest == text:
        return f"How many rows answer: {text}?"
    return f"How many {rest}?"


# --------------------------------------------------------------------------- suppression


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | Decimal):
        number = float(value)
        return None if math.isnan(number) else number
    return None


def suppress(columns: Sequence[str], rows: Sequence[Sequence], analysis: OutputAnalysis,
             k: int) -> tuple[list[list], dict]:  # fmt: skip
    """Counts 0 < n < k become "<k"; one more cell of a count column is hidden when only one was,
    so that no total (in the result or elsewhere) gives the hidden cell back by subtraction; and a
    small group's other statistics (averages, rates) are hidden with its size.

    Returns the new rows and the report kept with the run.
    """
    out = [list(r) for r in rows]
    report: dict[str, Any] = {"k": k, "suppressed": 0, "complementary": 0, "statistics": 0,
                              "count_columns": [], "notes": list(analysis.notes)}  # fmt: skip
    if k <= 0:
        return out, report
    if not analysis.understood or len(analysis.columns) != len(columns):
        if analysis.understood:
            report["notes"].append("askdb could not match the result's columns to the SQL's output.")
        report["notes"].append("No count was suppressed: check small numbers before sharing this result.")
        return out, report
    kinds = [c.kind for c in analysis.columns]
    count_cols = [j for j, kind in enumerate(kinds) if kind == COUNT]
    report["count_columns"] = [columns[j] for j in count_cols]
    marker = f"<{k}"
    hidden_rows: set[int] = set()
    for j in count_cols:
        hidden_rows |= _suppress_column(out, j, k, report)
    for i in sorted(hidden_rows):
        for j, kind in enumerate(kinds):
            if kind in STATISTIC_KINDS and out[i][j] is not None and out[i][j] != marker:
                out[i][j] = marker
                report["statistics"] += 1
    report["notes"].extend(_suppression_notes(columns, kinds, bool(count_cols), k))
    return out, report


def _suppress_column(out: list[list], j: int, k: int, report: dict) -> set[int]:
    """Column j's counts below k hidden, and one more when only one was; the rows touched."""
    marker = f"<{k}"
    primary = [i for i, row in enumerate(out) if (n := _number(row[j])) is not None and 0 < n < k]
    for i in primary:
        out[i][j] = marker
    report["suppressed"] += len(primary)
    hidden = set(primary)
    if len(primary) == 1:
        rest = [(n, i) for i, row in enumerate(out) if (n := _number(row[j])) is not None and n > 0]
        if rest:
            _, i = min(rest)
            out[i][j] = marker
            report["complementary"] += 1
            hidden.add(i)
    return hidden


def _suppression_notes(columns: Sequence[str], kinds: list[str], has_counts: bool, k: int) -> list[str]:
    notes = []
    statistics = [columns[j] for j, kind in enumerate(kinds) if kind in STATISTIC_KINDS]
    if statistics and not has_counts:
        notes.append(
            f"The result does not show the group sizes behind {', '.join(statistics)}, so askdb cannot "
            f"tell whether they describe fewer than {k} people."
        )
    derived = [columns[j] for j, kind in enumerate(kinds) if kind == DERIVED]
    if derived:
        notes.append(
            f"{', '.join(derived)} {'is' if len(derived) == 1 else 'are'} computed from counts the result does not "
            "show; askdb cannot check those counts for small cells."
        )
    return notes


def protect(result, analysis: OutputAnalysis, policy: PrivacyPolicy) -> ProtectedResult:
    """The result as every consumer may see it: small cells suppressed, the report attached."""
    k = policy.min_cell_size
    notes = []
    if analysis.about_individuals and policy.row_level and k > 0:
        # Only users who may list rows get here: suppressing one patient's own counts would hide
        # nothing they cannot list, and would make "how many admissions did patient X have?" useless.
        k = 0
        notes.append(f"Not suppressed: {analysis.row_level_reason}; its counts are row-level data, "
                     "which your role may see.")  # fmt: skip
    rows, report = suppress(list(result.columns), [list(r) for r in result.rows], analysis, k)
    report["notes"] = [*report["notes"], *notes]
    report["aggregated"] = analysis.aggregated
    positions = sorted({j for j, _ in analysis.sensitive(policy) if j < len(result.columns)})
    report["sensitive_columns"] = [result.columns[j] for j in positions]
    report["sensitive_positions"] = positions
    return ProtectedResult(columns=tuple(result.columns), rows=rows, truncated=result.truncated,
                           elapsed_ms=result.elapsed_ms, privacy=report)  # fmt: skip


def withhold_sensitive(rows: Sequence[Sequence], positions: Sequence[int]) -> list[list]:
    """Rows for the LLM: values of sensitive output columns replaced, whoever may see them."""
    hidden = set(positions)
    return [["(withheld: sensitive)" if j in hidden else v for j, v in enumerate(row)] for row in rows]


def suppression_sentence(report: dict) -> str:
    """One sentence for the methods paragraph and the page ("" when no suppression rule applied)."""
    k = report.get("k") or 0
    if k <= 0:
        return ""
    suppressed, extra, stats = (report.get(key) or 0 for key in ("suppressed", "complementary", "statistics"))
    if report.get("people_counted"):  # the aggregate fragment: whole rows, by the patients behind each
        if not suppressed:
            return f"Rows behind fewer than {k} patients were hidden (none in this result)."
        more = (
            f"; {extra} more so that no total reveals {'it' if suppressed == 1 else 'them'}" if extra else ""
        )
        return (
            f"Rows behind fewer than {k} patients were hidden whole ({suppressed} row{'s' if suppressed != 1 else ''}"
            f" shown as <{k}{more})."
        )
    if not suppressed:
        return f"Counts below {k} were suppressed (none in this result)."
    parts = [f"{suppressed} cell{'s' if suppressed != 1 else ''} shown as <{k}"]
    if extra:
        parts.append(f"{extra} more so that no total reveals {'it' if suppressed == 1 else 'them'}")
    if stats:
        parts.append(f"{stats} statistic{'s' if stats != 1 else ''} of those groups")
    return f"Counts below {k} were suppressed ({'; '.join(parts)})."
