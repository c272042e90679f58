"""The order swap: a verified template that picks the first (or last) of something with that direction
flipped, on the SQL tree, where the question asks for the other end: "… during the last hospital
visit" beside a verified "… in the first hospital visit", "the diagnosis patient N received first"
beside "… received last".

Why: the train cross-validation's largest shape of question with no template in the library is a
verified template with one ORDER BY direction flipped (about 270 of 1,631): the library has the first
visit's maximum, the question asks for the last visit's. Which ORDER BY a word governs comes from the
library, never from a list of columns: two of its templates that are the same SQL but for the
direction of the ORDER BYs on one column, whose questions differ in exactly one first/last operator
(operators.py: which visit, or the order of the thing asked), show that the column is ordered by that
operator and which direction says "first". The swap then flips every ORDER BY of the base template on
a column the library maps to the operator the question flips, and only if each of them is ordered the
way the base question's word says; the base question gets the question's word in place of its own.
The composition goes through the same rules, binding, validation and risk as any other (compose.py,
feature `composed`), so the guard still judges every word.

Hard rules (for a pre-check before the composition is built): planned only when the question and
the base question differ in exactly one of the operators `visit` and `order`, each saying one of
first / last; every composed paraphrase must say the old word exactly once for that operator (else
no composition; a visit may be named more than once, each named alike), and its SQL must have at
least one ORDER BY on a mapped column, each ordered the way the old word says.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import UNANSWERABLE, Entry, LibraryIndex
from core.match.operators import _OPERATOR_PATTERNS, _VISIT, _VISIT_NAMES, question_operators
from core.match.template import Template, parsed_sql, written

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

OPERATORS = ("visit", "order")  # the first/last operators an ORDER BY direction can say
ENDS = ("first", "last")
MAPPING_SHARE = 0.8  # share of the library's pairs that must agree on a column's operator and direction
_ORDER_WORDS = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in _OPERATOR_PATTERNS["order"]}


@dataclass(frozen=True)
class OrderSwap:
    """Flip every ORDER BY on `columns` (said by operator `operator`) from `old` to `new`."""

    operator: str  # "visit" or "order"
    old: str  # "first" or "last": the base question's
    new: str
    new_word: str  # the question's own word for it ("latest")
    columns: frozenset[tuple[str, bool]]  # ("table.column", descending for `old`) the operator orders

    @property
    def phrase(self) -> str:
        return f"{self.new_word} instead of {self.old}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with the direction and its word flipped, or None where
        this paraphrase does not say the old end (once, but for a visit) or orders no mapped column."""
        spans = said_spans(template.question, self.operator, self.old)
        if not spans or (len(spans) > 1 and self.operator != "visit"):  # a visit may be named twice
            return None
        question = template.question
        for start, end in reversed(spans):
            question = question[:start] + self.new_word + question[end:]
        try:
            tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
        except (SqlglotError, ValueError):
            return None
        old_desc = dict(self.columns)
        flipped = [(o, old_desc[c]) for o, c in _ordered(tree) if c in old_desc]
        if not flipped or any(bool(o.args.get("desc")) != desc for o, desc in flipped):
            return None  # an ORDER BY the word does not say: another template, not this swap
        for node, _ in flipped:  # its tie-breakers flip with it ("starttime DESC, pharmacy_id DESC")
            for term in _with_ties(node):  # and the NULLS order: each direction keeps its default
                term.set("desc", not term.args.get("desc"))
                term.set("nulls_first", not term.args.get("nulls_first"))
        return question, written(tree, template.dialect)  # our copy, kept as its SQL's parse


def said_spans(question: str, operator: str, end: str) -> list[tuple[int, int]]:
    """Where the question says `end` ("first"/"last") for `operator`: the word of a visit phrase
    ("the first hospital visit") or an order word outside one ("received first")."""
    visits = [m for m in _VISIT.finditer(question.lower())]
    if operator == "visit":
        return [m.span(1) for m in visits if _VISIT_NAMES.get(m.group(1), m.group(1)) == end]
    inside = [(m.start(), m.end()) for m in visits]
    return [
        m.span()
        for m in _ORDER_WORDS[end].finditer(question)
        if not any(a <= m.start() < b for a, b in inside)
    ]


def _with_ties(node: exp.Ordered) -> list[exp.Ordered]:
    """An ORDER BY's first term and the terms after it (its tie-breakers)."""
    parent = node.parent
    return list(parent.expressions) if isinstance(parent, exp.Order) else [node]


def _ordered(tree: exp.Expr) -> list[tuple[exp.Ordered, str]]:
    """Every ORDER BY's first term on a plain column, with its "table.column" (an alias resolved):
    the terms after it break its ties and follow its direction."""
    out = []
    for node in tree.find_all(exp.Ordered):
        column = node.this
        if not isinstance(column, exp.Column) or _with_ties(node)[0] is not node:
            continue
        select = node.find_ancestor(exp.Select)
        tables = {}
        if select is not None:
            for part in [select.args.get("from_"), *(select.args.get("joins") or [])]:
                for table in part.find_all(exp.Table) if part is not None else ():
                    tables[table.alias_or_name.lower()] = table.name.lower()
        table = tables.get(column.table.lower(), column.table.lower()) if column.table else ""
        if not table and len(set(tables.values())) == 1:
            table = next(iter(tables.values()))
        out.append((node, f"{table}.{column.name.lower()}"))
    return out


def _directions(template: Template) -> tuple[str, tuple[tuple[str, bool], ...]]:
    """The template's SQL with its slot values and directions left out, and its ORDER BY terms
    (column, descending) in order."""
    slots = tuple(sorted(use.index for slot in template.slots for use in slot.uses))
    return _directions_of(template.sql_template, template.dialect, slots)


@functools.lru_cache(maxsize=16384)
def _directions_of(
    sql: str, dialect: str, slots: tuple[int, ...]
) -> tuple[str, tuple[tuple[str, bool], ...]]:
    """Once per SQL: a calibration builds a library per fold from the same templates."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return "", ()
    literals = list(tree.find_all(exp.Literal))
    for i in slots:
        literals[i].replace(exp.var("slot"))
    terms = _ordered(tree)
    out = tuple((column, bool(node.args.get("desc"))) for node, column in terms)
    for node, _ in terms:  # a tie-breaker's direction kept as the same as its first term's or not
        lead = bool(node.args.get("desc"))
        for term in _with_ties(node):
            term.set("desc", bool(term.args.get("desc")) != lead)
            term.set("nulls_first", False)
    return tree.sql(dialect=dialect, copy=False), out


@dataclass(frozen=True)
class LibraryOrders:
    """What the library shows: column -> (operator, whether "first" orders it descending), and the
    entries that say each operator's end over such a column (the source of a swap's wording)."""

    mapping: dict[str, tuple[str, bool]]
    sayers: dict[tuple[str, str], tuple[int, ...]]


def library_orders(index: LibraryIndex) -> LibraryOrders:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_orders", None)
    if cached is not None:
        return cached
    groups: dict[str, dict[tuple, tuple[str, list[dict]]]] = defaultdict(dict)
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        if template is None or not template.usable:
            continue
        shape, terms = _directions(template)
        if terms and terms not in groups[shape]:  # each paraphrase's operators: one may say no more
            groups[shape][terms] = (key, [_operators(index.entries[i]) for i in members])
    votes: dict[str, Counter] = defaultdict(Counter)
    sayers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for variants in groups.values():
        for terms_a, (key_a, ops_a) in variants.items():
            for terms_b, (key_b, ops_b) in variants.items():
                found = _pair(terms_a, terms_b, ops_a, ops_b)
                if found is not None:
                    column, operator, first_desc, (end_a, end_b) = found
                    votes[column][(operator, first_desc)] += 1
                    sayers[(operator, end_a)].append(key_a)
                    sayers[(operator, end_b)].append(key_b)
    _single_votes(
        groups, votes, sayers, _agreed(votes), lambda key: index.entries[index.members[key][0]].template
    )
    out = LibraryOrders(
        _agreed(votes),
        {
            k: tuple(i for key in dict.fromkeys(keys) for i in index.members[key])
            for k, keys in sayers.items()
        },
    )
    index._compose_orders = out  # type: ignore[attr-defined]
    return out


def _agreed(votes: dict[str, Counter]) -> dict[str, tuple[str, bool]]:
    """column -> (operator, whether "first" orders it descending) where MAPPING_SHARE of its votes agree."""
    mapping = {}
    for column, by in votes.items():
        (operator, first_desc), n = by.most_common(1)[0]
        if n >= MAPPING_SHARE * sum(by.values()):
            mapping[column] = (operator, first_desc)
    return mapping


def _single_votes(
    groups: dict[str, dict[tuple, tuple[str, list[dict]]]],
    votes: dict[str, Counter],
    sayers: dict[tuple[str, str], list[str]],
    paired: dict[str, tuple[str, bool]],
    index_template: Callable[[str], Template | None],
) -> None:
    """One template's own evidence, added to the pairs' votes: every paraphrase that says an end says
    the same one, and exactly one ordered column is left for exactly one operator once the columns the
    pairs already map (and their operators) are set aside ("the first time patient N had a lactate
    test on the current visit": labevents.charttime ascending is "first").

    Why: a pair of templates alike but for one direction is rare in a small library (a tenth of train
    has one, admissions.admittime, where all of train has 12), and a first/last flip was the largest
    one-step miss of the 10 % library (about 140 of seed 0's misses). A template that says one end and
    orders one column by it shows that column's first direction as plainly as a pair does; one that
    says two ends, or orders two columns, shows nothing and is not read. Every vote still has to agree
    (MAPPING_SHARE) with the pairs and the other templates."""
    for variants in groups.values():
        for terms, (key, ops) in variants.items():
            ends = _ends(ops)
            template = index_template(key)
            if ends is None or template is None or not _picks_an_end(template.sql_template, template.dialect):
                continue
            left = {c for c, _ in terms if c not in paired}  # a pair's column keeps the pairs' reading
            spoken = {
                op: end
                for op, end in ends.items()
                if op not in {paired[c][0] for c, _ in terms if c in paired}
            }
            if len(spoken) != 1 or len(left) != 1 or len({d for c, d in terms if c in left}) != 1:
                continue
            (operator, end), column = next(iter(spoken.items())), next(iter(left))
            desc = next(d for c, d in terms if c == column)
            votes[column][(operator, desc if end == "first" else not desc)] += 1
            sayers[(operator, end)].append(key)


@functools.lru_cache(maxsize=16384)
def _picks_an_end(sql: str, dialect: str) -> bool:
    """Whether every ORDER BY of the SQL picks rows at one end (its SELECT has a LIMIT): an end word
    says which end is picked, and a list sorted for reading ("the average stay for each first care
    unit", sorted by the average) shows no end, whatever "first" it says. Once per SQL."""
    try:
        tree = parsed_sql(sql, dialect)
    except (SqlglotError, ValueError, RecursionError):
        return False
    orders = list(tree.find_all(exp.Order))
    return bool(orders) and all(
        isinstance(o.parent, exp.Select) and o.parent.args.get("limit") for o in orders
    )


def _ends(ops: list[dict]) -> dict[str, str] | None:
    """The one end ("first"/"last") each operator of OPERATORS says across a template's paraphrases, or
    None where a paraphrase says an end with another value ("first|last", "current|first"), or two
    paraphrases say different ones, or one says an extreme (its ORDER BY may be the extreme's, the end
    only its tie-breaker's). A visit that is no end ("the current visit") orders nothing."""
    out: dict[str, str] = {}
    for paraphrase in ops:
        if paraphrase.get("extreme"):  # "the first time it was highest": the ORDER BY says "highest"
            return None
        for operator in OPERATORS:
            value = paraphrase.get(operator) or ""
            if value in ENDS:
                if out.setdefault(operator, value) != value:
                    return None
            elif any(end in value.split("|") for end in ENDS):
                return None
    return out


def _pair(terms_a: tuple, terms_b: tuple, ops_a: list[dict], ops_b: list[dict]) -> tuple | None:
    """Two templates alike but for directions (each pair once): if the directions differ on one column
    and a paraphrase of each differs from the other in one first/last operator and nothing else, that
    column, the operator, whether "first" orders it descending, and each template's end; else None."""
    if terms_a >= terms_b or len(terms_a) != len(terms_b):
        return None
    flipped = {a[0] for a, b in zip(terms_a, terms_b, strict=True) if a[1] != b[1]}
    if len(flipped) != 1 or any(a[0] != b[0] for a, b in zip(terms_a, terms_b, strict=True)):
        return None
    column = next(iter(flipped))
    for a in ops_a:
        for b in ops_b:
            differ = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
            if (
                len(differ) == 1
                and differ[0] in OPERATORS
                and {a.get(differ[0]), b.get(differ[0])} == set(ENDS)
            ):
                operator = differ[0]
                desc_a = next(d for c, d in terms_a if c == column)
                return (
                    column,
                    operator,
                    desc_a if a[operator] == "first" else not desc_a,
                    (a[operator], b[operator]),
                )
    return None


@functools.lru_cache(maxsize=4096)
def _question_operators(question: str) -> dict:
    """Once per question: it is asked of every base template a composition is tried on (callers never
    change the dict)."""
    return question_operators(question)


def _operators(entry: Entry) -> dict:
    """An entry's operator words, as its template read them when it was built."""
    return entry.template.operators if entry.template is not None else {}


def order_plans(question: str, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, OrderSwap]]:
    """The order swap the question asks of the base entry's template, with the entry whose question
    says the new end over such a column (the nearest), or []."""
    entry = index.entries[base]
    if entry.template is None or not entry.template.usable:
        return []
    ops, base_ops = _question_operators(question), entry.template.operators
    differ = [op for op in OPERATORS if ops.get(op) != base_ops.get(op)]
    if len(differ) != 1 or {ops.get(differ[0]), base_ops.get(differ[0])} != set(ENDS):
        return []
    operator, old, new = differ[0], base_ops[differ[0]], ops[differ[0]]
    orders = library_orders(index)
    _, terms = _directions(entry.template)
    mine = [(c, d) for c, d in terms if orders.mapping.get(c, ("", False))[0] == operator]
    # the direction the base question's word says: "first" is the library's first direction
    if not mine or any(
        d != (orders.mapping[c][1] if old == "first" else not orders.mapping[c][1]) for c, d in mine
    ):
        return []  # no ORDER BY the operator governs, or one its word does not say
    words = said_spans(question, operator, new)
    sources = orders.sayers.get((operator, new), ())
    if not words or (len(words) > 1 and operator != "visit") or not sources:
        return []
    start, stop = words[0]
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    return [(source, OrderSwap(operator, old, new, question[start:stop], frozenset(mine)))]
