"""The outer SELECT of a template's SQL, as composition reads it: its tables, its WHERE conjuncts,
and whether a subquery reads one of its tables too (where an added condition would then belong is
not known, so composition does not add it)."""

from __future__ import annotations

import functools

from sqlglot import exp

from core.match.template import Template, parsed_sql


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The AND-ed parts of a condition, parentheses removed."""
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return conjuncts(node.left) + conjuncts(node.right)
    return [node]


def outer_tables(template: Template) -> dict[str, str]:
    """The outer SELECT's tables by alias (or name): alias -> bare table name."""
    return outer_tables_of(template.sql_template, template.dialect)


def outer_tables_of(sql: str, dialect: str) -> dict[str, str]:
    """The same for SQL text (reselected.py reads a stored template's SQL before any Template of it)."""
    return dict(_outer_tables(sql, dialect))


@functools.lru_cache(maxsize=32768)
def _outer_tables(sql: str, dialect: str) -> tuple[tuple[str, str], ...]:
    """Read once per SQL: a calibration asks it of every template again and again, and the parse
    it reads has often left parsed_sql's cache by then (the compositions' SQL passes through it)."""
    tree = parsed_sql(sql, dialect)
    if not isinstance(tree, exp.Select):
        return ()
    return tuple(select_tables(tree).items())


def select_tables(select: exp.Select) -> dict[str, str]:
    """One SELECT's own tables (its FROM and joins, not its subqueries'): alias (or name, as written)
    -> bare table name, lower-cased. The one reading of them: the outer SELECT's here, any SELECT's in
    timed.py."""
    sources = [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]
    out = {}
    for source in sources:
        table = source.this if source is not None else None
        if isinstance(table, exp.Table):
            out[table.alias_or_name] = table.name.lower()
    return out


def read_below(tree: exp.Select, table: str) -> bool:
    """Whether a subquery (or CTE) of `tree` reads `table` too. "The last drug given to patient N",
    written as `WHERE starttime = (SELECT MAX(starttime) FROM prescriptions …)`, chooses the last
    row below; a route added to the outer WHERE alone would filter after that choice (the last
    drug, if it was an IV bolus) instead of before it (the last IV bolus drug): a wrong answer."""
    return any(
        t.name.lower() == table
        for sub in tree.find_all(exp.Select)
        if sub is not tree
        for t in sub.find_all(exp.Table)
    )


def reads_other_below(tree: exp.Select, table: str) -> bool:
    """Whether a subquery (or CTE) of `tree` reads a table other than `table`. "How many patients had
    a protein test since 2100?" is written `FROM admissions WHERE hadm_id IN (SELECT hadm_id FROM
    labevents …)`: a year said with it may be the test's as well as the admission's, and EHRSQL's
    verified questions put it on the test (labevents.charttime); a year condition of the outer table
    added there answers another question, right only where the data happen to agree."""
    return any(
        t.name.lower() != table
        for sub in tree.find_all(exp.Select)
        if sub is not tree
        for t in sub.find_all(exp.Table)
    )
