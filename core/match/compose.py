"""Composed answers: a verified template's SQL with a condition that another verified template
expresses added to its WHERE (or one of its own conditions left out), built on the SQL tree.

Why: most questions a library has not seen are a verified question with one condition more or less
("how many female patients over 80?" beside "how many patients are older than 65?" and "how many
female patients are there?"). The condition and its wording both come from the library: a WHERE
conjunct over one table with one slot (a gender, a number compared, a named value, a year) and
the words of its question around that slot ("older than 65", "female", "for elective"). The
composed example (the base question with the phrase added or removed, the composed SQL) becomes a
template like any other (build.build_template), with a family made of the base template's
paraphrases composed alike, and goes through the same rules, binding, SQL validation and risk as
a verified template: a composition the guard would refuse for a verified question is refused too.
Its features say `composed`, so the calibrated P(correct) learns how compositions fail (the
cross-validation composes for held-out templates the same way, through library.match_library).
Composition is tried only when no verified template passes the rules: it never competes with one.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.build import build_template
from core.match.candidate import MatchResult, TemplateCandidate
from core.match.compared import Swap, comparison_plans
from core.match.direction import order_plans
from core.match.index import UNANSWERABLE, Entry, Family, LibraryIndex, entry_for
from core.match.items import item_plans, library_items
from core.match.matcher import match_one
from core.match.outer import conjuncts, outer_tables, read_below
from core.match.precheck import refused_family
from core.match.reading import Reading
from core.match.replace import REPLACEABLE_TYPES, replaced, replacement_plans, words
from core.match.retabled import table_plans
from core.match.retimed import period_plans
from core.match.risk import Calibration
from core.match.spans import DECADE, GENDER, NUMBER, VALUE, YEAR
from core.match.swap import library_swaps, swap_plans
from core.match.template import Template, parsed_sql
from core.match.untimed import untimed_plans
from core.match.values import ValueLookup
from core.match.words import tokenize
from core.types import CatalogSchema

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls this module
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
BASES_TRIED = 5  # best voted templates a condition is added to (or dropped from)
COMPOSED_TRIED = 8  # compositions tried per question at most
MEMBERS_COMPOSED = 3  # paraphrases of a base template composed into the composed family


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


@dataclass(frozen=True)
class Composed:
    """A composition to try: the base template's entry, the condition, added or dropped."""

    base: int  # index of the base entry in the library
    key: str  # base template key
    condition: Condition
    drop: bool
    source: int = -1  # index of the entry the condition comes from (the base's own when dropped)
    swap: Swap | None = None  # a swap (swap.py, items.py, direction.py, compared.py)
    old: Condition | None = None  # the base's condition `condition` takes the place of (a replacement)


def compose_results(
    reading: Reading,
    index: LibraryIndex,
    tried: Sequence[tuple[int, str, float]],
    vote: Vote,
    *,
    risk: Calibration,
    match: Callable[[TemplateCandidate], MatchResult],
) -> list[MatchResult]:
    """Composed results for the question read as `reading`: for the best voted templates (`tried`:
    vote rank, key, share), each condition the question seems to add or leave out, matched by
    `match` (matcher.match_one with the caller's lookup and catalog); confidences from `risk`."""
    out: list[MatchResult] = []
    for rank, key, share in list(tried)[:BASES_TRIED]:
        plans = _plans(reading, index, key, vote) + _swaps(reading, index, key, vote)
        plans += [Composed(b, key, new, drop=False, source=s, old=old) for b, s, new, old in
                  replacement_plans(reading, index, key, vote, own=conditions_of, library=lambda kind: _conditions(index, kind, vote))]  # fmt: skip
        for plan in plans + _item_swaps(reading, index, key, vote):
            result = _try(plan, index, vote, match, reading.ops)
            if result is None:
                continue
            features = {
                **result.features,
                **_vote_features(vote, index, plan, rank, share),
                "composed": 1.0,
            }
            confidence = round(risk.predict(features), 4) if result.hard_ok else 0.0
            out.append(dataclasses.replace(result, features=features, confidence=confidence))
            if len(out) >= COMPOSED_TRIED:
                return out
    return out


def compose_ready(index: LibraryIndex) -> None:
    """Read what composition needs from the whole library (its conditions, its aggregate words, the
    tables it uses alike) now, with the library's build: the first question that composes would
    otherwise pay for it (seconds on a 5,000-example library). Cached on the index."""
    _library_conditions(index)
    library_swaps(index)
    library_items(index)


def compose_follow_up(
    reading: Reading,
    index: LibraryIndex,
    earlier: Entry,
    vote: Vote,
    *,
    risk: Calibration,
    match: Callable[[TemplateCandidate], MatchResult],
) -> list[MatchResult]:
    """A follow-up that adds a condition ("and how many of them were over 80?"), composed on the
    earlier question's SQL (`earlier`: its question and SQL as a library entry, example id None).
    `reading` reads the earlier question and the follow-up together, so binding finds the earlier
    values and the new one, and the guard judges every word of both against the earlier question's
    wording plus the condition's. The earlier question is the base itself, so the vote reads as a
    perfect match for it; only the condition comes from the library."""
    template = earlier.template
    if template is None or not template.usable or not index.families:
        return []
    library_family = next(iter(index.families.values()))  # wording, synonyms, subjects: library-wide
    said, has = _said_types(reading), _slot_types(template)
    tables, used = set(outer_tables(template).values()), _columns(template.sql_template, template.dialect)
    out: list[MatchResult] = []
    for kind in CONDITION_TYPES:
        if said.get(kind, 0) <= has.get(kind, 0):
            continue
        for _, cond in _conditions(index, kind, vote):
            if cond.table not in tables or cond.columns & used:
                continue
            entry = _composed_entry(earlier, cond, drop=False)
            if entry is None:
                continue
            family = _family([entry], library_family)
            result = match(TemplateCandidate(None, entry.template, 1.0, entry.question, family))  # type: ignore[arg-type]
            features = {**result.features, **_FOLLOW_UP_VOTE, "composed": 1.0}
            confidence = round(risk.predict(features), 4) if result.hard_ok else 0.0
            out.append(dataclasses.replace(
                result, features=features, confidence=confidence, example_question=earlier.question,
                composed_from=(cond.example_id,), composed_with=cond.phrase,
            ))  # fmt: skip
            if len(out) >= COMPOSED_TRIED:
                return out
    out.sort(key=lambda r: (-int(r.hard_ok), -r.confidence))
    return out


# The vote for a follow-up's base: the earlier question is the base itself.
_FOLLOW_UP_VOTE = {"vote_share": 1.0, "vote_margin": 1.0, "vote_rank": 0.0, "top_similarity": 1.0,
                   "member_similarity": 1.0, "unanswerable_share": 0.0, "family_size": 0.6931}  # fmt: skip


def match_composed(
    reading: Reading,
    *,
    lookup: ValueLookup,
    catalog: CatalogSchema | None,
    values: Any,
    probe: Callable[[str], bool] | None,
) -> Callable[[TemplateCandidate], MatchResult]:
    """The matcher for composed candidates: match_one with the question's lookup and catalog."""

    def match(candidate: TemplateCandidate) -> MatchResult:
        return match_one(reading, candidate, lookup=lookup, catalog=catalog, values=values, probe=probe)

    return match


def _vote_features(
    vote: Vote, index: LibraryIndex, plan: Composed, rank: int, share: float
) -> dict[str, float]:
    """The vote as the risk model reads it, for a composition: the question's neighbours are both
    parts' paraphrases, so the vote for the two templates together, the nearer part's similarity."""
    features = vote.features(plan.key, rank, share, plan.base, index.families[plan.key].size)
    if plan.drop or plan.source < 0:
        return features
    parts = {plan.key, index.entries[plan.source].key}
    together = min(1.0, sum(s for k, s in vote.ranked if k in parts))
    others = [s for k, s in vote.ranked if k not in parts]
    nearer = max(float(vote.sims[plan.base]), float(vote.sims[plan.source]))
    ranks = [r for r, (k, _) in enumerate(p for p in vote.ranked if p[0] != UNANSWERABLE) if k in parts]
    return features | {
        "vote_rank": float(min(ranks, default=rank)),
        "vote_share": round(together, 4),
        "vote_margin": round(together - (others[0] if others else 0.0), 4),
        "member_similarity": round(nearer, 4),
    }


# --- what to compose ------------------------------------------------------------------------------


def _plans(reading: Reading, index: LibraryIndex, key: str, vote: Vote) -> list[Composed]:
    """Conditions the question says and the base template lacks (added), and the base template's
    conditions the question does not say (dropped), nearest source first."""
    members = sorted(index.members[key], key=lambda i: -vote.sims[i])
    base = index.entries[members[0]]
    assert base.template is not None
    said = _said_types(reading)
    has = _slot_types(base.template)
    tables = set(outer_tables(base.template).values())
    used = _columns(base.template.sql_template, base.template.dialect)
    plans: list[Composed] = []
    for kind in CONDITION_TYPES:
        if said.get(kind, 0) > has.get(kind, 0):
            for source, cond in _conditions(index, kind, vote):
                # A column the template already reads is not free to be narrowed: "diagnosed with X"
                # and "… with sepsis" on one diagnosis row, or the gender asked for, is another question.
                if cond.table in tables and not cond.columns & used:
                    plans.append(Composed(members[0], key, cond, drop=False, source=source))
        elif has.get(kind, 0) > said.get(kind, 0) and kind in DROPPABLE_TYPES:
            plans += [
                Composed(members[0], key, c, drop=True, source=members[0])
                for c in conditions_of(base.example_id, base.template)
                if c.slot_type == kind
            ]
    return plans[:COMPOSED_TRIED]


def _swaps(reading: Reading, index: LibraryIndex, key: str, vote: Vote) -> list[Composed]:
    """The swap the question asks of the base (swap.py, direction.py, compared.py), worded from its source."""
    for base in sorted(index.members[key], key=lambda i: -vote.sims[i])[:MEMBERS_COMPOSED]:
        plans = swap_plans(reading.question, index, base, vote) or order_plans(reading.question, index, base, vote) or comparison_plans(reading, index, base, vote) or period_plans(reading, index, base, vote) or untimed_plans(reading, index, base, vote)  # fmt: skip
        if plans:  # the nearest paraphrase that says the base's function (or first/last) in one word
            source, swap = plans[0]
            wording = Condition(index.entries[source].example_id, "", exp.true(), "aggregate", swap.phrase)
            return [Composed(base, key, wording, drop=False, source=source, swap=swap)]
    return []


def _item_swaps(reading: Reading, index: LibraryIndex, key: str, vote: Vote) -> list[Composed]:
    """The table (retabled.py) or else item (items.py) swaps the question asks of the base template."""
    base = max(index.members[key], key=lambda i: vote.sims[i])
    out = []
    for source, swap in table_plans(reading, index, base, vote) or item_plans(reading.question, reading.values, index, base, vote):  # fmt: skip
        wording = Condition(index.entries[source].example_id, "", exp.true(), VALUE, swap.phrase)
        out.append(Composed(base, key, wording, drop=False, source=source, swap=swap))
    return out


def _said_types(reading: Reading) -> dict[str, int]:
    counts: dict[str, int] = {}
    for span in reading.typed:
        counts[span.type] = counts.get(span.type, 0) + 1
    if reading.values is not None:
        counts[VALUE] = counts.get(VALUE, 0) + len(reading.values.spans(reading.question))
    return counts


def _slot_types(template: Template) -> dict[str, int]:
    counts: dict[str, int] = {}
    for slot in template.slots:
        counts[slot.type] = counts.get(slot.type, 0) + 1
    return counts


@functools.lru_cache(maxsize=16384)
def _columns(sql: str, dialect: str) -> frozenset[str]:
    """Every column name a template's SQL reads, anywhere in it: once per SQL (every held-out
    question that composes asks it of its best voted templates)."""
    return frozenset(_columns_of(parsed_sql(sql, dialect)))


def _columns_of(node: exp.Expr) -> set[str]:
    return {c.name.lower() for c in node.find_all(exp.Column)}


def _conditions(index: LibraryIndex, kind: str, vote: Vote) -> list[tuple[int, Condition]]:
    """The library's conditions of one slot type (with the entry each comes from), one per kind of
    conjunct, the one whose question is nearest to this question first (its wording is likeliest
    to be this question's)."""
    memo = vote.__dict__.setdefault("_conditions", {})  # one question: each kind picked once
    if kind not in memo:
        entries, conds = _library_conditions(index).get(kind, ((), ()))
        picked: dict[str, tuple[int, Condition]] = {}
        if conds:
            order = np.argsort(-vote.sims[np.asarray(entries)], kind="stable")
            for k in order:  # nearest first: the first of each kind of conjunct is its nearest
                picked.setdefault(conds[k].ident, (entries[k], conds[k]))
        memo[kind] = list(picked.values())
    return memo[kind]


def _library_conditions(index: LibraryIndex) -> dict[str, tuple[tuple[int, ...], tuple[Condition, ...]]]:
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
            f"{tables[next(iter(aliases))]}:{masked.sql(dialect=template.dialect, copy=False)}",
            plain.sql(dialect=template.dialect), frozenset(_columns_of(plain)),
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


# --- composing ------------------------------------------------------------------------------------


def _try(plan: Composed, index: LibraryIndex, vote: Vote, match: Callable, ops: dict) -> MatchResult | None:
    """The composition matched with the nearest paraphrases of the base template in turn; one the
    operators rule refuses for `ops` with its operator family alone (precheck.py: the same results)."""
    composed = _composed_entries(plan, index, vote)
    if not composed:
        return None
    family = refused_family(ops, composed) or _family(composed, index.families[plan.key])
    tried = []
    for entry in composed:
        assert entry.template is not None
        candidate = TemplateCandidate(
            entry.example_id, entry.template, float(vote.sims[plan.base]), entry.question, family
        )
        tried.append(match(candidate))
        if tried[-1].hard_ok:
            break
    result = next((r for r in tried if r.hard_ok), tried[0])
    base_question = index.entries[plan.base].question
    return dataclasses.replace(
        result,
        example_question=base_question,
        composed_from=(index.entries[plan.base].example_id,)
        + (() if plan.drop else (plan.condition.example_id,)),
        composed_with=("without " if plan.drop else "")
        + plan.condition.phrase
        + (f" instead of {plan.old.phrase}" if plan.old is not None else ""),
    )


def _composed_entries(plan: Composed, index: LibraryIndex, vote: Vote) -> list[Entry]:
    """The base template's nearest paraphrases, each composed (question and SQL) alike."""
    members = sorted(index.members[plan.key], key=lambda i: -vote.sims[i])[:MEMBERS_COMPOSED]
    out = []
    for i in members:
        entry = index.entries[i]
        assert entry.template is not None
        composed = _composed_entry(entry, plan.condition, drop=plan.drop, swap=plan.swap, old=plan.old)
        if composed is not None:
            out.append(composed)
    keys = {e.key for e in out}
    return [e for e in out if e.key == out[0].key] if len(keys) > 1 else out


_COMPOSED: dict[tuple, Entry | None] = {}


def _composed_entry(
    entry: Entry,
    cond: Condition,
    *,
    drop: bool,
    swap: Swap | None = None,
    old: Condition | None = None,
) -> Entry | None:
    """One paraphrase composed with the condition (added, or dropped) as a library entry, or None;
    made once: the same compositions come back question after question, and fold after fold in a
    calibration (keyed by content, so a changed library never reads a stale one)."""
    template = entry.template
    assert template is not None
    key = (entry.example_id, template.question, template.sql_template, template.dialect,
           cond.table, cond.slot_type, cond.phrase, cond.ident, cond.sql, drop, swap,
           old.ident if old is not None else "")  # fmt: skip
    if key not in _COMPOSED:
        if len(_COMPOSED) > 50_000:
            _COMPOSED.clear()
        made = _compose_one(entry, Composed(-1, entry.key, cond, drop=drop, swap=swap, old=old))
        _COMPOSED[key] = _entry(entry, made)
    return _COMPOSED[key]


def _entry(entry: Entry, made: tuple[str, str] | None) -> Entry | None:
    """The composed (question, SQL) as a library entry of its own template, or None."""
    if made is None or entry.template is None:
        return None
    question, sql = made
    composed = entry_for(entry.example_id, question, sql, _template(question, sql, entry.template.dialect))
    return composed if composed is not None and composed.template is not None else None


@functools.lru_cache(maxsize=1 << 15)
def _template(question: str, sql: str, dialect: str) -> Template:
    """A composition's template, built once: the same ones come back question after question, fold after
    fold (train: 16,478 distinct of 20,531 asked; 8,192 rebuilt ~290). Frozen: callers never change one."""
    return build_template(question, sql, dialect=dialect, generated=True)


def _compose_one(entry: Entry, plan: Composed) -> tuple[str, str] | None:
    """One paraphrase's question and SQL with the condition added (or dropped)."""
    template = entry.template
    assert template is not None
    if plan.swap is not None:
        return plan.swap.apply(template)
    if plan.old is not None:
        own = [c for c in conditions_of(entry.example_id, template) if c.ident == plan.old.ident]
        return replaced(template, own[0], plan.condition) if len(own) == 1 else None
    if plan.drop:
        own = [c for c in conditions_of(entry.example_id, template) if c.ident == plan.condition.ident]
        if not own:
            return None
        cond = own[0]
        question = " ".join((template.question[: cond.start] + template.question[cond.end :]).split())
        sql = _without(template, cond)
    else:
        text = template.question.rstrip().rstrip("?").rstrip()
        question = f"{text} {plan.condition.phrase}?"
        sql = _with(template, plan.condition)
    return (question, sql) if sql else None


def _with(template: Template, cond: Condition) -> str:
    tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
    aliases = [a for a, t in outer_tables(template).items() if t == cond.table]
    if len(aliases) != 1 or not isinstance(tree, exp.Select) or read_below(tree, cond.table):
        return ""
    conjunct = cond.conjunct.copy()
    for column in conjunct.find_all(exp.Column):
        column.set("table", exp.to_identifier(aliases[0]))
    return tree.where(conjunct, copy=False).sql(dialect=template.dialect, copy=False)


def _without(template: Template, cond: Condition) -> str:
    tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
    if not isinstance(tree, exp.Select) or tree.args.get("where") is None or read_below(tree, cond.table):
        return ""
    ident = cond.ident.partition(":")[2]
    keep = []
    for conjunct in conjuncts(tree.args["where"].this):
        masked = conjunct.copy()
        for column in masked.find_all(exp.Column):
            column.set("table", None)
        for lit in masked.find_all(exp.Literal):
            lit.replace(exp.var(cond.slot_type))
        if masked.sql(dialect=template.dialect, copy=False) != ident:
            keep.append(conjunct)
    if len(keep) == len(conjuncts(tree.args["where"].this)):
        return ""
    tree.set("where", None)
    return (tree.where(*keep, copy=False) if keep else tree).sql(dialect=template.dialect, copy=False)


_FAMILIES: dict[tuple, Family] = {}


def _own_family(entries: list[Entry]) -> Family:
    """The composed paraphrases' own family, read once per set of compositions (keyed by content:
    a composed entry's template is made from its question and SQL alone)."""
    key = tuple((e.question, e.template.sql_template if e.template else "", e.key) for e in entries)
    if key not in _FAMILIES:
        if len(_FAMILIES) > 20_000:
            _FAMILIES.clear()
        mini = LibraryIndex(entries, np.zeros((len(entries), 1), dtype=np.float32))
        _FAMILIES[key] = mini.families[entries[0].key]
    return _FAMILIES[key]


def _family(entries: list[Entry], base: Family) -> Family:
    """The composed paraphrases' family, read as the library reads its own (index.LibraryIndex),
    with the library's wording, synonyms and subjects of the base template's family."""
    family = _own_family(entries)
    return dataclasses.replace(
        family,
        neutral=base.neutral,
        synonyms=base.synonyms,
        subjects=base.subjects,
        core=family.core - base.neutral,
        paraphrases=tuple(dict.fromkeys((w - base.neutral, o) for w, o in family.paraphrases)),
    )
