"""Templates from reviewer-approved examples: which question words are values, and where they go in the SQL.

Why templates: many questions are an approved question with other values ("patient 10004235" instead
of "10006580", "fenofibrate" instead of "fentanyl"). Binding the new values into the approved SQL gives
an answer that is reproducible, free and fast, with no LLM. A template records, for one example, the
SQL literals that correspond to spans of its question (ids, numbers, years, dates, a gender, a named
value of a table.column) as typed slots, the question with those spans masked, and the question's
"meaning-flip" operators (first/last, min/max, count/avg, in/since, …) which decide whether another
question may reuse the SQL at all.

Binding replaces literal nodes of the parsed SQL (sqlglot), never pastes strings: a hostile value is
always one quoted literal. `sql_template` is the sqlglot-normalised SQL; each slot use points at one
literal of its parse by position and remembers the literal's text, so a stale position fails loudly
instead of binding the wrong literal. Literals that the question does not mention (`LIMIT 1`,
`icd_version = 10`) stay fixed; a quoted name whose column cannot be value-linked becomes an "anchor":
the question words must reappear in a new question for the template to apply.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from rapidfuzz import fuzz
from sqlglot import exp
from sqlglot.errors import SqlglotError

# Bump when the algorithm changes so that stored templates (Example.template) are rebuilt.
TEMPLATE_VERSION = (
    6  # 6: periods ("last year") are slots; a number inside a name is part of it; 85.0 stays real
)
# 5: operator words ("when" in a statement, "between"/"from" without a time, "how often")
# 4: a slot's column is its first use in SQL order (was set order, seed-dependent)

# Slot types. Ids are told apart by MIMIC's ranges and by the words before them.
PATIENT_ID, ADMISSION_ID, STAY_ID = "patient_id", "admission_id", "stay_id"
NUMBER, YEAR, DATE, GENDER, VALUE = "number", "year", "date", "gender", "value"
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
SLOT_TYPES = (*ID_TYPES, NUMBER, YEAR, DATE, GENDER, VALUE, *CALENDAR_TYPES, *PERIOD_TYPES.values())
# The SQL literal each calendar type writes (its value is stored in this form).
_CALENDAR_FORMS = {
    MONTH_YEAR: r"\d{4}-\d{2}",
    MONTH: r"\d{2}",
    MONTH_DAY: r"\d{2}-\d{2}",
    DAY: r"\d{2}",
    TIMESTAMP: r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}",
}

# Columns whose values the value index holds (metadata_admin.docs.VALUE_COLUMNS), by bare table name.
# The pipeline core cannot import metadata_admin, so callers with a catalog pass `value_columns`.
DEFAULT_VALUE_COLUMNS = frozenset(
    {
        ("d_icd_diagnoses", "long_title"),
        ("d_icd_procedures", "long_title"),
        ("d_labitems", "label"),
        ("d_items", "label"),
        ("d_hcpcs", "short_description"),
        ("prescriptions", "drug"),
        ("pharmacy", "medication"),
        ("emar", "medication"),
        ("microbiologyevents", "org_name"),
        ("microbiologyevents", "spec_type_desc"),
        ("microbiologyevents", "test_name"),
        ("prescriptions", "route"),
        ("transfers", "careunit"),
        ("admissions", "admission_location"),
        ("admissions", "admission_type"),
        ("admissions", "discharge_location"),
        ("admissions", "insurance"),
    }
)

# Words that carry no content of their own: ignored when comparing the fixed words of two questions.
# Operator words (first, since, average, not, …) are not here: they are compared separately and exactly.
FUNCTION_WORDS = frozenset(
    """a an the of to for in on at by with from and or as is are was were be been being am has have had do does
    did what which who whom whose how when where why this that these those it its their his her him he she they
    them there s me my i you your we our us can could would should will please tell show give list find display
    get let know want like any all some one""".split()
)
# Words the operator signature already compares exactly; they are neutral in word overlap so that
# "count the number of" and "how many" paraphrase each other when their operators agree.
OPERATOR_WORDS = frozenset(
    """first earliest initial initially 1st last latest recent recently final lastly maximum max highest largest
    greatest peak biggest top most minimum min lowest smallest fewest least how many number count counts counted
    total average averages avg mean sum cumulative much since after before prior until till through up between
    within during ever times often not no never without none neither nor excluding except more less than
    greater fewer older younger over under above below higher lower longer shorter larger exceed exceeds
    exceeded exceeding at past previous current next today yesterday now currently year years month months
    week weeks day days hour hours minute minutes decade decades time""".split()
)
NEUTRAL_WORDS = FUNCTION_WORDS | OPERATOR_WORDS

# Number words questions use for counts and ranks ("one" is left out: "which one", "any one").
NUMBER_WORDS = {
    w: n
    for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())
    if n >= 2
}
_GENDER_WORDS = {
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

# "/" joins digits to digits ("1/2", "12/2100") and letters to letters ("po/ng"), not "05/this".
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:(?:[-.:]|(?<=\d)/(?=\d)|(?<=[A-Za-z])/(?=[A-Za-z]))[A-Za-z0-9]+)*%?")
_INT = re.compile(r"\d+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_QUOTED = re.compile(r"(?<![A-Za-z0-9])(['\"])([^'\"]{2,80})\1(?![A-Za-z0-9])")
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
_ID_COLUMNS = {"subject_id": PATIENT_ID, "hadm_id": ADMISSION_ID, "stay_id": STAY_ID}


# --- words and spans -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    text: str
    start: int
    end: int

    @property
    def lower(self) -> str:
        return self.text.lower()


def tokenize(text: str) -> list[Token]:
    """Words, numbers, ISO dates and ids with their character offsets."""
    return list(_tokens(text))


@functools.lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> tuple[Token, ...]:
    # Matching and calibration read the same paraphrases over and over (half a million times in a
    # calibration of 5,000 examples): each text is split once.
    return tuple(Token(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text))


def stem(word: str) -> str:
    """A crude stem, enough to equate "prescribed"/"prescribe" and "patients"/"patient"."""
    word = word.lower().rstrip("%")
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


# Words that say the same thing in these questions, to one form: the meaning guard compares meanings,
# not spellings ("price" is "cost", "laboratory" is "lab"). Keys and values are stems (see `stem`).
_SYNONYMS = {
    word: group[0]
    for group in (
        ("lab", "laboratory"),
        ("amount", "volume", "quantity"),
        ("procedure", "procedur", "surgery", "surgeri", "operation"),
        ("cost", "price", "bill", "charge", "expens", "expense", "expenditure", "spend", "spent", "paid"),
        ("drug", "medic", "medicin", "medicine", "med"),
        ("includ", "include", "involv", "involve", "contain"),
        ("differ", "difference", "chang", "change"),
        (
            "get",
            "got",
            "gett",
            "had",
            "receiv",
            "receive",
            "underwent",
            "undergo",
            "undergone",
            "given",
            "took",
            "taken",
            "take",
            "experienc",
            "have",
            "having",
        ),
        ("patient", "people", "person", "individual"),
        ("microbiology", "microbial", "microbiologic", "microbiological", "micro"),
        ("test", "exam", "examin", "examination", "check"),
        ("visit", "encounter", "stay", "admission", "hospitalization"),
        ("name", "named", "call", "called"),
        ("happen", "occur", "occurr", "perform", "conduct", "carri", "done", "complet", "made", "execut"),
        ("measur", "measure", "measurement", "record", "document", "read", "reading", "chart"),
    )
    for word in group
}


def canonical(word: str) -> str:
    """One stem for words the meaning guard treats as the same ("price" -> "cost")."""
    return _SYNONYMS.get(word, word)


# Verbs that ask or that only say something happened to the patient ("tell me", "calculate", "got",
# "underwent"): no condition of their own, in any template.
GUARD_FILLER = frozenset(
    {"get", "calculate", "compute", "provide", "retrieve", "fetch", "tell", "show", "give", "list", "display",
     "know", "find", "identify", "determine", "quantify", "specify", "state", "report", "check", "let",
     "inform", "information", "instanc", "instance", "case", "thing", "anyth", "anything", "medical", "hey",
     "value", "name", "kind", "sort",
     # that something happened ("performed", "done", "made", "occurred"): the template's own subject
     # says what happened
     "happen"}
)  # fmt: skip


def content_words(text: str) -> list[str]:
    """Stems of the words that carry content: not function words, not placeholders, not numbers."""
    return list(_content_words(text))


@functools.lru_cache(maxsize=1 << 16)
def _content_words(text: str) -> tuple[str, ...]:
    text = re.sub(r"\{[^}]*\}", " ", text)
    return tuple(
        stem(t.text) for t in _tokens(text) if t.lower not in NEUTRAL_WORDS and not _NUMBER.fullmatch(t.text)
    )


@dataclass(frozen=True)
class Span:
    """A value-looking piece of a question: its type, its text, its offsets and its normalised value."""

    type: str  # a slot type, or "text" for a leftover run of content words / a quoted name
    text: str
    start: int
    end: int
    value: str  # digits for ids and numbers, "2150" for a year, ISO for a date, "F"/"M" for a gender


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
    """Ids, numbers, years, dates, calendar pieces, periods and gender words, in order of appearance."""
    tokens = tokenize(question)
    spans: list[Span] = _calendar_spans(question)
    spans += [
        p for p in period_spans(question) if not _overlaps(p.start, p.end, [(s.start, s.end) for s in spans])
    ]
    taken = [(s.start, s.end) for s in spans]
    for i, token in enumerate(tokens):
        text = token.text
        before = [t.lower for t in tokens[max(0, i - 3) : i]]
        if _overlaps(token.start, token.end, taken):
            # "05/this": only the calendar part is a value; a trailing word is left to the words.
            continue
        if _ISO_DATE.fullmatch(text) and _valid_date(text):
            spans.append(Span(DATE, text, token.start, token.end, text))
        elif _NUMBER.fullmatch(text):
            spans.append(
                Span(_number_type(text, before), text, token.start, token.end, _canonical_number(text))
            )
        elif token.lower in NUMBER_WORDS:  # "the top four diagnoses": LIMIT / rank 4
            spans.append(Span(NUMBER, text, token.start, token.end, str(NUMBER_WORDS[token.lower])))
        elif token.lower in _GENDER_WORDS:
            spans.append(Span(GENDER, text, token.start, token.end, _GENDER_WORDS[token.lower]))
    return sorted(spans, key=lambda s: s.start)


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


def _canonical_number(text: str) -> str:
    if "." in text:
        return text.rstrip("0").rstrip(".") or "0"
    return str(int(text))


def _valid_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


# --- operators -----------------------------------------------------------------------------------

_UNITS = r"(?:years?|months?|weeks?|days?|hours?|minutes?|decades?)"
_MONTHS = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
# "from last year", "from the past 3 months"; not "differ from the last value" (no time unit)
_TIME_TARGET = (
    rf"(?:the\s+)?(?:year\s+)?(?:\d{{4}}\b|{_MONTHS}\b"
    rf"|(?:this|last|past|previous|current|next)\s+(?:\d+\s+)?(?:{_UNITS}|{_MONTHS})\b)"
)
_TIME_POINT = rf"(?:the\s+)?(?:year\s+)?(?:\d{{4}}\b|{_MONTHS}\b)"
_TIME_WORDS = {
    "in": "in",
    "during": "in",
    "on": "in",
    "of": "in",
    "since": "since",
    "from": "from",
    "after": "after",
    "before": "before",
    "prior to": "before",
    "until": "until",
    "till": "until",
    "through": "until",
    "up to": "until",
    "by": "until",
    "between": "between",
    "within": "within",
    "as of": "until",
}
_OPERATOR_PATTERNS: dict[str, list[tuple[str, str]]] = {
    "order": [
        ("first", r"\b(?:first|earliest|initial|initially|1st)\b"),
        ("last", rf"\b(?:latest|most recent(?:ly)?|final|lastly)\b|\blast\b(?!\s+(?:\d+\s+)?{_UNITS}\b)"),
    ],
    "extreme": [
        (
            "max",
            r"\b(?:maximum|max|highest|largest|greatest|peak|biggest|top)\b|(?<!at )\bmost\b(?!\s+recent)"
            # "the five commonly taken specimens" is "the five most common": a top N
            r"|\b(?:two|three|four|five|six|seven|eight|nine|ten|\d+)\s+(?:\w+\s+)?(?:common|commonly|frequent|frequently)\b",
        ),
        ("min", r"\b(?:minimum|min|lowest|smallest|fewest)\b|(?<!at )\bleast\b"),
    ],
    "aggregate": [
        # "how often" is "how many times"
        ("count", r"\b(?:how many|how often|number of|count|counts|counted|total number|total count)\b"),
        ("avg", r"\b(?:average|averages|avg|mean)\b"),
        # "how much" is an amount, not when the question is about a difference or a weight
        (
            "sum",
            r"\b(?:sum|cumulative|accumulated|aggregate|overall)\b|\btotal\b(?!\s+(?:number|count)\b)"
            r"|\bhow much\b(?![^?]*\b(?:differ|difference|change|weigh)\b)",
        ),
    ],
    "compare": [
        (">=", r"\b(?:at least|or more|or older|or above|or greater|or higher|no less than)\b"),
        ("<=", r"\b(?:at most|or less|or fewer|or younger|or below|or lower|no more than)\b"),
        (
            ">",
            r"\b(?:more than|greater than|older than|higher than|longer than|larger than|exceed(?:s|ed|ing)?)\b"
            r"|\b(?:over|above)\s+\d",
        ),
        (
            "<",
            r"\b(?:less than|fewer than|younger than|lower than|shorter than|smaller than)\b"
            r"|\b(?:under|below)\s+\d",
        ),
    ],
}


_VISIT = re.compile(
    r"\b(first|initial|earliest|1st|last|latest|most recent|final|current|present|this|ongoing)\s+"
    r"(?:(?:(?:hospital|icu|hospital's|ward)\s+)?(?:visit|encounter|admission|hospitalization|hospital)s?\b"
    r"|(?:hospital|icu)\s+stays?\b)"
)
_VISIT_NAMES = {"initial": "first", "earliest": "first", "1st": "first", "latest": "last", "most recent": "last",
                "final": "last", "present": "current", "this": "current", "ongoing": "current"}  # fmt: skip


def question_operators(question: str) -> dict[str, Any]:
    """The words that flip a question's meaning while its embedding barely moves, normalised.

    Two questions may share SQL only if every entry is equal. Values are strings ("" joins several,
    "|"-separated and sorted), None, or booleans, so the dict survives JSON unchanged. Which visit
    ("the first hospital visit", "the current ICU stay") is its own entry, so that "the last time
    in the first visit" and "the first time in the last visit" differ.
    """
    text = " " + re.sub(r"\s+", " ", question.lower().replace("’", "'")) + " "
    visits = [(m.start(), m.end(), _VISIT_NAMES.get(m.group(1), m.group(1))) for m in _VISIT.finditer(text)]
    for start, end, _ in visits:  # the visit's own first/last is not the question's order
        text = text[:start] + " " * (end - start) + text[end:]
    ops: dict[str, Any] = {"visit": "|".join(sorted({v for _, _, v in visits})) or None}
    for key, patterns in _OPERATOR_PATTERNS.items():
        found = sorted({name for name, pattern in patterns if re.search(pattern, text)})
        ops[key] = "|".join(found) or None
    # "how many times" counts events; "total number of times" too: both set `times`, not `sum`.
    times_pattern = r"\b(?:how many times|number of times|how often|times)\b"
    times = bool(re.search(times_pattern, text))
    time_found = set()
    for phrase, name in _TIME_WORDS.items():
        if phrase in ("since", "after", "before", "prior to", "until", "till", "within"):
            # "within the same visit" is "in the same visit": no time limit of its own; "between" is a
            # time only between times ("the difference between weights …" is none)
            if re.search(rf"\b{phrase}\b(?!\s+(?:the\s+)?same\b)", text):
                time_found.add(name)
        elif re.search(rf"\b{phrase}\s+{_TIME_TARGET if name != 'in' else _TIME_POINT}", text):
            time_found.add(name)  # "in this year" is "this year": the period says it, not the "in"
    periods = set()
    for m in re.finditer(rf"\b(this|last|past|previous|current|next)\s+(?:(\d+)\s+)?({_UNITS})\b", text):
        which = {"past": "last", "previous": "last", "current": "this"}.get(m.group(1), m.group(1))
        periods.add(f"{which} {'n ' if m.group(2) else ''}{_unit(m.group(3))}")
    for word in ("today", "yesterday", "tomorrow", "now", "currently"):
        if re.search(rf"\b{word}\b", text):
            periods.add(word)
    units = {
        _unit(m.group(1))
        for m in re.finditer(rf"\b({_UNITS})\b(?!\s+\d{{4}}\b)", text)
        if not re.match(r"years?\s+old", text[m.start() :])
    }
    ops["time"] = "|".join(sorted(time_found)) or None
    ops["period"] = "|".join(sorted(periods)) or None
    ops["units"] = "|".join(sorted(units)) or None
    ops["ever"] = bool(re.search(r"\bever\b", text))
    # Asking for a time ("when", "what time", "what date") is another answer than asking for a thing;
    # "when" inside a statement ("the admission type when patient … entered", "the total bill when it
    # includes …") is a condition, not a question: it asks when it opens the question or a clause.
    ops["when"] = bool(
        re.search(
            r"(?:^\s*|[,;:]\s*|\b(?:me|know|us)\s+)when\b|\bwhen\s+(?:was|did|is|were|has|had|does|do|will|are)\b"
            r"|\bwhat (?:time|date|day)\b|\bthe (?:time|date) (?:of|when)\b|\b(?:instance|moment|occasion) when\b"
            r"|\b(?:what|which) (?:is|was|were) the (?:\w+ )?(?:first|last|latest|earliest|initial) time\b",
            text,
        )
    )
    # A yes/no question ("has patient … been …?", "was … given?") asks whether, not what or how much.
    ops["yes_no"] = bool(
        re.match(
            r"\s*(?:(?:tell me|can you tell me|please|in \S+|since \S+),?\s+|[^,?]{3,60},\s+)?"
            r"(?:has|have|had|is|was|were|are|did|does|do)\b",
            # "do you know the average …" asks what, not whether
            re.sub(r"^\s*do you know\s+(?!if\b|whether\b)", " tell me ", text),
        )
    )
    ops["times"] = times
    ops["negation"] = bool(
        re.search(r"\b(?:not|no|never|without|none|neither|nor|excluding|except)\b|n't\b", text)
    )
    return ops


# --- what a question asks for, what a template returns -------------------------------------------

# A name asked for as such: "the name of the input", "what was the drug name", "name the specimen".
_ASKS_NAME = re.compile(
    r"\bnames?\s+of\b|\bname\s+(?:the|a|an|all|each)\b"
    r"|\b(?:what|which)(?:'s|\s+(?:is|was|are|were))?\s+(?:the\s+|their\s+|its\s+)?(?:[a-z-]+\s+){0,2}names?\b"
)
# A time asked for as a thing: "what was the last prescription time", "which input date" (not "the
# first time", "the same time", "how many times").
_ASKS_TIME = re.compile(
    r"\b(?:what|which)\b[^?,]*?\b[a-z]+(?<!first)(?<!last)(?<!same)(?<!the)(?<!what)(?<!any) (?:time|date)\b(?!s)"
)
_NOT_ASKING_TIME = re.compile(r"\bhow many\b|\bfor the (?:\w+ )?time\b|\bat the same time\b")
_TIME_COLUMN = re.compile(r"(?:time|date)$|^dod$")


def asks_for_name(question: str) -> bool:
    """Whether the question asks for a name or label (of a drug, an input, a test), not a time or number."""
    return bool(_ASKS_NAME.search(" ".join(question.lower().replace("’", "'").split())))


def asks_for_time(question: str) -> bool:
    """Whether the question asks for a time as the thing it wants ("the last prescription time")."""
    text = " ".join(question.lower().replace("\u2019", "'").split())
    return bool(_ASKS_TIME.search(text)) and not _NOT_ASKING_TIME.search(text)


def answer_kind(template: Template) -> str:
    """What the template's SQL returns: "time" (a time column, its first or last), "number" (a count,
    sum, average or arithmetic), "column" (another column: a name, a label, a value) or "other".

    The question's asked-for thing must agree with it: "the name of the input" is not answered
    with the time of the input, however close the wording.
    """
    return _answer_kind(template.sql_template, template.dialect) if template.usable else "other"


@functools.lru_cache(maxsize=4096)
def _answer_kind(sql: str, dialect: str) -> str:
    try:
        tree = _parse(sql, dialect)
    except (SqlglotError, ValueError, RecursionError):
        return "other"
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None or len(select.expressions) != 1:
        return "other"
    node = select.expressions[0].unalias()
    if isinstance(node, exp.Distinct) and len(node.expressions) == 1:
        node = node.expressions[0]
    if isinstance(node, (exp.Count, exp.Sum, exp.Avg, exp.Binary)) and not isinstance(node, exp.Connector):
        return "number"
    if isinstance(node, (exp.Max, exp.Min)):
        node = node.this
    if isinstance(node, exp.Column):
        return "time" if _TIME_COLUMN.search(node.name.lower()) else "column"
    return "other"


def interchangeable(template: Template, slot_names: tuple[str, ...]) -> bool:
    """Whether these slots' values may be bound in any order: each is used once, all in one IN list."""
    slots = [s for s in template.slots if s.name in slot_names]
    if not template.usable or len(slots) < 2 or any(len(s.uses) != 1 for s in slots):
        return False
    return _one_in_list(template.sql_template, template.dialect, tuple(s.uses[0].index for s in slots))


@functools.lru_cache(maxsize=4096)
def _one_in_list(sql: str, dialect: str, indices: tuple[int, ...]) -> bool:
    literals = list(_parse(sql, dialect).find_all(exp.Literal))
    if any(i >= len(literals) for i in indices):
        return False
    parents = {id(literals[i].parent) for i in indices}
    parent = literals[indices[0]].parent
    return len(parents) == 1 and isinstance(parent, exp.In)


def _unit(word: str) -> str:
    return word.rstrip("s")


# --- the template --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiteralUse:
    """One literal of the SQL a slot fills: its position among the parse's literals and how to rebuild it.

    The literal is `prefix + value + suffix`, where value is the slot's value shifted by `offset`
    (years for a year slot, days for a date slot): `'2151-01-01'` is the year 2150, offset 1, suffix
    `-01-01`; `'%fentanyl%'` is prefix and suffix `%`; `'-6 month'` is prefix `-`, suffix ` month`.
    """

    index: int  # position in list(tree.find_all(exp.Literal)) of the parsed sql_template
    literal: str  # its text, checked before binding
    is_string: bool
    prefix: str = ""
    suffix: str = ""
    offset: int = 0
    case: str = "asis"  # "lower" | "upper" | "title" | "asis": how a user's text is written into a LIKE
    like: bool = False


@dataclass(frozen=True)
class Slot:
    name: str  # "patient_id", "year", "value", "value_2", …
    type: str  # one of SLOT_TYPES
    text: str  # the span of the example question
    start: int
    end: int
    value: str  # the value the example binds: "10004235", "2150", "Glucose", "F"
    column: str = ""  # "mimiciv_hosp.d_labitems.label": the column the literal is compared to
    uses: tuple[LiteralUse, ...] = ()

    @property
    def placeholder(self) -> str:
        return f"{{value:{self.column}}}" if self.type == VALUE else f"{{{self.type}}}"


@dataclass(frozen=True)
class Template:
    """A reusable form of one approved example (JSON round-trippable through to_dict/from_dict)."""

    question: str
    sql: str
    dialect: str
    masked_question: str
    slots: tuple[Slot, ...]
    sql_template: str  # the sqlglot-normalised SQL whose literals the slots point at
    operators: dict[str, Any] = field(default_factory=dict)
    anchors: tuple[str, ...] = ()  # question words tied to fixed SQL literals; a new question must have them
    fixed_values: tuple[str, ...] = ()  # value-looking question spans the SQL does not use
    warnings: tuple[str, ...] = ()
    error: str = ""  # set when the SQL could not be templated; such a template never matches
    version: int = TEMPLATE_VERSION

    @property
    def usable(self) -> bool:
        return not self.error and bool(self.sql_template)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "question": self.question,
            "sql": self.sql,
            "dialect": self.dialect,
            "masked_question": self.masked_question,
            "slots": [
                {
                    "name": s.name,
                    "type": s.type,
                    "text": s.text,
                    "start": s.start,
                    "end": s.end,
                    "value": s.value,
                    "column": s.column,
                    "uses": [u.__dict__.copy() for u in s.uses],
                }
                for s in self.slots
            ],
            "sql_template": self.sql_template,
            "operators": dict(self.operators),
            "anchors": list(self.anchors),
            "fixed_values": list(self.fixed_values),
            "warnings": list(self.warnings),
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Template:
        slots = tuple(
            Slot(
                name=s["name"],
                type=s["type"],
                text=s["text"],
                start=int(s["start"]),
                end=int(s["end"]),
                value=s["value"],
                column=s.get("column", ""),
                uses=tuple(LiteralUse(**u) for u in s.get("uses", ())),
            )
            for s in data.get("slots", ())
        )
        return cls(
            question=data["question"],
            sql=data["sql"],
            dialect=data.get("dialect", "postgres"),
            masked_question=data["masked_question"],
            slots=slots,
            sql_template=data.get("sql_template", ""),
            operators=dict(data.get("operators", {})),
            anchors=tuple(data.get("anchors", ())),
            fixed_values=tuple(data.get("fixed_values", ())),
            warnings=tuple(data.get("warnings", ())),
            error=data.get("error", ""),
            version=int(data.get("version", 0)),
        )

    def preview(self) -> str:
        """The SQL with each slot literal shown as `{slot}`, for people (not for parsing)."""
        if not self.usable:
            return ""
        tree = _parse(self.sql_template, self.dialect)
        literals = list(tree.find_all(exp.Literal))
        for slot in self.slots:
            for k, use in enumerate(slot.uses):
                name = slot.name if len(slot.uses) == 1 else f"{slot.name}#{k + 1}"
                literals[use.index].replace(exp.var(f"{{{name}}}"))
        return tree.sql(dialect=self.dialect)


def template_key(template: Template) -> str:
    """The template's identity: its normalised SQL with every slot literal replaced by its type.

    Examples whose SQL differs only in the values their questions name share a key: they are one
    template with many paraphrases. Fixed literals stay (`'-0 year'` "this year" and `'-1 year'`
    "last year" are different templates). "" for an unusable template. The library stores it
    with the template (its "key"): change TEMPLATE_VERSION when this function's output changes.
    """
    if not template.usable:
        return ""
    tree = _parsed(template.sql_template, template.dialect).copy()  # changed below: a copy
    literals = list(tree.find_all(exp.Literal))
    for slot in template.slots:
        for use in slot.uses:
            shift = f"{use.offset:+d}" if use.offset else ""
            placeholder = f"{use.prefix}{{{slot.type}{shift}}}{use.suffix}"
            literals[use.index].replace(
                exp.Literal.string(placeholder) if use.is_string else exp.var(placeholder)
            )
    return tree.sql(dialect=template.dialect, copy=False)  # our copy: sqlglot need not copy it again


def template_is_current(data: dict[str, Any] | None) -> bool:
    """Whether a stored template was built by this version of the algorithm (else rebuild it)."""
    return bool(data) and data.get("version") == TEMPLATE_VERSION


class BindError(ValueError):
    """A value could not be bound into a template (wrong type, stale template)."""


# --- building ------------------------------------------------------------------------------------


def build_template(
    question: str,
    sql: str,
    *,
    dialect: str = "postgres",
    value_columns: Callable[[str, str], bool] | None = None,
) -> Template:
    """The template of one approved example. Never raises: an unusable example gets `error` set.

    `value_columns(table, column)` says whether a column's values can be linked (the value index
    holds them); `table` is as the SQL names it ("mimiciv_hosp.prescriptions" or "prescriptions").
    """
    ops = question_operators(question)
    try:
        # A tree of its own, generated without the copy sqlglot makes by default (a third of the cost).
        normalised = _parse(sql, dialect).sql(dialect=dialect, copy=False)
        # Only read here (never changed), so not copied; cached: bind_sql and template_key reuse it.
        tree = _parsed(normalised, dialect)
    except (SqlglotError, ValueError, RecursionError) as error:
        return _unusable_sql(question, sql, dialect, ops, error)
    # The SQL must survive a round trip through sqlglot. The self-check below proves it when it
    # passes (binding the example's own values regenerates the parse), so the round trip is only
    # generated on the way out of a failure, to say which of the two failed.
    try:
        template = _template_of_tree(question, sql, dialect, value_columns, ops, tree, normalised)
    except Exception:
        problem = _round_trip_error(tree, normalised, dialect)
        if not problem:
            raise
        return _unusable_sql(question, sql, dialect, ops, problem)
    problem = _round_trip_error(tree, normalised, dialect) if template.error else ""
    return _unusable_sql(question, sql, dialect, ops, problem) if problem else template


def _unusable_sql(question: str, sql: str, dialect: str, ops: dict, error: object) -> Template:
    return Template(question, sql, dialect, question, (), "", ops, error=f"unusable SQL: {error}")


def _round_trip_error(tree: exp.Expr, normalised: str, dialect: str) -> str:
    """Why the parse of `normalised` does not generate `normalised` again ("" when it does)."""
    try:
        if tree.sql(dialect=dialect) != normalised:  # copies: the cached tree stays as parsed
            return "the SQL does not survive a round trip through sqlglot"
    except (SqlglotError, ValueError, RecursionError) as error:
        return str(error)
    return ""


def _template_of_tree(
    question: str,
    sql: str,
    dialect: str,
    value_columns: Callable[[str, str], bool] | None,
    ops: dict,
    tree: exp.Expr,
    normalised: str,
) -> Template:
    is_value_column = value_columns or _default_value_columns
    spans = extract_typed_spans(question)
    literals = list(tree.find_all(exp.Literal))
    aliases = _aliases(tree)
    claims: dict[tuple[int, int], list[tuple[Span, LiteralUse, str]]] = {}
    anchors: list[str] = []
    warnings: list[str] = []
    for index, literal in enumerate(literals):
        column = _compared_column(literal, aliases, is_value_column)
        claim = _claim_literal(question, spans, index, literal, column, is_value_column, claims)
        if claim is None:
            continue
        if claim[0] == "anchor":
            anchors.append(claim[1])
            continue
        span, use = claim[1], claim[2]
        claims.setdefault((span.start, span.end), []).append((span, use, column))
    slots, masked = _slots(question, claims, warnings)
    slot_ranges = [(s.start, s.end) for s in slots]
    fixed = tuple(
        s.text
        for s in spans
        if s.type != GENDER and not any(a <= s.start and s.end <= b for a, b in slot_ranges)
    )
    template = Template(
        question=question,
        sql=sql,
        dialect=dialect,
        masked_question=masked,
        slots=tuple(slots),
        sql_template=normalised,
        operators=ops,
        anchors=tuple(dict.fromkeys(anchors)),
        fixed_values=fixed,
        warnings=tuple(warnings),
    )
    # Self-check: binding the example's own values must give back its SQL exactly.
    try:
        rebuilt = bind_sql(template, {s.name: s.value for s in slots})
    except BindError as error:
        return _unusable(template, f"the template does not rebuild its own SQL: {error}")
    if rebuilt != normalised:
        return _unusable(template, "the template does not rebuild its own SQL")
    return template


def _unusable(template: Template, error: str) -> Template:
    return Template(**{**template.__dict__, "error": error})


def _default_value_columns(table: str, column: str) -> bool:
    return (table.rsplit(".", 1)[-1].lower(), column.lower()) in DEFAULT_VALUE_COLUMNS


def _parse(sql: str, dialect: str) -> exp.Expr:
    text = sql.strip().rstrip(";").strip()
    statements = [s for s in sqlglot.parse(text, dialect=dialect) if s is not None]
    if len(statements) != 1:
        raise ValueError(f"expected one statement, found {len(statements)}")
    return statements[0]


@functools.lru_cache(maxsize=2048)
def _parsed(sql: str, dialect: str) -> exp.Expr:
    """One parse per template SQL; callers that change the tree copy it first."""
    return _parse(sql, dialect)


def _aliases(tree: exp.Expr) -> dict[str, str]:
    """Alias (or bare name) -> the table as the SQL names it, schema included."""
    out: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        qualified = ".".join(p for p in (table.db, table.name) if p)
        out.setdefault(table.alias_or_name.lower(), qualified)
        out.setdefault(table.name.lower(), qualified)
    return out


_CLIMB = (exp.Cast, exp.TryCast, exp.Paren, exp.Neg, exp.Interval, exp.Lower, exp.Upper, exp.Trim, exp.Tuple)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.Is)


def _compared_column(
    literal: exp.Literal, aliases: dict[str, str], is_value_column: Callable[[str, str], bool]
) -> str:
    """`table.column` the literal is compared to (`=`, `<`, `IN`, `LIKE`, `BETWEEN`), or ""."""
    node: exp.Expr = literal
    parent = node.parent
    while isinstance(parent, _CLIMB):
        node, parent = parent, parent.parent
    other: exp.Expr | None = None
    if isinstance(parent, (exp.In, exp.Between)):
        other = parent.this
    elif isinstance(parent, _COMPARISONS):
        other = parent.right if parent.left is node else parent.left
    elif isinstance(parent, (exp.Add, exp.Sub)):
        # `charttime >= now() - interval '6 months'`: the comparison is one level up.
        grand = parent.parent
        if isinstance(grand, _COMPARISONS):
            other = grand.right if grand.left is parent else grand.left
    if other is None:
        return ""
    column = other if isinstance(other, exp.Column) else other.find(exp.Column)
    if column is None:
        return ""
    name = column.name.lower()
    if column.table:
        return f"{aliases.get(column.table.lower(), column.table.lower())}.{name}"
    select = column.find_ancestor(exp.Select)
    tables = []
    if select is not None:
        for source in [
            select.args.get("from_") or select.args.get("from"),
            *(select.args.get("joins") or []),
        ]:
            if source is not None and isinstance(source.this, exp.Table):
                t = source.this
                tables.append(".".join(p for p in (t.db, t.name) if p))
    if len(tables) == 1:
        return f"{tables[0]}.{name}"
    linkable = [t for t in tables if is_value_column(t, name)]
    return f"{linkable[0]}.{name}" if len(linkable) == 1 else name


def _claim_literal(
    question: str,
    spans: list[Span],
    index: int,
    literal: exp.Literal,
    column: str,
    is_value_column: Callable[[str, str], bool],
    claims: dict,
) -> tuple | None:
    """Which question span a literal expresses: ("slot", span, use), ("anchor", words) or None."""
    text = literal.this
    is_string = literal.is_string
    col_name = column.rsplit(".", 1)[-1]
    if is_string:
        # Calendar pieces by their SQL form: '2100-12', '05', '11-23', '2100-06-07 05:00:00'.
        core = text.strip("%")
        hits = [s for s in spans if s.type in CALENDAR_TYPES and s.value == core]
        if hits:
            free = [s for s in hits if (s.start, s.end) not in claims] or hits
            prefix, _, suffix = text.partition(core)
            return "slot", free[0], LiteralUse(index, text, True, prefix, suffix)
    # A period back from now: '-1 year' next to 'start of year' in one datetime() call is "last year".
    period = re.fullmatch(r"-(\d+) (year|month)", text) if is_string else None
    if period and any(
        isinstance(x, exp.Literal) and x.this == f"start of {period.group(2)}"
        for x in getattr(literal.parent, "expressions", ())
    ):
        hits = [s for s in spans if s.type == PERIOD_TYPES[period.group(2)] and s.value == period.group(1)]
        if len({(s.start, s.end) for s in hits}) == 1:
            return "slot", hits[0], LiteralUse(index, text, True, "-", f" {period.group(2)}")
        return None
    # Numbers (ids, counts, years) by value, also inside strings: '6 months', '-6 month', '2150'.
    number = re.fullmatch(r"([+-]?)(\d+(?:\.\d+)?)(\s*[A-Za-z][A-Za-z ]*)?", text)
    if number and not is_string and isinstance(literal.parent, (exp.Mul, exp.Div)):
        return None  # a constant of arithmetic (`365 / 4` for "3-month"), not a value the question names
    if number:
        value = _canonical_number(number.group(2))
        hits = [
            s
            for s in spans
            if s.type in (*ID_TYPES, NUMBER, YEAR)
            and s.value == value
            and not any(_overlaps(s.start, s.end, [k]) for k in claims if k != (s.start, s.end))
        ]
        if len(hits) == 1:
            span = hits[0]
            if col_name in _ID_COLUMNS and span.type != _ID_COLUMNS[col_name]:
                span = Span(_ID_COLUMNS[col_name], span.text, span.start, span.end, span.value)
            prefix = number.group(1) if is_string else ""
            suffix = (number.group(3) or "") if is_string else ""
            return "slot", span, LiteralUse(index, text, is_string, prefix, suffix)
        return None
    if not is_string:
        return None
    # Years and dates inside date strings, including the next year's / day's bound of a range.
    date_like = re.fullmatch(r"(%?)(\d{4})((?:-\d{2}(?:-\d{2})?)?(?:[ T]\d{2}:\d{2}(?::\d{2})?)?%?)", text)
    if date_like:
        prefix, year, rest = date_like.groups()
        for span in spans:
            if span.type == DATE and text.startswith(span.value, len(prefix)):
                return "slot", span, LiteralUse(index, text, True, prefix, text[len(prefix) + 10 :])
            if span.type == DATE and re.match(r"\d{4}-\d{2}-\d{2}", text[len(prefix) :]):
                day = dt.date.fromisoformat(text[len(prefix) : len(prefix) + 10])
                if day - dt.date.fromisoformat(span.value) == dt.timedelta(days=1) and _is_midnight(
                    text[len(prefix) + 10 :]
                ):
                    return "slot", span, LiteralUse(index, text, True, prefix, text[len(prefix) + 10 :], 1)
        years = [s for s in spans if s.type == YEAR]
        for span in years:
            if int(year) == int(span.value):
                return "slot", span, LiteralUse(index, text, True, prefix, rest)
        for span in years:
            if int(year) == int(span.value) + 1 and re.fullmatch(r"-01-01(?: 00:00(?::00)?)?", rest):
                return "slot", span, LiteralUse(index, text, True, prefix, rest, 1)
        return None
    # A gender code.
    genders = [s for s in spans if s.type == GENDER]
    if genders and (col_name == "gender" or text.strip().lower() in ("f", "m", "female", "male")):
        code = text.strip().upper()[:1]
        hits = [s for s in genders if s.value == code]
        if len(hits) == 1:
            return "slot", hits[0], LiteralUse(index, text, True, case=_case_of(text))
        return None
    # A name: an exact or fuzzy span of the question.
    like = isinstance(_climb(literal), (exp.Like, exp.ILike))
    prefix, core, suffix = _split_wildcards(text) if like else ("", text, "")
    if len(re.sub(r"[^A-Za-z]", "", core)) < 2:
        return None
    # The same name used again (a subquery repeats the filter) fills the same slot.
    again = [
        k for k, uses in claims.items() if any(u[1].literal.strip("%").lower() == core.lower() for u in uses)
    ]
    found = again[0] if again else _find_name_span(question, core, spans, claims)
    if found is None:
        return None
    start, end = found
    table = column.rsplit(".", 1)[0] if "." in column else ""
    if not table or not is_value_column(table, col_name):
        return "anchor", question[start:end]
    span = Span(VALUE, question[start:end], start, end, core)
    return "slot", span, LiteralUse(index, text, True, prefix, suffix, case=_case_of(core), like=like)


def _climb(node: exp.Expr) -> exp.Expr | None:
    parent = node.parent
    while isinstance(parent, _CLIMB):
        parent = parent.parent
    return parent


def _is_midnight(rest: str) -> bool:
    return re.fullmatch(r"(?:[ T]00:00(?::00)?)?", rest) is not None


def _split_wildcards(text: str) -> tuple[str, str, str]:
    m = re.fullmatch(r"([%_]*)(.*?)([%_]*)", text, flags=re.S)
    assert m is not None
    return m.group(1), m.group(2), m.group(3)


def _case_of(text: str) -> str:
    letters = re.sub(r"[^A-Za-z]", "", text)
    if letters.islower():
        return "lower"
    if letters.isupper() and len(letters) > 1:
        return "upper"
    if text.istitle():
        return "title"
    return "asis"


def apply_case(text: str, case: str) -> str:
    return {"lower": text.lower, "upper": text.upper, "title": text.title}.get(case, lambda: text)()


def _find_name_span(question: str, core: str, spans: list[Span], claims: dict) -> tuple[int, int] | None:
    """Where the question names a literal: whole words, case-insensitive, else the best fuzzy window.

    A number inside the name as written ("closed fracture of seven ribs") is part of the name."""
    taken = [(s.start, s.end) for s in spans] + list(claims)
    pattern = r"(?<![A-Za-z0-9])" + re.escape(core.strip()).replace(r"\ ", r"\s+") + r"(?![A-Za-z0-9])"
    for m in re.finditer(pattern, question, flags=re.I):
        cut = [(a, b) for a, b in taken if not (m.start() <= a and b <= m.end())]
        if not _overlaps(m.start(), m.end(), list(claims) + cut):
            return m.start(), m.end()
    tokens = tokenize(question)
    core_words = [w.lower() for w in re.findall(r"[A-Za-z0-9.%]+", core) if w.lower() not in FUNCTION_WORDS]
    if not core_words:
        return None
    best: tuple[float, int, tuple[int, int]] | None = None
    for i in range(len(tokens)):
        for j in range(i + 1, min(len(tokens), i + len(core_words) + 2) + 1):
            window = tokens[i:j]
            if window[0].lower in FUNCTION_WORDS or window[-1].lower in FUNCTION_WORDS:
                continue
            start, end = window[0].start, window[-1].end
            if _overlaps(start, end, taken):
                continue
            text = question[start:end].lower()
            score = fuzz.ratio(text, core.lower()) / 100
            if score < 0.88:
                words = [t.lower for t in window if t.lower not in FUNCTION_WORDS]
                matched = [w for w in words if max(fuzz.ratio(w, c) for c in core_words) >= 85]
                covered = {c for c in core_words if any(fuzz.ratio(w, c) >= 85 for w in words)}
                if len(matched) < len(words) or not words or sum(map(len, words)) < 4:
                    continue
                coverage = len(covered) / len(core_words)
                if coverage < 0.5 and core_words[0] not in covered:
                    continue
                score = 0.6 + 0.25 * coverage
            key = (score, j - i, (start, end))
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else None


def _overlaps(start: int, end: int, ranges: list[tuple[int, int]]) -> bool:
    return any(start < b and a < end for a, b in ranges)


def _slots(
    question: str, claims: dict[tuple[int, int], list[tuple[Span, LiteralUse, str]]], warnings: list[str]
) -> tuple[list[Slot], str]:
    counts: dict[str, int] = {}
    slots: list[Slot] = []
    for (start, end), uses in sorted(claims.items()):
        span = uses[0][0]
        types = {u[0].type for u in uses}
        columns = {c for _, _, c in uses if c}
        if len(types) > 1 or (span.type == VALUE and len(columns) > 1):
            warnings.append(f"{span.text!r} is used as {sorted(types)} / {sorted(columns)}; left fixed")
            continue
        counts[span.type] = counts.get(span.type, 0) + 1
        name = span.type if counts[span.type] == 1 else f"{span.type}_{counts[span.type]}"
        column = next((c for _, _, c in uses if c), "")  # the first use's, in SQL order (not set order)
        slots.append(
            Slot(name, span.type, span.text, start, end, span.value, column, tuple(u for _, u, _ in uses))
        )
    masked, cursor = [], 0
    for slot in slots:
        masked.append(question[cursor : slot.start])
        masked.append(slot.placeholder)
        cursor = slot.end
    masked.append(question[cursor:])
    return slots, "".join(masked)


# --- binding -------------------------------------------------------------------------------------


def bind_sql(template: Template, values: dict[str, str]) -> str:
    """The template's SQL with each slot's literals rebuilt from `values` (slot name -> value).

    Values are checked against the slot type (ids and numbers must be numbers, years four digits,
    dates ISO); names become quoted string literals whatever they contain.
    """
    if not template.usable:
        raise BindError(template.error or "the template has no SQL")
    tree = _parsed(template.sql_template, template.dialect).copy()  # parsed once per template
    literals = list(tree.find_all(exp.Literal))
    replacements: list[tuple[exp.Literal, exp.Expr]] = []
    for slot in template.slots:
        if slot.name not in values:
            raise BindError(f"no value for slot {slot.name}")
        value = str(values[slot.name]).strip()
        for use in slot.uses:
            if use.index >= len(literals) or literals[use.index].this != use.literal:
                raise BindError("the template is stale: its SQL literals moved; rebuild it")
            replacements.append((literals[use.index], _literal_for(slot, use, value)))
    for old, new in replacements:
        old.replace(new)
    return tree.sql(dialect=template.dialect, copy=False)  # our copy: sqlglot need not copy it again


def _literal_for(slot: Slot, use: LiteralUse, value: str) -> exp.Expr:
    if slot.type in (*ID_TYPES, NUMBER):
        if not _NUMBER.fullmatch(value) or (slot.type in ID_TYPES and not _INT.fullmatch(value)):
            raise BindError(f"{slot.name} needs a number, not {value!r}")
        core = value
        decimals = re.fullmatch(r"[+-]?\d+\.(\d+)", use.literal)
        if decimals and "." not in core:  # `valuenum = 85.0` stays a real number: 92 is written 92.0
            core = f"{core}.{'0' * len(decimals.group(1))}"
    elif slot.type == YEAR:
        if not re.fullmatch(r"\d{4}", value):
            raise BindError(f"{slot.name} needs a four-digit year, not {value!r}")
        core = str(int(value) + use.offset)
    elif slot.type == DATE:
        try:
            core = (dt.date.fromisoformat(value) + dt.timedelta(days=use.offset)).isoformat()
        except ValueError as error:
            raise BindError(f"{slot.name} needs an ISO date, not {value!r}") from error
    elif slot.type in PERIOD_TYPES.values():
        if not re.fullmatch(r"\d{1,3}", value):
            raise BindError(f"{slot.name} needs a number of periods back, not {value!r}")
        core = str(int(value))
    elif slot.type in CALENDAR_TYPES:
        if not re.fullmatch(_CALENDAR_FORMS[slot.type], value):
            raise BindError(f"{slot.name} needs the form {_CALENDAR_FORMS[slot.type]}, not {value!r}")
        core = value
    elif slot.type == GENDER:
        code = value.upper()[:1]
        if code not in ("F", "M"):
            raise BindError(f"{slot.name} needs F or M, not {value!r}")
        core = {"F": "female", "M": "male"}[code] if len(use.literal.strip()) > 1 else code
        core = apply_case(core, use.case)
    else:
        if not value or len(value) > 300 or "\x00" in value:
            raise BindError(f"{slot.name} needs a value of {slot.column}")
        core = value
    if use.is_string:
        return exp.Literal.string(f"{use.prefix}{core}{use.suffix}")
    return exp.Literal.number(core)
