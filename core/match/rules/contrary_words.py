"""A word the paraphrases say only with the opposite operator words must not be read with these:
"survival" said only with "lowest" (lowest survival = highest mortality) is not "highest survival"."""

from __future__ import annotations

from typing import Any

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.index import Family
from core.match.operators import operator_signature, opposite
from core.match.reading import Reading


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    family = candidate.family
    if family is None or len(family.signature_words) <= 1:
        return []
    contrary = contrary_words(bound.words, reading.ops, family)
    if not contrary:
        return []
    return [R.Reason(
        R.CONTRARY_WORDS,
        f"The verified question says {R.quoted(contrary)} only with the opposite operator words "
        "(such as highest instead of lowest), not with this question's.",
    )]  # fmt: skip


def contrary_words(words: list[str], ops: dict[str, Any], family: Family) -> list[str]:
    """Words of the question that the family's paraphrases say only with opposite operator words."""
    mine = operator_signature(ops)
    own = frozenset().union(*(w for sig, w in family.signature_words.items() if not opposite(sig, mine)))
    return [w for w in words if w in family.words - own]
