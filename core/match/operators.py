"""Operator words: what flips a question's meaning while its embedding barely moves (first/last, min/max,
count/average/total, in/since/before, which visit, yes/no, negation), read as a small dict."""

from __future__ import annotations

import re
from typing import Any

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
        periods.add(f"{which} {'n ' if m.group(2) else ''}{unit_of_word(m.group(3))}")
    for word in ("today", "yesterday", "tomorrow", "now", "currently"):
        if re.search(rf"\b{word}\b", text):
            periods.add(word)
    units = {
        unit_of_word(m.group(1))
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
# "what was the time of the first heart rate measurement", "at what time …": the time is what is asked
# for, though no word stands before "time" (issue 26: such a question was answered with the value).
_ASKS_THE_TIME = re.compile(r"^(?:at )?what time\b|\b(?:what|which) (?:is|was|were) the (?:time|date)\b")
_NOT_ASKING_TIME = re.compile(r"\bhow many\b|\bfor the (?:\w+ )?time\b|\bat the same time\b")


def asks_for_name(question: str) -> bool:
    """Whether the question asks for a name or label (of a drug, an input, a test), not a time or number."""
    return bool(_ASKS_NAME.search(" ".join(question.lower().replace("’", "'").split())))


def asks_for_time(question: str) -> bool:
    """Whether the question asks for a time as the thing it wants ("the last prescription time")."""
    text = " ".join(question.lower().replace("\u2019", "'").split())
    asked = _ASKS_TIME.search(text) or _ASKS_THE_TIME.search(text)
    return bool(asked) and not _NOT_ASKING_TIME.search(text)


def unit_of_word(word: str) -> str:
    return word.rstrip("s")


SOFT_OPERATORS = ("aggregate",)  # "maximum total cost" and "maximum cost": judged key by key only


def operator_signature(ops: dict[str, Any]) -> tuple:
    return tuple(sorted((k, v) for k, v in ops.items() if k not in SOFT_OPERATORS))


# Operator keys whose values oppose each other: a word said only with "lowest" ("survival") must not
# be read with "highest". Other keys ("in 2100" or "2100", "times") only word the same thing otherwise,
# and an operator word said or left out ("the three most common" / "the three common") is no opposite.
POLAR_OPERATORS = ("order", "extreme", "compare", "negation")


def opposite(a: tuple, b: tuple) -> bool:
    """Whether two operator signatures say opposite things ("lowest" and "highest", "not" and not)."""
    x, y = dict(a), dict(b)
    for key in POLAR_OPERATORS:
        if key == "negation":
            if bool(x.get(key)) != bool(y.get(key)):
                return True
        elif x.get(key) and y.get(key) and x[key] != y[key]:
            return True
    return False


def ops_key(ops: dict[str, Any]) -> tuple:
    """A question's operator words as one comparable value (all keys, soft ones too)."""
    return tuple(sorted((k, v) for k, v in ops.items() if v))
