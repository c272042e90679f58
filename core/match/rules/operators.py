"""Operator words must be ones the template's paraphrases use, and combined as one of them combines
them: "first" is not "last", "in 2100" is not "since 2100", "average" is not "count", however close
the embeddings. Runs before any value is looked up: a template that cannot apply costs nothing more."""

from __future__ import annotations

from typing import Any

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.index import Family
from core.match.operators import UNSAID_ALLOWED, operator_signature
from core.match.reading import Reading
from core.match.template import Template

COMBINATION = (
    "This question combines words such as first, highest, count or 'since' "
    "in a way no wording of the verified question does."
)


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    return operator_reasons(reading.ops, candidate.template, candidate.family)


# (operator words, the template's operator keys) judged per family, at most: beyond, start again
# (a web process's library lives long; a calibration's fold library asks far fewer).
KEPT_PER_FAMILY = 4096


def operator_reasons(ops: dict[str, Any], template: Template, family: Family | None) -> list[R.Reason]:
    """Why the question's operator words are not the template's (judged across its paraphrases):
    one reason per operator key that differs, else the combination when no paraphrase has it.

    Remembered on the family per (operator words, the template's operator keys): judged against a
    family, that is all the verdict reads of the template, and a question's candidates ask it of
    the same few families again and again (130,000 times in a train calibration, from its templates,
    their paraphrases and the compositions built on them). A family is built with its library
    (index.LibraryIndex), so a library that changes judges afresh."""
    if family is None:
        return _reasons(ops, template, None)
    try:
        key = (tuple(sorted(ops.items())), tuple(sorted(template.operators)))
        hash(key)
    except TypeError:  # an unhashable operator value: judged afresh
        return _reasons(ops, template, family)
    memo: dict = family.__dict__.setdefault("_operator_reasons", {})
    verdict = memo.get(key)  # one read: another thread of a web worker may clear it in between
    if verdict is None:
        if len(memo) >= KEPT_PER_FAMILY:
            memo.clear()
        verdict = memo[key] = tuple(_reasons(ops, template, family))
    return list(verdict)


def _reasons(ops: dict[str, Any], template: Template, family: Family | None) -> list[R.Reason]:
    reasons = []
    for key in sorted(set(ops) | set(template.operators)):
        if key in UNSAID_ALLOWED and not ops.get(key):
            continue
        allowed = family.operators.get(key, frozenset()) if family else {template.operators.get(key)}
        if ops.get(key) not in allowed:
            reasons.append(R.operator_differs(key, ops.get(key), allowed))
    if (
        family is not None
        and family.signatures
        and not reasons
        and operator_signature(ops) not in family.signatures
    ):
        reasons.append(R.Reason(R.OPERATOR_COMBINATION, COMBINATION))
    return reasons
