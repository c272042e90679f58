"""The condition replacement: a verified template's condition said another way takes its place, on the
SQL tree, the new condition and its wording read from another verified template.

Why: across EHRSQL's train templates, the commonest difference between a template and its nearest
other is one WHERE condition said another way: a time ("in 03/2100" where the template says "since
03/2100", "in 2100" for "since 10/2100"), a threshold compared the other way ("less than 108.0" for
"greater than 74.0"). Adding a condition (compose.py) cannot build those: the old condition must go.
The replacement takes the base template's condition the question does not say and a condition of
the library the question does say (its own words right around a value of its type: "since" before
a month), both over one column of the same role (the same column, or a time column for a time
column: a drug's starttime for a lab's charttime), and writes the new conjunct on the old one's column
and the new phrase in the old one's place. The composed example then goes through the same rules,
binding, validation and risk as any composition (compose.py), shown as "X instead of Y".

Never where a subquery reads the condition's table (outer.read_below): the subquery may choose a row
under the old condition too, and replacing the outer copy alone would ask two things at once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from core.match.index import LibraryIndex
from core.match.outer import conjuncts, read_below
from core.match.reading import Reading
from core.match.spans import CALENDAR_TYPES, DATE, DECADE, NUMBER, PERIOD_TYPES, YEAR
from core.match.template import TIME_COLUMN, Template, parsed_sql, written
from core.match.words import tokenize

if TYPE_CHECKING:  # conditions.py reads conditions and calls this module
    from core.match.conditions import Condition
    from core.match.library import Vote

# Conditions that may take another's place on the same column: times, thresholds and age decades
# ("aged 60 or above" for "in their 40s", both on the age).
REPLACEABLE_TYPES = (NUMBER, YEAR, DATE, DECADE, *CALENDAR_TYPES, *PERIOD_TYPES.values())


def words(text: str) -> tuple[str, ...]:
    """The text's tokens, lowercased: a condition's words around its slot, and a question's."""
    return tuple(t.lower for t in tokenize(text))


def replacement_plans(
    reading: Reading,
    index: LibraryIndex,
    key: str,
    vote: Vote,
    *,
    own: Callable[[int | None, Template], Sequence[Condition]],
    library: Callable[[str], Iterable[tuple[int, Condition]]],
) -> list[tuple[int, int, Condition, Condition]]:
    """(base entry, source entry, new condition, old condition) for each of the base template's
    conditions the question says another way, nearest source first. `own` reads a template's
    conditions, `library` the library's of one slot type (nearest to the question first)."""
    base = max(index.members[key], key=lambda i: vote.sims[i])
    entry = index.entries[base]
    assert entry.template is not None
    olds = [c for c in own(entry.example_id, entry.template) if c.slot_type in REPLACEABLE_TYPES]
    out = []
    for old in (c for c in olds if len(c.columns) == 1 and not says(reading, c)):
        # One plan per role: "in 2100" over admissions and over labevents make the same SQL once
        # moved to the old condition's column (the nearest source words it), and a question has a
        # few compositions tried at most (compose.COMPOSED_TRIED): copies would crowd out the rest.
        roles = {role(old)}
        for kind in REPLACEABLE_TYPES:
            if not any(span.type == kind for span in reading.typed):
                continue
            for source, new in library(kind):
                if role(new) not in roles and same_role(old, new) and says(reading, new):
                    roles.add(role(new))
                    out.append((base, source, new, old))
    return out


def says(reading: Reading, cond: Condition) -> bool:
    """Whether the question says the condition's words right around a value of its slot's type
    ("since" before a month): a condition whose phrase is its value alone is said by no question."""
    if not cond.left and not cond.right:
        return False
    for span in reading.typed:
        if span.type != cond.slot_type:
            continue
        before = words(reading.question[: span.start])
        after = words(reading.question[span.end :])
        if before[len(before) - len(cond.left) :] == cond.left and after[: len(cond.right)] == cond.right:
            return True
    return False


def same_role(old: Condition, new: Condition) -> bool:
    """One column each, the same one or both times (a lab's charttime for a drug's starttime)."""
    if len(old.columns) != 1 or len(new.columns) != 1:
        return False
    a, b = next(iter(old.columns)), next(iter(new.columns))
    return a == b or bool(TIME_COLUMN.search(a) and TIME_COLUMN.search(b))


def role(cond: Condition) -> str:
    """The condition with its table and column masked: two conditions that say the same thing of
    different tables ("since" a month on labevents or on prescriptions) have the same role."""
    return _role_of(cond.ident, next(iter(cond.columns), ""))


@functools.lru_cache(maxsize=16384)
def _role_of(ident: str, column: str) -> str:
    return re.sub(rf"\b{re.escape(column)}\b", "_c", ident.partition(":")[2])


def replaced(template: Template, mine: Condition, new: Condition) -> tuple[str, str] | None:
    """The template's question and SQL with its condition `mine` (its own wording of it) replaced by
    `new`: the phrase in the question, the conjunct in the SQL, the new conjunct on mine's column."""
    tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
    if not isinstance(tree, exp.Select) or tree.args.get("where") is None or read_below(tree, mine.table):
        return None
    plain = _plain_conjuncts(template.sql_template, template.dialect)
    found = conjuncts(tree.args["where"].this)
    target = next((c for c, text in zip(found, plain, strict=True) if text == mine.sql), None)
    column = target.find(exp.Column) if target is not None else None
    if target is None or column is None:
        return None
    conjunct = new.conjunct.copy()
    for col in conjunct.find_all(exp.Column):
        col.set("this", exp.to_identifier(column.name))
        col.set("table", exp.to_identifier(column.table) if column.table else None)
    target.replace(conjunct)
    question = template.question[: mine.start] + new.phrase + template.question[mine.end :]
    return question, written(tree, template.dialect)  # our copy, kept as its SQL's parse


@functools.lru_cache(maxsize=16384)
def _plain_conjuncts(sql: str, dialect: str) -> tuple[str, ...]:
    """The outer WHERE's conjuncts of a template's SQL as _plain writes them, in order: once per SQL
    (every question a replacement is tried for reads its base's again, fold after fold)."""
    tree = parsed_sql(sql, dialect)  # read only: _plain copies each conjunct it changes
    if not isinstance(tree, exp.Select) or tree.args.get("where") is None:
        return ()
    return tuple(_plain(c, dialect) for c in conjuncts(tree.args["where"].this))


def _plain(conjunct: exp.Expr, dialect: str) -> str:
    """A conjunct as Condition.sql writes it: columns unqualified."""
    plain = conjunct.copy()
    for column in plain.find_all(exp.Column):
        column.set("table", None)
    return plain.sql(dialect=dialect, copy=False)  # our copy
