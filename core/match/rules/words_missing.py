"""The question must say the template's subject: a word every paraphrase says ("discharged",
"specimen", "diagnoses" in some form) is what the template is about. Said outside the question's
values: "diagnostic" inside a procedure's name does not say "diagnoses"."""

from __future__ import annotations

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.reading import Reading
from core.match.words import same_stem


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    family = candidate.family
    if family is None or not family.core:
        return []
    said = bound.said
    missing = sorted(
        w for w in family.core if not any(same_stem(w, x) or x in family.synonyms.get(w, ()) for x in said)
    )
    if not missing:
        return []
    text = f"The verified question also requires {R.quoted(missing)}, which this question does not say."
    return [R.Reason(R.WORDS_MISSING, text)]
