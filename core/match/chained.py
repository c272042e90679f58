"""Chained compositions: two changes at once, the second planned on the first one's composition.

Why: most questions the library has not seen and no single composition answers differ from a
verified one in two things at once: a swap *and* a condition ("the last … of female patients"
beside "the first …"), a first/last flip *and* another period, an item swapped *and* a year added.
One composition alone is refused for the change it does not make. Here the first change is made
(compose.py's plans on the base template, the same ones compose_results tries), and the second is
planned on that composition as if it were the base: the same planners (conditions, swaps, items,
tables …) read it through a view of the library whose base entry is the composition
(`_Rebased`), so each planner's own guards judge the second change against what the first left.
The chain is one composed template (composing.try_plan with `then`): built, bound, validated,
every rule and the risk model like any composition, with the features `composed` and `chained`
(the calibrated P(correct) learns how chains fail: the cross-validation chains for held-out
templates the same way). Tried only where no verified template and no single composition passes
the rules, on the best few bases, a few chains per question at most (each one costs a build and
a match).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from core.match.candidate import MatchResult, TemplateCandidate
from core.match.compared import comparison_plans
from core.match.compose import _item_swaps, _plans, _swaps, _vote_features
from core.match.composing import Composed, composed_entry, try_plan
from core.match.conditions import Condition, conditions_of, nearest_conditions
from core.match.direction import order_plans
from core.match.index import Entry, LibraryIndex
from core.match.reading import Reading
from core.match.related import relation_plans
from core.match.replace import replacement_plans
from core.match.reselected import column_plans
from core.match.retimed import period_plans
from core.match.revisited import visit_plans
from core.match.risk import Calibration
from core.match.swap import swap_plans
from core.match.timed import time_plans
from core.match.untimed import untimed_plans

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls this module
    from core.match.library import Vote

CHAIN_BASES = 3  # best tried templates chained on
SWAPPED_BASES = 1  # voted templates whose operator words do not fit chained on, a swap first
FIRST_CHANGES = 4  # first changes per base a second one is planned on
CHAINS_TRIED = 6  # chains matched per question at most


def chain_results(
    reading: Reading,
    index: LibraryIndex,
    bases: Sequence[tuple[int, str, float]],
    vote: Vote,
    *,
    risk: Calibration,
    match: Callable[[TemplateCandidate], MatchResult],
    swapped: Sequence[tuple[int, str, float]] = (),
) -> list[MatchResult]:
    """Chained results for the question read as `reading` on the best bases (vote rank, key, share):
    each first change the base is planned for, composed, and each second change planned on that
    composition, matched by `match`; confidences from `risk`. At most CHAINS_TRIED chains.
    `swapped`: bases whose operator words do not fit (library._voted, _one_apart), chained on only
    after a swap first (SWAPPED_BASES of them), as swapped.py asks them for a swap alone."""
    out: list[MatchResult] = []
    done = {k for _, k, _ in list(bases)[:CHAIN_BASES]}
    chained = [(b, False) for b in list(bases)[:CHAIN_BASES]]
    chained += [(b, True) for b in [b for b in swapped if b[1] not in done][:SWAPPED_BASES]]
    for (rank, key, share), swap_first in chained:
        for first, then in _chains(reading, index, key, vote, swap_first=swap_first):
            result = try_plan(first, index, vote, match, reading.ops, then=then)
            if result is None:
                continue
            features = {
                **result.features,
                **_vote_features(vote, index, first, rank, share),
                "composed": 1.0,
                "chained": 1.0,
            }
            confidence = round(risk.predict(features), 4) if result.hard_ok else 0.0
            out.append(dataclasses.replace(result, features=features, confidence=confidence))
            if len(out) >= CHAINS_TRIED or result.hard_ok:
                return out
    return out


def _chains(
    reading: Reading, index: LibraryIndex, key: str, vote: Vote, *, swap_first: bool = False
) -> Iterator[tuple[Composed, Composed]]:
    """(first change, second change) pairs on the base template `key`: the first as compose.py plans
    it on the base (a swap alone where `swap_first`), the second as the same planners plan it on
    the first's composition."""
    base = max(index.members[key], key=lambda i: vote.sims[i])
    entry = index.entries[base]
    firsts = _swaps(reading, index, key, vote)
    if not swap_first:
        firsts = _plans(reading, index, key, vote) + firsts + _replacements(reading, index, key, vote) + _item_swaps(reading, index, key, vote)  # fmt: skip
    for first in firsts[:FIRST_CHANGES]:
        made = composed_entry(entry, first.condition, drop=first.drop, swap=first.swap, old=first.old)
        if made is None:
            continue
        view: Any = _Rebased(index, base, made)
        for then in _seconds(reading, view, key, base, vote):
            if _same_change(first, then) or (_added(first) and then.swap is not None):
                continue
            yield first, dataclasses.replace(then, base=base)


def _seconds(reading: Reading, view: Any, key: str, base: int, vote: Vote) -> list[Composed]:
    """The second changes planned on the composition (`view`: the library with it as its base entry):
    a condition added or left out, then each swap planner's change, then a table or item swap."""
    plans = [
        p
        for p in _plans(reading, view, key, vote) + _replacements(reading, view, key, vote)
        if p.base == base
    ]
    for planned in _swap_planners(reading, view, base, vote):
        if planned:
            source, swap = planned[0]
            wording = Condition(view.entries[source].example_id, "", exp.true(), "aggregate", swap.phrase)
            plans.append(Composed(base, key, wording, drop=False, source=source, swap=swap))
    return plans + _item_swaps(reading, view, key, vote)


def _replacements(reading: Reading, index: Any, key: str, vote: Vote) -> list[Composed]:
    """A time or threshold condition of the base said another way (replace.py), as compose.py plans it."""
    return [
        Composed(b, key, new, drop=False, source=s, old=old)
        for b, s, new, old in replacement_plans(
            reading,
            index,
            key,
            vote,
            own=conditions_of,
            library=lambda kind: nearest_conditions(index, kind, vote),
        )
    ]


def _swap_planners(reading: Reading, view: Any, base: int, vote: Vote) -> Iterator[list]:
    """Each swap planner's plans for the base (compose._swaps asks them in this order, first only)."""
    yield swap_plans(reading.question, view, base, vote)
    yield order_plans(reading.question, view, base, vote)
    for planner in (comparison_plans, period_plans, untimed_plans, relation_plans, column_plans, time_plans, visit_plans):  # fmt: skip
        yield planner(reading, view, base, vote)


def _added(plan: Composed) -> bool:
    """Whether the change adds a condition. Such a change comes second after a swap, never first:
    planned on the swap's composition, compose._plans refuses a condition on a column that
    composition reads ("the gender of patient X for female patients" is no gender swap of "the age
    of patient X" with "female" added first, on a base that did not read the gender)."""
    return plan.swap is None and not plan.drop and plan.old is None


def _same_change(first: Composed, then: Composed) -> bool:
    """Whether the second change undoes or repeats the first (the same condition, the same swap)."""
    if first.swap is not None or then.swap is not None:
        return type(first.swap) is type(then.swap) and first.swap is not None
    return first.condition.ident == then.condition.ident


class _Rebased:
    """The library as a planner reads it, with the composition in place of its base entry: what the
    planners read of the whole library (its conditions, mappings, caches) is the library's own, and
    what they cache on it is kept on the library."""

    def __init__(self, index: LibraryIndex, base: int, entry: Entry):
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "entries", _Entries(index.entries, base, entry))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._index, name, value)


class _Entries(Sequence):
    """The library's entries with one of them (`at`) replaced."""

    def __init__(self, entries: list[Entry], at: int, entry: Entry):
        self._entries, self._at, self._entry = entries, at, entry

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._entry if i == self._at else self._entries[i]

    def __len__(self) -> int:
        return len(self._entries)
