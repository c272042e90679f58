"""What a run of the pipeline decides, as frozen values: the answerability verdict, the LLM gate's
verdict, the library match and the outcome that carries them. The engine builds them; the run
service turns them into the run's JSON (`to_json`), so the core never shapes storage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class AnswerabilityVerdict:
    """The answerability gate's verdict on one question (its rules, and its model when trained).

    `detail` is everything the gate said, kept whole for the run (per-table relevance, findings,
    the model's version); the fields the engine decides on are typed."""

    answerable: bool = True
    category: str = ""  # the decline category when not answerable ("" → not_in_schema)
    reason: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnswerabilityVerdict:
        return cls(
            answerable=bool(data.get("answerable", True)),
            category=str(data.get("category") or ""),
            reason=str(data.get("reason") or ""),
            detail=dict(data),
        )

    def to_json(self) -> dict:
        return dict(self.detail) or {
            "answerable": self.answerable,
            "category": self.category,
            "reason": self.reason,
        }

    @property
    def rule_kind(self) -> str:
        """The kind of the first decisive rule the question's own words trip (future, advice,
        private, out_of_scope, not_in_schema for a concept no column documents), "" when none.

        Unlike the learned model's verdict (or a kind borrowed from the flagged question it
        resembles), a decisive rule is about what the question asks, so it still declines a
        confident library answer; the model alone does not. Nor does grounding (an attribute whose
        words the catalog lacks): a verified example that binds and runs shows the database holds it."""
        for finding in self.detail.get("findings") or ():
            if (
                isinstance(finding, Mapping)
                and finding.get("decisive")
                and finding.get("rule") != "ungrounded_attribute"
            ):
                return str(finding.get("kind") or "not_in_schema")
        return ""

    def noted(self, *keys: str) -> dict:
        """The given keys of what the gate said, those it said (for a stage's detail)."""
        return {k: self.detail.get(k) for k in keys if k in self.detail}


@dataclass(frozen=True)
class GateVerdict:
    """The LLM's category check of a question; empty when no gate ran (a library answer, no LLM)."""

    category: str = ""
    reason: str = ""


NO_GATE = GateVerdict()


@dataclass(frozen=True)
class MatchBinding:
    """One slot of a verified question bound to this question's value."""

    slot: str
    type: str
    old: str
    new: str
    value: str
    score: float
    fuzzy: bool
    column: str

    def to_json(self) -> dict:
        return {"slot": self.slot, "type": self.type, "old": self.old, "new": self.new, "value": self.value,
                "score": round(self.score, 4), "fuzzy": self.fuzzy, "column": self.column}  # fmt: skip


@dataclass(frozen=True)
class MatchInfo:
    """What the run keeps of the library match, answered or not: the example whose template fit,
    its confidence, bound SQL and bindings, the threshold, and why it did not answer."""

    example_id: int | None
    example_question: str
    confidence: float
    sql: str
    bindings: tuple[MatchBinding, ...]
    threshold: float
    reasons: tuple[str, ...] = ()  # plain sentences
    reason_codes: tuple[str, ...] = ()  # the same, as core.match.reasons codes
    answered: bool = False
    # A composed match (core.match.compose): the verified questions it was composed from and the
    # condition's words; never shown as verified.
    composed_from: tuple[int | None, ...] = ()
    composed_with: str = ""

    def with_reason(self, code: str, text: str) -> MatchInfo:
        """The same match with one more refusal reason."""
        return replace(self, reasons=(*self.reasons, text), reason_codes=(*self.reason_codes, code))

    def to_json(self) -> dict:
        return {
            "example_id": self.example_id, "example_question": self.example_question,
            "confidence": round(self.confidence, 4), "sql": self.sql,
            "bindings": [b.to_json() for b in self.bindings], "threshold": self.threshold,
            "reasons": list(self.reasons), "reason_codes": list(self.reason_codes), "answered": self.answered,
            "composed_from": list(self.composed_from), "composed_with": self.composed_with,
        }  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """How a run ended, and everything it learnt on the way (kept even when it did not answer)."""

    status: str  # "succeeded" | "declined" | "failed" | "cancelled"
    outcome: str  # answered, no_rows, no_data, <gate category>, no_llm, sql_invalid, execution_error, timeout, llm_error
    message: str = ""
    sql: str = ""
    result: Any = None
    summary: str = ""
    gate: GateVerdict = NO_GATE
    confidence: float | None = None  # share of sampled candidates agreeing with the answer
    candidates: Mapping[str, Any] = field(
        default_factory=dict
    )  # the grouped candidates (candidates.to_json())
    answered_by: str = ""  # "llm" | "library" (a verified example's template, values rebound) | "composed"
    example_id: int | None = None  # the verified example a library answer came from
    library_match: MatchInfo | None = None  # the best template match, answered or not
    answerability: AnswerabilityVerdict | None = None  # the answerability gate's verdict
    privacy: Mapping[str, Any] = field(default_factory=dict)  # suppression report, or the refusal

    @property
    def gate_category(self) -> str:
        return self.gate.category

    @property
    def gate_reason(self) -> str:
        return self.gate.reason
