"""The time drop: a verified template whose time condition is left out, wherever it filters, where
the question says no time at all: "what are the five most frequent microbiology tests?" beside a
verified "… microbiology tests since 2100?", "the top three most commonly prescribed drugs" beside
"… throughout this year".

Why: after the time replacement (retimed.py), the train cross-validation's largest group of questions
whose template the library lacks is the same question with no time period: the verified question asks
"since 2100" or "in this year" and the question asks of all time. compose.py leaves out a condition
only where it is one conjunct of the outer WHERE; a time condition mostly sits in a subquery too
(the one that ranks, or that picks the first or last row), where leaving one copy in would answer
another question. Here every copy is left out alike (retimed.py's reading of a template's one time
condition, with nothing written in its place).

Which time conditions may be left out comes from the library, never from a list: two templates that
are the same SQL but for one having a time condition of that form (its column and values masked) and
the other none show that the library's questions leave it out by saying no time. A small library
seldom holds such a pair (issue 26: the 10 % library's largest group of misses), so one template's own
evidence shows it too: where every paraphrase of the base template says one time phrase made of
exactly its condition's slots, with a word of its own ("in 2100", "since 5 months ago"), the phrase is
what says the condition, and a question that says no time asks without it (retimed.said_by_family).
A form neither shows is refused.

Hard rules (refused before anything is built): no negation in the question; the question says no
time (no time value, no time, period or unit word: operators.py's `time`, `period`, `units`; no time
said in words no operator reads: "in the past", "recently", "previously") and differs from the base
in nothing else the operators read; the base paraphrase says one time phrase made of exactly its time
condition's slots; the base template has one time condition (the same in every WHERE that has it) of
a form the library shows left out, or its own paraphrases show it as above. The composition then goes through the
same rules, binding, validation and risk as any other (compose.py, feature `composed`): the guard
still judges every word (a time word the cut leaves in the wording, "throughout", refuses it).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import UNANSWERABLE, LibraryIndex
from core.match.outer import conjuncts
from core.match.reading import Reading
from core.match.retimed import (
    TIME_KEYS,
    TIME_TYPES,
    _nested,
    _phrases,
    _timed,
    said_by_family,
    said_phrase,
    template_timing,
)
from core.match.spans import NUMBER
from core.match.template import Template, parsed_sql, written

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

# A time said in words no operator reads: "in the past" (no unit after it, so no period), "recently",
# "lately", "previously", "now". The guard reads "past", "previous", "now" as operator words (neutral:
# the operators compare them), so a question that says them with no time value passed it, and the
# time drop answered "… in the past?" with the all-time value. "Most recent(ly)" is the last one (an
# order the operators compare), not a time.
_TIME_SAID = re.compile(
    r"\b(?:past|previous|previously|lately|ago|today|yesterday|tonight|now|currently|nowadays|earlier|formerly)\b"
    r"|(?<!\bmost )\brecent(?:ly)?\b"
)
_SPACE_BEFORE = re.compile(r"\s+([?.,;:!])")
_OPENING = re.compile(r"^[\s,;:]+")


@dataclass(frozen=True)
class TimeDrop:
    """Leave out the base's time condition of form `old_form` (every copy) and its phrase."""

    old_form: tuple[str, ...]
    old_text: str  # the base question's phrase: what the answer says it left out

    @property
    def phrase(self) -> str:
        return f"without {self.old_text}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL without its time condition and phrase, or None where
        this paraphrase has not the base's condition or does not say it in one phrase."""
        timing = template_timing(template)
        said = said_phrase(template, timing) if timing is not None else None
        if timing is None or said is None or timing.form != self.old_form:
            return None
        indices = tuple(sorted(u.index for slot in template.slots for u in slot.uses))
        sql = _dropped(template.sql_template, template.dialect, indices, timing.columns)
        if sql is None:
            return None
        question = template.question[: said.start] + " " + template.question[said.end :]
        question = _OPENING.sub("", _SPACE_BEFORE.sub(r"\1", " ".join(question.split())))
        return (question[:1].upper() + question[1:], sql) if question else None


def untimed_plans(reading: Reading, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, TimeDrop]]:
    """The time drop the question asks of the base entry's template, with the nearest entry of the
    templates that show its time condition left out (the wording without a time), or []."""
    template = index.entries[base].template
    if template is None or not template.usable or reading.ops.get("negation"):
        return []
    ops, base_ops = reading.ops, template.operators
    if any(ops.get(k) for k in TIME_KEYS) or any(
        (ops.get(k) or None) != (base_ops.get(k) or None) for k in (ops.keys() | base_ops.keys()) - TIME_KEYS
    ):
        return []  # the question says a time word, or differs in more than its time
    if says_time(reading):
        return []
    found = time_drop(index, template, key=index.entries[base].key)
    if found is None:
        return []
    sources, drop = found
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    return [(source, drop)]


def time_drop(
    index: LibraryIndex, template: Template, *, key: str | None = None
) -> tuple[tuple[int, ...], TimeDrop] | None:
    """The drop of the template's one time condition, where its paraphrase says it in one phrase and
    the library shows that form left out (with the entries of the templates without it) or, for the
    template of `key`, its own paraphrases show that their phrase says it (retimed.said_by_family:
    with the template's own entries as the sources); else None.
    Why apart: revisited.py leaves a period out together with a visit renamed ("… during their last
    hospital visit" from the verified "… since 03/2100"), under its own hard rules."""
    timing = template_timing(template)
    said = said_phrase(template, timing) if timing is not None else None
    if timing is None or said is None:
        return None
    sources = library_untimed(index).get(timing.form, ())
    if not sources and key is not None and said_by_family(index, key, timing.form):
        sources = tuple(index.members[key])
    if not sources:
        return None
    return sources, TimeDrop(timing.form, template.question[said.start : said.end])


def says_time(reading: Reading) -> bool:
    """The question names a time value or a number with a unit after it ("5 months ago"), or says a
    time in words no operator reads ("in the past", "recently", "previously", "now")."""
    if _TIME_SAID.search(reading.lowered):
        return True
    spans = tuple((s.start, s.end, s.type) for s in reading.typed if s.type in TIME_TYPES or s.type == NUMBER)
    return bool(_phrases(reading.question, spans))


def library_untimed(index: LibraryIndex) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The time condition forms the library shows left out (a template with one and a template the
    same but for it), each with the entries of the templates without it (the wording a drop takes).
    Read once per library (cached on the index, as retimed.py caches its timings)."""
    cached = getattr(index, "_compose_untimed", None)
    if cached is not None:
        return cached
    timed: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    bare: dict[str, list[int]] = defaultdict(list)
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        rest = _rest(template) if template is not None and template.usable else None
        if rest is None:
            continue
        timing = template_timing(template) if rest[1] else None  # type: ignore[arg-type]
        if timing is not None:
            timed[rest[0]].add(timing.form)
        elif not rest[1]:  # not a time condition retimed.py cannot read (two columns, a slot used elsewhere)
            bare[rest[0]] += members
    shown: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for rest, forms in timed.items():
        for form in forms:
            shown[form] += bare.get(rest, [])
    out = {form: tuple(sorted(entries)) for form, entries in shown.items() if entries}
    index._compose_untimed = out  # type: ignore[attr-defined]
    return out


def _rest(template: Template) -> tuple[str, bool] | None:
    """The template's SQL with slot values masked and its time condition left out, and whether it had
    one; None where it is not read."""
    masks = tuple(
        sorted((use.index, use.prefix, use.suffix, slot.type) for slot in template.slots for use in slot.uses)
    )
    return _masked_rest(template.sql_template, template.dialect, masks)


@functools.lru_cache(maxsize=16384)
def _masked_rest(
    sql: str, dialect: str, masks: tuple[tuple[int, str, str, str], ...]
) -> tuple[str, bool] | None:
    """Once per SQL: a calibration builds a library per fold from the same templates."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return None
    literals = list(tree.find_all(exp.Literal))
    marked = set()
    for index, prefix, suffix, kind in masks:
        if index < len(literals):
            new = exp.Literal.string(f"{prefix}<{kind}>{suffix}")
            marked.add(id(new))
            literals[index].replace(new)
    found = _timed(tree, marked)
    if any(not parts for _, parts, _ in found) or _nested(found):
        return None  # two time columns in one WHERE, or one inside the other: not one condition
    _leave_out(found)
    return tree.sql(dialect=dialect, copy=False), bool(found)


@functools.lru_cache(maxsize=16384)
def _dropped(sql: str, dialect: str, indices: tuple[int, ...], columns: tuple[str, ...]) -> str | None:
    """The SQL with every copy of its time condition (on `columns`, holding the literals at `indices`)
    left out: once per base paraphrase (every question that drops the same base's time composes the
    same SQL, fold after fold)."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return None
    literals = list(tree.find_all(exp.Literal))
    slotted = {id(literals[i]) for i in indices if i < len(literals)}
    found = [f for f in _timed(tree, slotted) if f[2] in columns]
    if not found:
        return None
    _leave_out(found)
    return written(tree, dialect)  # our copy, kept as its SQL's parse


def _leave_out(found: list[tuple[exp.Select, list[exp.Expr], str]]) -> None:
    """Each select's WHERE without the time condition's conjuncts (no WHERE where none is left)."""
    for select, parts, _ in found:
        keep = [p for p in conjuncts(select.args["where"].this) if not any(p is q for q in parts)]
        select.set("where", None)
        if keep:
            select.where(*keep, copy=False)
