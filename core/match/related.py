"""The relation between two events replaced: a verified template that relates two events ("the drug
prescribed within the same day after the procedure") with the relation another verified template
writes for the question's relation phrase ("… within 2 days after the procedure …", "… in the same
month …", "… within the same hospital visit …").

Why: after the time replacement (retimed.py) and the time drop (untimed.py), the train
cross-validation's largest group of questions whose template the library lacks is a two-event
template (T1 JOIN T2 on the patient, the first event before the second) with its relation said
another way: 107 of them have, in their fold's library, the same SQL but for that relation. The
relation is one conjunct of the outer WHERE that compares the two events' columns (their times, or
their visits), so retimed.py (a time column compared with values) never reads it, and a question that
says "within 2 days" beside its period ("this month") says two time phrases, which it refuses.

Which relation a phrase writes comes from the library, never from a list: two templates that are the
same SQL but for their relation (the frame: slot values masked, the relation marked, a column the
derived tables return for the relation alone left out), whose paraphrases each say one relation
phrase, show which relation each phrase writes; a phrase whose paraphrases agree on one relation
(retimed.MAPPING_SHARE) is mapped. A relation phrase is a number with a unit after it made of exactly
the relation's slots ("within 2 days": the N is a number slot, bound from the question), or "the same"
and a unit or a visit's noun ("within the same day", "in the same hospital visit"). The relation's
form masks the events' time columns (kept per event: T1's and T2's) and its slot values, so a
relation learned over two diagnoses applies to a procedure and a drug.

Hard rules (refused before anything is built): no negation; the question says one relation phrase
and the library maps it; the base paraphrase says one, mapped to its own relation; the two relations
differ; the question and the base paraphrase read the same operators once each's relation phrase is
cut out (the same order of events, "after" or "before", the same period, the same top N); each event
returns one time column; a column the new relation reads that an event does not return is returned as
the library's source writes it, only from a table that event reads. The composition then goes through
the same rules, binding, validation and risk as any other (compose.py, feature `composed`).
"""

from __future__ import annotations

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
from core.match.operators import VISIT_NOUNS, question_operators
from core.match.outer import conjuncts
from core.match.reading import Reading
from core.match.retimed import MAPPING_SHARE, TIME_TYPES, UNITS, Phrase, _phrases, slot_masks
from core.match.spans import NUMBER, VALUE, blank, periods
from core.match.template import TIME_COLUMN, Template, dialect_named, parsed_sql, without_positions, written
from core.match.words import tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

# "the same" and a unit or a visit's noun: a relation said with no value. Which relation it writes is
# the library's (library_relations); these words only find where the phrase stands.
_NOUNS = sorted(
    {u for u in UNITS if not u.endswith("s") and u != "ago"} | set(VISIT_NOUNS), key=len, reverse=True
)
_SAME = re.compile(
    rf"\b(?:(?:within|in|during|on|at)\s+)?the\s+same\s+(?:(?:hospital|icu)\s+)?(?:{'|'.join(_NOUNS)})\b"
)
_MARK = "RELATED"  # the relation's place in a frame
_TIME_NAME = "_c"  # an event's time column, masked in a form


@dataclass(frozen=True)
class Relation:
    """A template's one relation between two events: the SQL without it (its frame), its form, its slots."""

    frame: str
    form: str  # the conjunct, time columns masked per event (T1._c), slot values masked
    slots: frozenset[str]  # names of the slots it holds ("within <number> days")


@dataclass(frozen=True)
class RelationReplace:
    """Write `conjunct` (the source's relation, its events' time columns masked) in place of the base's
    relation of form `old_form`, with the columns it reads returned as `returned` writes them, and
    `new_text` in place of the base's relation phrase."""

    old_form: str
    old_text: str  # the base question's phrase: what the answer says it replaced
    new_text: str  # the source question's phrase (its values: binding writes the question's)
    conjunct: str
    returned: tuple[tuple[str, str, str], ...]  # (event alias, column, the source's projection SQL)

    @property
    def phrase(self) -> str:
        return f"{self.new_text} instead of {self.old_text}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with its relation and phrase replaced, or None where this
        paraphrase has not the base's relation or does not say it in one phrase."""
        relation = template_relation(template)
        said = said_relation(template, relation) if relation is not None else None
        if relation is None or said is None or relation.form != self.old_form:
            return None
        sql = _rewritten(template.sql_template, template.dialect, self.conjunct, self.returned)
        if sql is None:
            return None
        return template.question[: said.start] + self.new_text + template.question[said.end :], sql


def relation_plans(
    reading: Reading, index: LibraryIndex, base: int, vote: Vote
) -> list[tuple[int, RelationReplace]]:
    """The relation the question asks of the base entry's template, with the nearest entry whose
    question says the question's relation phrase, or []."""
    template = index.entries[base].template
    if template is None or not template.usable or reading.ops.get("negation"):
        return []
    relation = template_relation(template)
    if relation is None:
        return []
    mapping = library_relations(index)
    said = said_relation(template, relation)
    if said is None or mapping.forms.get(said.pattern) != relation.form:
        return []
    asked = asked_relation(reading, mapping.forms)
    if asked is None or mapping.forms[asked.pattern] == relation.form:
        return []  # none, two, one the library never shows, or the base's own relation
    named = reading.values.spans(reading.question) if reading.values is not None else []
    own = [(s.start, s.end) for s in template.slots if s.type == VALUE]
    if _operators_cut(reading.question, asked, tuple(named)) != _operators_cut(
        template.question, said, tuple(own)
    ):
        return []  # the question differs from the base in more than its relation
    sources = mapping.sayers[asked.pattern]
    if not sources:
        return []
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    found = _source(index, source)
    if found is None:
        return []
    new_text, conjunct, returned = found
    old_text = template.question[said.start : said.end]
    return [(source, RelationReplace(relation.form, old_text, new_text, conjunct, returned))]


def _operators_cut(text: str, phrase: Phrase, named: tuple[tuple[int, int], ...]) -> dict:
    """The operators of a text with its relation phrase cut out and its named values and periods
    blanked (as library.match_library reads a question: "first" inside a diagnosis is no operator)."""
    kept = [(s, e) for s, e in (*named, *periods(text)) if e <= phrase.start or s >= phrase.end]
    cut = text[: phrase.start] + " " * (phrase.end - phrase.start) + text[phrase.end :]
    return question_operators(blank(cut, kept))


# --- what the library shows -------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryRelations:
    """pattern -> the relation form the library writes for it, and the entries that say each."""

    forms: dict[tuple[str, ...], str]
    sayers: dict[tuple[str, ...], tuple[int, ...]]


def library_relations(index: LibraryIndex) -> LibraryRelations:
    """Read once per library (cached on the index, as retimed.py caches its timings)."""
    cached = getattr(index, "_compose_relations", None)
    if cached is not None:
        return cached
    frames: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        relation = template_relation(template) if template is not None and template.usable else None
        if relation is not None:
            frames[relation.frame][relation.form].append(key)
    votes: dict[tuple[str, ...], Counter] = defaultdict(Counter)
    sayers: dict[tuple[str, ...], list[tuple[int, str]]] = defaultdict(list)
    for forms in frames.values():
        if len(forms) < 2:
            continue  # no other relation in this frame: the library shows no phrase-to-relation pair
        for keys in forms.values():
            for key in keys:
                for i in index.members[key]:
                    template = index.entries[i].template
                    relation = template_relation(template) if template is not None else None
                    said = said_relation(template, relation) if template and relation else None
                    if said is not None and relation is not None:
                        votes[said.pattern][relation.form] += 1
                        sayers[said.pattern].append((i, relation.form))
    mapped = {}
    for pattern, by in votes.items():
        form, n = by.most_common(1)[0]
        if n >= MAPPING_SHARE * sum(by.values()):
            mapped[pattern] = form
    out = LibraryRelations(
        mapped, {p: tuple(i for i, f in sayers[p] if f == form) for p, form in mapped.items()}
    )
    index._compose_relations = out  # type: ignore[attr-defined]
    return out


def _source(index: LibraryIndex, i: int) -> tuple[str, str, tuple[tuple[str, str, str], ...]] | None:
    """The source entry's phrase (its own values), its relation conjunct and the columns it returns."""
    template = index.entries[i].template
    relation = template_relation(template) if template is not None else None
    said = said_relation(template, relation) if template is not None and relation is not None else None
    if template is None or said is None:
        return None
    found = _source_parts(template.sql_template, template.dialect)
    return (template.question[said.start : said.end], *found) if found is not None else None


@functools.lru_cache(maxsize=4096)
def _source_parts(sql: str, dialect: str) -> tuple[str, tuple[tuple[str, str, str], ...]] | None:
    """The relation conjunct (its events' time columns masked) and, for each other column it reads,
    the projection its event writes for it."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return None
    found = _related(tree)
    if found is None:
        return None
    _, part, derived = found
    returned = []
    for column in part.find_all(exp.Column):
        if not TIME_COLUMN.search(column.name.lower()):
            projection = _projection(derived[column.table], column.name)
            if projection is None:
                return None
            returned.append((column.table, column.name, projection.sql(dialect=dialect_named(dialect))))
    conjunct = _time_masked(part.copy()).sql(dialect=dialect_named(dialect), copy=False)
    return conjunct, tuple(sorted(set(returned)))


# --- a template's relation --------------------------------------------------------------------------


def template_relation(template: Template) -> Relation | None:
    """The template's one relation between two events, or None."""
    return _relation(template.sql_template, template.dialect, slot_masks(template))


@functools.lru_cache(maxsize=16384)
def _relation(sql: str, dialect: str, masks: tuple[tuple[int, str, str, str, str], ...]) -> Relation | None:
    """Once per SQL: a calibration builds a library per fold from the same templates."""
    try:
        parsed = parsed_sql(sql, dialect)
    except (SqlglotError, ValueError, RecursionError):
        return None
    if "JOIN (SELECT" not in sql.upper() or _related(parsed) is None:
        return None  # most templates relate no two events (no derived table joined): read without a copy
    tree = parsed.copy()  # changed below: a copy
    literals = list(tree.find_all(exp.Literal))
    names = {}
    for index, prefix, suffix, kind, name in masks:
        if index < len(literals):
            marked = exp.Literal.string(f"{prefix}<{kind}>{suffix}")
            names[id(marked)] = name
            literals[index].replace(marked)
    found = _related(tree)
    assert found is not None  # the same tree, its literals masked
    select, part, derived = found
    slots = frozenset(names[id(lit)] for lit in part.find_all(exp.Literal) if id(lit) in names)
    form = _time_masked(part.copy()).sql(dialect=dialect_named(dialect), copy=False)
    for alias, column in _read_alone(select, part):
        _unreturn(derived[alias], column)
    part.replace(exp.func(_MARK))
    if any(names.get(id(lit)) in slots for lit in tree.find_all(exp.Literal)):
        return None  # a slot of the relation used outside it too: replacing it would change more
    return Relation(tree.sql(dialect=dialect_named(dialect), copy=False), form, slots)


def _related(tree: exp.Expr) -> tuple[exp.Select, exp.Expr, dict[str, exp.Select]] | None:
    """The one SELECT that joins two derived tables (the events) and its one WHERE conjunct that
    relates them (their columns compared, other than the order of the two: T1.charttime < T2.charttime),
    with the derived tables' SELECTs by alias; None where there is none or more than one."""
    found = []
    for select in tree.find_all(exp.Select):
        derived = _derived(select)
        where = select.args.get("where")
        if len(derived) < 2 or where is None:
            continue
        parts = [p for p in conjuncts(where.this) if _relates(p, derived)]
        if len(parts) != 1:
            return None
        found.append((select, parts[0], derived))
    return found[0] if len(found) == 1 else None


def _derived(select: exp.Select) -> dict[str, exp.Select]:
    """The SELECT's derived tables (FROM and JOIN subqueries) by alias, read from its own clauses."""
    out = {}
    for node in (select.args.get("from_"), *(select.args.get("joins") or ())):
        sub = node.this if node is not None else None
        if isinstance(sub, exp.Subquery) and sub.alias and isinstance(sub.this, exp.Select):
            out[sub.alias] = sub.this
    return out


def _relates(part: exp.Expr, derived: dict[str, exp.Select]) -> bool:
    if part.find(exp.Select) is not None:
        return False
    columns = list(part.find_all(exp.Column))
    tables = {c.table for c in columns}
    if len(tables) < 2 or not tables <= derived.keys():
        return False
    plain_order = isinstance(part, (exp.LT, exp.GT, exp.LTE, exp.GTE)) and all(
        isinstance(side, exp.Column) for side in (part.this, part.expression)
    )
    return not plain_order


def _time_masked(part: exp.Expr) -> exp.Expr:
    for column in part.find_all(exp.Column):
        if TIME_COLUMN.search(column.name.lower()):
            column.set("this", exp.to_identifier(_TIME_NAME))
    return part


def _read_alone(select: exp.Select, part: exp.Expr) -> set[tuple[str, str]]:
    """The events' columns the relation reads that nothing else of the SELECT reads (returned for it alone)."""
    inside = {id(c) for c in part.find_all(exp.Column)}
    elsewhere = {(c.table, c.name) for c in select.find_all(exp.Column) if id(c) not in inside}
    return {(c.table, c.name) for c in part.find_all(exp.Column)} - elsewhere


def _projection(event: exp.Select, column: str) -> exp.Expr | None:
    found = [e for e in event.expressions if e.alias_or_name == column]
    return found[0] if len(found) == 1 else None


def _unreturn(event: exp.Select, column: str) -> None:
    event.set("expressions", [e for e in event.expressions if e.alias_or_name != column])


def _time_of(event: exp.Select) -> str | None:
    """The one time column an event returns, or None."""
    found = [e.alias_or_name for e in event.expressions if TIME_COLUMN.search(e.alias_or_name.lower())]
    return found[0] if len(found) == 1 else None


def _read_tables(event: exp.Select) -> set[str]:
    out = set()
    for key in ("from", "from_", "joins"):
        value = event.args.get(key)
        for node in value if isinstance(value, list) else [value] if value is not None else []:
            if isinstance(node.this, exp.Table):
                out |= {node.this.name.lower(), node.this.alias_or_name.lower()}  # as columns name it
    return out


@functools.lru_cache(maxsize=16384)
def _rewritten(
    sql: str, dialect: str, conjunct: str, returned: tuple[tuple[str, str, str], ...]
) -> str | None:
    """The SQL with its relation replaced by `conjunct`, each event's time column written in, the columns
    the old relation alone read no longer returned and those the new one reads returned: once per base
    paraphrase and source."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
        new = _parsed(conjunct, dialect).copy()
    except (SqlglotError, ValueError, RecursionError):
        return None
    found = _related(tree)
    if found is None:
        return None
    select, part, derived = found
    for column in new.find_all(exp.Column):
        event = derived.get(column.table)
        time = _time_of(event) if event is not None else None
        if time is None:
            return None  # an event the base does not have, or one that returns no time or two
        if column.name == _TIME_NAME:
            column.set("this", exp.to_identifier(time))
    for alias, column in _read_alone(select, part):
        _unreturn(derived[alias], column)
    part.replace(new)
    for column in list(new.find_all(exp.Column)):
        event = derived[column.table]
        if _projection(event, column.name) is not None:
            continue
        shown = [p for a, c, p in returned if a == column.table and c == column.name]
        projection = _parsed(shown[0], dialect).copy() if shown else None
        tables = (
            {c.table.lower() for c in projection.find_all(exp.Column)} if projection is not None else {"?"}
        )
        if projection is None or not tables <= _read_tables(event):
            return None  # a column the event cannot return as the library writes it
        event.set("expressions", [*event.expressions, projection])
    return written(tree, dialect)  # our copy, kept as its parse


@functools.lru_cache(maxsize=4096)
def _parsed(sql: str, dialect: str) -> exp.Expr:
    """A source's relation (or projection) parsed once; callers copy it before changing anything."""
    return without_positions(sqlglot.parse_one(sql, dialect=dialect_named(dialect)))


# --- relation phrases -------------------------------------------------------------------------------


def said_relation(template: Template, relation: Relation | None) -> Phrase | None:
    """The paraphrase's one relation phrase: a phrase made of exactly the relation's slots, or where it
    has none, its one "the same …" phrase; None otherwise."""
    if relation is None:
        return None
    same = _same_phrases(template.question)
    if not relation.slots:
        return same[0] if len(same) == 1 else None
    spans = tuple(
        (s.start, s.end, s.type, s.name) for s in template.slots if s.type in TIME_TYPES or s.type == NUMBER
    )
    found = [p for p in _phrases(template.question, spans) if p.names == relation.slots]
    return found[0] if len(found) == 1 and not same else None


def asked_relation(reading: Reading, forms: dict[tuple[str, ...], str]) -> Phrase | None:
    """The question's one relation phrase the library maps (`forms`), or None (none, or more than one
    relation phrase, mapped or not: "the same …" is one whatever it says)."""
    spans = tuple((s.start, s.end, s.type) for s in reading.typed if s.type in TIME_TYPES or s.type == NUMBER)
    found = [p for p in _phrases(reading.question, spans) if p.pattern in forms]
    found += _same_phrases(reading.question)
    return found[0] if len(found) == 1 and found[0].pattern in forms else None


@functools.lru_cache(maxsize=1 << 15)
def _same_phrases(text: str) -> tuple[Phrase, ...]:
    lowered = text.lower()
    return tuple(
        Phrase(tuple(t.lower for t in tokenize(m.group(0))), m.start(), m.end())
        for m in _SAME.finditer(lowered)
    )
