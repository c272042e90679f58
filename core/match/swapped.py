"""Swaps asked of the best voted templates that compose_results does not try.

Why: compose_results composes on the templates tried for the question, those whose operator words fit
first (library._templates_to_try). A swap (first for last: direction.py; one aggregate for another:
swap.py) is asked of the template whose operator words differ from the question's in the one word it
swaps, so that template is often voted first and tried last, or not at all. Here only the swaps are
tried on the best voted templates left out (library.COMPOSE_VOTED), never the conditions: a condition
added to a template the question's operators do not fit would be judged on a base the question does
not ask for. Same plans, same matcher, same features and risk as compose_results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from core.match.candidate import MatchResult, TemplateCandidate
from core.match.compose import _swaps, _vote_features
from core.match.composing import try_plan
from core.match.index import LibraryIndex
from core.match.reading import Reading
from core.match.risk import Calibration

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls this module
    from core.match.library import Vote


def compose_swaps(
    reading: Reading,
    index: LibraryIndex,
    bases: Sequence[tuple[int, str, float]],
    vote: Vote,
    *,
    risk: Calibration,
    match: Callable[[TemplateCandidate], MatchResult],
) -> list[MatchResult]:
    """The swap each base template (vote rank, key, share) is asked for, composed and matched, with
    its confidence from `risk`."""
    out: list[MatchResult] = []
    for rank, key, share in bases:
        for plan in _swaps(reading, index, key, vote):
            result = try_plan(plan, index, vote, match, reading.ops)
            if result is None:
                continue
            features = {**result.features, **_vote_features(vote, index, plan, rank, share), "composed": 1.0}
            confidence = round(risk.predict(features), 4) if result.hard_ok else 0.0
            out.append(dataclasses.replace(result, features=features, confidence=confidence))
    return out
