"""Why a verified question was not used for a new one: a stable code and a plain sentence.

The code is for programs (the benchmark's miss causes, the API, audit); the sentence is for a
researcher reading the run page, so it never shows Python values (`None`, `['first']`): it says what
this question asks and what the verified question asks, in words. Each rule of `rules.RULES`
refuses with one of these codes; a new rule adds its own here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Codes, one per kind of refusal (stable: the benchmark and the API group by them).
NOT_USABLE = "not_usable"
OPERATOR = "operator_differs"
OPERATOR_COMBINATION = "operator_combination"
ASKS_NAME = "asks_for_name"
ASKS_TIME = "asks_for_time"
ANCHOR = "anchor_missing"
FIXED_VALUE = "fixed_value_missing"
EXTRA_VALUE = "extra_value"
VALUE_MISSING = "value_missing"
VALUE_PLACEMENT = "value_placement"
VALUE_NOT_FOUND = "value_not_found"
VALUE_AMBIGUOUS = "value_ambiguous"
VALUE_NOT_TOGETHER = "value_not_together"
CONTRARY_WORDS = "contrary_words"
WORDS_MISSING = "words_missing"
WORDS_UNEXPLAINED = "words_unexplained"
SQL_INVALID = "sql_invalid"
SUBJECT_TABLE = "subject_table"  # about diagnoses, the template reads procedures (or the reverse)
ASKS_VALUE = "asks_for_value"  # asks for a value, the template returns a time
VALUE_LONGER = "value_longer"  # the bound value has no rows, a longer value of the same item has
# Set by the engine after matching.
GATE_DECLINED = "gate_declined"
DISAGREE = "templates_disagree"
SQL_FAILED = "sql_failed"


@dataclass(frozen=True)
class Reason:
    code: str
    text: str


# How each operator value reads in a sentence ("this question asks for …").
_OPERATOR_WORDS: dict[str, dict[Any, str]] = {
    "order": {"first": "the first one", "last": "the last one"},
    "extreme": {"max": "the highest value", "min": "the lowest value"},
    "aggregate": {
        "count": "a count",
        "avg": "an average",
        "sum": "a total",
    },
    "compare": {
        ">=": "'at least'",
        "<=": "'at most'",
        ">": "'more than'",
        "<": "'less than'",
    },
    "visit": {
        "first": "the first visit",
        "last": "the last visit",
        "current": "the current visit",
    },
    "ever": {True: "whether it 'ever' happened"},
    "when": {True: "a time (when)"},
    "yes_no": {True: "a yes or no"},
    "times": {True: "how many times"},
    "negation": {True: "a negation ('not', 'never', 'without')"},
    "sequence": {
        "after": "'after' an event",
        "before": "'before' an event",
        "after|before": "'after' and 'before' events",
    },
    "manner": {True: "in what way ('how is … taken?')"},
    "group": {True: "one answer per group ('by …', 'per …', 'for each …')"},
}
_TIME_WORDS = {"in": "a time ('in …')", "since": "'since …'", "from": "'from …'", "after": "'after …'",
               "before": "'before …'", "until": "'until …'", "between": "'between …'", "within": "'within …'"}  # fmt: skip


def operator_phrase(key: str, value: Any) -> str:
    """One operator value in words ("the first one", "'at least'", "no time limit")."""
    words = _OPERATOR_WORDS.get(key, {})
    if value in words:
        return words[value]
    if isinstance(value, str) and "|" in value:
        return " and ".join(operator_phrase(key, v) for v in value.split("|"))
    if key == "time":
        return _TIME_WORDS.get(value, f"'{value} …'")
    if key == "period":
        return f"'{value}'"
    if key == "units":
        return f"{value}s"
    return f"'{value}'"


def operator_differs(key: str, asked: Any, allowed: Iterable[Any]) -> Reason:
    """The question's operator word is none the verified question's wordings use."""
    said = " or ".join(sorted({operator_phrase(key, v) for v in allowed if v})) or "nothing of the kind"
    if not asked:
        return Reason(OPERATOR, f"The verified question asks for {said}, which this question does not say.")
    if any(not v for v in allowed) and said != "nothing of the kind":
        said += " or nothing of the kind"
    return Reason(
        OPERATOR, f"This question asks for {operator_phrase(key, asked)}, the verified question for {said}."
    )


def quoted(words: Iterable[str]) -> str:
    """'a', 'b' and 'c' — words as a researcher reads them in a sentence."""
    items = [f"'{w}'" for w in words]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
