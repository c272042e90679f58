"""What the question asks for must be what the template's SQL returns: "the name of the input" is not
answered with the time of the input, nor "what was the last prescription time" with a drug name."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.reading import Reading
from core.match.template import answer_kind

KIND_WORDS = {"column": "a name", "time": "a time", "number": "a number", "other": "something else"}


def name(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    if reading.asks_name and (kind := answer_kind(candidate.template)) != "column":
        text = f"This question asks for a name, the verified question returns {KIND_WORDS.get(kind, kind)}."
        return [R.Reason(R.ASKS_NAME, text)]
    return []


def time(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    if reading.asks_time and (kind := answer_kind(candidate.template)) != "time":
        text = f"This question asks for a time, the verified question returns {KIND_WORDS.get(kind, kind)}."
        return [R.Reason(R.ASKS_TIME, text)]
    return []
