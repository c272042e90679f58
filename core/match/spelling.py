"""Spelling as researchers type it: "how mnay femal patients are in teh databse?" read as the library
writes it, before the question is masked, embedded and read.

Why here and why this way: the library votes with embeddings of masked questions, and the meaning
guard compares words; a typo is an unexplained word to the guard and noise to the encoder, so a
question that is a verified one with two typos was declined. A word is corrected only when it is
no word at all (neither in an English dictionary nor in the library's or the catalog's vocabulary,
nor part of a database value the question names) and exactly one word of the library's or the
catalog's vocabulary is nearest to it, within one edit (two for long words). A real word is never
"corrected" into another ("median" stays "median", and the guard refuses a template that does not
say it), so correction cannot change what a question asks, only make a misspelt one readable.

symspellpy does the lookup (Damerau OSA distance, so "mnay" is one transposition from "many") and
carries the English frequency dictionary that says which words are words.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import threading
import weakref
from collections import Counter
from collections.abc import Iterable

from symspellpy import SymSpell, Verbosity

from core.match.index import LibraryIndex
from core.match.spans import extract_typed_spans, quoted_spans
from core.match.values import ValueFinder, ValueIndex
from core.match.words import NEUTRAL_WORDS, NUMBER_WORDS, overlaps, tokenize
from core.types import CatalogSchema

ENGLISH = "frequency_dictionary_en_82_765.txt"
MIN_LENGTH = 3  # shorter tokens ("ml", "iv", "ct") are abbreviations, not typos
LONG_WORD = 8  # from this length a word may be two edits from its spelling
_WORD = re.compile(r"[a-z]+")


@functools.lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """The words of symspellpy's English frequency dictionary (82,765 words): what is a word."""
    text = importlib.resources.files("symspellpy").joinpath(ENGLISH).read_text(encoding="utf-8")
    return frozenset(line.split(" ", 1)[0] for line in text.splitlines() if line)


class Speller:
    """The vocabulary a question is corrected to: the library's questions and the catalog's names."""

    def __init__(self, texts: Iterable[str]):
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(w for w in _WORD.findall(text.lower().replace("_", " ")) if len(w) >= MIN_LENGTH)
        counts.update({w: 1 for w in (*NEUTRAL_WORDS, *NUMBER_WORDS) if len(w) >= MIN_LENGTH})
        self.vocabulary = frozenset(counts)
        self._symspell = SymSpell(max_dictionary_edit_distance=2, prefix_length=7)
        for word, n in counts.items():
            self._symspell.create_dictionary_entry(word, n)

    def known(self, word: str) -> bool:
        return word in self.vocabulary or word in english_words()

    def suggest(self, word: str) -> str | None:
        """The one vocabulary word nearest to a non-word, or None (a word, or no single nearest)."""
        word = word.lower()
        if len(word) < MIN_LENGTH or not word.isalpha() or self.known(word):
            return None
        distance = 2 if len(word) >= LONG_WORD else 1
        found = [s.term for s in self._symspell.lookup(word, Verbosity.CLOSEST, max_edit_distance=distance)]
        swapped = [t for t in found if sorted(t) == sorted(word)]  # two letters swapped: "mnay", "teh"
        if len(word) == MIN_LENGTH or len(found) > 1:
            # three letters, or two words equally near ("teh": "the" and "ten"): only a swap of two
            # letters is a typo sure enough to correct; otherwise it is not ours to choose
            found = swapped
        return found[0] if len(found) == 1 else None

    def correct(self, question: str, keep: Iterable[tuple[int, int]] = ()) -> str:
        """`question` with its non-words spelt as the vocabulary spells them; `keep`: character spans
        left as written (the database values it names)."""
        keep = list(keep)
        out, cursor = [], 0
        for token in tokenize(question):
            if overlaps(token.start, token.end, keep):
                continue
            fixed = self.suggest(token.text)
            if fixed is None:
                continue
            out.append(question[cursor : token.start])
            out.append(fixed.upper() if token.text.isupper() else fixed)
            cursor = token.end
        out.append(question[cursor:])
        return "".join(out)


# One speller per library index and catalog, made at the first question that needs it and dropped
# with the index (the app's library cache makes a new index when the library changes).
_SPELLERS: weakref.WeakKeyDictionary[LibraryIndex, dict[tuple[str, ...], Speller]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def speller_for(index: LibraryIndex, catalog: CatalogSchema | None = None) -> Speller:
    """The speller of this library's questions and this catalog's table and column names."""
    names = (
        tuple(sorted({t.name for t in catalog.tables} | {c for t in catalog.tables for c in t.columns}))
        if catalog
        else ()
    )
    with _LOCK:
        per_catalog = _SPELLERS.setdefault(index, {})
        if names not in per_catalog:
            per_catalog[names] = Speller([*(e.question for e in index.entries), *names])
        return per_catalog[names]


def correct_spelling(
    question: str,
    index: LibraryIndex,
    *,
    values: ValueFinder | None = None,
    catalog: CatalogSchema | None = None,
) -> str:
    """The question with its misspelt words corrected to the library's and the catalog's spelling;
    the database values it names (`values`, with the library's other names) and quoted names are
    kept as written. Call before masking and embedding it: the rest of the stage reads the result."""
    if not index.entries:
        return question
    if isinstance(values, ValueIndex):
        values = values.with_names(index.names)
    keep = list(values.spans(question)) if values is not None else []
    keep += [(s.start, s.end) for s in quoted_spans(question, extract_typed_spans(question))]
    return speller_for(index, catalog).correct(question, keep)
