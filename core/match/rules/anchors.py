"""Words tied to fixed SQL literals must be said: a template about 'po' (a route the value index does
not hold) does not answer a question that never says "po". Likewise a value the example names and its
SQL keeps fixed ("the top 5", where 5 is not a slot) must be in the question."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound, fixed_value_hits
from core.match.candidate import TemplateCandidate
from core.match.reading import Reading
from core.match.words import contains_words


def anchor(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    return [
        R.Reason(R.ANCHOR, f"The verified question is about '{a}', which this question does not mention.")
        for a in candidate.template.anchors
        if not contains_words(reading.lowered, a.lower())
    ]


def fixed_value(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    _free, missing = fixed_value_hits(reading, candidate.template)
    return [
        R.Reason(R.FIXED_VALUE, f"The verified question always uses '{f}', which this question does not say.")
        for f in missing
    ]
