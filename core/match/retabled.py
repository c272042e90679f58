"""The table swap: a verified template's item tables swapped for the ones the library uses alike in
other shapes (procedures for diagnoses: procedures_icd / d_icd_procedures for diagnoses_icd /
d_icd_diagnoses), on the SQL tree, where the question names an item of the other table.

Why: items.py swaps an item's tables only where the library holds the base template's own shape over
the other tables too; a template whose sibling the library lacks ("the cost of a procedure" beside a
verified "the cost of a diagnosis") stays out of reach, though the library shows in other shapes that
the two table sets are used alike. Here the renaming is learned across shapes: two library templates
whose SQL is the same tree once tables, aliases and literals are masked (items.shape_of), over table
sets that differ by one consistent renaming, show that renaming; one shown in RENAME_SUPPORT shapes
at least may be applied to a base template of any shape. The words the library ties to each side
(its subjects: the core words of templates over one side that their siblings over the other side
never say, "diagnos" and "procedur") must agree with the question: a question that says a subject of
the old side is refused (it names the old table: "the cost of the diagnosis <a procedure title>"),
and a base paraphrase that says one is composed only with the question's own word for the new side
in its place (the composed wording then says what the question says; else it is left out).

Refused before anything is built: no renaming learned for the base's tables, the base reading a table
of the new side already (both tables), a negation, a value slot binding fills (the question names a
value of its own column), not exactly one value of the renamed column in the question. The composed
question and SQL then go through the same rules, binding, validation and risk as any composition.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.match.index import LibraryIndex
from core.match.items import ItemSwap, _renaming, _unnamed_slot, shape_of
from core.match.reading import Reading
from core.match.spans import VALUE
from core.match.template import Template
from core.match.values import bare_column
from core.match.words import canonical, stem, tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

RENAME_SUPPORT = 2  # shapes the library must show one renaming in (one pair may be an accident)
SUBJECT_SUPPORT = 2  # …and shapes a word must tell the two sides apart in to be a side's subject
SUBJECT_STEM = 5  # letters a subject's stem and a word's share at least to be one word in two forms

Renaming = tuple[tuple[str, str], ...]  # sorted (old table, new table) pairs, changed tables only


@dataclass(frozen=True)
class TableSwap(ItemSwap):
    """An item swap (items.ItemSwap) whose renaming comes from other shapes, with the base wording's
    subject words of the old side (`old_subjects`, stems) replaced by the question's word for the new
    side (`new_word`; "" where the question says none, and a paraphrase saying one is left out)."""

    old_subjects: frozenset[str] = frozenset()
    new_word: str = ""

    def apply(self, template: Template) -> tuple[str, str] | None:
        """The item swap, its wording outside the item said of the new side, or None."""
        made = super().apply(template)
        slots = [s for s in template.slots if s.type == VALUE and bare_column(s.column) == self.old_column]
        if made is None or len(slots) != 1:
            return None
        before = self._reworded(template.question[: slots[0].start])
        after = self._reworded(template.question[slots[0].end :])
        if before is None or after is None:
            return None
        return before + self.text + after, made[1]

    def _reworded(self, text: str) -> str | None:
        """`text` with each subject word of the old side replaced by the question's word for the new
        side; None where it says one and the question says no side."""
        out, end = [], 0
        for token in tokenize(text):
            if _says(_word(token.text), self.old_subjects):
                if not self.new_word:
                    return None
                out += [text[end : token.start], self.new_word]
                end = token.end
        return "".join(out) + text[end:]


@dataclass(frozen=True)
class LibraryTables:
    """What the library shows: renamings -> the entries over their new side, and each renaming's
    subject stems (old side's, new side's)."""

    sources: dict[Renaming, tuple[int, ...]]
    subjects: dict[Renaming, tuple[frozenset[str], frozenset[str]]]


def library_tables(index: LibraryIndex) -> LibraryTables:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_tables", None)
    if cached is not None:
        return cached
    by_shape: dict[str, dict[tuple[str, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, entry in enumerate(index.entries):
        shape, tables = shape_of(entry.template)
        if shape:
            by_shape[shape][tables].append(i)
    support: Counter[Renaming] = Counter()
    sources: dict[Renaming, list[int]] = defaultdict(list)
    said: dict[Renaming, tuple[Counter[str], Counter[str]]] = defaultdict(lambda: (Counter(), Counter()))
    for sets in by_shape.values():
        for a, at in sets.items():
            for b, bt in sets.items():
                rename = _renaming(a, b) if a != b and len(a) == len(b) else None
                if not rename:
                    continue
                key = tuple(sorted(rename.items()))
                support[key] += 1
                sources[key] += bt
                old, new = _core(index, at), _core(index, bt)
                said[key][0].update(old - new)
                said[key][1].update(new - old)
    kept = [key for key, n in support.items() if n >= RENAME_SUPPORT]
    out = LibraryTables(
        {key: tuple(sources[key]) for key in kept},
        {
            key: tuple(frozenset(w for w, n in c.items() if n >= SUBJECT_SUPPORT) for c in said[key])
            for key in kept
        },  # type: ignore[misc]
    )
    index._compose_tables = out  # type: ignore[attr-defined]
    return out


def _core(index: LibraryIndex, entries: list[int]) -> set[str]:
    """The words every template of these entries says (its family's core), together."""
    cores = [index.families[k].core for k in {index.entries[i].key for i in entries} if k in index.families]
    return set.intersection(*map(set, cores)) if cores else set()


def _word(text: str) -> str:
    return canonical(stem(text))


def _says(word: str, subjects: frozenset[str]) -> bool:
    """Whether the word is one of the subjects in another form: the crude stem leaves "diagnosi"
    (diagnosis), "diagnos" (diagnosed) and "diagnostic" apart, one subject in three forms."""
    return any(
        word.startswith(s) or s.startswith(word) for s in subjects if min(len(word), len(s)) >= SUBJECT_STEM
    )


def table_plans(reading: Reading, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, TableSwap]]:
    """The table swaps the question asks of the base entry's template (with the nearest entry over
    the new side, whose use shows the renaming), or []."""
    template = index.entries[base].template
    values = reading.values
    if values is None or template is None or reading.ops.get("negation"):
        return []
    _, tables = shape_of(template)
    learned = library_tables(index)
    plans = [key for key in learned.sources if {o for o, _ in key} <= set(tables)]
    if not plans:
        return []
    slot = _unnamed_slot(template, reading.question, values)
    if slot is None:
        return []
    out = []
    for key in plans:
        rename = dict(key)
        if set(rename.values()) & set(tables):
            continue  # the base reads the new side already: both tables
        swap = _swap(reading, key, slot.column, slot.text, learned.subjects[key])
        if swap is not None:
            sources = learned.sources[key]
            out.append((sources[int(np.argmax(vote.sims[np.asarray(sources)]))], swap))
    return out


def _swap(
    reading: Reading,
    key: Renaming,
    column: str,
    old_text: str,
    subjects: tuple[frozenset[str], frozenset[str]],
) -> TableSwap | None:
    """The swap of the slot's column onto the renamed table, if the question names one value of it
    and says no subject of the old side and at most one word of the new."""
    old_column = bare_column(column)
    table, _, name = old_column.rpartition(".")
    new_table = next((n for o, n in key if o.rpartition(".")[2] == table), "")
    if not new_table or reading.values is None:
        return None
    new_column = f"{new_table.rpartition('.')[2]}.{name}"
    found = reading.values.contained(reading.question, new_column)
    longest = max(found, key=lambda f: f[1] - f[0], default=None)
    if longest is None or len({v for a, b, v in found if b - a == longest[1] - longest[0]}) != 1:
        return None
    a, b, value = longest
    rest = reading.question[:a] + " " + reading.question[b:]  # the value's own words say no side
    words = [(t.text, _word(t.text)) for t in tokenize(rest)]
    old_subjects, new_subjects = subjects
    said_new = {text.lower() for text, w in words if _says(w, new_subjects)}
    if any(_says(w, old_subjects) for _, w in words) or len(said_new) > 1:
        return None
    base = ItemSwap(key, old_column, new_column, reading.question[a:b], value, old_text)
    return TableSwap(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                     old_subjects=old_subjects, new_word=next(iter(said_new), ""))  # fmt: skip
