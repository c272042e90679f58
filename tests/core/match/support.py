"""Matching a question against a hand-picked list of templates (no library, no vote): how the rules'
tests ask one template at a time what it makes of a question."""

from __future__ import annotations

from collections.abc import Sequence

from core.match.binding import MIN_VALUE_SCORE
from core.match.candidate import MatchResult, TemplateCandidate
from core.match.matcher import match_one
from core.match.reading import cached_lookup, read_question
from core.match.risk import DEFAULT_CALIBRATION, Calibration
from core.match.rules.value_ambiguous import refuse_ambiguous_values
from core.match.values import ValueFinder, ValueLookup
from core.types import CatalogSchema


def match(
    question: str,
    candidates: Sequence[TemplateCandidate],
    *,
    lookup: ValueLookup,
    catalog: CatalogSchema | None = None,
    calibration: Calibration | None = None,
    min_value_score: float = MIN_VALUE_SCORE,
    values: ValueFinder | None = None,
) -> list[MatchResult]:
    """Every candidate scored for `question`, best first (clean bindings before the rest)."""
    reading, lookup = read_question(question, values), cached_lookup(lookup)
    results = refuse_ambiguous_values([
        match_one(reading, c, lookup=lookup, catalog=catalog, values=values,
                  calibration=calibration or DEFAULT_CALIBRATION, min_value_score=min_value_score)
        for c in candidates
    ])  # fmt: skip
    return sorted(
        results,
        key=lambda r: (
            -int(r.hard_ok),
            -int(bool(r.features.get("all_slots_bound"))),
            -r.confidence,
            -r.features.get("similarity", 0.0),
        ),
    )
