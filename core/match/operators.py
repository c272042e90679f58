"""Operator words: what flips a question's meaning while its embedding barely moves (first/last, min/max,
count/average/total, in/since/before, which visit, yes/no, negation), read as a small dict."""

from __future__ import annotations

import functools
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
    "throughout": "in",
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
# "the total of glucagon prescriptions" counts them (train's every such question is a COUNT); "the
# total of pantoprazole patient N had been prescribed" sums a dose. Read as a sum, a count template's
# family accepted "how much is the drug X?" (its price; issue 26, the 10 % library answered it with the
# count). Only nouns that are counted, never amounts ("the sum total of inputs" is a volume).
# The noun follows the item's name: "the total of X that patients received" is no count of patients.
_COUNTED = r"(?:(?!(?:that|which|who|for|in|of)\b)[^?,.\s]+\s+){0,6}?(?:prescriptions|patients|visits|admissions|cases|times)\b"
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
        (
            "count",
            r"\b(?:how many|how often|number of|count|counts|counted|total number|total count)\b"
            rf"|\btotal of {_COUNTED}",
        ),
        ("avg", r"\b(?:average|averages|avg|mean)\b"),
        # "how much" is an amount, not when the question is about a difference or a weight
        (
            "sum",
            rf"\b(?:sum|cumulative|accumulated|aggregate|overall)\b|\btotal\b(?!\s+(?:number|count)\b|\s+of {_COUNTED})"
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
    r"|(?:hospital|icu)\s+stays?\b"
    r"|(?:enter(?:ed|s)?|entry|entries)\s+(?:into\s+|to\s+)?the\s+hospital\b)"  # "first entered the hospital"
)
# "the first discharge", "last discharged", "the last time patient N was discharged", "discharged from the
# hospital for the first time": the first or last visit, as "the first hospital visit" is (train's
# every such question returns that visit's discharge time), not an order within one; never "the
# discharge lounge" (a care unit) nor "discharged since 2100" (no first or last).
_DISCHARGE_ORDINAL = r"(first|initial|earliest|1st|last|latest|most recent|final)"
_DISCHARGE = re.compile(
    rf"\b{_DISCHARGE_ORDINAL}\s+(?:hospital\s+)?discharge[ds]?\b(?!\s+lounge)"
    rf"|\b{_DISCHARGE_ORDINAL}\s+time\s+(?:that\s+)?(?:\S+\s+){{0,3}}?(?:was|were|is|got|get|gets)\s+discharged\b"
    rf"|\bdischarged\s+(?:from\s+(?:the\s+)?hospitals?\s+)?for\s+the\s+{_DISCHARGE_ORDINAL}\s+time\b"
)
# The nouns a visit is said with ("the first hospital visit", "the last encounter", "the first
# hospitalization"). Where the question reads the template's visit in other words ("the first
# discharge", "the last entry into the hospital"), the visit operator has compared them: they say which
# visit, not what the template is about (same_visit). Never "admission" (the admission type's word too),
# nor "icu" (an ICU stay is no hospital visit).
VISIT_NOUNS = ("visit", "encounter", "stay", "hospitalization", "hospital")
_VISIT_NAMES = {"initial": "first", "earliest": "first", "1st": "first", "latest": "last", "most recent": "last",
                "final": "last", "present": "current", "this": "current", "ongoing": "current"}  # fmt: skip


# question_operators' other patterns, compiled once (re's own cache is looked up on every call, and
# a calibration reads ~43,000 distinct texts, ~9 such calls each).
_SPACES = re.compile(r"\s+")
# "how many times" counts events; "total number of times" too: both set `times`, not `sum`.
_TIMES = re.compile(r"\b(?:how many times|number of times|how often|times)\b")
_PERIODS = re.compile(rf"\b(this|last|past|previous|current|next)\s+(?:(\d+)\s+)?({_UNITS})\b")
_NOW_WORDS = tuple(
    (word, re.compile(rf"\b{word}\b")) for word in ("today", "yesterday", "tomorrow", "now", "currently")
)
_EVER = re.compile(r"\bever\b")
# Asking for a time ("when", "what time", "what date") is another answer than asking for a thing;
# "when" inside a statement ("the admission type when patient … entered", "the total bill when it
# includes …") is a condition, not a question: it asks when it opens the question or a clause.
_WHEN = re.compile(
    r"(?:^\s*|[,;:]\s*|\b(?:me|know|us)\s+)when\b|\bwhen\s+(?:was|did|is|were|has|had|does|do|will|are)\b"
    r"|\bwhat (?:time|date|day)\b|\bthe (?:time|date) (?:of|when)\b|\b(?:instance|moment|occasion) when\b"
    r"|\b(?:what|which) (?:is|was|were) the (?:\w+ )?(?:first|last|latest|earliest|initial) time\b"
)
# A yes/no question ("has patient … been …?", "was … given?") asks whether, not what or how much;
# "do you know the average …" asks what, not whether.
_YES_NO = re.compile(
    r"\s*(?:(?:tell me|can you tell me|please|in \S+|since \S+),?\s+|[^,?]{3,60},\s+)?"
    r"(?:has|have|had|is|was|were|are|did|does|do)\b"
)
_DO_YOU_KNOW = re.compile(r"^\s*do you know\s+(?!if\b|whether\b)")
_NEGATION = re.compile(r"\b(?:not|no|never|without|none|neither|nor|excluding|except)\b|n't\b")


def same_visit(ops: dict[str, Any], visits: frozenset) -> bool:
    """Whether the question (its operators `ops`) reads the one visit every paraphrase of a template
    reads (`visits`: the values of their "visit" key), so that VISIT_NOUNS need not be said."""
    visit = ops.get("visit")
    return bool(visit) and visits == frozenset({visit})


def question_operators(question: str) -> dict[str, Any]:
    """The words that flip a question's meaning while its embedding barely moves, normalised.

    Two questions may share SQL only if every entry is equal. Values are strings ("" joins several,
    "|"-separated and sorted), None, or booleans, so the dict survives JSON unchanged. Which visit
    ("the first hospital visit", "the current ICU stay") is its own entry, so that "the last time
    in the first visit" and "the first time in the last visit" differ.
    """
    return dict(_operators_of(question))  # the caller's own dict: no change of it reaches another


@functools.lru_cache(maxsize=1 << 15)
def _operators_of(question: str) -> dict[str, Any]:
    """question_operators, read once per text. Why: a calibration reads the same text again and
    again: a composed paraphrase's question when its template is built and when its family reads it
    (index.library_reading: the same text where it names no value and no period), a held-out
    question in its fold and again in the sibling pass; ~50,000 readings of train's, 6 % of the
    time. The same dict either way: it depends on the text alone (this module's patterns and word
    lists), and its values (strings, None, booleans) cannot change; callers get a copy of it."""
    text = " " + _SPACES.sub(" ", question.lower().replace("’", "'")) + " "
    asked = text  # "what was the last time patient N was discharged": the visit's words may ask a time
    visits = [
        (m.start(), m.end(), _VISIT_NAMES.get(word, word))
        for pattern in (_VISIT, _DISCHARGE)
        for m in pattern.finditer(text)
        for word in [next(g for g in m.groups() if g)]
    ]
    for start, end, _ in visits:  # the visit's own first/last is not the question's order
        text = text[:start] + " " * (end - start) + text[end:]
    ops: dict[str, Any] = {"visit": "|".join(sorted({v for _, _, v in visits})) or None}
    for key, patterns in _OPERATOR_REGEXES.items():
        found = sorted({name for name, pattern in patterns if pattern.search(text)})
        ops[key] = "|".join(found) or None
    times = bool(_TIMES.search(text))
    time_found, sequence = _time_words(text)
    periods = set()
    for m in _PERIODS.finditer(text):
        which = {"past": "last", "previous": "last", "current": "this"}.get(m.group(1), m.group(1))
        periods.add(f"{which} {'n ' if m.group(2) else ''}{unit_of_word(m.group(3))}")
    periods.update(word for word, pattern in _NOW_WORDS if pattern.search(text))
    ops["in_units"], units = _units(text)
    ops["time"] = "|".join(sorted(time_found)) or None
    ops["sequence"] = "|".join(sorted(sequence)) or None
    ops["period"] = "|".join(sorted(periods)) or None
    ops["units"] = "|".join(sorted(units)) or None
    ops["ever"] = bool(_EVER.search(text))
    ops["when"] = bool(_WHEN.search(asked) or _OPENS_WITH_TIME.search(asked.strip()))
    ops["yes_no"] = bool(_YES_NO.match(_DO_YOU_KNOW.sub(" tell me ", text)))
    ops["times"] = times
    ops["manner"] = True if _MANNER.search(text) else None
    ops["group"] = True if groups_by(text) else None  # None, not False: libraries stored before it read alike
    ops["negation"] = bool(_NEGATION.search(text))
    return ops


# "after"/"before" an event ("after the diagnosis of …", "diagnosed with … before"), not a time: the
# library's paraphrases of one template say it or leave it out ("previously diagnosed", "in the same
# visit"), so it is its own key, matched only when said, and not read into the time ("after a
# diagnosis … since 1 year ago" is the time "since").
_SEQUENCE = ("after", "before", "prior to")


def _time_words(text: str) -> tuple[set[str], set[str]]:
    """The time limits said ("since 2100", "within 2 months", "after 2100") and the order of events
    ("after the diagnosis", "before").
    "within the same visit" is "in the same visit": no time limit of its own; "between" is a time
    only between times ("the difference between weights …" is none)."""
    time_found, sequence = set(), set()
    for phrase, (name, kind, pattern) in zip(_TIME_WORDS, _TIME_REGEXES, strict=True):
        if phrase not in text:  # each pattern says its phrase as written (_time_regex): none matches
            continue
        if kind == "sequence":
            for m in pattern.finditer(text):
                timed = _TIMED.match(text[m.end() :])
                (time_found if timed else sequence).add(name)
        elif pattern.search(text):
            time_found.add(name)  # "in this year" is "this year": the period says it, not the "in"
    return time_found, sequence


def _time_regex(phrase: str, name: str) -> tuple[str, str, re.Pattern]:
    """A time word's pattern, as _time_words reads it: an event's order, a limit, or a word before a time."""
    if phrase in _SEQUENCE:
        return name, "sequence", re.compile(rf"\b{phrase}\b(?!\s+(?:the\s+)?same\b)")
    if phrase in ("since", "until", "till", "within"):
        return name, "limit", re.compile(rf"\b{phrase}\b(?!\s+(?:the\s+)?same\b)")
    return name, "before", re.compile(rf"\b{phrase}\s+{_TIME_TARGET if name != 'in' else _TIME_POINT}")


# Compiled once: question_operators runs for every question and composition (~50,000 times in a
# calibration), and looking each pattern up in re's cache again was a tenth of its time.
_OPERATOR_REGEXES = {
    key: [(name, re.compile(pattern)) for name, pattern in patterns]
    for key, patterns in _OPERATOR_PATTERNS.items()
}
_TIME_REGEXES = [_time_regex(phrase, name) for phrase, name in _TIME_WORDS.items()]
_TIMED = re.compile(rf"\s+(?:{_TIME_TARGET}|\d)")


def _units(text: str) -> tuple[str | None, set[str]]:
    """The answer's unit ("the length of stay in days": a question that leaves it out asks the same,
    so it is matched only when said) and the question's other time units ("in 2 days", "how many days")."""
    answer_units = {unit_of_word(m.group(1)) for m in re.finditer(rf"\bin ({_UNITS})\b(?!\s+ago\b)", text)}
    units = {
        unit_of_word(m.group(1))
        for m in re.finditer(rf"\b({_UNITS})\b(?!\s+\d{{4}}\b)", text)
        if not re.match(r"years?\s+old", text[m.start() :]) and not re.search(r"\bin\s*$", text[: m.start()])
    }
    return "|".join(sorted(answer_units)) or None, units


# "How is nystatin taken?", "how was patient … admitted?": asks in what way (a route, an admission
# type), not how much ("how much is nystatin?" is its price: train CV answered the one with the other).
# None, not False, when not said: libraries stored before it read alike.
_MANNER = re.compile(
    r"^\s*(?:[^,?]{0,40},\s*)?how (?!much|many|long|old|often|far|big|large|high|low)"
    r"(?:is|are|was|were|do|does|did|should|can|has|have)\b"
)


# --- group-by wording -----------------------------------------------------------------------------

# "by first care unit", "per year", "for each first care unit", "broken down by gender", "across care
# units": one answer per group, whichever words say it (issue 26: "… by first care unit" was declined
# beside the library's "… for each first care unit"). The words themselves are operator words (neutral
# to the word rules); this key says a group-by was asked, so a question with one is not answered by a
# template without one, nor the reverse.
_GROUP_PHRASE = re.compile(
    r"\b(?:for|in) (?:each|every)\b|\b(?:broken down|grouped|split|stratified|categori[sz]ed) by\b"
    r"|\bbreakdown by\b"
    # "across care units", not "across all patients" (all of them together)
    r"|\bacross (?!all\b|every\b|patients\b|the (?:whole|entire|database)\b)(?:the |different |each )?[a-z]"
    r"|\bper (?!(?:hr|hour|min|minute|kg|ml|l|mg|dose|cent)\b)[a-z]"
)
# A bare "by" groups only before a thing to group by: not "prescribed by", "caused by", "seen by" (a
# verb before it), "visits by patient 10001", "by 2150", "by the end", "top four diagnoses by frequency".
_BY = re.compile(r"\b([a-z']+) by (?:the )?([a-z0-9']+)")
_NOT_GROUPED_BY = frozenset(
    """patient patients our their his her its a an any other another way far then now means frequency
    count counts number numbers occurrence occurrences volume amount total value values how end time
    january february march april may june july august september october november december""".split()
)
_VERB_BEFORE_BY = re.compile(r"(?:ed|en|wn)$|^(?:made|done|seen|run|paid|led|set|put|got|went|go|goes)$")


def groups_by(text: str) -> bool:
    """Whether the question asks for one answer per group ("… by first care unit", "per year")."""
    if _GROUP_PHRASE.search(text):
        return True
    for m in _BY.finditer(text):
        before, after = m.group(1), m.group(2)
        if _VERB_BEFORE_BY.search(before) or after in _NOT_GROUPED_BY or after[0].isdigit():
            continue
        return True
    return False


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
# "First time patient 10001 was prescribed a drug in 08/this year?": a question that opens with the
# occasion and asks nothing else (no what/which/who/how) asks for its time (issue 26: answered with the
# drug). "First time, what drug was prescribed …" asks for the drug.
_OPENS_WITH_TIME = re.compile(
    r"^(?:the )?(?:first|last|latest|earliest|initial|final|most recent) time\b(?![^?]*\b(?:what|which|who|how)\b)"
)
# Occasions and periods that say "time", "year" or "day" without asking for a time: "the first time
# it was measured", "at the same time", "how many times", "this year", "2 days ago", "per day".
_NOT_A_TIME_ASKED = re.compile(
    r"\b(?:for |at )?(?:the )?(?:very )?(?:first|last|same|next|latest|earliest|initial|final|\w+est) time\b"
    r"|\b(?:\w+ )?times\b"
    r"|\b(?:this|last|current|next|previous|past|that) (?:\d+ )?(?:years?|months?|weeks?|days?|hours?)\b"
    r"|\b\d+ (?:years?|months?|weeks?|days?|hours?|minutes?)(?: ago)?\b|\bper (?:year|month|week|day|hour)\b"
    r"|\b(?:years?|months?) old\b|\byear \d{4}\b|\bhow many (?:years?|months?|weeks?|days?|hours?)\b"
)
_TIME_WORD = re.compile(
    r"\b(?:when|whenever|time|timestamp|date|dates|day|days|hour|hours|moment|year|month|week)\b"
)


def asks_for_name(question: str) -> bool:
    """Whether the question asks for a name or label (of a drug, an input, a test), not a time or number."""
    return bool(_ASKS_NAME.search(" ".join(question.lower().replace("’", "'").split())))


def asks_for_time(question: str) -> bool:
    """Whether the question asks for a time as the thing it wants ("the last prescription time")."""
    text = " ".join(question.lower().replace("\u2019", "'").split())
    if _OPENS_WITH_TIME.search(text):
        return True
    asked = _ASKS_TIME.search(text) or _ASKS_THE_TIME.search(text)
    return bool(asked) and not _NOT_ASKING_TIME.search(text)


@functools.lru_cache(maxsize=4096)
def says_time(question: str) -> bool:
    """Whether a time is asked for or talked of as the answer ("when", "what time", "the date of", "the
    first time patient … was …"), not only as an occasion or a period ("the first time it was
    measured", "in 08/this year", "2 days ago"): a template that returns a time answers only such a
    question, and "what was the heart rate the first time it was measured today?" wants the value."""
    text = " ".join(question.lower().replace("\u2019", "'").split())
    if asks_for_time(text) or question_operators(text)["when"]:
        return True
    return bool(_TIME_WORD.search(_NOT_A_TIME_ASKED.sub(" ", text)))


def unit_of_word(word: str) -> str:
    return word.rstrip("s")


# Operator keys a question may leave unsaid: "the average length of stay" is the one "in days" (the
# answer's own unit), "… diagnosed with X in the same visit" the one "after the diagnosis of X"; said,
# they must be the template's ("in hours" is not "in days", "before" is not "after").
UNSAID_ALLOWED = ("in_units", "sequence")
SOFT_OPERATORS = (
    "aggregate",
    *UNSAID_ALLOWED,
)  # "maximum total cost" and "maximum cost": judged key by key only


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
