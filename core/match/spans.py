"""Value-looking spans of a question (ids, numbers, years, dates, calendar pieces, periods, genders, quoted
names), typed like the template slots they can fill."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.match.words import NUMBER_RE, NUMBER_WORDS, overlaps, tokenize

# 5: operator words ("when" in a statement, "between"/"from" without a time, "how often")
# 4: a slot's column is its first use in SQL order (was set order, seed-dependent)

# Slot types. Ids are told apart by MIMIC's ranges and by the words before them.
PATIENT_ID, ADMISSION_ID, STAY_ID = "patient_id", "admission_id", "stay_id"
NUMBER, YEAR, DATE, GENDER, VALUE = "number", "year", "date", "gender", "value"
# An age decade ("patients in their 40s"): one value that the SQL writes as its two bounds (`age
# BETWEEN 40 AND 49`), so "30s" binds where the library only has "40s". Its own type: a decade never
# fills a threshold ("older than 40"), nor a threshold a decade.
DECADE = "decade"
DECADE_SPAN = 9  # a decade's upper bound is its value + 9: "40s" is 40 to 49
_DECADE = re.compile(r"([1-9]0)s")
# Calendar pieces questions name without a full date: "12/2100", "05/this year", "11/23/this year",
# "last month/23", and a full "2100-06-07 05:00:00". Each binds to the SQL literal of the same shape.
MONTH_YEAR, MONTH, MONTH_DAY, DAY, TIMESTAMP = "month_year", "month", "month_day", "day", "timestamp"
CALENDAR_TYPES = (MONTH_YEAR, MONTH, MONTH_DAY, DAY, TIMESTAMP)
# A calendar period relative to now: "this year" / "last year" is how many years back the SQL's
# `datetime(current_time, 'start of year', '-1 year')` goes; the unit is part of the type, so a year
# is never bound where the SQL counts months.
PERIOD_YEAR, PERIOD_MONTH = "period_year", "period_month"
PERIOD_TYPES = {"year": PERIOD_YEAR, "month": PERIOD_MONTH}
_PERIOD = re.compile(r"(?<![A-Za-z])(this|current|last|previous)\s+(year|month)\b", re.I)
_PERIODS_BACK = {"this": "0", "current": "0", "last": "1", "previous": "1"}
ID_TYPES = (PATIENT_ID, ADMISSION_ID, STAY_ID)
SLOT_TYPES = (*ID_TYPES, NUMBER, YEAR, DATE, GENDER, VALUE, DECADE, *CALENDAR_TYPES, *PERIOD_TYPES.values())
# The SQL literal each calendar type writes (its value is stored in this form).
CALENDAR_FORMS = {
    MONTH_YEAR: r"\d{4}-\d{2}",
    MONTH: r"\d{2}",
    MONTH_DAY: r"\d{2}-\d{2}",
    DAY: r"\d{2}",
    TIMESTAMP: r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}",
}
TEXT = "text"
GENDER_WORDS = {
    "female": "F",
    "females": "F",
    "woman": "F",
    "women": "F",
    "girl": "F",
    "girls": "F",
    "male": "M",
    "males": "M",
    "man": "M",
    "men": "M",
    "boy": "M",
    "boys": "M",
}
ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_ID_CONTEXT = {
    "patient": PATIENT_ID,
    "patients": PATIENT_ID,
    "subject": PATIENT_ID,
    "subject_id": PATIENT_ID,
    "admission": ADMISSION_ID,
    "admissions": ADMISSION_ID,
    "hadm": ADMISSION_ID,
    "hadm_id": ADMISSION_ID,
    "hospitalization": ADMISSION_ID,
    "visit": ADMISSION_ID,
    "stay": STAY_ID,
    "stay_id": STAY_ID,
    "icustay": STAY_ID,
}
ID_COLUMNS = {"subject_id": PATIENT_ID, "hadm_id": ADMISSION_ID, "stay_id": STAY_ID}


@dataclass(frozen=True)
class Span:
    """A value-looking piece of a question: its type, its text, its offsets and its normalised value."""

    type: str  # a slot type, or "text" for a leftover run of content words / a quoted name
    text: str
    start: int
    end: int
    value: str  # digits for ids and numbers, "2150" for a year, ISO for a date, "F"/"M" for a gender, "40" for "40s"


_RELATIVE = r"(?:this|last|next|previous|current)"
_CALENDAR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (TIMESTAMP, re.compile(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2}))?(?![\d:])")),
    (DATE, re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])")),
    (MONTH_DAY, re.compile(rf"(?<![\d/])(\d{{1,2}})/(\d{{1,2}})(?=/{_RELATIVE}\s+year\b)", re.I)),
    (MONTH_YEAR, re.compile(r"(?<![\d/])(\d{1,2})/(\d{4})(?![\d/])")),
    (MONTH, re.compile(rf"(?<![\d/])(\d{{1,2}})(?=/{_RELATIVE}\s+year\b)", re.I)),
    (DAY, re.compile(r"(?<=month/)(\d{1,2})(?![\d/])", re.I)),
)


def _calendar_spans(question: str) -> list[Span]:
    """Dates and their pieces in the forms EHRSQL-style questions use, normalised to SQL's form."""
    spans: list[Span] = []
    for kind, pattern in _CALENDAR_PATTERNS:
        for m in pattern.finditer(question):
            if any(s.start < m.end() and m.start() < s.end for s in spans):
                continue
            g = m.groups()
            try:
                if kind == TIMESTAMP:
                    value = f"{g[0]}-{g[1]}-{g[2]} {g[3]}:{g[4]}:{g[5] or '00'}"
                    dt.datetime.fromisoformat(value)
                elif kind == DATE:
                    value = dt.date(int(g[2]), int(g[0]), int(g[1])).isoformat()
                elif kind == MONTH_DAY:
                    dt.date(2000, int(g[0]), int(g[1]))
                    value = f"{int(g[0]):02d}-{int(g[1]):02d}"
                elif kind == MONTH_YEAR:
                    value = dt.date(int(g[1]), int(g[0]), 1).isoformat()[:7]
                elif kind == MONTH:
                    value = dt.date(2000, int(g[0]), 1).isoformat()[5:7]
                else:
                    value = dt.date(2000, 1, int(g[0])).isoformat()[8:10]
            except ValueError:
                continue
            spans.append(Span(kind, m.group(0), m.start(), m.end(), value))
    return spans


def period_spans(question: str) -> list[Span]:
    """Calendar periods relative to now ("this year", "last month"), valued by how many periods back."""
    return [
        Span(
            PERIOD_TYPES[m.group(2).lower()],
            m.group(0),
            m.start(),
            m.end(),
            _PERIODS_BACK[m.group(1).lower()],
        )
        for m in _PERIOD.finditer(question)
    ]


def extract_typed_spans(question: str) -> list[Span]:
    """Ids, numbers, years, dates, calendar pieces, periods and gender words, in order of appearance
    (a new list: callers add to it)."""
    return list(_typed_spans(question))


@functools.lru_cache(maxsize=1 << 15)
def _typed_spans(question: str) -> tuple[Span, ...]:
    """extract_typed_spans, once per text (Spans are frozen). Why: a calibration reads the same
    questions again and again: the library's paraphrases, the held-out questions fold after fold, and
    each composition's question, which comes back with every SQL composed for it (a composed
    template is built per question and SQL)."""
    tokens = tokenize(question)
    spans: list[Span] = _calendar_spans(question)
    spans += [
        p for p in period_spans(question) if not overlaps(p.start, p.end, [(s.start, s.end) for s in spans])
    ]
    taken = [(s.start, s.end) for s in spans]
    for i, token in enumerate(tokens):
        text = token.text
        if taken and overlaps(token.start, token.end, taken):
            # "05/this": only the calendar part is a value; a trailing word is left to the words.
            continue
        if text[0].isdigit():  # a date, a number and a decade start with a digit; no word does
            if ISO_DATE.fullmatch(text) and _valid_date(text):
                spans.append(Span(DATE, text, token.start, token.end, text))
            elif NUMBER_RE.fullmatch(text):
                before = [t.lower for t in tokens[max(0, i - 3) : i]]
                spans.append(
                    Span(_number_type(text, before), text, token.start, token.end, canonical_number(text))
                )
            elif _DECADE.fullmatch(text):  # "in their 40s": the decade's first year of age
                spans.append(Span(DECADE, text, token.start, token.end, text[:-1]))
        elif token.lower in NUMBER_WORDS:  # "the top four diagnoses": LIMIT / rank 4
            spans.append(Span(NUMBER, text, token.start, token.end, str(NUMBER_WORDS[token.lower])))
        elif token.lower in GENDER_WORDS:
            spans.append(Span(GENDER, text, token.start, token.end, GENDER_WORDS[token.lower]))
    return tuple(sorted(spans, key=lambda s: s.start))


def _number_type(text: str, before: list[str]) -> str:
    # Only the word right before ("patient 42", "admission id 42") names an id: in "patients older
    # than 65" the number is an age.
    words = list(before)
    if words and words[-1] in ("id", "number", "no"):
        words.pop()
    context = _ID_CONTEXT.get(words[-1]) if words else None
    if "." not in text:
        if len(text) == 8 and text[0] in "123":
            # MIMIC's ranges: subject_id 1xxxxxxx, hadm_id 2xxxxxxx, stay_id 3xxxxxxx.
            return {"1": PATIENT_ID, "2": ADMISSION_ID, "3": STAY_ID}[text[0]]
        if context in ID_TYPES:
            return context
        if len(text) == 4 and 1900 <= int(text) <= 2300:
            return YEAR
    return NUMBER


def canonical_number(text: str) -> str:
    if "." in text:
        return text.rstrip("0").rstrip(".") or "0"
    return str(int(text))


def _valid_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def quoted_spans(question: str, typed: list[Span]) -> list[Span]:
    out = []
    for m in re.finditer(r"(?<![A-Za-z0-9])(['\"])([^'\"]{2,120})\1(?![A-Za-z0-9])", question):
        start, end = m.start(2), m.end(2)
        if not any(s.start < end and start < s.end for s in typed):
            out.append(Span(TEXT, m.group(2), start, end, m.group(2)))
    return out


def blank(question: str, spans: Iterable[tuple[int, int]]) -> str:
    """The question with named values blanked, so that "not elsewhere classified" or "first" inside
    a diagnosis or drug name is not read as an operator word."""
    out, cursor = [], 0
    for start, end in sorted(spans):
        if start < cursor:
            continue
        out += [question[cursor:start], "X"]
        cursor = end
    out.append(question[cursor:])
    return "".join(out)


def periods(question: str) -> list[tuple[int, int]]:
    """Where a question names a period back from now ("last year"): a value to bind, blanked for the
    operator words (on both sides, so a period the template keeps fixed is compared as a fixed value)."""
    return [(s.start, s.end) for s in period_spans(question)]
