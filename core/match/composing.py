"""One composition made: a base template's nearest paraphrases with a condition added, dropped or
replaced, or with a swap, each as a library entry of its own template, and the composed family.

Why apart from compose.py (which picks what to compose): a composition is made the same way
whatever asked for it (compose_results, compose_follow_up, swapped.compose_swaps), and made once,
keyed by content, since the same compositions come back question after question and fold after
fold in a calibration.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from core.match.build import build_template
from core.match.candidate import MatchResult, TemplateCandidate
from core.match.compared import Swap
from core.match.conditions import Condition, conditions_of
from core.match.index import Entry, Family, LibraryIndex, entry_for, paraphrase_family
from core.match.outer import conjuncts, outer_tables, read_below, reads_other_below
from core.match.precheck import refused_family
from core.match.replace import replaced
from core.match.spans import YEAR
from core.match.template import Template, dialect_named, parsed_sql, written

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

MEMBERS_COMPOSED = 3  # paraphrases of a base template composed into the composed family


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


def try_plan(
    plan: Composed, index: LibraryIndex, vote: Vote, match: Callable, ops: dict, then: Composed | None = None
) -> MatchResult | None:
    """The composition matched with the nearest paraphrases of the base template in turn; one the
    operators rule refuses for `ops` with its operator family alone (precheck.py: the same results),
    and then its first paraphrase alone: the rule refuses every one, so none is hard_ok and the
    result is the first's whichever others are matched (a refused match reads and changes nothing).
    `then`: a second change made on the first's composition (a chain, chained.py), planned on it."""
    composed = _composed_entries(plan, index, vote, then)
    if not composed:
        return None
    refused = refused_family(ops, composed)
    family = refused or composed_family(composed, index.families[plan.key])
    tried = []
    for entry in composed[:1] if refused is not None else composed:
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
        composed_from=(
            index.entries[plan.base].example_id,
            *(p.condition.example_id for p in (plan, then) if p is not None and not p.drop),
        ),
        composed_with=" and ".join(_shown(p) for p in (plan, then) if p is not None),
    )


def _shown(plan: Composed) -> str:
    """One change's words as the answer shows them ("without male", "older than 65 instead of …")."""
    return (
        ("without " if plan.drop else "")
        + plan.condition.phrase
        + (f" instead of {plan.old.phrase}" if plan.old is not None else "")
    )


def _composed_entries(
    plan: Composed, index: LibraryIndex, vote: Vote, then: Composed | None = None
) -> list[Entry]:
    """The base template's nearest paraphrases, each composed (question and SQL) alike; with `then`,
    each composition composed once more by the second change."""
    members = sorted(index.members[plan.key], key=lambda i: -vote.sims[i])[:MEMBERS_COMPOSED]
    out = []
    for i in members:
        entry = index.entries[i]
        assert entry.template is not None
        composed = composed_entry(entry, plan.condition, drop=plan.drop, swap=plan.swap, old=plan.old)
        if composed is not None and then is not None:
            composed = composed_entry(composed, then.condition, drop=then.drop, swap=then.swap, old=then.old)
        if composed is not None:
            out.append(composed)
    keys = {e.key for e in out}
    return [e for e in out if e.key == out[0].key] if len(keys) > 1 else out


_COMPOSED: dict[tuple, Entry | None] = {}


def composed_entry(
    entry: Entry,
    cond: Condition,
    *,
    drop: bool,
    swap: Swap | None = None,
    old: Condition | None = None,
) -> Entry | None:
    """One paraphrase composed with the condition (added, or dropped) as a library entry, or None;
    made once: the same compositions come back question after question, and fold after fold in a
    calibration (keyed by content, so a changed library never reads a stale one). A swap's entry is
    keyed by the swap alone, not by `cond`: _compose_one reads nothing of the condition for a swap
    (`cond` is then only its wording, what the answer shows), so questions that say one swap in
    other words (retimed.TimeReplace.shown) share it."""
    template = entry.template
    assert template is not None
    key = (entry.example_id, template.question, template.sql_template, template.dialect, drop, swap,
           old.ident if old is not None else "",
           None if swap is not None else (cond.table, cond.slot_type, cond.phrase, cond.ident, cond.sql))  # fmt: skip
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
    if cond.slot_type == YEAR and reads_other_below(tree, cond.table):  # whose year: not known
        return ""
    conjunct = cond.conjunct.copy()
    for column in conjunct.find_all(exp.Column):
        column.set("table", exp.to_identifier(aliases[0]))
    return written(tree.where(conjunct, copy=False), template.dialect)


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
        if masked.sql(dialect=dialect_named(template.dialect), copy=False) != ident:
            keep.append(conjunct)
    if len(keep) == len(conjuncts(tree.args["where"].this)):
        return ""
    tree.set("where", None)
    return written(tree.where(*keep, copy=False) if keep else tree, template.dialect)


def composed_family(entries: list[Entry], base: Family) -> Family:
    """The composed paraphrases' family, read as the library reads its own (index.LibraryIndex),
    with the library's wording, synonyms and subjects of the base template's family. Made afresh
    for each composition: nothing of it is shared with the library's families but the library-wide
    wording they share already, so a rule's memo on it (rules.operators) lives as long as the match."""
    return paraphrase_family(entries, base)
