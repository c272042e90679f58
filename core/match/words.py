"""Words as the matcher reads them: tokens, stems, synonyms, and the word lists that say which words carry no
content (function words) or are compared as operators (operator words).

The lists are data: a word added here changes what every rule reads, and shows as a fixture diff
(tests/core/match/fixtures)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rapidfuzz import fuzz

# Words that carry no content of their own: ignored when comparing the fixed words of two questions.
# Operator words (first, since, average, not, …) are not here: they are compared separately and exactly.
FUNCTION_WORDS = frozenset(
    """a an the of to for in on at by with from and or as is are was were be been being am has have had do does
    did what which who whom whose how when where why this that these those it its their his her him he she they
    them there s me my i you your we our us can could would should will please tell show give list find display
    get let know want like any all some one database dataset db""".split()
)
# Words the operator signature already compares exactly; they are neutral in word overlap so that
# "count the number of" and "how many" paraphrase each other when their operators agree.
OPERATOR_WORDS = frozenset(
    """first earliest initial initially 1st last latest recent final lastly maximum max highest largest
    greatest peak biggest top most minimum min lowest smallest fewest least how many number count counts counted
    total average averages avg mean sum cumulative much since after before prior until till through up between
    within during throughout ever times often not no never without none neither nor excluding except more less than
    greater fewer older younger over under above below higher lower longer shorter larger exceed exceeds
    exceeded exceeding at past previous current next today yesterday now currently year years month months
    week weeks day days hour hours minute minutes decade decades time each every per across broken down grouped
    breakdown stratified""".split()
)
NEUTRAL_WORDS = FUNCTION_WORDS | OPERATOR_WORDS

# Number words questions use for counts, ranks and thresholds ("one" is left out: "which one", "any
# one"): "the ten most common", "older than fifty", "more than twenty-five days".
_UNITS = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = {
    w: 10 * n for n, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)
}
NUMBER_WORDS = {
    **{w: n for n, w in enumerate(_UNITS) if n >= 2},
    **{w: n for n, w in enumerate(_TEENS, start=10)},
    **_TENS,
    **{f"{t}-{u}": n + k for t, n in _TENS.items() for k, u in enumerate(_UNITS) if k >= 1},
    "hundred": 100,
}

# "/" joins digits to digits ("1/2", "12/2100") and letters to letters ("po/ng"), not "05/this".
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:(?:[-.:]|(?<=\d)/(?=\d)|(?<=[A-Za-z])/(?=[A-Za-z]))[A-Za-z0-9]+)*%?")
INT_RE = re.compile(r"\d+")
NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")


# --- words and spans -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    text: str
    start: int
    end: int
    # Read millions of times in a calibration: lowered once per token, as it is made. Not a
    # cached_property: Python 3.11's takes a lock on each first read, which cost more than the split
    # itself (a million first reads in a calibration). Not compared: it is the text's, lowercased.
    lower: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lower", self.text.lower())


def tokenize(text: str) -> list[Token]:
    """Words, numbers, ISO dates and ids with their character offsets."""
    return list(_tokens(text))


@functools.lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> tuple[Token, ...]:
    # Matching and calibration read the same paraphrases over and over (half a million times in a
    # calibration of 5,000 examples): each text is split once.
    return tuple(Token(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text))


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A crude stem, enough to equate "prescribed"/"prescribe" and "patients"/"patient" (once per
    word: a calibration stems the same words hundreds of thousands of times)."""
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
        # "the 10 most common diagnoses" is "the top 10 most frequent diagnoses"
        ("frequent", "frequently", "common", "commonly", "prevalent", "popular"),
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
    tokens = _tokens(re.sub(r"\{[^}]*\}", " ", text))
    return tuple(
        stem(t.text)
        for i, t in enumerate(tokens)
        if not is_neutral(tokens, i) and not NUMBER_RE.fullmatch(t.text)
    )


def is_neutral(tokens: Sequence[Token], i: int) -> bool:
    """A function or operator word, or "recently" in "most recently" (the operator signature reads it
    as "last"). "Recently" alone is a content word a paraphrase must say: it names no period, and
    a template without one would answer for all time in silence."""
    word = tokens[i].lower
    return word in NEUTRAL_WORDS or (word == "recently" and i > 0 and tokens[i - 1].lower == "most")


def overlaps(start: int, end: int, ranges: list[tuple[int, int]]) -> bool:
    return any(start < b and a < end for a, b in ranges)


def same_stem(a: str, b: str) -> bool:
    """ "admitt" and "admission", "discharg" and "discharged": the same word for the guard."""
    if a == b:
        return True
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n >= 4 and n >= 0.6 * min(len(a), len(b))


def same_word(a: str, b: str) -> bool:
    return a == b or (min(len(a), len(b)) >= 5 and fuzz.ratio(a, b) >= 90)


def contains_words(text: str, words: str) -> bool:
    pattern = r"(?<![a-z0-9])" + re.escape(words.strip()).replace(r"\ ", r"\s+") + r"(?![a-z0-9])"
    return re.search(pattern, text) is not None


def norm(text: str) -> str:
    return re.sub(r"[^a-z0-9%]+", " ", text.lower()).strip()


@functools.lru_cache(maxsize=1 << 15)
def plain(text: str) -> str:
    """The text's content words, lowercased, a slot placeholder as one word ("slotvalue"): what the
    masked similarity compares. Once per text: a template's masked question is read for every
    question it is tried for."""
    text = re.sub(r"\{([^}:]*)(?::[^}]*)?\}", lambda m: f" slot{m.group(1)} ", text.lower())
    return " ".join(t.lower for t in tokenize(text) if t.lower not in FUNCTION_WORDS)


NUMERIC = re.compile(r"[\d.,:/-]+%?")


def guard_sequence(text: str) -> list[str]:
    """The question's words in order as the guard reads them (synonyms folded), function words out,
    operator words and placeholders kept as the context a swapped word must share, request words
    ("tell", "show") out."""
    text = re.sub(r"\{([^}:]*)(?::[^}]*)?\}", lambda m: f" slot{m.group(1)} ", text.lower())
    words = (canonical(stem(t.text)) for t in tokenize(text) if t.lower not in FUNCTION_WORDS)
    return [w for w in words if w not in GUARD_FILLER]


def guard_words(text: str) -> list[str]:
    """Content words as the meaning guard compares them: stems, synonyms folded."""
    return [w for w in map(canonical, content_words(text)) if w not in GUARD_FILLER]


@functools.lru_cache(maxsize=1 << 14)
def name_pattern(name: str) -> re.Pattern[str]:
    """A name as whole words, any case, any spacing between its words. Compiled once per name: re's own
    cache holds 512 patterns, and a calibration looks up thousands of names (it recompiled them)."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(name).replace(r"\ ", r"\s+") + r"(?![A-Za-z0-9])", re.I)
