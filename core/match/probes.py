"""Queries the matcher asks the source before it answers: do the bound values occur together, does the
order of two values matter."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import sqlglot
from sqlglot import exp

from core.match.binding import Bound
from core.match.spans import VALUE
from core.match.template import BindError, Template, bind_sql, read_back

MAX_UNORDERED = 3  # values of one type whose every order is tried (3! = 6 queries at most)


def order_is_free(
    template: Template, work: Bound, names: tuple[str, ...], probe: Callable[[str], bool]
) -> bool:
    """Whether every other order of these slots' values gives the same result on the source.

    "X and Y at the same time": the question does not say which drug is the template's first, and it
    need not, when both orders answer alike. Tried on the database (a probe that returns a row only
    when the results are equal), so an asymmetric SQL ("X within 2 months after Y") is refused, and a
    probe that fails refuses too.
    """
    if len(names) > MAX_UNORDERED:
        return False
    bound = [work.bindings[n].value for n in names]
    values = {n: b.value for n, b in work.bindings.items()}
    for perm in itertools.permutations(bound):
        if list(perm) == bound:
            continue
        try:
            other = bind_sql(template, values | dict(zip(names, perm, strict=True)))
        except BindError:
            return False
        if not probe(same_result_probe(bind_sql(template, values), other, template.dialect)):
            return False
    return True


def same_result_probe(a: str, b: str, dialect: str) -> str:
    """A query that returns a row only when queries `a` and `b` return the same rows (as sets, and
    as many of them)."""
    x, y = (sqlglot.parse_one(q, read=dialect) for q in (a, b))

    # Every tree below is this function's own (parsed here, each use of `x` and `y` a copy), so no
    # builder copies it again: sqlglot's builders deep-copy what they take by default, and five
    # nested copies of two whole queries made a probe cost a tenth of a second.
    def rows(q: exp.Expr, alias: str) -> exp.Select:
        return exp.select("*").from_(q.copy().subquery(alias, copy=False), copy=False)

    def none_but(p: exp.Expr, q: exp.Expr) -> exp.Expr:
        return exp.not_(exp.Exists(this=exp.except_(rows(p, "a"), rows(q, "b"), copy=False)), copy=False)

    def count(q: exp.Expr, alias: str) -> exp.Expr:
        counted = exp.select(exp.Count(this=exp.Star()))
        return counted.from_(q.copy().subquery(alias, copy=False), copy=False).subquery(copy=False)

    same = exp.and_(
        none_but(x, y), none_but(y, x), exp.EQ(this=count(x, "a"), expression=count(y, "b")), copy=False
    )
    return exp.select(exp.Literal.number(1)).where(same, copy=False).sql(dialect=dialect, copy=False)


def value_probes(template: Template, sql: str) -> list[str]:
    """Queries that must return a row for the bound named values to make sense.

    A value is linked to its column alone, but the SQL may also filter its table with fixed
    categorical conditions: 'foley' is a d_items label, yet not one with linksto = 'inputevents'.
    For each named-value literal, its own condition and the fixed conditions on the same table in
    the same WHERE (no subqueries) become `SELECT 1 FROM table WHERE … LIMIT 1`; none when the value
    is the only condition. Conditions that hold other slots' values (a patient, a second drug) or
    compute anything (a time window, "last year") are left out: that the patient got no such drug
    last year is an answer ("no", 0), not a sign that the value was misread.
    """
    tree = read_back(sql, template.dialect)[0]  # binding read it back: only read here, never changed
    literals = list(tree.find_all(exp.Literal))
    slot_literals = {id(literals[u.index]) for s in template.slots for u in s.uses if u.index < len(literals)}
    out: list[str] = []
    for slot in (s for s in template.slots if s.type == VALUE):
        for use in slot.uses:
            if use.index < len(literals):
                probe = _value_probe(literals[use.index], slot_literals, template.dialect)
                if probe is not None:
                    out.append(probe)
    return list(dict.fromkeys(out))


def _value_probe(literal: exp.Literal, slot_literals: set[int], dialect: str) -> str | None:
    """The probe of one named-value literal, or None when its SELECT has no other fixed condition."""
    select = literal.find_ancestor(exp.Select)
    source = select.args.get("from_") or select.args.get("from") if select is not None else None
    where = select.args.get("where") if select is not None else None
    if source is None or where is None or select.args.get("joins") or not isinstance(source.this, exp.Table):
        return None
    table = source.this
    names = {table.name.lower(), table.alias_or_name.lower(), ""}
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    own = {id(c) for c in conjuncts if any(x is literal for x in c.find_all(exp.Literal))}
    kept = [c for c in conjuncts if id(c) in own or _fixed_condition(c, slot_literals)]
    kept = [
        c
        for c in kept
        if not c.find(exp.Select)
        and all(col.table.lower() in names for col in c.find_all(exp.Column))
        and any(True for _ in c.find_all(exp.Column))
    ]
    if len(kept) < 2 or not any(id(c) in own for c in kept):
        return None
    # Built of copies (the bound tree is shared): no builder below copies them again.
    probe = exp.select(exp.Literal.number(1)).from_(table.copy(), copy=False)
    probe = probe.where(exp.and_(*[c.copy() for c in kept], copy=False), copy=False)
    return probe.limit(1, copy=False).sql(dialect=dialect, copy=False)


def _fixed_condition(condition: exp.Expr, slot_literals: set[int]) -> bool:
    """A categorical condition that holds no slot's value (`linksto = 'inputevents'`)."""
    return all(isinstance(n, _CATEGORICAL) for n in condition.walk()) and not any(
        id(x) in slot_literals for x in condition.find_all(exp.Literal)
    )


# What a fixed categorical condition is made of (`linksto = 'inputevents'`, `x IN ('a', 'b')`): no
# functions, no ranges, no clock.
_CATEGORICAL = (
    exp.Column, exp.Identifier, exp.Literal, exp.EQ, exp.NEQ, exp.In, exp.Like, exp.ILike, exp.Not,
    exp.Paren, exp.Is, exp.Null, exp.Boolean, exp.Tuple, exp.Or, exp.Lower, exp.Upper,
)  # fmt: skip
