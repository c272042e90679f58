"""The bound values must occur together with the template's fixed conditions: 'foley' is a d_items
label, yet not one with linksto = 'inputevents'. Asked of the source (probes.value_probes)."""

from __future__ import annotations

from askdb.pipeline.match import reasons as R
from askdb.pipeline.match.binding import Bound
from askdb.pipeline.match.candidate import TemplateCandidate
from askdb.pipeline.match.probes import value_probes
from askdb.pipeline.match.reading import Reading

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
