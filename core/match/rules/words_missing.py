"""The question must say the template's subject: a word every paraphrase says ("discharged",
"specimen", "diagnoses" in some form) is what the template is about. Said outside the question's
values: "diagnostic" inside a procedure's name does not say "diagnoses". A visit's nouns ("visit",
"hospital") need not be said where the question reads the template's visit in other words ("the
first discharge" for "the first hospital visit": features.visit_words_compared)."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.features import visit_words_compared
from core.match.reading import Reading
from core.match.words import same_stem


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    family = candidate.family
    if family is None or not family.core:
        return []
    said = bound.said
    core = family.core - visit_words_compared(reading.ops, family)
    missing = sorted(
        w for w in core if not any(same_stem(w, x) or x in family.synonyms.get(w, ()) for x in said)
    )
    if not missing:
        return []
    text = f"The verified question also requires {R.quoted(missing)}, which this question does not say."
    return [R.Reason(R.WORDS_MISSING, text)]
