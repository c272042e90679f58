"""Database values a question names: the value index (exact, longest first) and the lookup protocol."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

import sqlglot.expressions as sx

from core.match.spans import VALUE
from core.match.template import DEFAULT_VALUE_COLUMNS, Template
from core.match.words import NEUTRAL_WORDS


class ValueLookup(Protocol):
    """Real database values of `table_column` ("mimiciv_hosp.prescriptions.drug") like `text`, best first.

    Scores are 0..1; an exact (case-insensitive) match should score 1.0 and a value that merely
    contains the text less. The caller implements it over the value index or the clinical database.
    """

    def __call__(self, table_column: str, text: str) -> list[tuple[str, float]]: ...


class ValueFinder(Protocol):
    """Database values of linkable columns that a question contains, longest first (see library.ValueIndex)."""

    def contained(self, question: str, column: str) -> list[tuple[int, int, str]]: ...
    def spans(self, question: str) -> list[tuple[int, int]]: ...
    def covers(self, column: str) -> bool: ...


def bare_column(column: str) -> str:
    """ "mimiciv_hosp.d_items.label" and "d_items.label" are the same column for value linking."""
    return ".".join(column.lower().split(".")[-2:])


# --- database values a question names ------------------------------------------------------------


MAX_VALUE_CHARS = 300  # ICD titles run to 230 characters ("surgical operation with anastomosis, …")


class ValueIndex:
    """Every value of the linkable columns, to find the longest ones a question contains.

    Exact containment, case-insensitive, on word boundaries: a drug is named as it is written.
    Values with fewer than two letters or that are plain function words are left out. A value may
    end in a bracket ("fibromatosis [dupuytren]") and start with "%" ("% hemoglobin a1c"); one glued
    to a word by a hyphen is not read ("non-invasive" is not the value 'non').
    """

    _START = re.compile(r"(?:^|(?<=[\s(\"'/]))(?=[A-Za-z0-9(%\[])")
    _END = re.compile(r"(?<=[A-Za-z0-9)%.\]])(?=$|[\s?,;:!\"')\]]|\.(?:\s|$)|'s\b)")

    def __init__(self, values: dict[str, Iterable[str]], *, names: dict[str, dict[str, str]] | None = None):
        """`values`: column -> its values. `names`: column -> {another name: the value it names}."""
        self._by_text: dict[str, dict[str, str]] = defaultdict(dict)
        pairs = [(c, v, v) for c, vs in values.items() for v in vs]
        pairs += [(c, n, v) for c, ns in (names or {}).items() for n, v in ns.items()]
        for column, name, value in pairs:
            if not isinstance(name, str) or not isinstance(value, str):
                continue
            text = " ".join(name.lower().split())
            if len(re.sub(r"[^a-z]", "", text)) < 2 or text in NEUTRAL_WORDS or len(text) > MAX_VALUE_CHARS:
                continue
            self._by_text[text].setdefault(bare_column(column), value)
        self.max_len = max((len(t) for t in self._by_text), default=0)
        self.columns = {c for d in self._by_text.values() for c in d}
        self._cache: dict[str, list[tuple[int, int, dict[str, str]]]] = {}
        self._longer: dict[tuple[str, str], list[str]] = {}
        # Made by `prepare` (with the library build, else on first use): a column's (text, value)
        # pairs, where each starts, all joined.
        self._by_column: dict[str, tuple[list[tuple[str, str]], list[int], str]] = {}
        self._prepared = False

    def __len__(self) -> int:
        return len(self._by_text)

    def _all(self, question: str) -> list[tuple[int, int, dict[str, str]]]:
        cached = self._cache.get(question)  # one read: another thread of a web worker may clear it
        if cached is not None:
            return cached
        lowered = question.lower()
        starts = [m.start() for m in self._START.finditer(lowered)]
        ends = [m.start() for m in self._END.finditer(lowered)]
        found = []
        for a in starts:
            for b in ends:
                if b <= a:
                    continue
                if b - a > self.max_len:
                    break
                hit = self._by_text.get(" ".join(lowered[a:b].split()))
                if hit:
                    found.append((a, b, hit))
        if len(self._cache) > 20000:
            self._cache.clear()
        self._cache[question] = found
        return found

    def contained(self, question: str, column: str) -> list[tuple[int, int, str]]:
        col = bare_column(column)
        return [(a, b, hit[col]) for a, b, hit in self._all(question) if col in hit]

    def covers(self, column: str) -> bool:
        return bare_column(column) in self.columns

    def spans(self, question: str) -> list[tuple[int, int]]:
        """The longest non-overlapping values the question contains (any column)."""
        out: list[tuple[int, int]] = []
        for a, b, _ in sorted(self._all(question), key=lambda f: (f[0] - f[1], f[0])):
            if not any(a < y and x < b for x, y in out):
                out.append((a, b))
        return sorted(out)

    def _texts_with(self, col: str, text: str) -> list[tuple[str, str]]:
        """(text, value) of one column's values that contain `text`: found by str.find in the
        column's values joined by newlines (no value holds one), not by a Python loop over them."""
        if not self._prepared:
            self.prepare()
        if col not in self._by_column:
            return []
        pairs, starts, joined = self._by_column[col]
        found: dict[int, None] = {}
        at = joined.find(text)
        while at >= 0:
            found[bisect.bisect_right(starts, at) - 1] = None
            at = joined.find(text, at + 1)
        return [pairs[k] for k in found]

    def prepare(self) -> None:
        """Every column's values joined for `longer`, in one pass over the index (one pass per
        column cost ~80 ms each on a 5,000-example library's values, paid by whichever question
        first named a value of that column). The library cache calls it with its build."""
        by_column: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for t, hit in self._by_text.items():
            for col, value in hit.items():
                by_column[col].append((t, value))
        built = {}
        for col, pairs in by_column.items():
            starts, at = [], 0
            for t, _ in pairs:
                starts.append(at)
                at += len(t) + 1
            built[col] = (pairs, starts, "\n".join(t for t, _ in pairs))
        self._by_column, self._prepared = built, True

    def with_names(self, names: ValueIndex) -> ValueIndex:
        """This index and the other names of its values the library's questions use (value_names)."""
        return _NamedValues(self, names) if len(names) else self

    def longer(self, column: str, value: str, limit: int = 5) -> list[str]:
        """Values of `column` that contain `value` as whole words and are longer ("potassium, whole
        blood" for "potassium"), shortest first: what else a question naming `value` may mean."""
        col, text = bare_column(column), " ".join(value.lower().split())
        if not text:
            return []
        kept = self._longer.get((col, text))  # one read: another thread may clear it in between
        if kept is None:  # one scan of the index per value asked: values recur
            word = re.compile(r"(?<![a-z0-9])" + re.escape(text) + r"(?![a-z0-9])")
            found = {
                value
                for t, value in self._texts_with(col, text)
                if len(t) > len(text) and text in t and word.search(t)
            }
            if len(self._longer) > 20000:
                self._longer.clear()
            kept = self._longer[(col, text)] = sorted(found, key=lambda v: (len(v), v))
        return kept[:limit]


class _NamedValues(ValueIndex):
    """A value index and a small one of other names for its values, read as one; a database
    value's own spelling wins over another name spelled the same."""

    def __init__(self, values: ValueIndex, names: ValueIndex):
        self.base, self.names = values, names
        self.max_len = max(values.max_len, names.max_len)
        self.columns = values.columns

    def __len__(self) -> int:
        return len(self.base)

    def longer(self, column: str, value: str, limit: int = 5) -> list[str]:
        return self.base.longer(column, value, limit)

    def _all(self, question: str) -> list[tuple[int, int, dict[str, str]]]:
        last = self.__dict__.get("_last")  # one question's matching reads it a dozen times: merged once
        if last is not None and last[0] == question:
            return last[1]
        own = self.base._all(question)
        spans = {(a, b): hit for a, b, hit in own}
        other = [
            (a, b, {c: v for c, v in hit.items() if c not in spans.get((a, b), {})})
            for a, b, hit in self.names._all(question)
        ]
        self._last = (question, own + [(a, b, hit) for a, b, hit in other if hit])
        return self._last[1]


NAME_EXAMPLES = 2  # approved questions that must name a value the same other way before it is a name


def value_names(templates: Iterable[Template]) -> ValueIndex:
    """Other names the library's approved questions give database values: "systolic blood pressure"
    for 'arterial blood pressure systolic', "weigh" for 'daily weight'.

    A named-value slot whose question words are not the value's spelling is a reviewer-approved
    reading of those words. A name counts when NAME_EXAMPLES questions use it for one value of a
    column and none for another; LIKE patterns are written from the question's own words, so they
    name nothing else.
    """
    seen: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for template in templates:
        for slot in template.slots:
            if slot.type != VALUE or not slot.column or any(u.like for u in slot.uses):
                continue
            name = " ".join(slot.text.lower().split())
            if name != " ".join(slot.value.lower().split()):
                seen[(bare_column(slot.column), name)][slot.value].add(template.question.lower())
    names: dict[str, dict[str, str]] = defaultdict(dict)
    for (column, name), by_value in seen.items():
        if len(by_value) == 1:
            value, questions = next(iter(by_value.items()))
            if len(questions) >= NAME_EXAMPLES:
                names[column][name] = value
    return ValueIndex({}, names=names)


def load_values(executor, tables: dict[str, str], dialect: str) -> ValueIndex:
    """A ValueIndex over the linkable columns (templates.DEFAULT_VALUE_COLUMNS) of these tables.

    `tables` maps a bare table name to the name to query ("d_items" -> "mimiciv_icu.d_items"); one
    DISTINCT query per column through `executor` (read-only). A column that cannot be read is skipped.
    """
    found: dict[str, list[str]] = {}
    for table, column in sorted(DEFAULT_VALUE_COLUMNS):
        if table not in tables:
            continue
        query = sx.select(sx.column(column, quoted=True)).distinct().from_(sx.to_table(tables[table]))
        try:
            rows = executor.execute(query.sql(dialect=dialect), timeout_s=60, row_cap=500_000).rows
        except Exception:  # a column this database lacks or cannot read: no values to link
            continue
        found[f"{tables[table]}.{column}"] = [r[0] for r in rows if isinstance(r[0], str)]
    return ValueIndex(found)


def columns_naming(values: ValueIndex, text: str) -> set[str]:
    """The columns of which `text`, as a whole, is a value."""
    return {col for a, b, hit in values._all(text) if a == 0 and b == len(text) for col in hit}
