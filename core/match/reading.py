"""A question as every rule reads it, made once per question: its tokens, its typed and quoted values,
its operator words, its masked text and what it asks for.

Why once: the library tries several templates and several paraphrases of each for one question; each
used to tokenise, mask and read the operators of the question again. A `Reading` is frozen, so a rule
can only look at it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from core.match.operators import asks_for_name, asks_for_time, question_operators
from core.match.spans import Span, extract_typed_spans, quoted_spans
from core.match.values import ValueFinder, ValueLookup
from core.match.words import Token, tokenize


@dataclass(frozen=True)
class Reading:
    question: str
    lowered: str
    tokens: tuple[Token, ...]
    # Operator words (first/last, count/average, in/since…), read with the question's named values and
    # periods blanked when the library reads it ("first" inside a diagnosis name is no operator).
    ops: dict[str, Any] = field(hash=False)
    typed: tuple[Span, ...]  # ids, numbers, dates, genders…, less those inside a named database value
    quoted: tuple[Span, ...]  # 'quoted names' outside the typed values
    values: ValueFinder | None = field(default=None, compare=False, repr=False)  # what it was read with

    # Read when first asked (still once): most templates are refused before a rule asks.
    @cached_property
    def masked(self) -> str:
        """Typed values as {type}, database values as {value}: what retrieval embeds (with the typed
        values already read: read again, they were a fifth of the readings' time in a calibration)."""
        return _masked(self.question, self.typed, self.values)

    @cached_property
    def asks_name(self) -> bool:
        """ "what is the name of …": the answer must be a name."""
        return asks_for_name(self.question)

    @cached_property
    def asks_time(self) -> bool:
        """ "what was the last prescription time": the answer must be a time."""
        return asks_for_time(self.question)


def read_question(
    question: str, values: ValueFinder | None = None, *, operator_text: str | None = None
) -> Reading:
    """The reading of `question`; `operator_text`: the question with its values blanked, when the
    caller has blanked them (library.match_library), else the operators are read from the question."""
    typed = question_typed_spans(question, values)
    return Reading(
        question=question,
        lowered=question.lower(),
        tokens=tuple(tokenize(question)),
        ops=question_operators(question if operator_text is None else operator_text),
        typed=tuple(typed),
        quoted=tuple(quoted_spans(question, typed)),
        values=values,
    )


def mask_question(question: str, values: ValueFinder | None = None) -> str:
    """The question with ids, numbers, dates and genders replaced by `{type}`, named values by `{value}`.

    Embedding masked questions keeps "patient 10004235" and "patient 10006580", or "aspirin" and
    "heparin", equally close to an example, which is what template retrieval wants.
    """
    return _masked(question, question_typed_spans(question, values), values)


def _masked(question: str, typed: Sequence[Span], values: ValueFinder | None) -> str:
    """mask_question with the question's typed spans (question_typed_spans) given."""
    pieces = [(s.start, s.end, f"{{{s.type}}}") for s in typed]
    if values is not None:
        pieces += [(a, b, "{value}") for a, b in values.spans(question)]
    out, cursor = [], 0
    for start, end, placeholder in sorted(pieces):
        if start < cursor:
            continue
        out.append(question[cursor:start])
        out.append(placeholder)
        cursor = end
    out.append(question[cursor:])
    return "".join(out)


def question_typed_spans(question: str, values: ValueFinder | None = None) -> list[Span]:
    """Typed spans of a question, less those inside a database value it names ("nacl 0.9%")."""
    typed = extract_typed_spans(question)
    if values is None:
        return typed
    named = values.spans(question)
    return [s for s in typed if not any(a <= s.start and s.end <= b for a, b in named)]


def cached_lookup(lookup: ValueLookup) -> ValueLookup:
    """`lookup` asking the database once per (column, text): one question's templates ask alike."""
    cache: dict[tuple[str, str], list[tuple[str, float]]] = {}

    def cached(column: str, text: str) -> list[tuple[str, float]]:
        key = (column, text.lower())
        if key not in cache:
            cache[key] = list(lookup(column, text) or [])
        return cache[key]

    return cached
