"""The conditions a verified template's WHERE carries, with the words its question says them with.

Why: composition (compose.py) adds another verified question's condition to a template, leaves one
of the template's own out, or replaces one (replace.py); all of them read a condition the same way:
a WHERE conjunct of the outer SELECT over one table with one slot of a condition type (a gender, a
number compared, a named value, a year), and the words of its question around that slot ("older
than 65", "for elective"). Read once per template and once per library (cached on the index), since
every held-out question that composes asks for them again.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import LibraryIndex
from core.match.outer import conjuncts, outer_tables
from core.match.reading import Reading
from core.match.replace import REPLACEABLE_TYPES, words
from core.match.spans import DECADE, GENDER, NUMBER, VALUE, YEAR
from core.match.template import Template, dialect_named, parsed_sql
from core.match.words import tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

# Slot types a condition may carry: a condition with an id ("of patient 10004235") is another question.
CONDITION_TYPES = (GENDER, NUMBER, VALUE, YEAR, DECADE)
_READ_TYPES = frozenset(CONDITION_TYPES + REPLACEABLE_TYPES)  # …and those a replacement reads (replace.py)
# Conditions that may be left out: without its named value ("potassium") a template reads every item
# of its table, which is never what the shorter question means; a gender, a threshold or a year is.
DROPPABLE_TYPES = (GENDER, NUMBER, YEAR, DECADE)
# Words a condition's phrase extends over, left and right of its slot ("older than 65", "aged 80 or
# older", "in the Coronary Care Unit", "for elective"): comparison words and prepositions, never a
# word that says what is asked ("how many", "average"), so a phrase adds a condition and nothing else.
PHRASE_LEFT = frozenset(
    "older younger than over under above below at least most more less greater fewer aged age in "
    "during after before since from between equal to exceeding the with for who were was are is their".split()
)
PHRASE_OPENING = frozenset("the who were was are is".split())  # never a phrase's first word
PHRASE_RIGHT = frozenset("or older younger more less above below over under years year old".split())
PHRASE_REACH = 3  # words a phrase reaches on either side of its slot


@dataclass(frozen=True)
class Condition:
    """One WHERE conjunct of a verified template, with the words its question says it with."""

    example_id: int | None
    table: str  # the bare table name it reads ("patients")
    conjunct: exp.Expr = dataclasses.field(compare=False, repr=False)  # columns unqualified
    slot_type: str = ""
    phrase: str = ""  # the question's words for it: "older than 65"
    start: int = 0  # the phrase's place in its question
    end: int = 0
    ident: str = ""  # the conjunct with its slot literal masked: one condition, however many examples
    sql: str = ""  # the conjunct as SQL (columns unqualified): what a composition's cache keys on
    columns: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False)  # it reads
    # The phrase's words before and after its slot ("since", ""): what a question says it with.
    left: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    right: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)


def said_types(reading: Reading) -> dict[str, int]:
    counts: dict[str, int] = {}
    for span in reading.typed:
        counts[span.type] = counts.get(span.type, 0) + 1
    if reading.values is not None:
        counts[VALUE] = counts.get(VALUE, 0) + len(reading.values.spans(reading.question))
    return counts


def slot_types(template: Template) -> dict[str, int]:
    counts: dict[str, int] = {}
    for slot in template.slots:
        counts[slot.type] = counts.get(slot.type, 0) + 1
    return counts


@functools.lru_cache(maxsize=16384)
def columns_read(sql: str, dialect: str) -> frozenset[str]:
    """Every column name a template's SQL reads, anywhere in it: once per SQL (every held-out
    question that composes asks it of its best voted templates)."""
    return frozenset(_columns_of(parsed_sql(sql, dialect)))


def _columns_of(node: exp.Expr) -> set[str]:
    return {c.name.lower() for c in node.find_all(exp.Column)}


def nearest_conditions(index: LibraryIndex, kind: str, vote: Vote) -> list[tuple[int, Condition]]:
    """The library's conditions of one slot type (with the entry each comes from), one per kind of
    conjunct, the one whose question is nearest to this question first (its wording is likeliest
    to be this question's)."""
    memo = vote.__dict__.setdefault("_conditions", {})  # one question: each kind picked once
    if kind not in memo:
        entries, conds = library_conditions(index).get(kind, ((), ()))
        picked: dict[str, tuple[int, Condition]] = {}
        if conds:
            order = np.argsort(-vote.sims[np.asarray(entries)], kind="stable")
            for k in order:  # nearest first: the first of each kind of conjunct is its nearest
                picked.setdefault(conds[k].ident, (entries[k], conds[k]))
        memo[kind] = list(picked.values())
    return memo[kind]


def library_conditions(index: LibraryIndex) -> dict[str, tuple[tuple[int, ...], tuple[Condition, ...]]]:
    """Every condition of the library by slot type, with its entry: read once per library (a
    question must not read 5,000 templates' conditions again)."""
    cached = getattr(index, "_compose_conditions", None)
    if cached is not None:
        return cached
    by_kind: dict[str, tuple[list[int], list[Condition]]] = {}
    for i, entry in enumerate(index.entries):
        for cond in conditions_of(entry.example_id, entry.template) if entry.template else ():
            entries, conds = by_kind.setdefault(cond.slot_type, ([], []))
            entries.append(i)
            conds.append(cond)
    out = {kind: (tuple(e), tuple(c)) for kind, (e, c) in by_kind.items()}
    index._compose_conditions = out  # type: ignore[attr-defined]
    return out


# --- conditions of a template ---------------------------------------------------------------------

_CONDITIONS: dict[tuple[int | None, str, str], tuple[Condition, ...]] = {}


def conditions_of(example_id: int | None, template: Template) -> tuple[Condition, ...]:
    """The WHERE conjuncts of the template's outer SELECT that read one table and fill one slot of a
    condition type with all its literals; each with the words of its question around the slot."""
    cache_key = (example_id, template.question, template.sql_template)
    if cache_key not in _CONDITIONS:
        if len(_CONDITIONS) > 50_000:
            _CONDITIONS.clear()
        try:
            _CONDITIONS[cache_key] = tuple(_conditions_of(example_id, template))
        except (SqlglotError, ValueError, RecursionError):
            _CONDITIONS[cache_key] = ()
    return _CONDITIONS[cache_key]


def _conditions_of(example_id: int | None, template: Template) -> list[Condition]:
    if not template.usable or not any(slot.type in _READ_TYPES for slot in template.slots):
        return []  # no slot a condition could carry: no need to read the SQL
    tree = parsed_sql(template.sql_template, template.dialect)
    if not isinstance(tree, exp.Select) or tree.args.get("where") is None:
        return []
    literals = {id(lit): i for i, lit in enumerate(tree.find_all(exp.Literal))}
    slot_at = {use.index: slot for slot in template.slots for use in slot.uses}
    tables = outer_tables(template)
    out = []
    for conjunct in conjuncts(tree.args["where"].this):
        if conjunct.find(exp.Select) is not None:
            continue
        aliases = {c.table or _only(tables) for c in conjunct.find_all(exp.Column)}
        if len(aliases) != 1 or next(iter(aliases)) not in tables:
            continue
        inside = {literals[id(lit)] for lit in conjunct.find_all(exp.Literal)}
        slots = {slot_at[i].name: slot_at[i] for i in inside if i in slot_at}
        if len(slots) != 1:
            continue
        slot = next(iter(slots.values()))
        if slot.type not in _READ_TYPES or not {u.index for u in slot.uses} <= inside:
            continue
        start, end = _phrase(template.question, slot.start, slot.end)
        plain = conjunct.copy()
        for column in plain.find_all(exp.Column):
            column.set("table", None)
        masked = plain.copy()
        for lit in masked.find_all(exp.Literal):
            lit.replace(exp.var(slot.type))
        out.append(Condition(
            example_id, tables[next(iter(aliases))], plain, slot.type, template.question[start:end], start, end,
            f"{tables[next(iter(aliases))]}:{masked.sql(dialect=dialect_named(template.dialect), copy=False)}",
            plain.sql(dialect=dialect_named(template.dialect)), frozenset(_columns_of(plain)),
            words(template.question[start:slot.start]), words(template.question[slot.end:end]),
        ))  # fmt: skip
    return out


def _only(tables: dict[str, str]) -> str:
    """The one table's alias of a one-table SELECT (its columns need no qualifier), else ""."""
    return next(iter(tables)) if len(tables) == 1 else ""


def _phrase(question: str, start: int, end: int) -> tuple[int, int]:
    """The slot's span widened over comparison words and prepositions (PHRASE_LEFT / PHRASE_RIGHT)."""
    tokens = tokenize(question)
    before = [t for t in tokens if t.end <= start][::-1]
    after = [t for t in tokens if t.start >= end]
    reached = []
    for token in before[:PHRASE_REACH]:
        if token.lower not in PHRASE_LEFT:
            break
        reached.append(token)
    while reached and reached[-1].lower in PHRASE_OPENING:  # "are older than 65" is "older than 65"
        reached.pop()
    start = reached[-1].start if reached else start
    for token in after[:PHRASE_REACH]:
        if token.lower not in PHRASE_RIGHT:
            break
        end = token.end
    return start, end
