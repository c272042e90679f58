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

This module picks what to compose; conditions.py reads the conditions, composing.py makes one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from core.match.candidate import MatchResult, TemplateCandidate
from core.match.compared import comparison_plans
from core.match.composing import MEMBERS_COMPOSED, Composed, composed_entry, composed_family, try_plan
from core.match.conditions import (
    CONDITION_TYPES,
    DROPPABLE_TYPES,
    Condition,
    columns_read,
    conditions_of,
    library_conditions,
    nearest_conditions,
    said_types,
    slot_types,
)
from core.match.direction import order_plans
from core.match.index import UNANSWERABLE, Entry, LibraryIndex
from core.match.items import item_plans, library_items
from core.match.matcher import match_one
from core.match.outer import outer_tables
from core.match.reading import Reading
from core.match.related import library_relations, relation_plans
from core.match.replace import replacement_plans
from core.match.reselected import column_plans, library_columns
from core.match.retabled import table_plans
from core.match.retimed import period_plans
from core.match.revisited import library_visits, visit_plans
from core.match.risk import Calibration
from core.match.spans import VALUE
from core.match.swap import library_swaps, swap_plans
from core.match.timed import library_times, time_plans
from core.match.untimed import untimed_plans
from core.match.values import ValueLookup
from core.types import CatalogSchema

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls this module
    from core.match.library import Vote

BASES_TRIED = 5  # best voted templates a condition is added to (or dropped from)
COMPOSED_TRIED = 8  # compositions tried per question at most


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
                  replacement_plans(reading, index, key, vote, own=conditions_of, library=lambda kind: nearest_conditions(index, kind, vote))]  # fmt: skip
        for plan in plans + _item_swaps(reading, index, key, vote):
            result = try_plan(plan, index, vote, match, reading.ops)
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
    library_conditions(index)
    library_swaps(index)
    library_items(index)
    library_columns(index)
    library_times(index)
    library_visits(index)
    library_relations(index)


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
    said, has = said_types(reading), slot_types(template)
    tables, used = set(outer_tables(template).values()), columns_read(template.sql_template, template.dialect)
    out: list[MatchResult] = []
    for kind in CONDITION_TYPES:
        if said.get(kind, 0) <= has.get(kind, 0):
            continue
        for _, cond in nearest_conditions(index, kind, vote):
            if cond.table not in tables or cond.columns & used:
                continue
            entry = composed_entry(earlier, cond, drop=False)
            if entry is None:
                continue
            family = composed_family([entry], library_family)
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
    said = said_types(reading)
    has = slot_types(base.template)
    tables = set(outer_tables(base.template).values())
    used = columns_read(base.template.sql_template, base.template.dialect)
    plans: list[Composed] = []
    for kind in CONDITION_TYPES:
        if said.get(kind, 0) > has.get(kind, 0):
            for source, cond in nearest_conditions(index, kind, vote):
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
    """The swap the question asks of the base (swap.py, direction.py, compared.py, retimed.py, untimed.py,
    related.py, reselected.py, timed.py, revisited.py), worded from its source."""
    for base in sorted(index.members[key], key=lambda i: -vote.sims[i])[:MEMBERS_COMPOSED]:
        plans = swap_plans(reading.question, index, base, vote) or order_plans(reading.question, index, base, vote) or comparison_plans(reading, index, base, vote) or period_plans(reading, index, base, vote) or untimed_plans(reading, index, base, vote) or relation_plans(reading, index, base, vote) or column_plans(reading, index, base, vote) or time_plans(reading, index, base, vote) or visit_plans(reading, index, base, vote)  # fmt: skip
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
