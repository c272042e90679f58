"""Every content word of the question must be explained: by some paraphrase of the template, by a
bound value ("the drug vancomycin": a drug value says "drug"), or as wording the library's paraphrases
leave out. "… who died in the hospital" added to a count of patients is a condition no paraphrase
has: answering with that SQL would drop it.

A bound value explains a word by its column's name only where the word is not itself a value of
another column: in "how many patients in medicine were prescribed heparin", "medicine" says "drug"
(a synonym) but names a care unit, and the prescriptions count that binds heparin would drop it."""

from __future__ import annotations

from rapidfuzz import fuzz

from core.match import reasons as R
from core.match.binding import Bound, bound_column_words, outside_values
from core.match.candidate import TemplateCandidate
from core.match.index import Family
from core.match.reading import Reading
from core.match.spans import VALUE
from core.match.words import GUARD_FILLER, canonical, overlaps, same_stem, stem


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    if candidate.family is None:
        return []
    words = unexplained(reading, bound, candidate.family)
    if not words:
        return []
    return [R.Reason(
        R.WORDS_UNEXPLAINED,
        f"This question also says {R.quoted(words)}, which no wording of the verified question "
        "says: answering with it would drop that condition.",
    )]  # fmt: skip


def unexplained(reading: Reading, bound: Bound, family: Family) -> list[str]:
    """Content words of the question that no paraphrase, bound value or common word accounts for."""
    named = bound_column_words(bound)
    elsewhere = values_of_other_columns(reading, bound)
    out = []
    for token in outside_values(reading, bound):
        word = canonical(stem(token.text))
        if explained(word, family):
            continue
        if any(same_stem(word, w) for w in named) and not overlaps(token.start, token.end, elsewhere):
            continue
        out.append(token.text)
    return out


def values_of_other_columns(reading: Reading, bound: Bound) -> list[tuple[int, int]]:
    """Where the question names a database value of a column no bound value is of (the longest
    values it names, as retrieval masks them): such a word is that value, not the bound column's name."""
    if reading.values is None:
        return []
    columns = {b.column for b in bound.bindings.values() if b.type == VALUE and b.column}
    own = {(a, b) for c in columns for a, b, _ in reading.values.contained(reading.question, c)}
    return [span for span in reading.values.spans(reading.question) if span not in own]


def explained(word: str, family: Family) -> bool:
    """Said by some paraphrase (or a synonym), library wording that is no template's subject, filler,
    or a near spelling of a paraphrase's word."""
    if family.says(word) or (word in family.neutral and word not in family.subjects) or word in GUARD_FILLER:
        return True
    return len(word) >= 5 and any(fuzz.ratio(word, w) >= 90 for w in family.words if len(w) >= 5)
