"""What the question asks for must be what the template's SQL returns: "the name of the input" is not
answered with the time of the input, nor "what was the last prescription time" with a drug name."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.operators import says_time
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


def value(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    """The reverse of `time`: "what was the first lab test of patient X" is not answered with the
    time of that test when the verified wording asks for a time ("what was the time of …"); a
    paraphrase the library approved without a time word ("what was the first input of …") may be.
    An occasion or a period is no time asked for: "what was the heart rate the first time it was
    measured in 08/this year?" wants the value (operators.says_time)."""
    if (
        answer_kind(candidate.template) == "time"
        and not says_time(reading.question)
        and says_time(candidate.question)  # the library never asked it without one
    ):
        return [
            R.Reason(R.ASKS_VALUE, "This question asks for a value, the verified question returns a time.")
        ]
    return []
