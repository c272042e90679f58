"""The bound values must occur together with the template's fixed conditions: 'foley' is a d_items
label, yet not one with linksto = 'inputevents'. Asked of the source (probes.value_probes)."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.probes import value_probes
from core.match.reading import Reading

TEXT = (
    "This question's values never occur together with the verified question's other "
    "conditions in the database."
)


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    if bound.probe is None or bound.sql is None:
        return []
    if any(not bound.probe(q) for q in value_probes(candidate.template, bound.sql)):
        return [R.Reason(R.VALUE_NOT_TOGETHER, TEXT)]
    return []
