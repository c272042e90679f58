"""The visit swap: a verified template asked of another hospital visit, its visit subquery renamed on
the SQL tree: "the maximum ast value in their current hospital visit" beside a verified "… in the
first hospital visit", "how often did patient N go to the ICU on the first hospital encounter" beside
a verified "how often did patient N go to the ICU" (every visit), and back.

Why: after the time and table swaps, the train cross-validation's largest learnable group of
questions whose template the library lacks is a verified question with its visit said another way
(~130 of 538 such misses: the question's visit subquery differs from one library template's that is
otherwise the same SQL). direction.py flips first and last where an ORDER BY says it; the current
visit (`dischtime IS NULL`) and every visit (the patient's visits, no order) are other subqueries.

Which subquery a visit is written as comes from the library, never from a list: two templates that
are the same SQL but for one IN-subquery (every copy of it alike; slots masked), whose paraphrases
differ in the `visit` operator alone (operators.py: first / last / current, or none said), show that
renaming and which visit each side is said with. A renaming is used only where the library shows it
in two shapes at least (so a template whose own sibling the library lacks is reached), and only for
the visit noun the library says with the new side ("icu stay" or a hospital visit: an ICU stay is no
hospital visit).

Hard rules (refused before anything is built): no negation; the question names one visit (never
two) and differs from the base in nothing else the operators read; the base's every paraphrase used
says its visit the way the renaming's old side is said (its visit word replaced by the question's, or,
from every visit, the question's visit phrase added; to every visit, its visit phrase left out).

A period goes with every visit: "the daily average weight on their last hospital visit" beside a
verified "… since 03/2100" (every visit) is the renaming with the base's period left out first
(untimed.py's drop: a form the library shows left out, its phrase cut from the wording). Only from every
visit to one, for a question that says no time word or value at all; never a period left out of a base
that names a visit, nor another period written in (retimed.py replaces one; adding one is not read).
The composition then goes through the same rules, binding, validation and risk as any other (compose.py,
feature `composed`): the guard still judges every word.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.build import build_template
from core.match.index import UNANSWERABLE, LibraryIndex
from core.match.operators import _VISIT, _VISIT_NAMES, VISIT_NOUNS
from core.match.reading import Reading
from core.match.retimed import TIME_KEYS
from core.match.template import Template, dialect_named, parsed_sql, written
from core.match.untimed import TimeDrop, says_time, time_drop

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

MIN_SHAPES = 2  # distinct SQL shapes that must show a renaming before it is used
NONE = ""  # the visit of a question that names none (every visit)
_SLOT = "slot"
_HOLE = "VISIT_HOLE"
# A visit phrase with the words that attach it ("during their first hospital visit"): what is added
# to, or left out of, a paraphrase that says no visit.
_ATTACHED = re.compile(
    r"(?:,\s*)?\b(?:(?:on|in|during|at|for|within|throughout|from)\s+)?(?:(?:the|their|his|her|its)\s+)?$"
)


# A visit or stay said in any words: a question that says one is never read as every visit.
_VISIT_WORD = re.compile(rf"\b(?:{'|'.join(VISIT_NOUNS)}|admission|admitted)s?\b", re.IGNORECASE)


@dataclass(frozen=True)
class VisitSwap:
    """Rename every copy of the visit subquery `old_form` to `new_form` (slots masked as `slot`), and
    the base paraphrase's visit wording from `old` to the question's `new` ("" is every visit)."""

    old: str
    new: str
    old_form: str
    new_form: str
    new_words: str  # the question's own wording: its visit word, or its whole visit phrase (old is "")
    dialect: str
    # The base's period left out first (every visit renamed to one: "… on their last hospital visit"
    # from the verified "… since 03/2100"), where the question says no time; None: no period left out.
    drop: TimeDrop | None = None

    @property
    def phrase(self) -> str:
        old = self.old or (self.drop.old_text if self.drop is not None else "every visit")
        return f"{self.new_words or 'every visit'} instead of {old}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with the visit renamed, or None where the paraphrase
        does not say its visit as the old side is said or holds no copy of the old subquery."""
        if self.drop is not None:  # the period left out first, its result read again as a template
            made = self.drop.apply(template)
            template = _rebuilt(*made, template.dialect) if made is not None else None  # type: ignore[assignment]
            if template is None or not template.usable:
                return None
        question = _reworded(template.question, self.old, self.new, self.new_words)
        if question is None:
            return None
        try:
            tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
        except (SqlglotError, ValueError):
            return None
        slots = _slot_indices(template)
        literals = list(tree.find_all(exp.Literal))
        marked = {id(literals[i]) for i in slots if i < len(literals)}
        dialect = dialect_named(template.dialect)
        swapped = 0
        for select in list(_in_selects(tree)):
            values = [lit for lit in select.find_all(exp.Literal) if id(lit) in marked]
            if _masked(select, marked, dialect) != self.old_form:
                continue
            new = parsed_sql(self.new_form, self.dialect).copy()
            holes = [c for c in new.find_all(exp.Column) if c.name == _SLOT and not c.table]
            if len(holes) != len(values):
                return None
            for hole, value in zip(holes, values, strict=True):
                hole.replace(value.copy())
            select.replace(new)
            swapped += 1
        return (question, written(tree, template.dialect)) if swapped else None  # kept as its parse


@functools.lru_cache(maxsize=4096)
def _rebuilt(question: str, sql: str, dialect: str) -> Template:
    """A paraphrase with its period left out, as a template (its slots where its values now are):
    built once, the same bases come back question after question, fold after fold."""
    return build_template(question, sql, dialect=dialect, generated=True)


def _reworded(question: str, old: str, new: str, new_words: str) -> str | None:
    """The paraphrase's question with its visit said as the question says it, or None."""
    spans = _visits(question)
    if {v for _, _, v, _ in spans} != ({old} if old else set()):
        return None  # the paraphrase does not say its visit as the renaming's old side
    if old and new:
        for start, _, _, word in reversed(spans):
            question = question[:start] + new_words + question[start + len(word) :]
        return question
    if old:  # to every visit: each visit phrase left out with the words that attach it
        for start, end, _, _ in reversed(spans):
            head = _ATTACHED.sub("", question[:start].rstrip() + " ")
            question = head.rstrip() + " " + question[end:].lstrip()
        return re.sub(r"\s+([?.,;:!])", r"\1", " ".join(question.split()))
    text = question.rstrip().rstrip("?").rstrip()  # from every visit: the question's phrase added
    return f"{text} {new_words}?"


def _visits(question: str) -> list[tuple[int, int, str, str]]:
    """Each visit phrase said: start, end, the visit ("first", "current") and its word as said."""
    return [
        (m.start(), m.end(), _VISIT_NAMES.get(m.group(1), m.group(1)), m.group(1))
        for m in _VISIT.finditer(question.lower())
    ]


def _noun(question: str) -> str:
    """Which kind of visit a question names: an ICU stay or a hospital visit ("" for none)."""
    kinds = {"icu" if "icu" in question.lower()[s:e] else "hospital" for s, e, _, _ in _visits(question)}
    return next(iter(kinds)) if len(kinds) == 1 else ""


def _slot_indices(template: Template) -> tuple[int, ...]:
    return tuple(sorted(use.index for slot in template.slots for use in slot.uses))


def _in_selects(tree: exp.Expr) -> list[exp.Select]:
    """Every SELECT that is the list of an IN (a visit, a stay, a set of items)."""
    out = []
    for node in tree.find_all(exp.In):
        query = node.args.get("query")
        inner = query.this if isinstance(query, exp.Subquery) else query
        if isinstance(inner, exp.Select):
            out.append(inner)
    return out


def _masked(node: exp.Expr, marked: set[int], dialect: object) -> str:
    """The node's SQL with its slot literals (ids in `marked`) written as `slot`."""
    copy = node.copy()
    for original, lit in zip(node.find_all(exp.Literal), copy.find_all(exp.Literal), strict=True):
        if id(original) in marked:
            lit.replace(exp.var(_SLOT))
    return copy.sql(dialect=dialect, copy=False)


@functools.lru_cache(maxsize=16384)
def _shapes_of(sql: str, dialect: str, slots: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
    """Once per SQL (a calibration builds a library per fold from the same templates): for each
    IN-subquery form (slots masked), the whole SQL with every copy of that form masked as a hole."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return ()
    literals = list(tree.find_all(exp.Literal))
    for i in slots:
        if i < len(literals):
            literals[i].replace(exp.var(_SLOT))
    named = dialect_named(dialect)
    # A subquery is written alike alone and inside its IN's parentheses: the holes are cut as text
    # (no tree copied per form), each form whole, never a form that is the start of a longer one.
    whole = tree.sql(dialect=named)
    forms = dict.fromkeys(s.sql(dialect=named) for s in _in_selects(tree))
    return tuple((whole.replace(f"({form})", f"({_HOLE})"), form) for form in forms if f"({form})" in whole)


@dataclass(frozen=True)
class LibraryVisits:
    """What the library shows: (old form, new visit) -> (new form, its visit noun), where two shapes
    at least agree; each form's visit as its paraphrases say it; the entries that say each visit."""

    renamings: dict[tuple[str, str], tuple[str, str]]
    said: dict[str, str]  # form -> the visit its templates' paraphrases say ("" none)
    sayers: dict[str, tuple[int, ...]]  # visit -> entries whose template says it over a renamed form


def library_visits(index: LibraryIndex) -> LibraryVisits:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_visits", None)
    if cached is not None:
        return cached
    groups: dict[str, dict[str, tuple[str, _Sayings, str]]] = defaultdict(dict)
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        if template is None or not template.usable:
            continue
        for shape, form in _shapes_of(template.sql_template, template.dialect, _slot_indices(template)):
            if form not in groups[shape]:
                ops = [index.entries[i].template.operators for i in members if index.entries[i].template]
                groups[shape][form] = (key, _Sayings.of(ops), _noun(template.question))
    shown: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    said: dict[str, Counter] = defaultdict(Counter)
    sayers: dict[str, list[str]] = defaultdict(list)
    for shape, variants in groups.items():
        for form_a, (_, ops_a, _) in variants.items():
            for form_b, (key_b, ops_b, noun_b) in variants.items():
                pair = _pair(ops_a, ops_b) if form_a != form_b else None
                if pair is None:
                    continue
                said[form_a][pair[0]] += 1
                said[form_b][pair[1]] += 1
                shown[(form_a, pair[1])][f"{form_b}\n{noun_b}"].add(shape)
                sayers[pair[1]].append(key_b)
    renamings = {}
    for (form, new), targets in shown.items():
        best, shapes = max(targets.items(), key=lambda kv: len(kv[1]))
        if len(shapes) >= MIN_SHAPES and sum(len(s) >= MIN_SHAPES for s in targets.values()) == 1:
            new_form, _, noun = best.partition("\n")
            renamings[(form, new)] = (new_form, noun)
    out = LibraryVisits(
        renamings,
        {form: by.most_common(1)[0][0] for form, by in said.items() if len(by) == 1},
        {
            v: tuple(i for key in dict.fromkeys(keys) for i in index.members[key])
            for v, keys in sayers.items()
        },
    )
    index._compose_visits = out  # type: ignore[attr-defined]
    return out


@dataclass(frozen=True)
class _Sayings:
    """A template's paraphrases' operators, each as (every other operator said, its visit), and the
    visits said beside each set of other operators, in paraphrase order. Why: a library's pairs
    of forms are compared paraphrase by paraphrase (~800,000 comparisons of two dicts in a train
    calibration, ~5 % of it); keyed once per template, a pair is a lookup."""

    said: tuple[tuple[frozenset, str], ...]
    beside: dict[frozenset, tuple[str, ...]]

    @classmethod
    def of(cls, ops: list[dict]) -> _Sayings:
        # An operator said is one whose value is truthy (_pair's old reading: `a.get(k) or None`).
        said = tuple(
            (frozenset((k, v) for k, v in o.items() if v and k != "visit"), o.get("visit") or NONE)
            for o in ops
        )
        beside: dict[frozenset, list[str]] = defaultdict(list)
        for rest, visit in said:
            beside[rest].append(visit)
        return cls(said, {rest: tuple(visits) for rest, visits in beside.items()})


def _pair(a: _Sayings, b: _Sayings) -> tuple[str, str] | None:
    """Two templates' paraphrases (operators) where one of each differs from the other in the visit
    alone, each naming one visit or none: (the visit of a, the visit of b), else None. The first
    such pair in paraphrase order (a's, then b's)."""
    for rest, va in a.said:
        for vb in b.beside.get(rest, ()):
            if va != vb and "|" not in va + vb:
                return va, vb
    return None


def visit_plans(reading: Reading, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, VisitSwap]]:
    """The visit renaming the question asks of the base entry's template, with the entry whose
    template says the question's visit over a renamed form (the nearest), or []."""
    template = index.entries[base].template
    if template is None or not template.usable or _refused(reading, index, base):
        return []
    new, old = reading.ops.get("visit") or NONE, template.operators.get("visit") or NONE
    drop = None
    if _period_left(reading.ops, template.operators):
        found_drop = time_drop(index, template) if old == NONE and not says_time(reading) else None
        if found_drop is None:
            return []  # a period left out only where the base says every visit and the library shows it
        drop = found_drop[1]
    visits = library_visits(index)
    shapes = _shapes_of(template.sql_template, template.dialect, _slot_indices(template))
    noun = _noun(reading.question)
    found = [
        (form, visits.renamings[(form, new)])
        for _, form in shapes
        if visits.said.get(form) == old and (form, new) in visits.renamings
    ]
    found = [(form, target) for form, target in found if not new or target[1] == noun]
    sources = visits.sayers.get(new, ())
    if len(found) != 1 or not sources:
        return []  # no renamed form, or two (which one the question means is not read)
    words = _words(reading.question, old, new)
    if words is None:
        return []
    form, (new_form, _) = found[0]
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    return [(source, VisitSwap(old, new, form, new_form, words, template.dialect, drop))]


def _refused(reading: Reading, index: LibraryIndex, base: int) -> bool:
    """The hard rules read before the library's renamings: a negation, the same visit or two, every
    visit for a question that says one in other words, or another operator word that differs (but
    the base's period, where the question names a visit and no time: visit_plans leaves it out)."""
    ops, base_ops = reading.ops, index.entries[base].template.operators  # type: ignore[union-attr]
    if ops.get("negation"):
        return True
    new, old = ops.get("visit") or NONE, base_ops.get("visit") or NONE
    if new == old or "|" in new + old:
        return True  # the same visit, or two named: not this swap
    if not new and _VISIT_WORD.search(reading.question):
        return True  # a visit said in words the operators do not read ("their lab visit", "an elective admission")
    if not _differ(ops, base_ops, set()):
        return False  # the visit alone differs
    if _differ(ops, base_ops, TIME_KEYS):
        return True  # the question differs in more than its visit and its period
    # Its period too: only the base's period left out, for one visit named (visit_plans reads the rest).
    return not (new and _period_left(ops, base_ops))


def _differ(ops: dict, base_ops: dict, besides: set | frozenset) -> bool:
    """The two operator readings differ in a key other than the visit and `besides`."""
    keys = (ops.keys() | base_ops.keys()) - {"visit"} - besides
    return any((ops.get(k) or None) != (base_ops.get(k) or None) for k in keys)


def _period_left(ops: dict, base_ops: dict) -> bool:
    """The base says a period the question does not: the question says no time word at all."""
    return any(base_ops.get(k) for k in TIME_KEYS) and not any(ops.get(k) for k in TIME_KEYS)


def _words(question: str, old: str, new: str) -> str | None:
    """The question's wording of its visit: its word ("current"), or, where the base says no visit,
    its visit phrase with the words that attach it ("during their current hospital visit")."""
    spans = _visits(question)
    if not new:
        return ""
    if len({question.lower()[s:e] for s, e, _, _ in spans}) != 1:
        return None  # the visit said two ways: which wording to add is not read
    start, end, _, word = spans[0]
    if old:
        return question[start : start + len(word)]
    lead = re.search(
        r"\b(?:(?:on|in|during|at|for|within|throughout|from)\s+)?(?:(?:the|their|his|her|its)\s+)?$",
        question[:start],
    )
    return question[lead.start() if lead else start : end]
