"""The reduce step: from a patient's judged snippets to present / absent / uncertain.

Framework-free. A patient has the phenotype when one snippet affirms it now or in the past
(a history of atrial fibrillation is atrial fibrillation); mentions about a family member or a
hypothetical never count; uncertain mentions alone make the patient uncertain; negations alone,
or nothing, make the patient absent. The deciding snippets are kept as the evidence to show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PRESENT_ASSERTIONS = frozenset({"affirmed", "historical"})


@dataclass(frozen=True)
class Decision:
    decision: str  # present / absent / uncertain
    deciding: tuple[int, ...]  # indexes of the snippets that decided it


def decide(assertions: Sequence[str]) -> Decision:
    """The patient's decision from the assertions of their snippets (in any order)."""
    for wanted, decision in ((PRESENT_ASSERTIONS, "present"), ({"uncertain"}, "uncertain")):
        hits = tuple(i for i, a in enumerate(assertions) if a in wanted)
        if hits:
            return Decision(decision, hits)
    return Decision("absent", tuple(i for i, a in enumerate(assertions) if a == "negated"))


def agreement(decisions: dict[int, str], coded: set[int]) -> dict[str, int]:
    """The 2x2 table of the notes' decision (present or not) against the code-based definition."""
    table = {"notes_only": 0, "codes_only": 0, "both": 0, "neither": 0}
    for subject, decision in decisions.items():
        notes = decision == "present"
        codes = subject in coded
        key = "both" if notes and codes else "notes_only" if notes else "codes_only" if codes else "neither"
        table[key] += 1
    return table


def wilson_interval(agree: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion: sound at small n and near 0 or 1."""
    if n == 0:
        return (0.0, 1.0)
    p = agree / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
