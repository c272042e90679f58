"""The answer as a sentence and numbers a person reads, without an LLM: a sentence built from the
question and the result ("30 patients are older than 70."), and numbers rounded sensibly.

Pure functions over plain values, so the run page, the API and exports phrase alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from core.labels import ColumnLabel, capfirst, draft_label, lowerfirst

_HOW_MANY = re.compile(r"^\s*how many (?P<rest>.+?)\s*[?.!]*\s*$", re.I)
_COUNT_THE = re.compile(r"^\s*count (?:the )?(?:total )?number of (?P<rest>.+?)\s*[?.!]*\s*$", re.I)
_WHAT_IS = re.compile(r"^\s*(?:what|which) (?P<verb>is|was|are|were) (?P<rest>.+?)\s*[?.!]*\s*$", re.I)
_AUXILIARY = re.compile(r"\s+(did|does|do|has|have|had)\s+", re.I)
_COUNT_COLUMN = re.compile(r"^(count|n|num|number|total|cnt)(_.*)?$|count\(", re.I)
_SUPPRESSED = re.compile(r"<\s*(?P<k>\d+)")  # a small count withheld (core/privacy.py writes "<11")
_TOP_N = re.compile(r"\b(?:top|most common|most frequent|most often|commonest)\b", re.I)
# Nouns a question asks about, for "No admissions in the data match this question."
_QUESTION_NOUNS = ("patients", "admissions", "icu stays", "stays", "diagnoses", "procedures", "prescriptions",
                   "lab results", "transfers", "values", "events")  # fmt: skip
_ID_NOUNS = {"Patient": "patients", "Admission": "admissions", "ICU stay": "ICU stays"}


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


def format_cell(value, fmt: str = "") -> str:
    """A result cell for display: numbers rounded, NULL spelled, everything else as is; `fmt` is
    the catalog's format for the column (core/labels.FORMATS): "code" leaves ids and codes alone,
    "integer" and "decimal" round, "percent" adds %, "date" drops a timestamp's time."""
    if value is None:
        return "NULL"
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if fmt == "code":
        return str(value)
    if fmt == "integer" and number:
        return f"{round(value):,}"
    if fmt == "decimal" and number:
        return format_number(float(value))
    if fmt == "percent" and number:
        return f"{format_number(value)} %"
    if fmt == "date" and isinstance(value, str) and len(value) > 10 and value[4:5] == "-":
        return value[:10]
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def answer_sentence(question: str, columns: Sequence[str], rows: Sequence[Sequence], *, row_count: int | None = None,
                    units: dict[str, str] | None = None, labels: Sequence[ColumnLabel] | None = None) -> str:  # fmt: skip
    """One sentence a person would write from the question, the result's shape and the columns'
    labels, or "" when no honest one fits.

    A count reads "<n> <rest of the question>." ("30 patients are older than 70."), a suppressed
    count says it is withheld and why; one value reads "The … of … is <value>." or "The <label> is
    <value>."; one row names each column; a top-N question lists its rows; a group table names its
    largest row; an empty result says what did not match.
    """
    units = units or {}
    if labels is None or len(labels) != len(columns):
        labels = [_fallback_label(c) for c in columns]
    labels = [ColumnLabel(lb.name, lb.label, lb.unit or units.get(c, ""), lb.format)
              for lb, c in zip(labels, columns, strict=True)]  # fmt: skip
    total = row_count if row_count is not None else len(rows)
    if not rows:
        return _empty_sentence(question, labels)
    if len(rows) == 1 and len(columns) == 1:
        return _one_value_sentence(question, labels[0], rows[0][0])
    if len(rows) == 1:
        return _one_row_sentence(labels, rows[0])
    if len(columns) > 1 and _is_group_table(rows):
        # a group table: a category, then its numbers; the first number is the one stated
        return _group_sentence(question, labels[:2], [r[:2] for r in rows], total)
    return _list_sentence(labels, rows, total)


def _is_group_table(rows: Sequence[Sequence]) -> bool:
    return all(_is_number(r[1]) or _is_suppressed(r[1]) for r in rows) and not all(
        _is_number(r[0]) for r in rows
    )


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_suppressed(value) -> bool:
    return isinstance(value, str) and bool(_SUPPRESSED.fullmatch(value.strip()))


def _shown(value, label: ColumnLabel) -> str:
    if value is None:
        return "unknown (no value)"
    return format_number(value, label.unit)


def _withheld(value: str, noun: str, *, verb_rest: str = "") -> str:
    k = _SUPPRESSED.fullmatch(value.strip())["k"]
    said = f"Fewer than {k} {noun}{(' ' + verb_rest) if verb_rest else ''}"
    return f"{said.rstrip()} — the exact number is withheld to protect privacy."


def _one_value_sentence(question: str, label: ColumnLabel, value) -> str:
    how_many = _HOW_MANY.match(question) or _COUNT_THE.match(question)
    if how_many and (_is_number(value) or _is_suppressed(value)):
        noun, aux, _ = [*_AUXILIARY.split(how_many["rest"], maxsplit=1), "", ""][:3]
        rest = noun.strip() if aux else _sentence_rest(how_many["rest"])
        if _is_suppressed(value):
            return _withheld(value, rest)
        if value == 0:
            return f"No {rest}."
        return f"{_shown(value, label)} {rest}."
    if _is_suppressed(value):
        return _withheld(value, _count_noun(label))
    what = _WHAT_IS.match(question)
    if what:
        return f"{capfirst(_sentence_rest(what['rest']))} {what['verb'].lower()} {_shown(value, label)}."
    if label.label.startswith("Number of ") and _is_number(value):
        return f"{format_number(value)} {label.label[len('Number of ') :]}."
    return f"The {lowerfirst(label.label)} is {_shown(value, label)}."


def _one_row_sentence(labels: Sequence[ColumnLabel], row: Sequence) -> str:
    parts = []
    for label, value in zip(labels, row, strict=False):
        if _is_suppressed(value):
            parts.append(f"the {lowerfirst(label.label)} is withheld (fewer than {value.strip()[1:]})")
        else:
            parts.append(f"the {lowerfirst(label.label)} is {_shown(value, label)}")
    return capfirst(_join(parts)) + "."


def _group_sentence(
    question: str, labels: Sequence[ColumnLabel], rows: Sequence[Sequence], total: int
) -> str:
    what, measure = labels
    numbers = [r for r in rows if _is_number(r[1])]
    if not numbers:  # every cell suppressed
        k = rows[0][1].strip()[1:]
        return (f"Each of the {total} {_plural(lowerfirst(what.label))} has fewer than {k} "
                f"{_count_noun(measure)} — the exact numbers are withheld to protect privacy.")  # fmt: skip
    top_n = _TOP_N.search(question)
    if top_n and len(rows) <= 10:
        listed = _join([f"{'no value' if r[0] is None else r[0]} ({_cell(r[1], measure)})" for r in rows])
        return f"Top {len(rows)} by {lowerfirst(measure.heading)}: {listed}."
    top = max(numbers, key=lambda r: r[1])
    name = top[0] if top[0] is not None else "no value"
    withheld = len(rows) - len(numbers)
    tail = f" ({withheld} withheld as too few to show)" if withheld else ""
    return (f"Of {total} {_plural(lowerfirst(what.label))}, {name} has the highest "
            f"{lowerfirst(measure.label)}: {_shown(top[1], measure)}{tail}.")  # fmt: skip


def _list_sentence(labels: Sequence[ColumnLabel], rows: Sequence[Sequence], total: int) -> str:
    first = labels[0]
    noun = _ID_NOUNS.get(first.label) or _plural(lowerfirst(first.label))
    if len(labels) == 1:
        values = [format_cell(r[0]) for r in rows[:3]]
        more = f" and {total - 3} more" if total > 3 else ""
        return f"{total} {noun}: {', '.join(values)}{more}."
    return f"{total} {noun}, listed below."


def _empty_sentence(question: str, labels: Sequence[ColumnLabel]) -> str:
    lowered = f" {question.lower()} "
    for word in _QUESTION_NOUNS:
        if f" {word} " in lowered or f" {word}?" in lowered:
            return f"No {word} in the data match this question."
    return "Nothing in the data matches this question."


def _count_noun(label: ColumnLabel) -> str:
    text = label.label
    return text[len("Number of ") :] if text.startswith("Number of ") else "patients"


def _cell(value, label: ColumnLabel) -> str:
    return value.strip() if _is_suppressed(value) else format_number(value)


def _join(parts: Sequence[str]) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _plural(noun: str) -> str:
    if noun.endswith("is"):  # diagnosis → diagnoses
        return noun[:-2] + "es"
    if noun.endswith("s"):
        return noun
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _fallback_label(column: str) -> ColumnLabel:
    if _COUNT_COLUMN.match(column or ""):
        return ColumnLabel(column, "Number", "", "integer")
    return draft_label(column)


def _sentence_rest(text: str) -> str:
    """The question's words as the rest of a statement: "patients are older than 70"; a trailing
    "are there" is dropped ("how many patients are there?" → "patients")."""
    text = re.sub(r"\s+", " ", text.strip())
    return re.sub(r" (?:are|were|is|was) there$", "", text, flags=re.I)
