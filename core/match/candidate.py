"""What the matcher is given (a template candidate) and what it returns for it (a match result)."""

from __future__ import annotations

from dataclasses import dataclass

from core.match.binding import Binding
from core.match.index import Family
from core.match.template import Template


@dataclass(frozen=True)
class TemplateCandidate:
    example_id: int | None
    template: Template
    similarity: float | None = None  # embedding cosine similarity of the questions, from the caller
    question: str = ""  # the example's question (defaults to the template's)
    family: Family | None = None  # all paraphrases of its template (index.Family)


@dataclass(frozen=True)
class MatchResult:
    example_id: int | None
    example_question: str
    sql: str | None  # the bound SQL, None when it could not be bound
    bindings: tuple[Binding, ...]
    features: dict[str, float]
    confidence: float
    reasons: tuple[str, ...] = ()  # why the confidence was forced to 0 (hard rules), plain sentences
    reason_codes: tuple[str, ...] = ()  # the same, as reasons codes (one per reason)
    masked_question: str = ""  # the new question with its bound spans masked
    # A composed result (compose.py): the verified questions it was composed from (the template's,
    # the condition's) and the condition's words ("female", "without male"); empty for a template.
    composed_from: tuple[int | None, ...] = ()
    composed_with: str = ""

    @property
    def hard_ok(self) -> bool:
        return bool(self.features.get("hard_ok"))

    def answers(self, threshold: float) -> bool:
        return self.hard_ok and self.sql is not None and self.confidence >= threshold
