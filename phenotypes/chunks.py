"""Notes cut into section-labelled sentences, and the sentences that mention a phenotype's terms.

Framework-free on purpose (like core/): the retrieval service feeds it note text, the
tests feed it strings. A chunk is one sentence (or one list line) with the section it sits in,
because ConText judges a mention inside its sentence and the section changes what it means
("Family History: mother had …").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# A section header starts a line: a capitalised phrase and a colon that ends the line ("Brief
# Hospital Course:", "Past Medical History:"), or an upper-case one followed by text on the same
# line ("FINDINGS: …", "INDICATION: …"), as MIMIC-IV discharge and radiology notes write them.
# "Primary: ___" inside a diagnosis list is not a header.
_HEADER = re.compile(
    r"^[ \t]*(?:(?P<name>[A-Z][A-Za-z /&\-]{2,60}):[ \t]*$\n?|(?P<upper>[A-Z][A-Z /&\-]{2,60}):[ \t]*)",
    re.MULTILINE,
)
# Sentence ends: . ! ? followed by space and a capital/digit/"_", or a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])[ \t]+(?=[A-Z0-9_\[(])|\n+")


@dataclass(frozen=True)
class Chunk:
    note_id: str
    section: str
    text: str
    term_start: int  # the first term match inside text
    term_end: int


def sections(text: str) -> Iterator[tuple[str, str]]:
    """(section name, body) pairs in order; text before the first header has section ''."""
    matches = list(_HEADER.finditer(text))
    if not matches or matches[0].start() > 0:
        yield "", text[: matches[0].start() if matches else len(text)]
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        yield (m["name"] or m["upper"]).strip(), text[m.end() : end]


def sentences(body: str) -> Iterator[str]:
    for piece in _SENTENCE_END.split(body):
        piece = piece.strip().lstrip("-*• ").strip()
        if piece:
            yield piece


def term_pattern(terms: Iterable[str]) -> re.Pattern[str]:
    """One case-insensitive regex for every term, whole words only, longest first."""
    alternatives = sorted({t.strip().lower() for t in terms if t.strip()}, key=len, reverse=True)
    if not alternatives:
        raise ValueError("a phenotype needs at least one term")
    body = "|".join(r"\s+".join(map(re.escape, t.split())) for t in alternatives)
    return re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.IGNORECASE)


def candidate_chunks(note_id: str, text: str, pattern: re.Pattern[str]) -> list[Chunk]:
    """The note's sentences that mention a term, with their section."""
    if not pattern.search(text):
        return []
    found = []
    for section, body in sections(text):
        for sentence in sentences(body):
            m = pattern.search(sentence)
            if m:
                found.append(Chunk(note_id, section, sentence, m.start(), m.end()))
    return found
