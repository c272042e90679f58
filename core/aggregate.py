"""The safe aggregate language of aggregate-only access, checked on the validated tree, and the
rewrite that makes it safe to show: each output row also counts the distinct people behind it,
and rows of fewer than k people are hidden whole.

Why a fragment and not "is every output column an aggregate": an aggregate can list its rows
(json_agg, string_agg, percentile_disc of an id), describe one person (GROUP BY subject_id,
sum(CASE WHEN subject_id = … THEN …)), or hide a small count behind arithmetic (count(*)+0,
-count(*), count(*)::text). Each accepted construct below is one whose cells are statistics of
the people counted for the row, so one people count per row decides what is shown.

Accepted: one SELECT (no WITH, window or set operation) over catalogued tables and joins, or
over a cohort subquery that selects plain columns under their own names, with
- group keys: non-identifier columns, constants, and date_trunc / extract / CASE buckets of them;
- aggregates: count(*), count(column), count(DISTINCT column), and sum / avg / min / max of a
  non-identifier column, optionally round(aggregate, n); nothing else around or inside them;
- GROUP BY of group keys that are also output; HAVING over the same aggregates and constants;
- WHERE (and subqueries in it) filtering on anything but given identifier values, whether
  written (`subject_id = 1`) or computed (`<> (SELECT min(subject_id) …)`, a subquery's LIMIT);
- ORDER BY of output columns (ordering by anything else is dropped), LIMIT / OFFSET.
The person column (`subject_id`) of the first table that has one is what the rewrite counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from core import privacy
from core.types import CatalogSchema
from core.validation import executable_sql

PEOPLE_COLUMN = "askdb_people"
PERSON_COLUMN = "subject_id"  # MIMIC-IV's patient identifier: what "people behind a cell" counts

# Aggregates whose value is a statistic of the counted rows (sqlglot node types).
_COUNTS = (exp.Count,)
_STATISTICS = (exp.Sum, exp.Avg, exp.Max, exp.Min)
# Buckets of a column that stay group keys.
_BUCKETS = (exp.TimestampTrunc, exp.DateTrunc, exp.Extract, exp.Case)
# (IS [NOT] NULL is not among them: it picks no value.)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Like, exp.ILike,
                exp.NullSafeEQ, exp.NullSafeNEQ)  # fmt: skip
# Syntax allowed inside keys, buckets, WHERE and HAVING (besides columns, literals and the above).
_PLAIN = (exp.Literal, exp.Null, exp.Boolean, exp.Var, exp.Paren, exp.And, exp.Or, exp.Not, exp.If, exp.Is,
          exp.DataType, exp.Cast, exp.Neg, exp.Interval)  # fmt: skip


class _Outside(Exception):
    """The query is outside the fragment; the message is the sentence the user reads."""


@dataclass(frozen=True)
class Rewrite:
    sql: str  # the accepted query with the people count as its last output column
    analysis: privacy.OutputAnalysis  # of the accepted query (without the people column)
    dropped_order: bool = False


def rewrite(tree: exp.Expr, catalog: CatalogSchema, policy: privacy.PrivacyPolicy) -> Rewrite:
    """Check that `tree` (the validated tree) is in the fragment and add the people count.

    Raises privacy.PrivacyRefusal("aggregate_fragment") with a sentence when it is not."""
    try:
        return _rewrite(tree.copy(), catalog, policy)
    except _Outside as exc:
        raise privacy.PrivacyRefusal(
            "aggregate_fragment",
            "Your role may see only aggregated results on this source, and askdb accepts those in a "
            f"simple form it can check and protect: {exc} Ask for counts of patients, admissions or "
            "stays, or sums, averages, minimums or maximums of a value, grouped by non-identifying "
            "columns.",
        ) from exc


def _rewrite(tree: exp.Expr, catalog: CatalogSchema, policy: privacy.PrivacyPolicy) -> Rewrite:
    ids = policy.identifier_columns | {PERSON_COLUMN}
    _check_shape(tree)
    tables = _from_tables(tree, catalog)
    analysis = privacy.analyse_output(tree, catalog.dialect, policy=policy, catalog=catalog)
    if analysis.whole_rows:
        raise _Outside(f"it uses a whole row of {', '.join(sorted(analysis.whole_rows))} as a value.")
    outputs = [e.unalias() if isinstance(e, exp.Alias) else e for e in tree.expressions]
    aliases = {e.alias.lower(): e.unalias() for e in tree.expressions if isinstance(e, exp.Alias)}
    _check_grouping(tree, outputs, aliases, ids)
    having = tree.args.get("having")
    if having is not None:
        _check_condition(having.this, ids, allow_aggregates=True)
    dropped = _drop_hidden_order(tree, outputs, aliases)  # before the checks: what is dropped never runs
    # Conditions anywhere (WHERE, ON, HAVING, and inside subqueries and cohorts) may not pick
    # given identifier values.
    _check_filter(tree, ids)
    person = next((alias for alias, columns in tables if PERSON_COLUMN in columns), None)
    if person is None:
        raise _Outside(
            "none of its tables has a patient identifier, so askdb cannot count the people behind each row."
        )
    people = exp.Count(this=exp.Distinct(expressions=[exp.column(PERSON_COLUMN, table=person)]))
    tree.append("expressions", exp.alias_(people, PEOPLE_COLUMN))
    if dropped:
        note = "Its ordering by a value it does not show was dropped: results are ordered only by what they show."
        analysis = replace(analysis, notes=(*analysis.notes, note))
    return Rewrite(sql=executable_sql(tree, catalog.dialect), analysis=analysis, dropped_order=dropped)


def _check_shape(tree: exp.Expr) -> None:
    if isinstance(tree, exp.SetOperation):
        raise _Outside("it combines queries (UNION, INTERSECT or EXCEPT), which askdb does not accept here.")
    if not isinstance(tree, exp.Select):
        raise _Outside("it is not a single SELECT.")
    if tree.args.get("with_") or tree.args.get("with"):
        raise _Outside("it uses WITH; write it as one SELECT over the tables.")
    if tree.find(exp.Window):
        raise _Outside("it uses a window function (OVER …).")
    if tree.args.get("distinct"):
        raise _Outside("it uses SELECT DISTINCT; use GROUP BY with a count instead.")


def _check_grouping(
    tree: exp.Select, outputs: list[exp.Expr], aliases: dict[str, exp.Expr], ids: frozenset[str]
) -> None:
    """Every output is an accepted aggregate or a group key, and GROUP BY holds exactly the keys."""
    keys: list[exp.Expr] = []
    aggregates = 0
    for position, node in enumerate(outputs, start=1):
        if _is_aggregate(node, ids, position):
            aggregates += 1
        else:
            _check_key(node, ids, position)
            keys.append(node)
    if not aggregates:
        raise _Outside("it has no count or other aggregate in its output.")
    grouped = [_resolve(g, outputs, aliases) for g in (tree.args.get("group") or exp.Group()).expressions]
    for item in grouped:
        _check_key(item, ids, None)
        if not any(item == key for key in keys):
            raise _Outside(f"it groups by `{item.sql()}`, which is not among its output columns.")
    for key in keys:
        if not isinstance(key, exp.Literal | exp.Null | exp.Boolean) and not any(key == g for g in grouped):
            raise _Outside(f"`{key.sql()}` is output but not in GROUP BY.")


def _from_tables(tree: exp.Select, catalog: CatalogSchema) -> list[tuple[str, frozenset[str]]]:
    """(alias, its columns) of every FROM and JOIN item; each must be a catalogued table."""
    out = []
    relations = [tree.args.get("from_") or tree.args.get("from"), *(tree.args.get("joins") or [])]
    for rel in relations:
        if rel is None:
            continue
        node = rel.this
        if node.args.get("alias") is not None and node.args["alias"].columns:
            raise _Outside("it renames columns with a column list after an alias.")
        if isinstance(node, exp.Subquery):
            out.append(((node.alias or "").lower(), _cohort_columns(node.this, catalog)))
            continue
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise _Outside("it reads from VALUES or a function; read the tables directly.")
        found = catalog.find(node.name.lower(), node.db.lower() or None)
        if len(found) != 1:
            raise _Outside(f"`{node.sql()}` is not one table of the catalog.")
        out.append(((node.alias or node.name).lower(), frozenset(c.lower() for c in found[0].columns)))
    if not out:
        raise _Outside("it reads no table.")
    return out


def _cohort_columns(body: exp.Expr, catalog: CatalogSchema) -> frozenset[str]:
    """A subquery in FROM is accepted as a cohort: a SELECT of plain columns, under their own
    names, of tables or other cohorts (so `SELECT count(*) FROM (SELECT DISTINCT subject_id …) s`
    counts people). Anything computed in it could carry an identifier into an aggregate outside."""
    if not isinstance(body, exp.Select) or body.args.get("with_") or body.args.get("with"):
        raise _Outside("a subquery in its FROM is not a plain SELECT.")
    names = []
    for projection in body.expressions:
        column = projection.unalias() if isinstance(projection, exp.Alias) else projection
        if not isinstance(column, exp.Column) or isinstance(column.this, exp.Star):
            raise _Outside(
                f"a subquery in its FROM outputs `{projection.sql()[:60]}`; it may select only columns."
            )
        if isinstance(projection, exp.Alias) and projection.alias.lower() != column.name.lower():
            raise _Outside(f"a subquery in its FROM renames `{column.name}` to `{projection.alias}`.")
        names.append(column.name.lower())
    _from_tables(body, catalog)
    return frozenset(names)


def _identifier(node: exp.Expr, ids: frozenset[str]) -> exp.Column | None:
    return next((c for c in node.find_all(exp.Column) if c.name.lower() in ids), None)


def _is_aggregate(node: exp.Expr, ids: frozenset[str], position: int) -> bool:
    """Whether an output is an accepted aggregate (raises when it is an aggregate of another kind)."""
    inner = _numeric(_unround(node))
    if isinstance(inner, _COUNTS):
        arg = inner.this
        if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
            arg = arg.expressions[0]
        if isinstance(arg, exp.Star) or (isinstance(arg, exp.Column) and not isinstance(arg.this, exp.Star)):
            return True
        raise _Outside(f"output {position} counts `{arg.sql()}`; count rows (count(*)) or one column.")
    if isinstance(inner, _STATISTICS):
        _check_statistic(inner, ids, position)
        return True
    if not node.find(exp.AggFunc, exp.Filter, exp.WithinGroup, exp.Subquery):
        return False
    raise _Outside(_why_not_accepted(node, position))


def _check_statistic(node: exp.Expr, ids: frozenset[str], position: int) -> None:
    arg = node.this
    if node.expressions:  # SQLite's max(a, b) is the larger of two values of one row
        raise _Outside(f"output {position} calls `{node.key}` with several values, a value of each row.")
    if isinstance(arg, exp.Distinct):
        raise _Outside(f"output {position} uses DISTINCT inside `{node.key}`.")
    if not isinstance(arg, exp.Column):
        raise _Outside(
            f"output {position} aggregates `{arg.sql()}`; aggregate one column, with nothing computed inside."
        )
    if arg.name.lower() in ids:
        raise _Outside(f"output {position} aggregates the identifier `{arg.name}`.")


def _unround(node: exp.Expr) -> exp.Expr:
    """round(statistic, n) as the statistic it rounds; anything else as it is."""
    if isinstance(node, exp.Round) or (isinstance(node, exp.Anonymous) and node.name.lower() == "round"):
        args = [node.this, node.args.get("decimals")] if isinstance(node, exp.Round) else node.expressions
        args = [a for a in args if a is not None]
        if (
            args
            and isinstance(_numeric(args[0]), _STATISTICS)
            and all(isinstance(a, exp.Literal) for a in args[1:])
        ):
            return args[0]
    return node


def _why_not_accepted(node: exp.Expr, position: int) -> str:
    if node.find(exp.Subquery):
        return f"output {position} holds a subquery."
    if node.find(exp.Filter):
        return f"output {position} uses FILTER (…); put the condition in WHERE."
    agg = node.find(exp.AggFunc)
    if agg is node or isinstance(node, exp.WithinGroup):
        return f"output {position} uses `{(agg or node).key}`, which is not among the accepted aggregates."
    return f"output {position} computes with an aggregate (`{node.sql()[:60]}`); output the aggregate itself."


def _numeric(node: exp.Expr) -> exp.Expr:
    """A statistic under a cast to a number type (PostgreSQL's round(avg(x), 1) is generated as
    ROUND(CAST(AVG(x) AS DECIMAL), 1)) is the statistic; a cast of anything else stays a cast."""
    if (
        isinstance(node, exp.Cast)
        and isinstance(node.this, _STATISTICS)
        and node.to.this in exp.DataType.NUMERIC_TYPES
    ):
        return node.this
    return node


def _check_key(node: exp.Expr, ids: frozenset[str], position: int | None) -> None:
    where = f"output {position}" if position else "a GROUP BY item"
    found = _identifier(node, ids)
    if found is not None:
        raise _Outside(f"{where} is the identifier `{found.name}`: a row per identifier is row-level data.")
    if isinstance(node, exp.Column | exp.Literal | exp.Null | exp.Boolean):
        return
    if isinstance(node, _BUCKETS) or (isinstance(node, exp.Cast) and isinstance(node.this, exp.Column)):
        for sub in node.walk():
            if sub is not node and not isinstance(
                sub, (exp.Column, exp.Identifier, *_PLAIN, *_COMPARISONS, exp.If)
            ):
                raise _Outside(f"{where} (`{node.sql()[:60]}`) computes more than a bucket of a column.")
        return
    raise _Outside(
        f"{where} (`{node.sql()[:60]}`) is neither a column, a bucket of one, nor an accepted aggregate."
    )


def _check_condition(node: exp.Expr, ids: frozenset[str], *, allow_aggregates: bool) -> None:
    for sub in node.walk():
        if isinstance(sub, exp.AggFunc):
            if not allow_aggregates or not (
                isinstance(sub, (*_COUNTS, *_STATISTICS))
                and isinstance(sub.this, exp.Column | exp.Star | exp.Distinct)
            ):
                raise _Outside(f"its HAVING uses `{sub.sql()[:60]}`.")
        elif isinstance(sub, exp.Subquery | exp.Window):
            raise _Outside("its HAVING holds a subquery.")
    _check_filter(node, ids)


def _check_filter(node: exp.Expr, ids: frozenset[str]) -> None:
    """No condition may pick given identifier values, anywhere (WHERE, ON, HAVING and the
    subqueries inside them): `subject_id = 10001`, `hadm_id IN (…)`, `stay_id < 3000…`, nor a
    value computed to pick one person (`subject_id <> (SELECT min(subject_id) …)`, a subquery with
    ORDER BY / LIMIT): "all but the patient with the lowest id" is that patient by difference."""
    for comparison in node.find_all(*_COMPARISONS):
        _check_comparison(comparison, ids)
    for agg in node.find_all(exp.AggFunc):
        if not isinstance(agg, exp.Count) and _identifier(agg, ids) is not None:
            raise _Outside(f"it computes `{agg.sql()[:60]}` of an identifier, which picks an individual.")
    for select in node.find_all(exp.Select):
        if select is not node and any(select.args.get(k) for k in ("limit", "offset", "order")):
            raise _Outside(
                "a subquery in it uses ORDER BY, LIMIT or OFFSET, which can pick given individuals."
            )


def _check_comparison(comparison: exp.Expr, ids: frozenset[str]) -> None:
    sides = [
        v for k, v in comparison.args.items() if isinstance(v, exp.Expr) and k not in ("escape", "query")
    ]
    sides += [e for e in comparison.args.get("expressions") or [] if isinstance(e, exp.Expr)]
    named = [s for s in sides if _identifier(s, ids) is not None]
    if not named:
        return
    # Besides the identifier, only another row's identifier (a join) may be compared with it.
    other = [s for s in sides if s not in named]
    listed = isinstance(comparison, exp.In) and comparison.args.get("query") is None
    picked = [s for s in other if not isinstance(s, exp.Column)] or (len(named) == 1 and not other and listed)
    if picked or not isinstance(named[0], exp.Column):
        column = _identifier(named[0], ids)
        raise _Outside(
            f"it filters to given values of the identifier `{column.name}`, so it describes individuals."
        )


def _resolve(item: exp.Expr, outputs: list[exp.Expr], aliases: dict[str, exp.Expr]) -> exp.Expr:
    """A GROUP BY / ORDER BY item as the output it names: `GROUP BY 1`, `ORDER BY n`."""
    if isinstance(item, exp.Literal) and item.is_int and 1 <= int(item.name) <= len(outputs):
        return outputs[int(item.name) - 1]
    if isinstance(item, exp.Column) and not item.table and item.name.lower() in aliases:
        return aliases[item.name.lower()]
    return item


def _drop_hidden_order(tree: exp.Select, outputs: list[exp.Expr], aliases: dict[str, exp.Expr]) -> bool:
    """Keep ORDER BY items that order by an output; drop the others (ordering by a hidden value
    would rank groups by something the user may not see)."""
    order = tree.args.get("order")
    if order is None:
        return False
    kept = [o for o in order.expressions if any(_resolve(o.this, outputs, aliases) == out for out in outputs)]
    if len(kept) == len(order.expressions):
        return False
    if kept:
        order.set("expressions", kept)
    else:
        tree.set("order", None)
    return True


# --------------------------------------------------------------------------- the result


def protect(result, analysis: privacy.OutputAnalysis, policy: privacy.PrivacyPolicy,
            people_column: str = PEOPLE_COLUMN) -> privacy.ProtectedResult:  # fmt: skip
    """Rows behind fewer than k people are hidden whole (every column), one more row when only one
    was (so no total gives it back), and the people count is dropped before anyone sees it."""
    columns = list(result.columns)
    if not columns or columns[-1].lower() != people_column:
        raise ValueError("the aggregate rewrite's people count is missing from the result")
    k = policy.min_cell_size
    marker = f"<{k}"
    rows = [list(r[:-1]) for r in result.rows]
    people = [_people(r[-1]) for r in result.rows]
    small = [i for i, n in enumerate(people) if k > 0 and 0 < n < k]
    complementary: list[int] = []
    if len(small) == 1:
        rest = sorted((n, i) for i, n in enumerate(people) if i not in small and n > 0)
        if rest:
            complementary.append(rest[0][1])
    for i in (*small, *complementary):
        rows[i] = [marker] * len(rows[i])
    report: dict[str, Any] = {
        "k": k, "suppressed": len(small), "complementary": len(complementary), "statistics": 0,
        "count_columns": [c.name for c in analysis.columns if c.kind == privacy.COUNT], "notes": list(analysis.notes),
        "rows_hidden": len(small) + len(complementary), "aggregated": True, "people_counted": True,
    }  # fmt: skip
    if k > 0:
        report["notes"].append(
            f"Each row was checked for the number of distinct patients behind it; rows of fewer than {k} "
            "patients are hidden whole."
        )
    positions = sorted({j for j, _ in analysis.sensitive(policy) if j < len(columns) - 1})
    report["sensitive_columns"] = [columns[j] for j in positions]
    report["sensitive_positions"] = positions
    return privacy.ProtectedResult(columns=tuple(columns[:-1]), rows=rows, truncated=result.truncated,
                                   elapsed_ms=result.elapsed_ms, privacy=report)  # fmt: skip


def _people(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
