"""The selected column swapped: a verified template whose outer SELECT returns one bare column, with that
column swapped for another column of the same table, where the question names the other one, on the
SQL tree, worded as the library words it.

Why: "what was the insurance of patient N on the first hospital visit?" beside a verified "how old was
patient N on the first hospital visit?" reads the same row and returns another of its columns. Both
the column and its wording come from the library, never from a list: two of its templates that are
the same SQL but for the one bare column their outer SELECT returns (literals masked), and a paraphrase
of each that differs from one of the other in one run of words and nothing else, show that phrase
names that column ("insurance" -> admissions.insurance, "how old" -> admissions.age). A phrase the
library shows naming two columns, or a column said with two phrases that name others, never swaps.

Hard rules (refused before anything is built): no negation in the question; the base returns one bare
column (an aggregate, an expression or two columns: no swap, since the library only shows what a
phrase names as a bare column), which its SQL reads nowhere else (an ORDER BY or WHERE on it would
then read the old column); exactly one phrase the library maps to another column of the same table
is in the question, and its phrase for the base's column is not; the base paraphrase says the old
phrase once and not the new. The composed question (the base paraphrase with the phrase replaced)
goes through the same rules, binding, validation and risk as any composition (compose.py, feature
`composed`), so the guard still judges every other word of the question.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import UNANSWERABLE, LibraryIndex
from core.match.outer import outer_tables_of
from core.match.reading import Reading
from core.match.template import Template, parsed_sql, written
from core.match.words import tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

PHRASE_WORDS = 4  # longest run of words a phrase for a column may be
MEMBERS_READ = 12  # paraphrases of each template of a pair compared (the pairs are few, each cheap)


@dataclass(frozen=True)
class ColumnSwap:
    """Return `new` ("table.column") in place of `old`, said `new_phrase` in place of `old_phrase`."""

    old: str
    new: str
    old_phrase: tuple[str, ...]
    new_phrase: tuple[str, ...]
    new_text: str  # the question's own words for the new column

    @property
    def phrase(self) -> str:
        return f"{self.new_text} instead of {' '.join(self.old_phrase)}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with the column and its phrase swapped, or None where this
        paraphrase does not say the old phrase exactly once (or says the new one), or its SQL does not
        return the old column alone."""
        old_at = phrase_spans(template.question, self.old_phrase)
        if len(old_at) != 1 or phrase_spans(template.question, self.new_phrase):
            return None
        sql = returning_column(template.sql_template, template.dialect, self.old, self.new)
        if sql is None:
            return None
        start, end = old_at[0]
        return template.question[:start] + self.new_text + template.question[end:], sql


def phrase_spans(question: str, phrase: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where the question says the phrase's words in a row (any case), as character spans."""
    tokens = tokenize(question)
    n = len(phrase)
    return [
        (tokens[i].start, tokens[i + n - 1].end)
        for i in range(len(tokens) - n + 1)
        if tuple(t.lower for t in tokens[i : i + n]) == phrase
    ]


@functools.lru_cache(maxsize=16384)
def selected_column(sql: str, dialect: str) -> tuple[str, str]:
    """(the one bare column the outer SELECT returns as "table.column", the SQL with it and every
    literal masked), or ("", "") where it returns anything else or reads that column elsewhere too.
    Once per SQL: a calibration builds a library per fold from the same templates."""
    try:
        tree = parsed_sql(sql, dialect)
    except (SqlglotError, ValueError, RecursionError):
        return "", ""
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1 or tree.args.get("distinct"):
        return "", ""
    column = tree.expressions[0].unalias()
    if not isinstance(column, exp.Column) or not column.table:
        return "", ""
    tables = outer_tables_of(sql, dialect)
    if column.table not in tables:
        return "", ""
    same = [c for c in tree.find_all(exp.Column) if c.name.lower() == column.name.lower()]
    if len(same) != 1:
        return "", ""  # also ordered or filtered on: swapping the returned column alone would not do
    masked = tree.copy()
    masked.expressions[0].replace(exp.var("SELECTED"))
    for lit in masked.find_all(exp.Literal):
        lit.replace(exp.var("L"))
    return f"{tables[column.table]}.{column.name.lower()}", masked.sql(dialect=dialect)


@functools.lru_cache(maxsize=16384)
def returning_column(sql: str, dialect: str, old: str, new: str) -> str | None:
    """The SQL returning column `new` in place of `old` (same table, same alias), or None. The one
    way a composition swaps the returned column: this kind's and timed.py's (a time column)."""
    found, _ = selected_column(sql, dialect)
    if found != old or old.split(".")[0] != new.split(".")[0]:
        return None
    tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    column = tree.expressions[0].unalias()
    column.set("this", exp.to_identifier(new.split(".", 1)[1]))
    return written(tree, dialect)  # our copy, kept as its SQL's parse


# --- what the library shows -------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryColumns:
    """phrase -> the one column the library shows it naming; the entries that say each phrase for its
    column (the source of a swap's wording); each column's phrases."""

    column: dict[tuple[str, ...], str]
    sayers: dict[tuple[str, ...], tuple[int, ...]]
    phrases: dict[str, frozenset[tuple[str, ...]]]


def library_columns(index: LibraryIndex) -> LibraryColumns:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_columns", None)
    if cached is not None:
        return cached
    shapes: dict[str, dict[str, str]] = defaultdict(dict)  # masked SQL -> column -> template key
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        if template is not None and template.usable:
            column, shape = selected_column(template.sql_template, template.dialect)
            if column:
                shapes[shape].setdefault(column, key)
    named: dict[tuple[str, ...], set[str]] = defaultdict(set)
    sayers: dict[tuple[str, ...], set[int]] = defaultdict(set)
    for by_column in shapes.values():
        for (col_a, key_a), (col_b, key_b) in combinations(sorted(by_column.items()), 2):
            for (phrase_a, i), (phrase_b, j) in _phrase_pairs(index, key_a, key_b):
                named[phrase_a].add(col_a)
                named[phrase_b].add(col_b)
                sayers[phrase_a].add(i)
                sayers[phrase_b].add(j)
    column = {p: next(iter(cols)) for p, cols in named.items() if len(cols) == 1}  # one column, or none
    phrases: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for p, c in column.items():
        phrases[c].add(p)
    out = LibraryColumns(
        column,
        {p: tuple(sorted(sayers[p])) for p in column},
        {c: frozenset(ps) for c, ps in phrases.items()},
    )
    index._compose_columns = out  # type: ignore[attr-defined]
    return out


def _phrase_pairs(index: LibraryIndex, key_a: str, key_b: str) -> list[tuple[tuple, tuple]]:
    """((phrase, entry) of template a, (phrase, entry) of template b) for each paraphrase pair of the two
    that differs in one run of words and nothing else (values masked)."""
    out = []
    for i in index.members[key_a][:MEMBERS_READ]:
        words_a = _masked_words(index, i)
        for j in index.members[key_b][:MEMBERS_READ]:
            middle = _differ(words_a, _masked_words(index, j))
            if middle is not None:
                out.append(((middle[0], i), (middle[1], j)))
    return out


def _masked_words(index: LibraryIndex, i: int) -> tuple[str, ...]:
    template = index.entries[i].template
    return tuple(t.lower for t in tokenize(template.masked_question)) if template is not None else ()


def _differ(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The one run of words two questions differ in (each side a phrase of plain words), or None."""
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    mid_a, mid_b = a[start : len(a) - end], b[start : len(b) - end]
    if not (0 < len(mid_a) <= PHRASE_WORDS and 0 < len(mid_b) <= PHRASE_WORDS):
        return None
    if not all(w.isalpha() for w in mid_a + mid_b):
        return None  # a value's place or a number: not a phrase for a column
    return mid_a, mid_b


# --- planning ---------------------------------------------------------------------------------------


def column_plans(
    reading: Reading, index: LibraryIndex, base: int, vote: Vote
) -> list[tuple[int, ColumnSwap]]:
    """The column swap the question asks of the base entry's template, with the entry whose question
    says the new column's phrase (the nearest), or []."""
    template = index.entries[base].template
    if template is None or not template.usable or reading.ops.get("negation"):
        return []
    old, _ = selected_column(template.sql_template, template.dialect)
    if not old:
        return []
    library = library_columns(index)
    old_phrases = [p for p in library.phrases.get(old, ()) if len(phrase_spans(template.question, p)) == 1]
    if len(old_phrases) != 1 or any(phrase_spans(reading.question, p) for p in library.phrases.get(old, ())):
        return []  # the base's phrase unsaid (or said twice), or the question says the old column too
    table = old.split(".")[0]
    asked = [
        (p, c)
        for p, c in library.column.items()
        if c != old and c.split(".")[0] == table and phrase_spans(reading.question, p)
    ]
    if len({c for _, c in asked}) != 1:
        return []  # no other column named, or two
    new_phrase, new = max(asked, key=lambda pc: len(pc[0]))  # "admission type" over "type"
    spans = phrase_spans(reading.question, new_phrase)
    if len(spans) != 1 or phrase_spans(template.question, new_phrase):
        return []
    sources = library.sayers[new_phrase]
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    text = reading.question[spans[0][0] : spans[0][1]]
    return [(source, ColumnSwap(old, new, old_phrases[0], new_phrase, text))]
