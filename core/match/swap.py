"""The aggregate swap: a verified template whose answer is one aggregate of a column (the average, the
minimum, the maximum, the total) with that function swapped for another the question asks for, on the
SQL tree, worded as the library words it.

Why: "what is the minimum age of male patients?" beside a verified "what is the average age of male
patients?" differs by one word and one SQL function. Both the wording and the function come from the
library: a word (an operator word of operators.py: "average", "lowest", "peak" …) maps to a function
only where the library's own one-aggregate questions show that mapping (MAPPING_SUPPORT templates at
least, MAPPING_SHARE of them), and a column takes an arithmetic aggregate (average, total) only where
the library already averages or sums it: the average of a text column or of a time is never composed.
The swap is planned only when the question says as many such words as the base paraphrase and they
map to the same functions but for one, the base's outer function ("the maximum total cost" for a
verified "the minimum total cost": MIN over the visit's SUM becomes MAX, the total kept; never "the
average count" for "the count", nor two functions changed); the composed question (the base paraphrase
with its word replaced) then goes through the same rules, binding, validation and risk as any
composition (compose.py), so the guard still judges every word.

A count is read (its words keep a question with two functions apart) but never swapped: COUNT(*) or a
count of ids has no column an average could read.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import LibraryIndex
from core.match.operators import _OPERATOR_PATTERNS
from core.match.template import Template, parsed_sql, written

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

# The SQL functions by name; the ones a swap may write, and the ones that need a column of numbers.
FUNCTIONS: dict[type[exp.Expr], str] = {exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX", exp.Sum: "SUM",
                                        exp.Count: "COUNT"}  # fmt: skip
SWAPPABLE = ("AVG", "MIN", "MAX", "SUM")
# An average reads a column the library averages or sums; a total, one the library sums ("the total
# amount given"): the total of an age or of a lab value is no question a researcher asks.
READS = {"AVG": ("AVG", "SUM"), "SUM": ("SUM",)}
# Words of an output name that say the function ("avg_age"), renamed with it ("min_age").
_NAME_WORDS = {"avg": "AVG", "average": "AVG", "mean": "AVG", "min": "MIN", "minimum": "MIN", "lowest": "MIN",
               "max": "MAX", "maximum": "MAX", "highest": "MAX", "sum": "SUM", "total": "SUM"}  # fmt: skip
_NAME_OF = {"AVG": "avg", "MIN": "min", "MAX": "max", "SUM": "total"}
MAPPING_SUPPORT = 1  # templates a word must say a function in (a new library has one of each)
MAPPING_SHARE = 0.8  # …and the share of its one-aggregate templates that function must have
# The words operators.py reads as an extreme or an aggregate: the candidates the library confirms.
_WORDS = re.compile(
    "|".join(f"(?:{pattern})" for key in ("extreme", "aggregate") for _, pattern in _OPERATOR_PATTERNS[key]),
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AggregateSwap:
    """Swap the outer aggregate `old` (said as `old_word`) for `new` (said as `new_word`)."""

    old: str
    new: str
    old_word: str  # the base question's word, for the composition's wording
    new_word: str
    old_words: frozenset[str]  # every word the library maps to `old`: a paraphrase may say another
    said: int = 1  # aggregate words the base says ("the minimum total cost": 2, the total kept)

    @property
    def phrase(self) -> str:
        return f"{self.new_word} instead of {self.old_word}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with the function and its word swapped, or None where
        this paraphrase does not say the old function with exactly the one word."""
        said = aggregate_words(template.question)
        old = [w for w in said if w[2] in self.old_words]
        if len(said) != self.said or len(old) != 1:
            return None
        start, end, _ = old[0]
        question = template.question[:start] + self.new_word + template.question[end:]
        try:
            tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
        except (SqlglotError, ValueError):
            return None
        node = outer_aggregate(tree)
        if node is None or FUNCTIONS[type(node)] != self.old:
            return None
        alias = node.parent if isinstance(node.parent, exp.Alias) else None
        node.replace(_NEW[self.new](this=node.this.copy()))
        if alias is not None:
            alias.set("alias", exp.to_identifier(self._renamed(alias.alias)))
        return question, written(tree, template.dialect)  # our copy, kept as its SQL's parse

    def _renamed(self, name: str) -> str:
        """ "avg_age" for a minimum is "min_age": the output's name says the function it holds."""
        words = name.split("_")
        return "_".join(_NAME_OF[self.new] if _NAME_WORDS.get(w.lower()) == self.old else w for w in words)


_NEW: dict[str, type[exp.Expr]] = {name: cls for cls, name in FUNCTIONS.items()}


@functools.lru_cache(maxsize=1 << 16)
def aggregate_words(question: str) -> tuple[tuple[int, int, str], ...]:
    """The question's extreme and aggregate words (start, end, the word lowercased), in order. Read
    once per question: composing asks it of the same library questions for every held-out question
    (a tenth of a calibration's match time went to this one long pattern)."""
    return tuple(
        (m.start(), m.end(), " ".join(m.group(0).lower().split())) for m in _WORDS.finditer(question)
    )


def outer_aggregate(tree: exp.Expr) -> exp.Expr | None:
    """The outer SELECT's one aggregate function over one column, or None (none, several, a subquery's
    only, an ORDER BY / LIMIT on the outer SELECT, or a count of * or DISTINCT)."""
    if not isinstance(tree, exp.Select) or tree.args.get("order") or tree.args.get("limit"):
        return None
    found = [
        node
        for projection in tree.expressions
        for node in projection.find_all(*FUNCTIONS)
        if node.parent_select is tree
    ]
    if len(found) != 1 or not isinstance(found[0].this, exp.Column):
        return None
    return found[0]


@dataclass(frozen=True)
class LibrarySwaps:
    """What the library shows: word -> function, the entries saying each word of a one-aggregate
    template (for the source of a swap), and the columns each function reads."""

    mapping: dict[str, str]
    sayers: dict[str, tuple[int, ...]]
    columns: dict[str, frozenset[str]]  # function -> the column names the library applies it to


def library_swaps(index: LibraryIndex) -> LibrarySwaps:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_swaps", None)
    if cached is not None:
        return cached
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    seen: set[tuple[str, str]] = set()
    sayers: dict[str, list[int]] = defaultdict(list)
    columns: dict[str, set[str]] = defaultdict(set)
    for i, entry in enumerate(index.entries):
        function, column = _function_of(entry.template)
        if not function:
            continue
        columns[function].add(column)
        said = {word for _, _, word in aggregate_words(entry.question)}
        # a paraphrase that says two words ("the minimum total cost") shows neither's function alone:
        # which one is the outer is not said; a value's own words ("platelet count") are not said
        alone = {word for _, _, word in aggregate_words(entry.template.masked_question)}  # type: ignore[union-attr]
        for word in said:
            sayers[word].append(i)
            if alone == {word} and (word, entry.key) not in seen:  # a template counts once
                seen.add((word, entry.key))
                counts[word][function] += 1
    mapping = {}
    for word, by_function in counts.items():
        function, n = by_function.most_common(1)[0]
        if n >= MAPPING_SUPPORT and n >= MAPPING_SHARE * sum(by_function.values()):
            mapping[word] = function
    out = LibrarySwaps(
        mapping,
        {w: tuple(s) for w, s in sayers.items() if w in mapping},
        {f: frozenset(c) for f, c in columns.items()},
    )
    index._compose_swaps = out  # type: ignore[attr-defined]
    return out


def _function_of(template: Template | None) -> tuple[str, str]:
    """The template's outer aggregate and its column name, or ("", "")."""
    if template is None or not template.usable:
        return "", ""
    return _function(template.sql_template, template.dialect)


@functools.lru_cache(maxsize=16384)
def _function(sql: str, dialect: str) -> tuple[str, str]:
    """Once per SQL: a calibration builds a library per fold from the same templates."""
    try:
        node = outer_aggregate(parsed_sql(sql, dialect))
    except (SqlglotError, ValueError, RecursionError):
        return "", ""
    return (FUNCTIONS[type(node)], node.this.name.lower()) if node is not None else ("", "")


def swap_plans(question: str, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, AggregateSwap]]:
    """The swap the question asks of the base entry's template, with the entry whose question shows
    the new word's mapping (the nearest such), or []: one word, one function, another than the
    base's, on a column that function can read."""
    swaps = library_swaps(index)
    said = aggregate_words(question)
    base_entry = index.entries[base]
    base_said = aggregate_words(base_entry.question)
    if not said or len(said) != len(base_said):  # "the average count" for "the count": no swap
        return []
    functions = [swaps.mapping.get(w) for _, _, w in said]
    base_functions = [swaps.mapping.get(w) for _, _, w in base_said]
    differ = [i for i, (a, b) in enumerate(zip(functions, base_functions, strict=True)) if a != b]
    if len(differ) != 1 or None in functions or None in base_functions:
        return []  # two functions changed, or a word the library does not map
    new_word, old_word = said[differ[0]][2], base_said[differ[0]][2]
    new, old = functions[differ[0]], base_functions[differ[0]]
    function, column = _function_of(base_entry.template)
    if old != function or new not in SWAPPABLE or old not in SWAPPABLE or base_functions.count(old) != 1:
        return []  # the word swapped is the outer function's, said once; the others stay as they are
    if new in READS and not any(column in swaps.columns.get(f, ()) for f in READS[new]):
        return []  # no average of a text or a time, no total of an age
    sources = swaps.sayers.get(new_word, ())
    if not sources:
        return []
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    old_words = frozenset(w for w, f in swaps.mapping.items() if f == old)
    return [(source, AggregateSwap(old, new, old_word, new_word, old_words, len(said)))]
