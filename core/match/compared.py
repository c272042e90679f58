"""The comparison flip: a verified template with one comparison said the other way, on the SQL tree,
where the question says the other word: "… since 05/2100" beside a verified "… in 03/2100" whose
month is compared inside a subquery, "was the value second measured less than the first?" beside a
verified "… greater than the first?".

Why: after the first/last swap (direction.py), the train cross-validation's next largest shape of
question with no template in the library is a verified template whose one comparison is flipped or
changed (about 150 of 1,333): the library has "in", the question says "since"; it has "greater than",
the question says "less than". The condition replacement (replace.py) cannot reach most of them: the
comparison sits in a subquery, or compares two subqueries and has no slot. Which SQL comparison a word
says comes from the library, never from a list: two of its templates that are the same SQL but for
one comparison, whose paraphrases say that comparison with two different words (the time word right
before the compared slot's value, or the comparison word of operators.py when no slot is compared),
show which comparison each word writes, for comparisons of that form (its operands with columns and
values masked: a month compared as '%m-%Y' text, two subqueries). The flip then writes the new
comparison on the base template's and the question's word in place of the base's. The composition
goes through the same rules, binding, validation and risk as any other (compose.py, feature
`composed`), so the guard still judges every word.

Hard rules (refused before anything is built): the question's operator words differ from the base
template's in exactly one key, `time` or `compare`; the question says the new word once (one compared
time value, or one comparison word and no negation), the base paraphrase the old word once; every
comparison the word governs in the base SQL has the form and the operator the library maps the old
word to, and the library maps the new word to another operator for that form.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.direction import OrderSwap
from core.match.index import UNANSWERABLE, LibraryIndex
from core.match.items import ItemSwap
from core.match.operators import _OPERATOR_PATTERNS, _TIME_WORDS
from core.match.reading import Reading
from core.match.spans import CALENDAR_TYPES, DATE, NUMBER, YEAR
from core.match.swap import AggregateSwap
from core.match.template import Template, dialect_named, parsed_sql, written
from core.match.words import tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

KEYS = ("time", "compare")  # the operator keys a comparison's word is read under
TIME_TYPES = frozenset((YEAR, DATE, *CALENDAR_TYPES))  # slots a time word compares
MAPPING_SHARE = 0.8  # share of the library's pairs that must agree on a word's comparison for a form
COMPARISONS: dict[str, type[exp.Expr]] = {
    "EQ": exp.EQ, "GTE": exp.GTE, "GT": exp.GT, "LT": exp.LT, "LTE": exp.LTE, "NEQ": exp.NEQ,
}  # fmt: skip
_CLASSES = tuple(COMPARISONS.values())
_COMPARE_WORDS = [(name, re.compile(pattern)) for name, pattern in _OPERATOR_PATTERNS["compare"]]
_ANY_COMPARE = re.compile("|".join(f"(?:{p})" for _, p in _OPERATOR_PATTERNS["compare"]))


@dataclass(frozen=True)
class Comparison:
    """One comparison of a template's SQL: its form (operands masked), its operator, and the slots
    (literal indices) it compares."""

    form: str
    operator: str  # a key of COMPARISONS
    literals: frozenset[int]


@dataclass(frozen=True)
class ComparisonFlip:
    """Write `new` for every comparison the word governs (of a form in `forms`, operator `old`)."""

    key: str  # "time" or "compare"
    old_word: str  # the base question's reading of the word ("in", "<")
    old_text: str  # …and its own words for it ("during", "lower than"): what the answer says it replaced
    new_word: str  # the question's own words for the new one ("since", "greater than")
    forms: frozenset[tuple[str, str, str]]  # (form, old operator, new operator)

    @property
    def phrase(self) -> str:
        return f"{self.new_word} instead of {self.old_text}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with the comparison and its word flipped, or None where
        this paraphrase does not say the old word once or its comparisons are not the ones flipped."""
        said = _said(template, self.key)
        if said is None or said[0] != self.old_word:
            return None
        _, start, end, literals = said
        try:
            tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
        except (SqlglotError, ValueError):
            return None
        flips = {(form, old): new for form, old, new in self.forms}
        found = _governed(_nodes(tree, template.dialect), literals)
        if not found or any((c.form, c.operator) not in flips for _, c in found):
            return None
        for node, c in found:
            node.replace(COMPARISONS[flips[(c.form, c.operator)]](this=node.this, expression=node.expression))
        question = template.question[:start] + self.new_word + template.question[end:]
        return question, written(tree, template.dialect)  # our copy, kept as its SQL's parse


def comparison_plans(
    reading: Reading, index: LibraryIndex, base: int, vote: Vote
) -> list[tuple[int, ComparisonFlip]]:
    """The comparison flip the question asks of the base entry's template, with the entry whose
    question says the new word over such a comparison (the nearest), or []."""
    entry = index.entries[base]
    template = entry.template
    if template is None or not template.usable:
        return []
    ops, base_ops = reading.ops, template.operators
    if all((ops.get(k) or None) == (base_ops.get(k) or None) for k in KEYS):
        return []  # nearly every base: no comparison word differs (the check below reads every key)
    differ = [k for k in ops.keys() | base_ops.keys() if (ops.get(k) or None) != (base_ops.get(k) or None)]
    if len(differ) != 1 or differ[0] not in KEYS:
        return []  # refused before anything is read: most bases differ in another word, or in none
    key = differ[0]
    asked, said = _question_said(reading, key), _said(template, key)
    if asked is None or said is None or asked[0] == said[0] or asked[2] != (said[3] is not None):
        return []  # the same word, or one that compares a value where the other compares no value
    mapping = library_comparisons(index)
    forms = set()
    for _, c in _governed([(None, c) for c in _comparisons(template)], said[3]):
        words = mapping.words.get(c.form, {})
        if words.get(said[0]) != c.operator or words.get(asked[0]) in (None, c.operator):
            return []  # a comparison the old word does not say, or no other the new word says
        forms.add((c.form, c.operator, words[asked[0]]))
    sources = mapping.sayers.get((key, asked[0]), ())
    if not forms or not sources:
        return []
    source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
    flip = ComparisonFlip(key, said[0], template.question[said[1] : said[2]], asked[1], frozenset(forms))
    return [(source, flip)]


# What compose.Composed may carry: every kind of swap, each with `phrase` and `apply(template)`.
Swap = AggregateSwap | ItemSwap | OrderSwap | ComparisonFlip


# --- what the library shows -------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryComparisons:
    """form -> {word: operator} where the library agrees, and the entries that say each (key, word)."""

    words: dict[str, dict[str, str]]
    sayers: dict[tuple[str, str], tuple[int, ...]]


def library_comparisons(index: LibraryIndex) -> LibraryComparisons:
    """Read once per library (cached on the index, as direction.py caches its orders)."""
    cached = getattr(index, "_compose_comparisons", None)
    if cached is not None:
        return cached
    groups: dict[str, dict[tuple, str]] = defaultdict(dict)
    for key, members in index.members.items():
        template = index.entries[members[0]].template if key != UNANSWERABLE else None
        if template is None or not template.usable:
            continue
        shape, comparisons = _shape(template)
        if comparisons:
            groups[shape].setdefault(comparisons, key)
    votes: dict[tuple[str, str], Counter] = defaultdict(Counter)
    sayers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for variants in groups.values():
        pairs = list(variants.items())
        for n, (comps_a, key_a) in enumerate(pairs):
            for comps_b, key_b in pairs[n + 1 :]:
                for form, key, (word_a, op_a), (word_b, op_b) in _pair(index, key_a, key_b, comps_a, comps_b):
                    votes[(form, word_a)][op_a] += 1
                    votes[(form, word_b)][op_b] += 1
                    sayers[(key, word_a)].append(key_a)
                    sayers[(key, word_b)].append(key_b)
    _single_votes(index, votes, sayers)
    words: dict[str, dict[str, str]] = defaultdict(dict)
    for (form, word), by in votes.items():
        operator, n = by.most_common(1)[0]
        if n >= MAPPING_SHARE * sum(by.values()):
            words[form][word] = operator
    out = LibraryComparisons(
        dict(words),
        {k: tuple(i for t in dict.fromkeys(keys) for i in index.members[t]) for k, keys in sayers.items()},
    )
    index._compose_comparisons = out  # type: ignore[attr-defined]
    return out


def _single_votes(
    index: LibraryIndex, votes: dict[tuple[str, str], Counter], sayers: dict[tuple[str, str], list[str]]
) -> None:
    """One template's own evidence, added to the pairs' votes where no pair reads that word for that
    form: a paraphrase that says the comparison with one word, right before the one value it compares
    ("since 06/23/2100": the date's day compared >=), shows the comparison that word writes for
    comparisons of that form, as a pair does. Every comparison the word governs must have one form and
    one operator; each (form, word) counts once per template.

    Why: a pair of templates alike but for one comparison is rare in a small library, and "on
    03/10/2100" for a verified "since 06/23/2100" was one of the 10 % library's largest one-step
    misses. Every vote still has to agree (MAPPING_SHARE) with the pairs and the other templates."""
    paired = set(votes)
    for template_key, members in index.members.items():
        for (key, form, word), operator in _template_sayings(index, template_key, members).items():
            if (form, word) not in paired:
                votes[(form, word)][operator] += 1
                sayers[(key, word)].append(template_key)


def _template_sayings(index: LibraryIndex, template_key: str, members: list[int]) -> dict[tuple, str]:
    """(key, form, word) -> the operator a template's paraphrases write for that word: each paraphrase
    that says one word governing comparisons of one form and one operator (its paraphrases share one
    SQL, so a word governs the same comparisons in each)."""
    first = index.entries[members[0]].template if template_key != UNANSWERABLE else None
    comparisons = _comparisons(first) if first is not None and first.usable else ()
    out: dict[tuple, str] = {}
    for i in members if comparisons else ():
        template = index.entries[i].template
        for key in KEYS:
            said = _said(template, key) if template is not None else None
            if said is None:
                continue
            governed = {(c.form, c.operator) for _, c in _governed([(None, c) for c in comparisons], said[3])}
            if len(governed) == 1:
                ((form, operator),) = governed
                out[(key, form, said[0])] = operator
    return out


def _pair(index: LibraryIndex, key_a: str, key_b: str, comps_a: tuple, comps_b: tuple) -> list[tuple]:
    """Two templates alike but for one comparison's operator: the form, the key the
    word is read under, and (word, operator) of each, from paraphrases of each that say the
    comparison with one word each and differ in no other operator word; else []."""
    if len(comps_a) != len(comps_b):
        return []
    differ = [i for i, (a, b) in enumerate(zip(comps_a, comps_b, strict=True)) if a != b]
    if len(differ) != 1:
        return []
    a, b = comps_a[differ[0]], comps_b[differ[0]]
    if a.form != b.form or a.literals != b.literals:
        return []
    for key in KEYS:
        words_a = _sayings(index, key_a, key, a, comps_a)
        for rest, word_b in _sayings(index, key_b, key, b, comps_b).items():
            word_a = words_a.get(rest)
            if word_a is not None and word_a != word_b:
                return [(a.form, key, (word_a, a.operator), (word_b, b.operator))]
    return []


def _sayings(
    index: LibraryIndex, template_key: str, key: str, comparison: Comparison, comparisons: tuple
) -> dict[tuple, str]:
    """A template's paraphrases' other operator words -> the word they say `comparison` with (under
    `key`), for paraphrases that say it once. Its paraphrases share one SQL shape, so the literal
    places of the first (`comparisons`) are each one's: no paraphrase's SQL is read again."""
    plain = [c for _, c in _governed([(None, c) for c in comparisons], None)]
    out: dict[tuple, str] = {}
    for i in index.members[template_key]:
        template = index.entries[i].template
        said = _said(template, key) if template is not None else None
        if said is None or not (plain == [comparison] if said[3] is None else said[3] <= comparison.literals):
            continue  # no word, or one that governs another comparison than the one that differs
        rest = tuple(sorted((k, v) for k, v in template.operators.items() if k != key and v))
        out.setdefault(rest, said[0])
    return out


# --- a template's comparisons ------------------------------------------------------------------------


def _shape(template: Template) -> tuple[str, tuple[Comparison, ...]]:
    slots = tuple(sorted(use.index for slot in template.slots for use in slot.uses))
    return _shape_of(template.sql_template, template.dialect, slots)


@functools.lru_cache(maxsize=16384)
def _shape_of(sql: str, dialect: str, slots: tuple[int, ...]) -> tuple[str, tuple[Comparison, ...]]:
    """The SQL with its slot values and comparison operators left out, and its comparisons in order:
    once per SQL (a calibration builds a library per fold from the same templates)."""
    try:
        tree = parsed_sql(sql, dialect).copy()  # changed below: a copy
    except (SqlglotError, ValueError, RecursionError):
        return "", ()
    found = _nodes(tree, dialect)
    literals = list(tree.find_all(exp.Literal))
    for i in slots:
        literals[i].replace(exp.var("slot"))
    for node, _ in found:
        node.replace(exp.func("CMP", node.this, node.expression))
    return tree.sql(dialect=dialect_named(dialect), copy=False), tuple(c for _, c in found)


def _comparisons(template: Template) -> tuple[Comparison, ...]:
    return _comparisons_of(template.sql_template, template.dialect)


@functools.lru_cache(maxsize=16384)
def _comparisons_of(sql: str, dialect: str) -> tuple[Comparison, ...]:
    try:
        return tuple(c for _, c in _nodes(parsed_sql(sql, dialect), dialect))
    except (SqlglotError, ValueError, RecursionError):
        return ()


def _nodes(tree: exp.Expr, dialect: str) -> list[tuple[exp.Expr, Comparison]]:
    """Every comparison of the tree (read only) with its form and the literal indices it compares."""
    index = {id(lit): i for i, lit in enumerate(tree.find_all(exp.Literal))}
    out = []
    for node in tree.find_all(*_CLASSES):
        form = " ? ".join(_operand(side, dialect) for side in (node.this, node.expression))
        own = node.find_ancestor(exp.Select)  # a subquery's values are its own comparisons'
        inside = frozenset(
            index[id(lit)] for lit in node.find_all(exp.Literal) if lit.find_ancestor(exp.Select) is own
        )
        out.append((node, Comparison(form, type(node).__name__, inside)))
    return out


def _operand(side: exp.Expr, dialect: str) -> str:
    """An operand with its columns and values masked; a subquery is one."""
    if isinstance(side, (exp.Subquery, exp.Select)):
        return "_q"

    def mask(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column):
            return exp.var("_c")
        # a value is masked, a format ('%m-%Y') kept: it says what is compared
        return exp.var("_v") if isinstance(node, exp.Literal) and "%" not in node.this else node

    return side.transform(mask).sql(dialect=dialect_named(dialect), copy=False)  # transform made it a copy


def _governed(found, literals: frozenset[int] | None) -> list:
    """The comparisons a word governs: those that compare its slot's literals (a time word, a comparison
    word next to a number), or else the one comparison of two subqueries when there is exactly one."""
    if literals is not None:
        return [(n, c) for n, c in found if c.literals & literals]
    plain = [(n, c) for n, c in found if c.form == "_q ? _q"]
    return plain if len(plain) == 1 else []


# --- the word ---------------------------------------------------------------------------------------


def _said(template: Template, key: str) -> tuple[str, int, int, frozenset[int] | None] | None:
    """How a paraphrase says the comparison under `key`: (its reading, where, the slot literals it
    governs: a time's or a number's next to the word, None for a comparison word of two subqueries),
    or None where it says none or more than one."""
    if key == "compare":
        found = _compare_word(template.question)
        if not found:
            return None
        numbers = [s for s in template.slots if s.type == NUMBER]
        k = _next_to(template.question, found[1], found[2], [(s.start, s.end) for s in numbers])
        return (*found, None if k is None else frozenset(u.index for u in numbers[k].uses))
    times = [s for s in template.slots if s.type in TIME_TYPES]
    if len(times) != 1:
        return None
    word = _time_word(template.question, times[0].start)
    return (*word, frozenset(u.index for u in times[0].uses)) if word else None


def _question_said(reading: Reading, key: str) -> tuple[str, str, bool] | None:
    """The question's reading of the new word, its own words for it, and whether a value of its own
    stands next to it (a threshold: "less than 99"), or None."""
    if key == "compare":
        found = _compare_word(reading.question)
        if not found:
            return None
        numbers = [(s.start, s.end) for s in reading.typed if s.type == NUMBER]
        near = _next_to(reading.question, found[1], found[2], numbers) is not None
        return found[0], reading.question[found[1] : found[2]], near
    times = [s for s in reading.typed if s.type in TIME_TYPES]
    word = _time_word(reading.question, times[0].start) if len(times) == 1 else None
    return (word[0], reading.question[word[1] : word[2]], True) if word else None


def _next_to(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> int | None:
    """The span right after the word ("less than 99") or right before it ("65 or more"), if one."""
    for k, (a, b) in enumerate(spans):
        if (a >= end and not text[end:a].strip()) or (b <= start and not text[b:start].strip()):
            return k
    return None


@functools.lru_cache(maxsize=16384)
def _compare_word(question: str) -> tuple[str, int, int] | None:
    """The one comparison word of a question that says one and no negation ("not greater than" is
    another question), with its reading and place (without the number "over 65" reads it by)."""
    text = question.lower()
    if re.search(r"\b(?:not|no|never|neither|nor)\b|n't\b", text) or len(_ANY_COMPARE.findall(text)) != 1:
        return None
    for name, pattern in _COMPARE_WORDS:
        m = pattern.search(text)
        if m:
            return name, m.start(), m.start() + len(m.group().rstrip("0123456789").rstrip())
    return None


def _time_word(question: str, start: int) -> tuple[str, int, int] | None:
    """The time word right before a time value ("since 05/2100", "prior to 2100"), read as
    operators.py reads it, with its place; None where another word stands there."""
    before = [t for t in tokenize(question[:start])][-2:]
    for n in (2, 1):
        if len(before) >= n:
            words = " ".join(t.lower for t in before[-n:])
            if words in _TIME_WORDS:
                return _TIME_WORDS[words], before[-n].start, before[-1].end
    return None
