"""The answer as a sentence and numbers a person reads, without an LLM: a sentence built from the
question and the result ("30 patients are older than 70."), and numbers rounded sensibly.

Pure functions over plain values, so the run page, the API and exports phrase alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_HOW_MANY = re.compile(r"^\s*how many (?P<rest>.+?)\s*[?.!]*\s*$", re.I)
_COUNT_THE = re.compile(r"^\s*count (?:the )?(?:total )?number of (?P<rest>.+?)\s*[?.!]*\s*$", re.I)
_WHAT_IS = re.compile(r"^\s*(?:what|which) (?P<verb>is|was|are|were) (?P<rest>.+?)\s*[?.!]*\s*$", re.I)
_AUXILIARY = re.compile(r"\s+(did|does|do|has|have|had)\s+", re.I)
_COUNT_COLUMN = re.compile(r"^(count|n|num|number|total|cnt)(_.*)?$|count\(", re.I)


def format_number(value, unit: str = "") -> str:
    """A number as a person writes it: integers whole (ids keep no separators), other numbers to
    three significant digits at most (4.364982638888889 → 4.36, 1234.567 → 1,234.6)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 1e15):
        text = str(int(value))
    elif not math.isfinite(value):
        text = str(value)
    else:
        magnitude = abs(value)
        if magnitude >= 100:
            text = f"{value:,.1f}"
        elif magnitude >= 1:
            text = f"{value:.2f}".rstrip("0").rstrip(".")
        elif magnitude == 0:
            text = "0"
        else:
            digits = max(2, 2 - math.floor(math.log10(magnitude)))
            text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return f"{text} {unit}".strip() if unit else text


def format_cell(value) -> str:
    """A result cell for display: numbers rounded, NULL spelled, everything else as is."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def answer_sentence(question: str, columns: Sequence[str], rows: Sequence[Sequence], *, row_count: int | None = None,
                    units: dict[str, str] | None = None) -> str:  # fmt: skip
    """One sentence that answers the question from its result, or "" when no honest one fits.

    One number for "how many …?" becomes "<n> <rest of the question>." ("30 patients are older
    than 70.", and "count the number of …" alike); one value for "what is the … of …?" becomes "The … of … is <value>."; other single
    values read "<column>: <value>."; several rows are counted, and a category/number table names
    its largest row.
    """
    units = units or {}
    total = row_count if row_count is not None else len(rows)
    if not rows:
        return "Nothing in the data matches this question."
    if len(rows) == 1 and len(columns) == 1:
        value = rows[0][0]
        shown = format_number(value, units.get(columns[0], "")) if value is not None else "unknown (no value)"
        how_many = _HOW_MANY.match(question)
        if how_many and isinstance(value, int | float):
            noun, aux, _ = [*_AUXILIARY.split(how_many["rest"], maxsplit=1), "", ""][:3]
            if aux:  # "how many admissions did patient 7 have?": the verb cannot be turned around
                return f"{shown} {noun.strip()}."
            return f"{shown} {_sentence_rest(how_many['rest'])}."
        count_the = _COUNT_THE.match(question)
        if count_the and isinstance(value, int | float):  # "count the number of patients older than 70."
            return f"{shown} {_sentence_rest(count_the['rest'])}."
        what = _WHAT_IS.match(question)
        if what:
            return f"{_capfirst(_sentence_rest(what['rest']))} {what['verb'].lower()} {shown}."
        return f"{_label(columns[0])}: {shown}."
    if len(rows) == 1:
        parts = [f"{_label(c)}: {format_number(v, units.get(c, '')) if v is not None else 'unknown'}"
                 for c, v in zip(columns, rows[0], strict=False)]  # fmt: skip
        return _capfirst(", ".join(parts)) + "."
    if len(columns) == 2 and all(isinstance(r[1], int | float) and not isinstance(r[1], bool) for r in rows):
        top = max(rows, key=lambda r: r[1])
        name = top[0] if top[0] is not None else "no value"
        value = format_number(top[1], units.get(columns[1], ""))
        return f"Of {total} rows, {name} has the highest {_label(columns[1])}: {value}."
    return f"{total} row{'s' if total != 1 else ''} match this question."


def _sentence_rest(text: str) -> str:
    """The question's words as the rest of a statement: "patients are older than 70"; a trailing
    "are there" is dropped ("how many patients are there?" → "patients")."""
    text = re.sub(r"\s+", " ", text.strip())
    return re.sub(r" (?:are|were|is|was) there$", "", text, flags=re.I)


def _label(column: str) -> str:
    return "count" if _COUNT_COLUMN.match(column or "") else (column or "value").replace("_", " ")


def _capfirst(text: str) -> str:
    return text[:1].upper() + text[1:]
