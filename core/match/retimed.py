"""The time-period replacement: a verified template whose time condition is replaced, wherever it
filters, by the time condition another verified template writes for the question's time phrase:
"… since 5 months ago" beside a verified "… in 2100", "… in 03/this year" beside "… in 03/2100".

Why: after the first/last swap (direction.py) and the comparison flip (compared.py), the train
cross-validation's next shape of question with no template in the library is a verified template
with its time period said another way: the question names a period relative to now ("since 1 year
ago", "this year", "last month") where the template names a fixed one ("in 2100"), or the reverse.
That is a whole condition replaced, not an operator flipped, and it mostly sits both in the outer
WHERE and in the subquery that picks the first or last row (where replace.py does not reach: it
would change one copy and leave the other). Here every copy is replaced alike, on each time column
the condition bounds: "the drug prescribed after the procedure this month" bounds both events' times
by the one period the question says (train's two-event templates write it on both), so "in 03/2100"
said of it is written on both too.

Which condition a time phrase writes comes from the library, never from a list: two templates that
are the same SQL but for their time condition on one column (the frame), whose paraphrases each say
one time phrase made of exactly the condition's slots ("since <number> months ago", "in
<month>/<period_year>"), show which condition each phrase writes; a phrase whose paraphrases agree
on one condition (MAPPING_SHARE) is mapped. A small library seldom holds such a pair (issue 26), so
a template alone in its frame votes too, for a phrase no pair reads, where every one of its paraphrases
says one time phrase made of exactly its condition's slots with a word of its own ("in 2100"; never a
bare "2100"): the phrase is then what says the condition (said_by_family). The condition's form masks
its column and its slot values, so a phrase learned over a lab's charttime applies to a drug's starttime.

Hard rules (refused before anything is built): no negation in the question; the question says one
time phrase (its time values and the words around them) and the library maps it; the base paraphrase
says one time phrase, made of exactly its time condition's slots, mapped to the base's condition;
the base template has one time condition (conjuncts over a time column, no subquery, the same in
every WHERE that has it, on every time column; never two time columns in one WHERE) and the two
conditions differ. The composition then goes through the same
rules, binding, validation and risk as any other (compose.py, feature `composed`): the guard still
judges every word, and the answer is shown as "… instead of …" and goes to review.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import UNANSWERABLE, LibraryIndex
from core.match.operators import _TIME_WORDS
from core.match.outer import conjuncts
from core.match.reading import Reading
from core.match.spans import CALENDAR_TYPES, DATE, NUMBER, PERIOD_TYPES, YEAR
from core.match.template import TIME_COLUMN, Template, dialect_named, parsed_sql, without_positions, written
from core.match.words import tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

TIME_TYPES = frozenset((YEAR, DATE, *CALENDAR_TYPES, *PERIOD_TYPES.values()))  # values a time phrase names
# A number is a time value when a unit follows it ("since 5 months ago"); the unit and "ago" end the
# phrase. Not a mapping: which condition a phrase writes is the library's (library_timings).
UNITS = frozenset("year years month months week weeks day days hour hours minute minutes ago".split())
TIME_KEYS = frozenset(("time", "period", "units"))  # the operator keys a time phrase sets
MAPPING_SHARE = 0.8  # share of a phrase's paraphrases that must agree on its condition
_GAP = re.compile(r"\s*([/-]?)\s*$")  # what may stand between two values of one phrase ("05/this year")


@dataclass(frozen=True)
class Timing:
    """A template's one time condition: the SQL without it (its frame), its form, its slots."""

    frame: str  # the SQL with slot values masked and the condition's conjuncts marked
    form: tuple[str, ...]  # the condition's conjuncts, column and slot values masked
    # the time columns it filters ("charttime"; "charttime" and "starttime" where one period bounds
    # two events: "the drug prescribed after the procedure this month", each event's time in it)
    columns: tuple[str, ...]
    slots: frozenset[str]  # names of the slots it holds


@dataclass(frozen=True)
class Phrase:
    """A time phrase of a question: its pattern (values as <type>), its place, its slots' names."""

    pattern: tuple[str, ...]
    start: int
    end: int
    names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TimeReplace:
    """Write `conditions` (a source's conjuncts, columns unqualified) in place of the base's time
    condition of form `old_form`, on its column, and `new_text` in place of its time phrase."""

    old_form: tuple[str, ...]
    old_text: str  # the base question's phrase: what the answer says it replaced
    new_text: str  # the source question's phrase (its values: binding writes the question's)
    # The question's own phrase: shown in the answer alone (`phrase`), never written by `apply`, so two
    # replacements that differ in it alone are equal (composing.composed_entry makes their entry once).
    shown: str = dataclasses.field(compare=False)
    conditions: tuple[str, ...]

    @property
    def phrase(self) -> str:
        return f"{self.shown} instead of {self.old_text}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with its time condition and phrase replaced, or None
        where this paraphrase has not the base's condition or does not say it in one phrase."""
        timing = template_timing(template)
        said = said_phrase(template, timing) if timing is not None else None
        if timing is None or said is None or timing.form != self.old_form:
            return None
        indices = tuple(sorted(u.index for slot in template.slots for u in slot.uses))
        sql = _rewritten(template.sql_template, template.dialect, indices, timing.columns, self.conditions)
        if sql is None:
            return None
        return template.question[: said.start] + self.new_text + template.question[said.end :], sql


def period_plans(
    reading: Reading, index: LibraryIndex, base: int, vote: Vote
) -> list[tuple[int, TimeReplace]]:
    """The time replacement the question asks of the base entry's template, with the entry whose
    question says the question's time phrase (the nearest), or []."""
    template = index.entries[base].template
    if template is None or not template.usable or reading.ops.get("negation"):
        return []
    ops, base_ops = reading.ops, template.operators
    if any(
        (ops.get(k) or None) != (base_ops.get(k) or None) for k in (ops.keys() | base_ops.keys()) - TIME_KEYS
    ):
        return []  # refused before anything is read: the question differs in more than its time
    asked = asked_phrase(reading)
    mapping = library_timings(index)
    if asked is None or asked.pattern not in mapping.forms:
        return []  # the question says no time phrase, two, or one the library never shows
    timing = template_timing(template)
    said = said_phrase(template, timing) if timing is not None else None
    if timing is None or said is None or mapping.forms.get(said.pattern) != timing.form:
        return []
    if mapping.forms[asked.pattern] == timing.form:
        return []  # the same condition: a verified template's question, not a replacement
    sources = mapping.sayers[asked.pattern]
    if not sources:
        return []
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    found = _source(index, source)
    if found is None:
        return []
    new_text, conditions = found
    shown = reading.question[asked.start : asked.end]
    old_text = template.question[said.start : said.end]
    return [(source, TimeReplace(timing.form, old_text, new_text, shown, conditions))]


# --- what the library shows -------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryTimings:
    """pattern -> the condition form the library writes for it, and the entries that say each."""

    forms: dict[tuple[str, ...], tuple[str, ...]]
    sayers: dict[tuple[str, ...], tuple[int, ...]]


def library_timings(index: LibraryIndex) -> LibraryTimings:
    """Read once per library (cached on the index, as compared.py caches its comparisons)."""
    cached = getattr(index, "_compose_timings", None)
    if cached is not None:
        return cached
    frames: dict[str, dict[tuple[str, ...], list[str]]] = defaultdict(lambda: defaultdict(list))
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        timing = template_timing(template) if template is not None and template.usable else None
        if timing is not None:
            frames[timing.frame][timing.form].append(key)
    votes: dict[tuple[str, ...], Counter] = defaultdict(Counter)
    sayers: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for forms in frames.values():
        if len(forms) < 2:
            continue  # no other condition in this frame: the library shows no phrase-to-condition pair
        for form, keys in forms.items():
            for key in keys:
                _said_by(index, key, form, votes, sayers)
    _single_votes(index, frames, votes, sayers)
    mapped = {}
    for pattern, by in votes.items():
        form, n = by.most_common(1)[0]
        if n >= MAPPING_SHARE * sum(by.values()):
            mapped[pattern] = form
    out = LibraryTimings(
        mapped,
        {p: tuple(i for i in sayers[p] if _form_of(index, i) == form) for p, form in mapped.items()},
    )
    index._compose_timings = out  # type: ignore[attr-defined]
    return out


def _single_votes(index: LibraryIndex, frames: dict, votes: dict, sayers: dict) -> None:
    """One template's own evidence, added to the pairs' votes where no pair reads that phrase: a
    template alone in its frame whose every paraphrase says one time phrase made of exactly its
    condition's slots, with a word of its own (said_by_family), shows the condition that phrase writes,
    as a pair does.

    Why: a pair of templates alike but for their time condition is rare in a small library (issue 26),
    so a phrase said by one template alone was never mapped. Every vote still has to agree
    (MAPPING_SHARE) with the other templates that say the phrase."""
    single: dict[tuple[str, ...], Counter] = defaultdict(Counter)
    said: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for forms in frames.values():
        if len(forms) != 1:
            continue
        for form, keys in forms.items():
            for key in keys:
                if said_by_family(index, key, form):
                    _said_by(index, key, form, single, said)
    for pattern, by in single.items():
        if pattern not in votes:
            votes[pattern] = by
            sayers[pattern] = said[pattern]


def said_by_family(index: LibraryIndex, key: str, form: tuple[str, ...]) -> bool:
    """Whether every paraphrase of the template `key` says one time phrase made of exactly its time
    condition's slots (of `form`), with a word of its own ("in 2100", "since 5 months ago"; never a
    bare "2100" whose "in the year" is left around it): the template's own evidence that its phrase is
    what says its condition (here and untimed.py)."""
    members = index.members.get(key, ())
    for i in members:
        template = index.entries[i].template
        timing = template_timing(template) if template is not None and template.usable else None
        said = said_phrase(template, timing) if template is not None and timing is not None else None
        if timing is None or said is None or timing.form != form or not _worded(said.pattern):
            return False
    return bool(members)


def _worded(pattern: tuple[str, ...]) -> bool:
    """A phrase pattern with a word besides its values ("in", "months ago") or a period, whose value is
    said in words ("this year"): not a bare time value ("2100", whose "in the year" stays around it)."""
    return any(t[:1].isalpha() or t in _PERIOD_VALUES for t in pattern)


_PERIOD_VALUES = frozenset(f"<{t}>" for t in PERIOD_TYPES.values())


def _said_by(index: LibraryIndex, key: str, form: tuple[str, ...], votes: dict, sayers: dict) -> None:
    """Each paraphrase of a template that says its time condition in one phrase votes that phrase's
    pattern for the condition's form."""
    for i in index.members[key]:
        template = index.entries[i].template
        timing = template_timing(template) if template is not None else None
        said = said_phrase(template, timing) if template is not None and timing is not None else None
        if said is not None and timing is not None and timing.form == form:
            votes[said.pattern][form] += 1
            sayers[said.pattern].append(i)


def _form_of(index: LibraryIndex, i: int) -> tuple[str, ...] | None:
    template = index.entries[i].template
    timing = template_timing(template) if template is not None else None
    return timing.form if timing is not None else None


def _source(index: LibraryIndex, i: int) -> tuple[str, tuple[str, ...]] | None:
    """The source entry's phrase (its own values) and its time condition's conjuncts as SQL."""
    template = index.entries[i].template
    timing = template_timing(template) if template is not None else None
    said = said_phrase(template, timing) if template is not None and timing is not None else None
    if template is None or timing is None or said is None:
        return None
    conditions = _conditions(template, timing.columns)
    return (template.question[said.start : said.end], conditions) if conditions else None


# --- a template's time condition --------------------------------------------------------------------


def template_timing(template: Template) -> Timing | None:
    """The template's one time condition, or None (none, two, or one not the same in every WHERE and
    on every time column it filters)."""
    return _timing(template.sql_template, template.dialect, slot_masks(template))


def slot_masks(template: Template) -> tuple[tuple[int, str, str, str, str], ...]:
    """The template's slots as a hashable key: a reading of its SQL cached per SQL must know which
    literals are slots (the same SQL is a template in every fold's library)."""
    return tuple(
        sorted(
            (use.index, use.prefix, use.suffix, slot.type, slot.name)
            for slot in template.slots
            for use in slot.uses
        )
    )


@functools.lru_cache(maxsize=16384)
def _timing(sql: str, dialect: str, masks: tuple[tuple[int, str, str, str, str], ...]) -> Timing | None:
    """Once per SQL: a calibration builds a library per fold from the same templates."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return None
    literals = list(tree.find_all(exp.Literal))
    names = {}
    for index, prefix, suffix, kind, name in masks:
        if index < len(literals):
            marked = exp.Literal.string(f"{prefix}<{kind}>{suffix}")
            names[id(marked)] = name
            literals[index].replace(marked)
    found = _timed(tree, set(names))
    if not found or _nested(found):
        return None
    # One form on every column (the period that bounds both events); two forms, or two time columns
    # in one WHERE, and which one a phrase says is not known.
    forms = {tuple(_masked(p, dialect) for p in parts) for _, parts, _ in found}
    slots = {
        names[id(lit)]
        for _, parts, _ in found
        for p in parts
        for lit in p.find_all(exp.Literal)
        if id(lit) in names
    }
    if len(forms) != 1 or not slots:
        return None  # copies that differ, or a condition with no value a phrase could say
    for select, parts, name in found:
        _mark(select, parts, name)
    if any(names.get(id(lit)) in slots for lit in tree.find_all(exp.Literal)):
        return None  # a slot of the condition used outside it too: replacing it would change more
    columns = tuple(sorted({c for _, _, c in found}))
    return Timing(
        tree.sql(dialect=dialect_named(dialect), copy=False), next(iter(forms)), columns, frozenset(slots)
    )


def _nested(found: list[tuple[exp.Select, list[exp.Expr], str]]) -> bool:
    """Whether a copy on one time column sits inside a SELECT that filters another ("the last heart
    rate in 2100" whose admission is in 2100 too): the period of the event and of what holds it, not
    one period of two events side by side ("the drug after the procedure this month", T1 JOIN T2)."""
    for outer, _, column in found:
        for inner, _, other in found:
            if other != column and inner is not outer and _inside(inner, outer):
                return True
    return False


def _inside(node: exp.Expr, outer: exp.Expr) -> bool:
    parent = node.parent
    while parent is not None:
        if parent is outer:
            return True
        parent = parent.parent
    return False


def _timed(tree: exp.Expr, slotted: set[int]) -> list[tuple[exp.Select, list[exp.Expr], str]]:
    """Every WHERE's conjuncts over one time column alone (no subquery) that hold a slot's value
    (`slotted`: the ids of its literals; "dischtime IS NOT NULL" is no time a phrase says), with
    the column's name."""
    out = []
    for select in list(tree.find_all(exp.Select)):
        where = select.args.get("where")
        if where is None:
            continue
        parts: dict[str, list[exp.Expr]] = defaultdict(list)
        for part in conjuncts(where.this):
            column = _time_column(part)
            if column and any(id(lit) in slotted for lit in part.find_all(exp.Literal)):
                parts[column].append(part)
        if len(parts) > 1:
            return [(select, [], c) for c in parts]  # two time columns in one WHERE: refused above
        out += [(select, found, column) for column, found in parts.items()]
    return out


def _time_column(part: exp.Expr) -> str:
    """The time column a conjunct compares with values alone ("charttime"), or ""."""
    if part.find(exp.Select) is not None:
        return ""
    columns = {(c.table, c.name.lower()) for c in part.find_all(exp.Column)}
    if len(columns) != 1:
        return ""
    name = next(iter(columns))[1]
    return name if TIME_COLUMN.search(name) else ""


def _masked(part: exp.Expr, dialect: str) -> str:
    def mask(node: exp.Expr) -> exp.Expr:
        return exp.var("_c") if isinstance(node, exp.Column) else node

    return part.transform(mask).sql(dialect=dialect_named(dialect), copy=False)  # transform made it a copy


def _mark(select: exp.Select, parts: list[exp.Expr], column: str) -> None:
    """The select's WHERE with the condition's conjuncts as one marker (the frame)."""
    where = select.args["where"]
    keep, marked = [], False
    for part in conjuncts(where.this):
        if any(part is p for p in parts):
            if not marked:
                keep.append(exp.func("TIMED", exp.column(column)))
                marked = True
            continue
        keep.append(part)
    select.set("where", None)
    select.where(*keep, copy=False)


def _conditions(template: Template, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The time condition's conjuncts (their own values, columns unqualified) of one WHERE."""
    indices = tuple(sorted({u.index for slot in template.slots for u in slot.uses}))
    return _conditions_of(template.sql_template, template.dialect, indices, columns)


@functools.lru_cache(maxsize=16384)
def _conditions_of(
    sql: str, dialect: str, indices: tuple[int, ...], columns: tuple[str, ...]
) -> tuple[str, ...]:
    """Once per source SQL: the nearest source of a time phrase is the same entry question after
    question, fold after fold (a tree copy and a generation each time, before). Keyed by all it
    reads: the SQL, and which of its literals hold a slot's value."""
    tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    literals = list(tree.find_all(exp.Literal))
    slotted = {id(literals[i]) for i in indices if i < len(literals)}
    found = [parts for _, parts, c in _timed(tree, slotted) if c in columns]
    if not found:
        return ()
    out = []
    for part in found[0]:
        for col in part.find_all(exp.Column):
            col.set("table", None)
        out.append(part.sql(dialect=dialect_named(dialect)))
    return tuple(out)


@functools.lru_cache(maxsize=16384)
def _rewritten(
    sql: str, dialect: str, indices: tuple[int, ...], columns: tuple[str, ...], conditions: tuple[str, ...]
) -> str | None:
    """The SQL with every copy of its time condition (on `columns`, holding the literals at `indices`)
    replaced by `conditions`, each copy on its own column: once per base paraphrase and source (every
    question that asks the same period of the same base composes the same SQL, fold after fold)."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
        new = _condition_trees(conditions, dialect)  # only copied below
    except (SqlglotError, ValueError, RecursionError):
        return None
    literals = list(tree.find_all(exp.Literal))
    slotted = {id(literals[i]) for i in indices if i < len(literals)}
    found = [(s, parts) for s, parts, c in _timed(tree, slotted) if c in columns]
    if not found:
        return None
    for select, parts in found:
        target = next(iter(parts[0].find_all(exp.Column)))
        renamed = [c.copy() for c in new]
        for part in renamed:
            for col in part.find_all(exp.Column):
                col.set("this", exp.to_identifier(target.name))
                col.set("table", exp.to_identifier(target.table) if target.table else None)
        keep, placed = [], False
        for part in conjuncts(select.args["where"].this):
            if any(part is p for p in parts):
                keep += [] if placed else renamed
                placed = True
                continue
            keep.append(part)
        select.set("where", None)
        select.where(*keep, copy=False)
    return written(tree, dialect)  # our copy, kept as its SQL's parse


@functools.lru_cache(maxsize=4096)
def _condition_trees(conditions: tuple[str, ...], dialect: str) -> tuple[exp.Expr, ...]:
    """A source's time conditions parsed once: every base paraphrase it is written into (fold after
    fold) would parse them again. Callers copy them before changing anything; kept without the
    parser's positions and empty comment lists (template.without_positions: the same SQL is written
    from them, and each copy costs half as much)."""
    return tuple(without_positions(sqlglot.parse_one(c, dialect=dialect_named(dialect))) for c in conditions)


# --- time phrases -----------------------------------------------------------------------------------


def asked_phrase(reading: Reading) -> Phrase | None:
    """The question's one time phrase, or None (none, or more than one)."""
    spans = tuple((s.start, s.end, s.type) for s in reading.typed if s.type in TIME_TYPES or s.type == NUMBER)
    found = _phrases(reading.question, spans)
    return found[0] if len(found) == 1 else None


def said_phrase(template: Template, timing: Timing) -> Phrase | None:
    """The paraphrase's one time phrase, made of exactly its time condition's slots, or None."""
    spans = tuple(
        (s.start, s.end, s.type, s.name) for s in template.slots if s.type in TIME_TYPES or s.type == NUMBER
    )
    found = _phrases(template.question, spans)
    if len(found) != 1 or found[0].names != timing.slots:
        return None
    return found[0]


@functools.lru_cache(maxsize=1 << 15)
def _phrases(text: str, spans: tuple[tuple, ...]) -> tuple[Phrase, ...]:
    """The time phrases of a text: its time values (a number only with a unit after it), those
    standing next to each other grouped ("05/this year"), each widened over the time word before it
    ("since", "prior to") and the unit words after it ("months ago")."""
    tokens = tokenize(text)
    timed = sorted(s for s in spans if s[2] != NUMBER or _unit_after(text, tokens, s[1]))
    groups: list[list[tuple]] = []
    for span in timed:
        if (
            groups
            and _GAP.match(text[groups[-1][-1][1] : span[0]])
            and len(text[groups[-1][-1][1] : span[0]].strip()) <= 1
        ):
            groups[-1].append(span)
        else:
            groups.append([span])
    return tuple(_phrase(text, tokens, group) for group in groups)


def _unit_after(text: str, tokens: list, end: int) -> bool:
    after = [t for t in tokens if t.start >= end]
    return bool(after) and after[0].lower in UNITS and not text[end : after[0].start].strip()


def _phrase(text: str, tokens: list, group: list[tuple]) -> Phrase:
    start, end = group[0][0], group[-1][1]
    pattern: list[str] = []
    for n, span in enumerate(group):
        if n:
            gap = text[group[n - 1][1] : span[0]].strip()
            pattern += [gap] if gap else []
        pattern.append(f"<{span[2]}>")
    for token in [t for t in tokens if t.start >= end][:2]:
        if token.lower not in UNITS or text[end : token.start].strip():
            break
        pattern.append(token.lower)
        end = token.end
    before = [t for t in tokens if t.end <= start]
    if before and before[-1].lower == "the" and not text[before[-1].end : start].strip():
        # "in the last year" is not "in last year" (the past twelve months, or the calendar year?):
        # its article is part of the phrase, so a phrase the library says without it is not this one
        pattern.insert(0, "the")
        start = before.pop().start
    before = before[-2:]
    for n in (2, 1):
        words = " ".join(t.lower for t in before[-n:]) if len(before) >= n else ""
        if words in _TIME_WORDS and not text[before[-1].end : start].strip():
            pattern = words.split() + pattern
            start = before[-n].start
            break
    names = frozenset(s[3] for s in group if len(s) > 3)
    return Phrase(tuple(pattern), start, end, names)
