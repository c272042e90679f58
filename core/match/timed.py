"""A time returned in place of a value: a verified template whose outer SELECT returns one bare column,
returning instead the time column of the same table that the question names, on the SQL tree.

Why: "when was patient N discharged from the hospital for the first time?" beside a verified "how old
was patient N on the first hospital visit?" reads the same row and asks for its discharge time, not
its age. Which word names which time column comes from the library, never from a list: the library's
templates that read a time column of a table in a time condition or return it ("how many patients were
discharged from the hospital in 2100?": admissions.dischtime) say words that every such template says
and no template reading another time column says ("discharged"; not "admitted", which would name
admissions.admittime; not "patients", which every kind says). The words that say the base's own
column ("how old") are the words its paraphrases say and the library's templates of the same SQL
returning another column ("what was the insurance of …") rarely do: they are left out of the base's
wording, and the question's words for the time take their place.

Hard rules (refused before anything is built): no negation; the question asks for a time
(operators.says_time: "when", "what time", "the date of"); the base returns one bare non-time column
of a table, read nowhere else (reselected.selected_column); the question names exactly one time column
of the whole library and it belongs to that table (a time of a table the base does not read, or two
times named, "admitted and discharged", never swap); the question says none of the base's words for
its own column (both the value and the time asked: "the age and the discharge time"); a duration ("how
many days") is no time asked. The composed question goes through the same rules, binding, validation
and risk as any composition (compose.py, feature `composed`): the guard judges every other word.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import UNANSWERABLE, LibraryIndex
from core.match.operators import question_operators, says_time
from core.match.outer import select_tables
from core.match.reading import Reading
from core.match.reselected import returning_column, selected_column
from core.match.template import TIME_COLUMN, Template, answer_kind, parsed_sql
from core.match.words import FUNCTION_WORDS, same_stem, stem, tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

MIN_FAMILIES = 2  # templates that must read a time column (all saying the word) before a word names it
OWN_SHARE = 0.5  # a time column's word: said by at least this share of the paraphrases of each template
OTHER_SHARE = 0.2  # a base's word for its column: said by less than this share of each same-SQL sibling's
TIME_NOUNS = frozenset({"time", "date"})  # the words TIME_COLUMN reads a time column's name by


@dataclass(frozen=True)
class TimeSwap:
    """Return the time column `new` ("table.column") in place of `old`; the base's words for `old`
    (stems) left out of its wording and the question's words for the time (`new_text`) said instead."""

    old: str
    new: str
    old_words: frozenset[str]
    new_words: frozenset[str]  # the library's stems naming `new`
    new_text: str
    when: bool = False  # the question asks "when" (an operator word the composed wording must say too)

    @property
    def phrase(self) -> str:
        return f"{self.new_text} instead of {' '.join(sorted(self.old_words))}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with the time returned, or None where this paraphrase
        does not say a word for the old column, says one for the new, or returns another column."""
        tokens = tokenize(template.question)
        if any(_names(t.lower, self.new_words) for t in tokens):
            return None
        gone = [
            t
            for i, t in enumerate(tokens)
            if stem(t.lower) in self.old_words or _opens(tokens, i, self.old_words)
        ]
        if not any(stem(t.lower) in self.old_words for t in gone):
            return None
        sql = returning_column(template.sql_template, template.dialect, self.old, self.new)
        if sql is None:
            return None
        parts, at = [], 0
        for i, token in enumerate(gone):
            parts.append(template.question[at : token.start] + (self.new_text if i == 0 else ""))
            at = token.end
        question = " ".join(("".join(parts) + template.question[at:]).split())
        if self.when and not question_operators(question.lower())["when"]:
            # the question asks "when" (an operator word): so must its wording
            question = f"When {question[0].lower()}{question[1:]}"
        return question, sql


def _opens(tokens: list, i: int, words: frozenset[str]) -> bool:
    """ "how" before the base's word for its column ("how old"): the value's question, left out with it."""
    return tokens[i].lower == "how" and i + 1 < len(tokens) and stem(tokens[i + 1].lower) in words


def _names(word: str, stems: frozenset[str]) -> bool:
    """Whether `word` is one of the library's words for a column ("discharge" for "discharged")."""
    if word in FUNCTION_WORDS or not word.isalpha():
        return False
    s = stem(word)
    return any(same_stem(s, t) for t in stems)


@functools.lru_cache(maxsize=16384)
def timed_columns(sql: str, dialect: str) -> frozenset[str]:
    """The time columns ("table.column") a SQL reads as a time: returned, or inside a time condition
    (not only ordered on or checked for NULL, as every "first hospital visit" template does, nor in a
    duration: "the length of the ICU stay" names no time column)."""
    try:
        tree = parsed_sql(sql, dialect)
    except (SqlglotError, ValueError, RecursionError):
        return frozenset()
    out = set()
    for column in tree.find_all(exp.Column):
        if not TIME_COLUMN.search(column.name.lower()) or isinstance(column.parent, (exp.Is, exp.Ordered)):
            continue
        if _in_arithmetic(column):
            continue  # a duration ("outtime - intime", "days since intime") is no time read
        select = column.find_ancestor(exp.Select)
        tables = {a.lower(): t for a, t in select_tables(select).items()} if select is not None else {}
        table = tables.get(column.table.lower())
        if table:
            out.add(f"{table}.{column.name.lower()}")
    return frozenset(out)


def _in_arithmetic(column: exp.Column) -> bool:
    node = column.parent
    while node is not None and not isinstance(node, exp.Select):
        if isinstance(node, (exp.Sub, exp.Add, exp.Mul, exp.Div)):
            return True
        node = node.parent
    return False


# --- what the library shows -------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryTimes:
    """Each time column's words (stems), the entries that say them, and each base template's words for
    the bare column it returns (read against the library's templates of the same SQL)."""

    words: dict[str, frozenset[str]]
    sayers: dict[str, tuple[int, ...]]
    own_words: dict[str, frozenset[str]]


def library_times(index: LibraryIndex) -> LibraryTimes:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_times", None)
    if cached is not None:
        return cached
    said: dict[str, _Said] = {}  # template key -> the stems its paraphrases say (values masked)
    timed: dict[str, list[str]] = defaultdict(list)  # time column -> template keys reading it as a time
    shapes: dict[str, list[str]] = defaultdict(list)  # masked SQL -> keys returning one bare column
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        if template is None or not template.usable:
            continue
        said[key] = _Said(index, members)
        for column in timed_columns(template.sql_template, template.dialect):
            timed[column].append(key)
        column, shape = selected_column(template.sql_template, template.dialect)
        if column:
            shapes[shape].append(key)
    words = {c: _time_words(c, keys, timed, said) for c, keys in timed.items() if len(keys) >= MIN_FAMILIES}
    words = {c: w for c, w in words.items() if w}
    sayers = {
        c: tuple(i for k in timed[c] for i in index.members[k] if _says(index, i, w))
        for c, w in words.items()
    }
    out = LibraryTimes(words, sayers, _own_words(shapes, said))
    index._compose_times = out  # type: ignore[attr-defined]
    return out


def _own_words(shapes: dict[str, list[str]], said: dict[str, _Said]) -> dict[str, frozenset[str]]:
    """Each base's words for the column it returns: said by any of its paraphrases and by few of each
    template of the same SQL returning another column ("old", "age" for the age; not "patient" or
    "visit"). Any paraphrase's, not most: a question saying one of them asks for the value too."""
    own = {}
    for keys in shapes.values():
        for key in keys:
            others = [said[k] for k in keys if k != key]
            if others:
                own[key] = frozenset(
                    w for w in said[key].stems if all(o.share(w) < OTHER_SHARE for o in others)
                )
    return own


class _Said:
    """The content stems each paraphrase of one template says, and each word's share of them, a word
    said in any form counted ("discharge" with "discharged": words.same_stem)."""

    def __init__(self, index: LibraryIndex, members: list[int]) -> None:
        self.members = [_stems(_masked(index, i)) for i in members]
        self.stems = frozenset().union(*self.members)
        self._shares: dict[str, float] = {}

    def share(self, word: str) -> float:
        if word not in self._shares:
            forms = {s for s in self.stems if same_stem(s, word)}
            self._shares[word] = sum(1 for m in self.members if m & forms) / len(self.members)
        return self._shares[word]


def _masked(index: LibraryIndex, i: int) -> str:
    """An entry's question with its values masked: "the discharge lounge" is a care unit, no time's word."""
    template = index.entries[i].template
    return template.masked_question if template is not None else index.entries[i].question


def _stems(question: str) -> frozenset[str]:
    return frozenset(
        stem(t.lower) for t in tokenize(question) if t.lower not in FUNCTION_WORDS and t.lower.isalpha()
    )


def _time_words(
    column: str, keys: list[str], timed: dict[str, list[str]], said: dict[str, _Said]
) -> frozenset[str]:
    """Stems most paraphrases of every template reading `column` as a time say, and no paraphrase of a
    template reading another time column (and not that one) says: "discharged", never "patients"."""
    common = {w for w in said[keys[0]].stems if all(said[k].share(w) >= OWN_SHARE for k in keys)}
    mine = set(keys)
    for other, other_keys in timed.items():
        if other != column:
            for k in other_keys:
                if k not in mine:
                    common = {w for w in common if said[k].share(w) == 0}
    return frozenset(common)


def _says(index: LibraryIndex, i: int, words: frozenset[str]) -> bool:
    return any(_names(t.lower, words) for t in tokenize(index.entries[i].question))


# --- planning ---------------------------------------------------------------------------------------


def time_plans(reading: Reading, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, TimeSwap]]:
    """The time the question asks of the base entry's template in place of its value, with the entry
    whose question says the time's words (the nearest), or []."""
    template = index.entries[base].template
    if (
        template is None
        or not template.usable
        or reading.ops.get("negation")
        or not says_time(reading.question)
    ):
        return []
    if answer_kind(template) != "column":
        return []
    old, _ = selected_column(template.sql_template, template.dialect)
    library = library_times(index)
    own = library.own_words.get(index.entries[base].key, frozenset())
    if not old or not own:
        return []
    tokens = tokenize(reading.masked)  # a value ("the discharge lounge") names no time
    if any(stem(t.lower) in own for t in tokens):
        return []  # the value asked too ("the age and the discharge time")
    named = {c for c, w in library.words.items() if any(_names(t.lower, w) for t in tokens)}
    if len(named) != 1 or next(iter(named)).split(".")[0] != old.split(".")[0]:
        return []  # no time named, two, or one of a table the base does not return from
    new = next(iter(named))
    # The question's words for the time: those naming the column, and "time" or "date" ("the discharge time")
    text = " ".join(t.text for t in tokens if _names(t.lower, library.words[new]) or t.lower in TIME_NOUNS)
    sources = np.asarray(library.sayers[new])
    if not len(sources):
        return []
    source = int(sources[int(np.argmax(vote.sims[sources]))])
    return [(source, TimeSwap(old, new, own, library.words[new], text, bool(reading.ops.get("when"))))]
