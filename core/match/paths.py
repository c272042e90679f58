"""How the library reaches an event table's rows and names its items (its path): by the visit itself
(`labevents.hadm_id IN (…admissions…)`) or through a stay (`chartevents.stay_id IN (SELECT
icustays.stay_id FROM icustays WHERE icustays.hadm_id IN (…admissions…))`, a hop), and its items'
dictionary narrowed to the table it serves (`d_items.linksto = 'chartevents'`, a link).

Why: a lab value and a chart value are read alike but for that path, so their templates are never the
same SQL once table names are masked (retabled.py's learning) and a chart question stays out of reach
of every lab template. Read with hops collapsed and links left out (`plain`), the two are one shape,
and retabled.py learns the renaming from them; the renamed SQL is then written back the way the
library reads the new side (`rerouted`): the hop added or taken out, the link added or left out.
Both the hops and the links are learned from the library's own templates, never listed here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.template import Template, parsed_sql

PATH_SUPPORT = 2  # templates that must show a hop or a link for it to be the library's way

Hop = tuple[str, str, str]  # (the event table's stay column, the stay table, the stay table's visit column)


@dataclass(frozen=True)
class Paths:
    """The library's paths: event table -> its hop (a table never read by the visit directly), and
    (dictionary, event table) -> the dictionary's link column for that table."""

    hops: dict[str, Hop]
    links: dict[tuple[str, str], str]
    # (dictionary, item) -> the event tables the library's templates link that item to: "foley" asked
    # as a chart value is an output's item, and a chart query for it answers nothing
    served: dict[tuple[str, str], frozenset[str]] = dataclasses.field(default_factory=dict)

    def plain(self, tree: exp.Expr) -> exp.Expr:
        """The tree (changed in place) with every hop collapsed onto the visit column and every link
        left out: the path-free reading two templates over a lab and a chart value share."""
        for node in list(tree.find_all(exp.In)):
            hop = _hop_of(node)
            if hop is not None:
                _unhop(node, hop)
        for node in list(tree.find_all(exp.EQ)):
            if _link_of(node) is not None:
                _drop(node)
        return tree

    def rerouted(self, tree: exp.Expr, tables: set[str]) -> exp.Expr | None:
        """The tree (changed in place) with the new side's `tables` (bare names) read the library's
        way: a hop where the library hops, none where it reads the visit directly, a link where the
        library links the dictionary to that table; None where a path the library does not show stays
        (a stay condition with more than the visit in it, the ICU stay asked of a lab value)."""
        for node in list(tree.find_all(exp.In)):
            hop = _hop_of(node)
            if hop is not None and hop[0] in tables and hop[0] not in self.hops:
                _unhop(node, hop)
        for node in list(tree.find_all(exp.In)):
            column = node.this
            if not isinstance(column, exp.Column) or column.table.lower() not in tables:
                continue
            stay, via, visit = self.hops.get(column.table.lower(), ("", "", ""))
            if stay and column.name.lower() == visit and _hop_of(node) is None and not _in_hop(node):
                inner = (
                    exp.select(exp.column(stay, via))
                    .from_(via)
                    .where(exp.In(this=exp.column(visit, via), query=node.args["query"]))
                )
                node.replace(exp.In(this=exp.column(stay, column.table), query=exp.Subquery(this=inner)))
        for node in list(tree.find_all(exp.EQ)):
            link = _link_of(node)
            if link is not None and {link[0], link[1]} & tables and self.links.get(link[:2]) != link[2]:
                _drop(node)
        if not all([self._link(select, tables) for select in list(tree.find_all(exp.Select))]):
            return None
        return None if _stays_left(tree, tables, self.hops) else tree

    def _link(self, select: exp.Select, tables: set[str]) -> bool:
        """The link the library writes for a dictionary read for one event table, where it lacks it;
        False where the item it names is one the library links to another table only."""
        source = select.args.get("from_") or select.args.get("from")
        parent = select.parent.parent if isinstance(select.parent, exp.Subquery) else select.parent
        if source is None or not isinstance(source.this, exp.Table) or not isinstance(parent, exp.In):
            return True
        dictionary = source.this.name.lower()
        event = parent.this.table.lower() if isinstance(parent.this, exp.Column) else ""
        column = self.links.get((dictionary, event))
        if column is None or (dictionary not in tables and event not in tables):
            return True
        if any(_link_of(eq) == (dictionary, event, column) for eq in select.find_all(exp.EQ)):
            return True
        if any(
            event not in self.served.get((dictionary, item), {event}) for item in _items(select, dictionary)
        ):
            return False  # an item the library links to another table only
        link = exp.EQ(this=exp.column(column, dictionary), expression=exp.Literal.string(event))
        select.where(link, copy=False)
        return True


def library_paths(templates: list[Template]) -> Paths:
    """The hops and links the library's templates show (PATH_SUPPORT each at least). A hop is kept for
    a table whose items' dictionary the library links to it (a table of items read along a path: a
    count of admissions read through labevents has the form of a hop and is none), and not for a
    table the library also reads by the visit directly (one way per table)."""
    hops: Counter[tuple[str, Hop]] = Counter()
    direct: Counter[tuple[str, str]] = Counter()
    links: Counter[tuple[str, str, str]] = Counter()
    served: set[tuple[tuple[str, str], str]] = set()
    for template in templates:
        found = _facts(template.sql_template, template.dialect)
        hops.update(found[0])
        direct.update(found[1])
        links.update(found[2])
        served.update(found[3])
    linked = {(d, e): c for (d, e, c), n in links.items() if n >= PATH_SUPPORT}
    tables = {e for _, e in linked}  # an item's table: a count of admissions through labevents is no hop
    return Paths(
        {
            t: hop
            for (t, hop), n in hops.items()
            if n >= PATH_SUPPORT and t in tables and not direct[(t, hop[2])]
        },
        linked,
        {item: frozenset(e for i, e in served if i == item) for item, _ in served},
    )


@functools.lru_cache(maxsize=16384)
def _facts(sql: str, dialect: str) -> tuple[tuple, tuple, tuple, tuple]:
    """One template SQL's hops, direct visit reads, links and linked items, read once per process: a
    calibration reads the same templates in every fold's library, and parsed_sql's cache (4,096
    trees) does not hold a train library's 4,619 (re-parsing them cost ~2.5 s CPU a library)."""
    hops, direct, links, served = [], [], [], []
    try:
        tree = parsed_sql(sql, dialect)
    except (SqlglotError, ValueError, RecursionError):
        return (), (), (), ()
    for node in tree.find_all(exp.In):
        hop = _hop_of(node)
        if hop is not None:
            hops.append((hop[0], (hop[1], hop[2][0], hop[2][2])))
        elif isinstance(node.this, exp.Column) and not _in_hop(node):
            direct.append((node.this.table.lower(), node.this.name.lower()))
    for eq in tree.find_all(exp.EQ):
        link = _link_of(eq)
        if link is not None:
            links.append(link)
            served += [((link[0], item), link[1]) for item in _items(eq.find_ancestor(exp.Select), link[0])]
    return tuple(hops), tuple(direct), tuple(links), tuple(served)


def _hop_of(node: exp.In) -> tuple[str, str, tuple[str, str, str, exp.Expr]] | None:
    """(table, stay column, (stay table, stay table's stay column, its visit column, the visit
    subquery)) for `T.c IN (SELECT S.c FROM S WHERE S.v IN (…))` with nothing else in the stay's
    WHERE, or None."""
    column, query = node.this, node.args.get("query")
    select = query.this if isinstance(query, exp.Subquery) else query
    if (
        not isinstance(column, exp.Column)
        or not isinstance(select, exp.Select)
        or len(select.expressions) != 1
    ):
        return None
    source, where, out = select.args.get("from_"), select.args.get("where"), select.expressions[0]
    if (
        source is None
        or not isinstance(source.this, exp.Table)
        or where is None
        or not isinstance(out, exp.Column)
    ):
        return None
    if any(v for k, v in select.args.items() if k not in ("expressions", "from_", "from", "where")):
        return None  # an ORDER BY or LIMIT: the stay is chosen, not any stay of the visit
    via, inner = source.this.name.lower(), where.this
    if (
        not isinstance(inner, exp.In)
        or not isinstance(inner.this, exp.Column)
        or out.name.lower() != column.name.lower()
    ):
        return None
    if inner.this.table.lower() != via or out.table.lower() != via or via == column.table.lower():
        return None
    return (
        column.table.lower(),
        column.name.lower(),
        (via, out.name.lower(), inner.this.name.lower(), inner.args["query"]),
    )


def _unhop(node: exp.In, hop: tuple[str, str, tuple[str, str, str, exp.Expr]]) -> None:
    """`T.stay IN (SELECT S.stay FROM S WHERE S.visit IN (…))` read as `T.visit IN (…)`."""
    table, _, (_, _, visit, inner) = hop
    node.replace(exp.In(this=exp.column(visit, table), query=inner))


def _in_hop(node: exp.In) -> bool:
    """Whether this IN is the inner visit condition of a hop (`icustays.hadm_id IN (…)`)."""
    outer = node.find_ancestor(exp.In)
    return outer is not None and (hop := _hop_of(outer)) is not None and hop[2][3] is node.args.get("query")


def _link_of(node: exp.EQ) -> tuple[str, str, str] | None:
    """(dictionary, event table, column) for `D.c = 'table'` where the string is a table name the
    enclosing SELECT is read for (the column its IN compares), or None."""
    column, literal = node.this, node.expression
    if not isinstance(column, exp.Column) or not isinstance(literal, exp.Literal) or not literal.is_string:
        return None
    select = node.find_ancestor(exp.Select)
    parent = select.parent.parent if select is not None and isinstance(select.parent, exp.Subquery) else None
    if not isinstance(parent, exp.In) or not isinstance(parent.this, exp.Column):
        return None
    if parent.this.table.lower() != literal.this.lower() or column.table.lower() == literal.this.lower():
        return None
    return column.table.lower(), literal.this.lower(), column.name.lower()


def _items(select: exp.Select | None, dictionary: str) -> list[str]:
    """The items a dictionary's SELECT names (`d_items.label = 'foley'`), lowercased."""
    where = select.args.get("where") if select is not None else None
    if where is None:
        return []
    return [
        eq.expression.this.lower()
        for eq in where.find_all(exp.EQ)
        if isinstance(eq.this, exp.Column) and eq.this.table.lower() == dictionary
        and isinstance(eq.expression, exp.Literal) and eq.expression.is_string and _link_of(eq) is None
    ]  # fmt: skip


def _drop(node: exp.Expr) -> None:
    """Take one conjunct out of its AND (or the whole WHERE where it is alone)."""
    parent = node.parent
    if isinstance(parent, exp.And):
        other = parent.expression if parent.this is node else parent.this
        parent.replace(other)
    elif isinstance(parent, exp.Where):
        parent.pop()


def _stays_left(tree: exp.Expr, tables: set[str], hops: dict[str, Hop]) -> bool:
    """Whether a table of the new side the library reads by the visit still reads a stay column."""
    stays = {hop[0] for hop in hops.values()}
    return any(
        c.table.lower() in tables and c.table.lower() not in hops and c.name.lower() in stays
        for c in tree.find_all(exp.Column)
    )
