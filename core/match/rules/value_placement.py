"""Two values of one type that the question's wording does not place ("X and Y at the same time":
which drug is the template's first?) answer only when every order gives the same result on the
source. Needs the source (a probe); without one the question is refused."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.probes import order_is_free
from core.match.reading import Reading


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    for names, text in bound.unordered:
        if bound.probe is None or not order_is_free(candidate.template, bound, names, bound.probe):
            return [R.Reason(R.VALUE_PLACEMENT, text)]
    return []
