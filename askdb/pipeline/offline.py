"""Answer without an LLM: match a question to approved templates, bind its values, score the match.

Design, in three decisions:
- Templates (askdb.pipeline.templates) turn an approved example into SQL with typed slots. A new
  question that is the example with other values reuses reviewer-approved SQL: reproducible, free,
  milliseconds. Named values are linked to real database values through a caller-supplied lookup
  (the value index), so "fenofibrate" binds only if the prescriptions table has it.
- Hard rules before any score. An embedding barely moves between "first" and "last", "in 2150" and
  "since 2150", "average" and "count", yet the answer changes completely, and a wrong answer is far
  worse than an abstention. So any of these forces confidence 0: an operator differs
  (templates.question_operators), a slot cannot be bound, the question holds a value the template
  cannot place, a named value has no database match good enough, an anchor word of the example is
  missing, the bound SQL does not validate.
- A calibrated confidence for what is left. A small logistic model over match features (embedding
  similarity, masked-text similarity, word overlap, extra/missing content words, fuzziness of value
  links) with hand-set default coefficients; `fit_calibration` refits it on held-out library
  questions (leave-one-out over approved examples and their paraphrases) and `choose_threshold` picks
  the lowest threshold whose precision stays at the target above it. Below the threshold: abstain.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import sqlglot
from rapidfuzz import fuzz
from sqlglot import exp

from askdb.pipeline import match_reasons as R
from askdb.pipeline.templates import (
    FUNCTION_WORDS,
    GUARD_FILLER,
    NEUTRAL_WORDS,
    VALUE,
    BindError,
    Slot,
    Span,
    Template,
    Token,
    answer_kind,
    apply_case,
    asks_for_name,
    asks_for_time,
    bind_sql,
    canonical,
    content_words,
    extract_typed_spans,
    interchangeable,
    question_operators,
    stem,
    tokenize,
)
from askdb.pipeline.types import CatalogSchema
from askdb.pipeline.validation import SqlValidationError, validate_sql

__all__ = [
    "DEFAULT_CALIBRATION",
    "DEFAULT_THRESHOLD",
    "MIN_VALUE_SCORE",
    "Binding",
    "Calibration",
    "MatchResult",
    "TemplateCandidate",
    "ValueLookup",
    "choose_threshold",
    "decide",
    "extract_values",
    "fit_calibration",
    "mask_question",
    "match",
    "question_operators",
    "refuse_ambiguous_values",
]

MIN_VALUE_SCORE = 0.7  # a named value linked below this score is no match at all
DEFAULT_THRESHOLD = 0.8  # answer at or above this confidence until a threshold is chosen on held-out data
MAX_CONFIDENCE = 0.9999  # a threshold of 1.0 therefore means "never answer"
_TEXT = "text"


class ValueLookup(Protocol):
    """Real database values of `table_column` ("mimiciv_hosp.prescriptions.drug") like `text`, best first.

    Scores are 0..1; an exact (case-insensitive) match should score 1.0 and a value that merely
    contains the text less. The caller implements it over the value index or the clinical database.
    """

    def __call__(self, table_column: str, text: str) -> list[tuple[str, float]]: ...


@dataclass(frozen=True)
class TemplateCandidate:
    example_id: int | None
    template: Template
    similarity: float | None = None  # embedding cosine similarity of the questions, from the caller
    question: str = ""  # the example's question (defaults to the template's)
    family: Family | None = None  # all paraphrases of its template (askdb.pipeline.library)


@dataclass(frozen=True)
class Family:
    """What all paraphrases of one template say, so one example's wording is not the only yardstick.

    `operators`: per operator key, every value the paraphrases use ("total" in one and "maximum" in
    another is the same SQL). `words`: every content-word stem the paraphrases use. `neutral`:
    words so common across the library's templates that they tell templates apart by nothing.
    """

    key: str
    operators: dict[str, frozenset]
    words: frozenset[str]
    neutral: frozenset[str] = frozenset()
    size: int = 1
    # Each paraphrase's operators together (less SOFT_OPERATORS): "highest mortality" and "lowest
    # survival" may be one SQL, but "highest survival" is neither paraphrase.
    signatures: frozenset = frozenset()
    # The content words of the paraphrases with each signature: "survival" said only where the
    # operator is "lowest" must not be read with "highest".
    signature_words: dict = field(default_factory=dict)
    # Words (nearly) every paraphrase says: the template's subject ("discharged", "specimen"). A
    # question that says none of one is about something else.
    core: frozenset[str] = frozenset()
    # Words the library's own paraphrases use for one another ("sex" for "gender"): mined across
    # templates (library.mine_synonyms), shared by every family of one library.
    synonyms: dict = field(default_factory=dict)
    # Each paraphrase's content words less library wording, and its operator words (ops_key): how far
    # the question is from the nearest one ("what was the admission type …" says none of "age"/"old",
    # whichever paraphrase one takes; "how is X taken?" is neither "how much is X?" nor "the cost of X").
    paraphrases: tuple[tuple[frozenset[str], tuple], ...] = ()
    # Library wording (in `neutral`) that is the subject of some template ("age", "route"): it must be
    # said by this template's paraphrases to be explained.
    subjects: frozenset[str] = frozenset()

    def says(self, word: str) -> bool:
        """Whether some paraphrase says `word` or a word the library uses in its place."""
        return word in self.words or bool(self.synonyms.get(word, frozenset()) & self.words)


SOFT_OPERATORS = ("aggregate",)  # "maximum total cost" and "maximum cost": judged key by key only


def operator_signature(ops: dict[str, Any]) -> tuple:
    return tuple(sorted((k, v) for k, v in ops.items() if k not in SOFT_OPERATORS))


class ValueFinder(Protocol):
    """Database values of linkable columns that a question contains, longest first (see library.ValueIndex)."""

    def contained(self, question: str, column: str) -> list[tuple[int, int, str]]: ...
    def spans(self, question: str) -> list[tuple[int, int]]: ...
    def covers(self, column: str) -> bool: ...


@dataclass(frozen=True)
class Binding:
    slot: str
    type: str
    old: str  # the example's text for the slot
    new: str  # the new question's text for it
    value: str  # what is bound: the database value for names, the normalised id/number/year/date
    score: float = 1.0  # how well `new` matched a database value (1.0 for typed values)
    fuzzy: bool = False  # the database value is not the question's text: show it to the user
    column: str = ""


@dataclass(frozen=True)
class MatchResult:
    example_id: int | None
    example_question: str
    sql: str | None  # the bound SQL, None when it could not be bound
    bindings: tuple[Binding, ...]
    features: dict[str, float]
    confidence: float
    reasons: tuple[str, ...] = ()  # why the confidence was forced to 0 (hard rules), plain sentences
    reason_codes: tuple[str, ...] = ()  # the same, as match_reasons codes (one per reason)
    masked_question: str = ""  # the new question with its bound spans masked

    @property
    def hard_ok(self) -> bool:
        return bool(self.features.get("hard_ok"))

    def answers(self, threshold: float) -> bool:
        return self.hard_ok and self.sql is not None and self.confidence >= threshold


# --- values in a new question --------------------------------------------------------------------


def extract_values(question: str, template: Template | None = None) -> list[Span]:
    """Typed value spans of a question (ids, numbers, years, dates, genders, quoted names), in order.

    With a template, also the runs of content words that are not the template's fixed words
    (type "text"): the candidates for its named-value slots.
    """
    spans = extract_typed_spans(question)
    quoted = _quoted(question, spans)
    spans += quoted
    if template is not None:
        spans += _leftover_runs(question, tokenize(question), spans, template)
    return sorted(spans, key=lambda s: (s.start, s.end))


def mask_question(question: str, values: ValueFinder | None = None) -> str:
    """The question with ids, numbers, dates and genders replaced by `{type}`, named values by `{value}`.

    Embedding masked questions keeps "patient 10004235" and "patient 10006580", or "aspirin" and
    "heparin", equally close to an example, which is what template retrieval wants.
    """
    pieces = [(s.start, s.end, f"{{{s.type}}}") for s in question_typed_spans(question, values)]
    if values is not None:
        pieces += [(a, b, "{value}") for a, b in values.spans(question)]
    out, cursor = [], 0
    for start, end, placeholder in sorted(pieces):
        if start < cursor:
            continue
        out.append(question[cursor:start])
        out.append(placeholder)
        cursor = end
    out.append(question[cursor:])
    return "".join(out)


def _quoted(question: str, typed: list[Span]) -> list[Span]:
    out = []
    for m in re.finditer(r"(?<![A-Za-z0-9])(['\"])([^'\"]{2,120})\1(?![A-Za-z0-9])", question):
        start, end = m.start(2), m.end(2)
        if not any(s.start < end and start < s.end for s in typed):
            out.append(Span(_TEXT, m.group(2), start, end, m.group(2)))
    return out


def _token_status(token: Token, fixed: set[str]) -> str:
    if token.lower in NEUTRAL_WORDS:
        return "neutral"
    s = stem(token.text)
    if s in fixed or (len(s) >= 5 and any(fuzz.ratio(s, f) >= 90 for f in fixed if len(f) >= 5)):
        return "fixed"
    return "content"


def _leftover_runs(
    question: str,
    tokens: list[Token],
    spans: list[Span],
    template: Template,
    fixed_words: frozenset[str] | None = None,
) -> list[Span]:
    """Runs of content words that are neither the template's fixed words nor typed values."""
    fixed = set(fixed_words) if fixed_words is not None else set(content_words(template.masked_question))
    taken = [(s.start, s.end) for s in spans]
    runs: list[list[Token]] = [[]]
    for token in tokens:
        inside = any(a <= token.start and token.end <= b for a, b in taken)
        status = "typed" if inside else _token_status(token, fixed)
        current = runs[-1]
        gap = question[current[-1].end : token.start] if current else ""
        if status == "content" and not re.search(r"[,;?!()]", gap):
            current.append(token)
        elif status == "content":
            runs.append([token])
        elif (
            status == "neutral"
            and token.lower in FUNCTION_WORDS
            and current
            and not re.search(r"[,;?!()]", gap)
        ):
            current.append(token)  # may join "disorders of lipoid metabolism"; trimmed below
        else:
            runs.append([])
    out = []
    for run in runs:
        while run and run[-1].lower in NEUTRAL_WORDS:
            run.pop()
        if run:
            text = question[run[0].start : run[-1].end]
            out.append(Span(_TEXT, text, run[0].start, run[-1].end, text))
    return out


# --- matching ------------------------------------------------------------------------------------


def match(
    question: str,
    candidates: Sequence[TemplateCandidate],
    *,
    lookup: ValueLookup,
    catalog: CatalogSchema | None = None,
    calibration: Calibration | None = None,
    min_value_score: float = MIN_VALUE_SCORE,
    values: ValueFinder | None = None,
) -> list[MatchResult]:
    """Every candidate scored for `question`, best first (clean bindings before the rest).

    The caller shortlists candidates (embedding search over example questions or `mask_question`
    texts) and executes the winner read-only. With a `catalog`, bound SQL is also validated.
    """
    calibration = calibration or DEFAULT_CALIBRATION
    ops, typed, quoted, cached_lookup = question_context(question, lookup, values)
    results = refuse_ambiguous_values(
        [
            _match_one(
                question, ops, typed, quoted, c, cached_lookup, catalog, calibration, min_value_score, values
            )
            for c in candidates
        ]
    )
    results.sort(
        key=lambda r: (
            -int(r.hard_ok),
            -int(bool(r.features.get("all_slots_bound"))),
            -r.confidence,
            -r.features.get("similarity", 0.0),
        )
    )
    return results


def question_context(
    question: str, lookup: ValueLookup, values: ValueFinder | None = None, *, operator_text: str | None = None
) -> tuple[dict[str, Any], list[Span], list[Span], ValueLookup]:
    """What every candidate of one question is matched against, computed once per question: its
    operator words (read from `operator_text` when the caller blanked its values first), its typed
    and quoted spans, and a value lookup that asks the database once per (column, text)."""
    ops = question_operators(question if operator_text is None else operator_text)
    typed = question_typed_spans(question, values)
    quoted = _quoted(question, typed)
    cache: dict[tuple[str, str], list[tuple[str, float]]] = {}

    def cached_lookup(column: str, text: str) -> list[tuple[str, float]]:
        key = (column, text.lower())
        if key not in cache:
            cache[key] = list(lookup(column, text) or [])
        return cache[key]

    return ops, typed, quoted, cached_lookup


def question_typed_spans(question: str, values: ValueFinder | None = None) -> list[Span]:
    """Typed spans of a question, less those inside a database value it names ("nacl 0.9%")."""
    typed = extract_typed_spans(question)
    if values is None:
        return typed
    named = values.spans(question)
    return [s for s in typed if not any(a <= s.start and s.end <= b for a, b in named)]


def decide(results: Sequence[MatchResult], threshold: float) -> tuple[MatchResult | None, list[MatchResult]]:
    """The result to answer with (or None to abstain) and the other confident results.

    Two confident templates that bind to different SQL may still mean the same thing; the caller can
    execute the competitors and compare results (askdb.pipeline.compare.results_match) and abstain
    when they disagree.
    """
    confident = [r for r in results if r.answers(threshold)]
    if not confident:
        return None, []
    best = confident[0]
    return best, [r for r in confident[1:] if r.sql != best.sql]


def refuse_ambiguous_values(results: Sequence[MatchResult]) -> list[MatchResult]:
    """Results that bind one of the question's words to a value of another column than a competitor does
    are refused, both of them: "anion gap" is a lab item and a chart item, and a question that does not
    say which is not answered. A template whose paraphrases say which ("lab", "chart") refuses the other
    one's reading through the meaning guard, so only the readings the question leaves open remain here.
    """
    columns: dict[str, set[str]] = {}
    for r in results:
        if r.hard_ok:
            for b in r.bindings:
                if b.type == VALUE:
                    columns.setdefault(b.new.lower(), set()).add(b.column)
    open_words = {w: sorted(c) for w, c in columns.items() if len(c) > 1}
    if not open_words:
        return list(results)
    out = []
    for r in results:
        word = next((b.new for b in r.bindings if b.type == VALUE and b.new.lower() in open_words), None)
        if not r.hard_ok or word is None:
            out.append(r)
            continue
        where = " and ".join(f"a {_column_words(c)} in {c.split('.')[0]}" for c in open_words[word.lower()])
        text = f"'{word}' is {where}, and this question does not say which one it means."
        out.append(
            dataclasses.replace(
                r,
                sql=None,
                confidence=0.0,
                features={**r.features, "hard_ok": 0.0},
                reasons=(*r.reasons, text),
                reason_codes=(*r.reason_codes, R.VALUE_AMBIGUOUS),
            )
        )
    return out


@dataclass
class _Work:
    reasons: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    bindings: dict[str, Binding] = field(default_factory=dict)
    placed: dict[str, Span] = field(default_factory=dict)  # slot name -> the new question's span
    unplaced: list[Span] = field(default_factory=list)
    # Slots of one type whose values the question's wording does not place, bound in the question's
    # order with the text to refuse with: they answer only if every other order gives the same result.
    unordered: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def refuse(self, code: str, text: str) -> None:
        self.codes.append(code)
        self.reasons.append(text)


def _match_one(
    question: str,
    ops: dict[str, Any],
    typed: list[Span],
    quoted: list[Span],
    candidate: TemplateCandidate,
    lookup: ValueLookup,
    catalog: CatalogSchema | None,
    calibration: Calibration,
    min_value_score: float,
    values: ValueFinder | None = None,
    probe: Callable[[str], bool] | None = None,
) -> MatchResult:
    template = candidate.template
    family = candidate.family
    work = _Work()
    example_question = candidate.question or template.question
    if not template.usable:
        work.refuse(
            R.NOT_USABLE,
            f"The verified question's SQL cannot be reused with other values ({template.error or 'no SQL'}).",
        )
        return _result(candidate, example_question, None, work, {}, 0.0, question)
    for reason in operator_reasons(ops, template, family):
        work.refuse(reason.code, reason.text)
    if not work.reasons and asks_for_name(question) and (kind := answer_kind(template)) != "column":
        work.refuse(
            R.ASKS_NAME,
            f"This question asks for a name, the verified question returns {_KIND_WORDS.get(kind, kind)}.",
        )
    if not work.reasons and asks_for_time(question) and (kind := answer_kind(template)) != "time":
        work.refuse(
            R.ASKS_TIME,
            f"This question asks for a time, the verified question returns {_KIND_WORDS.get(kind, kind)}.",
        )
    if work.reasons:  # no lookups for a template that cannot apply
        return _result(candidate, example_question, None, work, {"operators_agree": 0.0}, 0.0, question)
    lowered = question.lower()
    for anchor in template.anchors:
        if not _contains_words(lowered, anchor.lower()):
            work.refuse(
                R.ANCHOR, f"The verified question is about '{anchor}', which this question does not mention."
            )
    free = list(typed)
    for fixed in template.fixed_values:
        hit = next((s for s in free if s.text == fixed), None)
        if hit is None:
            work.refuse(
                R.FIXED_VALUE,
                f"The verified question always uses '{fixed}', which this question does not say.",
            )
        else:
            free.remove(hit)
    _assign_typed(template, question, free, work)
    fixed = (
        family.words | {w for w, same in family.synonyms.items() if same & family.words} if family else None
    )
    if values is not None:
        _assign_contained(template, question, typed, values, work)
    taken = typed + quoted + list(work.placed.values())
    runs = _leftover_runs(question, tokenize(question), taken, template, fixed)
    # A column whose every value is indexed needs no fuzzy lookup: the value is in the question or not.
    covered = {
        s.name for s in template.slots if values is not None and s.type == VALUE and values.covers(s.column)
    }
    _assign_values(template, quoted + runs, lookup, min_value_score, work, skip=covered)
    if family is not None and not work.reasons and len(family.signature_words) > 1:
        contrary = _contrary_words(_question_words(question, typed, work), ops, family)
        if contrary:
            work.refuse(
                R.CONTRARY_WORDS,
                f"The verified question says {R.quoted(contrary)} only with the opposite operator words "
                "(such as highest instead of lowest), not with this question's.",
            )
    # Said outside the question's values: "diagnostic" inside a procedure's name does not say
    # "diagnoses", the subject of a template about diagnoses.
    said = set(_question_words(question, typed, work)) | _bound_column_words(work)
    if family is not None and not work.reasons and family.core:
        missing = sorted(
            w
            for w in family.core
            if not any(_same_stem(w, x) or x in family.synonyms.get(w, ()) for x in said)
        )
        if missing:
            work.refuse(
                R.WORDS_MISSING,
                f"The verified question also requires {R.quoted(missing)}, which this question does not say.",
            )
    if family is not None and not work.reasons:
        unexplained = _unexplained(question, typed, work, family)
        if unexplained:
            work.refuse(
                R.WORDS_UNEXPLAINED,
                f"This question also says {R.quoted(unexplained)}, which no wording of the verified question "
                "says: answering with it would drop that condition.",
            )
    sql = None
    if not work.reasons:
        sql = _bind_and_check(template, work, catalog)
    if sql is not None and work.unordered:
        for names, text in work.unordered:
            if probe is None or not _order_is_free(template, work, names, probe):
                work.refuse(R.VALUE_PLACEMENT, text)
                sql = None
                break
    if sql is not None and probe is not None:
        for check in value_probes(template, sql):
            if not probe(check):
                work.refuse(
                    R.VALUE_NOT_TOGETHER,
                    "This question's values never occur together with the verified question's other "
                    "conditions in the database.",
                )
                sql = None
                break
    features = _features(question, candidate, template, work, runs, quoted)
    if family is not None:
        features["paraphrase_missing"] = float(paraphrase_missing(said, family, ops))
    confidence = 0.0 if work.reasons else calibration.predict(features)
    return _result(candidate, example_question, sql, work, features, confidence, question)


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


def _contrary_words(words: list[str], ops: dict[str, Any], family: Family) -> list[str]:
    """Words of the question that the family's paraphrases say only with opposite operator words."""
    mine = operator_signature(ops)
    own = frozenset().union(*(w for sig, w in family.signature_words.items() if not opposite(sig, mine)))
    return [w for w in words if w in family.words - own]


def operator_reasons(ops: dict[str, Any], template: Template, family: Family | None) -> list[R.Reason]:
    """Why the question's operator words are not the template's (judged across its paraphrases)."""
    reasons = []
    for key in sorted(set(ops) | set(template.operators)):
        allowed = family.operators.get(key, frozenset()) if family else {template.operators.get(key)}
        if ops.get(key) not in allowed:
            reasons.append(R.operator_differs(key, ops.get(key), allowed))
    if (
        family is not None
        and family.signatures
        and not reasons
        and operator_signature(ops) not in family.signatures
    ):
        reasons.append(
            R.Reason(
                R.OPERATOR_COMBINATION,
                "This question combines words such as first, highest, count or 'since' "
                "in a way no wording of the verified question does.",
            )
        )
    return reasons


def _result(candidate, example_question, sql, work, features, confidence, question) -> MatchResult:
    hard_ok = not work.reasons
    features = {"hard_ok": float(hard_ok), **features}
    bindings = tuple(work.bindings[s.name] for s in candidate.template.slots if s.name in work.bindings)
    return MatchResult(
        example_id=candidate.example_id,
        example_question=example_question,
        sql=sql if hard_ok else None,
        bindings=bindings,
        features=features,
        confidence=round(confidence, 4) if hard_ok else 0.0,
        reasons=tuple(work.reasons),
        reason_codes=tuple(work.codes),
        masked_question=_masked(question, candidate.template, work),
    )


def _contains_words(text: str, words: str) -> bool:
    pattern = r"(?<![a-z0-9])" + re.escape(words.strip()).replace(r"\ ", r"\s+") + r"(?![a-z0-9])"
    return re.search(pattern, text) is not None


def _assign_typed(template: Template, question: str, spans: list[Span], work: _Work) -> None:
    """Ids, numbers, years, dates and genders to slots of the same type, in order (checked by context)."""
    for slot_type in sorted({s.type for s in spans} | {s.type for s in template.slots if s.type != VALUE}):
        slots = [s for s in template.slots if s.type == slot_type]
        found = [s for s in spans if s.type == slot_type]
        if len(found) > len(slots):
            extra = found[len(slots) :] if slots else found
            work.unplaced += extra
            work.refuse(
                R.EXTRA_VALUE,
                f"This question gives {_describe(slot_type, len(found))}, the verified question has "
                f"{'room for ' + str(len(slots)) if slots else 'no room for ' + ('it' if len(found) == 1 else 'them')}.",
            )
            continue
        if len(found) < len(slots):
            missing = ", ".join(s.name for s in slots[len(found) :])
            work.refuse(
                R.VALUE_MISSING, f"This question gives no value for the verified question's {missing}."
            )
            continue
        order = _ordering(template, question, slots, found)
        if order is None:
            order = list(found)
            work.unordered.append(
                (
                    tuple(s.name for s in slots),
                    f"askdb cannot tell which {_describe(slot_type, 2)[2:]} of this question goes where in the verified question.",
                )
            )
        for slot, span in zip(slots, order, strict=True):
            work.bindings[slot.name] = Binding(
                slot.name, slot.type, slot.text, span.text, span.value, 1.0, False, slot.column
            )
            work.placed[slot.name] = span


_KIND_WORDS = {"column": "a name", "time": "a time", "number": "a number", "other": "something else"}


def _column_words(column: str) -> str:
    """'prescriptions.drug' -> 'drug' (the column a value belongs to, as a researcher names it)."""
    return column.rsplit(".", 1)[-1].replace("_", " ")


def _describe(slot_type: str, n: int) -> str:
    name = slot_type.replace("_", " ")
    return f"{n} {name}{'s' if n > 1 else ''}" if n > 1 else f"a {name}"


def _ordering(template: Template, question: str, slots: list[Slot], spans: list[Span]) -> list[Span] | None:
    """Spans in slot order. Several slots of one type must agree with the words before each value,
    else with their units, else with the words next to each value."""
    if len(slots) == 1:
        return spans
    wanted = [_next_words(template.question, s.start, s.end)[0] for s in slots]
    for perm in itertools.permutations(spans):
        if [_next_words(question, s.start, s.end)[0] for s in perm] == wanted:
            return list(perm)
    if interchangeable(template, tuple(s.name for s in slots)):
        return list(spans)  # "a, b, or c": one IN list, any order means the same
    return _by_unit(question, slots, spans) or _by_context(template, question, slots, spans)


MAX_UNORDERED = 3  # values of one type whose every order is tried (3! = 6 queries at most)


def _order_is_free(
    template: Template, work: _Work, names: tuple[str, ...], probe: Callable[[str], bool]
) -> bool:
    """Whether every other order of these slots' values gives the same result on the source.

    "X and Y at the same time": the question does not say which drug is the template's first, and it
    need not, when both orders answer alike. Tried on the database (a probe that returns a row only
    when the results are equal), so an asymmetric SQL ("X within 2 months after Y") is refused, and a
    probe that fails refuses too.
    """
    if len(names) > MAX_UNORDERED:
        return False
    bound = [work.bindings[n].value for n in names]
    values = {n: b.value for n, b in work.bindings.items()}
    for perm in itertools.permutations(bound):
        if list(perm) == bound:
            continue
        try:
            other = bind_sql(template, values | dict(zip(names, perm, strict=True)))
        except BindError:
            return False
        if not probe(same_result_probe(bind_sql(template, values), other, template.dialect)):
            return False
    return True


def same_result_probe(a: str, b: str, dialect: str) -> str:
    """A query that returns a row only when queries `a` and `b` return the same rows (as sets, and
    as many of them)."""
    x, y = (sqlglot.parse_one(q, read=dialect) for q in (a, b))

    def rows(q: exp.Expr, alias: str) -> exp.Select:
        return exp.select("*").from_(q.copy().subquery(alias))

    def none_but(p: exp.Expr, q: exp.Expr) -> exp.Expr:
        return exp.not_(exp.Exists(this=exp.except_(rows(p, "a"), rows(q, "b"))))

    def count(q: exp.Expr, alias: str) -> exp.Expr:
        return exp.select(exp.Count(this=exp.Star())).from_(q.copy().subquery(alias)).subquery()

    same = exp.and_(none_but(x, y), none_but(y, x), exp.EQ(this=count(x, "a"), expression=count(y, "b")))
    return exp.select(exp.Literal.number(1)).where(same).sql(dialect=dialect)


def _next_words(text: str, start: int, end: int) -> tuple[str, str]:
    """The words just before and just after a span (articles skipped), "" at either end."""
    before = [t.lower for t in tokenize(text[:start]) if t.lower not in ("the", "a", "an")]
    after = [t.lower for t in tokenize(text[end:]) if t.lower not in ("the", "a", "an")]
    return (before[-1] if before else ""), (after[0] if after else "")


def _by_context(template: Template, question: str, slots: list[Slot], spans: list[Span]) -> list[Span] | None:
    """Values placed by a word next to them: "the top three diagnoses of patients aged 60 or above"
    puts three where the example has "top five" (the word before) and 60 where it has "age of 50 or
    above" (the word after). None unless exactly one placement gives every value such a word."""
    wanted = [_next_words(template.question, s.start, s.end) for s in slots]
    mine = {id(s): _next_words(question, s.start, s.end) for s in spans}
    fits = [
        list(p)
        for p in itertools.permutations(spans)
        if all(
            any(x and x == y for x, y in zip(mine[id(s)], w, strict=True))
            for s, w in zip(p, wanted, strict=True)
        )
    ]
    return fits[0] if len(fits) == 1 else None


def _by_unit(question: str, slots: list[Slot], spans: list[Span]) -> list[Span] | None:
    """Numbers placed by their unit: "the top three … within 2 months" puts 2 where the SQL says
    ' month' and three where it says no unit. None unless that places every number one way only."""

    def unit_after(span: Span) -> str:
        m = re.match(r"\s*-?\s*(year|month|week|day|hour|minute)s?\b", question[span.end :].lower())
        return m.group(1) if m else ""

    def unit_of(slot: Slot) -> str:
        m = re.search(r"(year|month|week|day|hour|minute)s?\b", " ".join(u.suffix for u in slot.uses).lower())
        return m.group(1) if m else ""

    wanted = [unit_of(s) for s in slots]
    fits = [list(p) for p in itertools.permutations(spans) if [unit_after(x) for x in p] == wanted]
    return fits[0] if len(fits) == 1 else None


def _assign_values(
    template: Template,
    runs: list[Span],
    lookup: ValueLookup,
    min_value_score: float,
    work: _Work,
    skip: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:
    """Named-value slots to runs of the question, each linked to a real database value."""
    free = list(runs)
    for slot in (s for s in template.slots if s.type == VALUE and s.name not in work.bindings):
        if slot.name in skip:
            work.refuse(
                R.VALUE_NOT_FOUND,
                f"This question names no {_column_words(slot.column)} that is in the database.",
            )
            continue
        best: tuple[float, Span, str, str] | None = None  # score, span used, db value, bound value
        closest: tuple[float, str, str] | None = None
        for run in free:
            for piece in _pieces(run):
                linked = _link(slot, piece.text, lookup)
                if linked is None:
                    continue
                score, db_value, bound = linked
                if closest is None or score > closest[0]:
                    closest = (score, piece.text, db_value)
                if score >= min_value_score and (best is None or score > best[0]):
                    best = (score, piece, db_value, bound)
            if best is not None and best[0] >= 0.999:
                break
        if best is None:
            if closest is not None:
                work.refuse(
                    R.VALUE_NOT_FOUND,
                    f"No {_column_words(slot.column)} in the database is close enough to '{closest[1]}' "
                    f"(the closest is '{closest[2]}').",
                )
            elif free:
                texts = ", ".join(repr(r.text) for r in free)
                work.refuse(
                    R.VALUE_NOT_FOUND, f"No {_column_words(slot.column)} in the database matches {texts}."
                )
            else:
                work.refuse(
                    R.VALUE_MISSING,
                    f"This question names no {_column_words(slot.column)}, which the verified question needs.",
                )
            continue
        score, piece, db_value, bound = best
        fuzzy = _norm(db_value) != _norm(piece.text)
        work.bindings[slot.name] = Binding(
            slot.name, VALUE, slot.text, piece.text, bound, round(score, 4), fuzzy, slot.column
        )
        work.placed[slot.name] = piece
        run = next(r for r in free if r.start <= piece.start and piece.end <= r.end)
        free.remove(run)
        # What is left of the run around the value stays a candidate for the next slot (or is extra).
        for start, end in ((run.start, piece.start), (piece.end, run.end)):
            rest = run.text[start - run.start : end - run.start].strip(" ,")
            if re.search(r"[A-Za-z]", rest):
                offset = run.text.index(rest, start - run.start) + run.start
                free.append(Span(_TEXT, rest, offset, offset + len(rest), rest))


def _assign_contained(
    template: Template, question: str, typed: list[Span], values: ValueFinder, work: _Work
) -> None:
    """Named-value slots to the longest database value of their column the question contains.

    "docusate sodium (liquid)" is a drug of its own, not "docusate sodium" plus a word: the longest
    contained value wins. The example's own wording of its value counts as one more candidate
    ("weight" for 'daily weight'), so approved mappings keep working.
    """
    taken = [(s.start, s.end) for s in typed] + [(p.start, p.end) for p in work.placed.values()]
    by_column: dict[str, list[Slot]] = {}
    for slot in (s for s in template.slots if s.type == VALUE):
        by_column.setdefault(bare_column(slot.column), []).append(slot)
    for slots in (v for v in by_column.values() if len(v) > 1):
        # Several values of one column ("X … after Y"): the longest named values, placed as the
        # example places them (by the word before each); unclear placement refuses.
        chosen: list[tuple[int, int, str]] = []
        for a, b, v in sorted(values.contained(question, slots[0].column), key=lambda f: f[0] - f[1]):
            if not _overlaps(a, b, taken + [(x, y) for x, y, _ in chosen]):
                chosen.append((a, b, v))
        if len(chosen) != len(slots):
            continue  # left to the one-by-one linking below, which reports what is missing
        spans = [Span(_TEXT, question[a:b], a, b, v) for a, b, v in sorted(chosen)]
        order = _ordering(template, question, slots, spans)
        if order is None:
            order = list(spans)
            work.unordered.append(
                (
                    tuple(s.name for s in slots),
                    f"askdb cannot tell which {_column_words(slots[0].column)} of this question goes where in the verified question.",
                )
            )
        for slot, span in zip(slots, order, strict=True):
            bound = span.value
            if slot.uses and all(u.like for u in slot.uses):
                bound = apply_case(span.text.strip(), slot.uses[0].case)
            work.bindings[slot.name] = Binding(
                slot.name, VALUE, slot.text, span.text, bound, 1.0, False, slot.column
            )
            work.placed[slot.name] = span
            taken.append((span.start, span.end))
    for slot in (s for s in template.slots if s.type == VALUE and s.name not in work.bindings):
        found = [
            (a, b, v) for a, b, v in values.contained(question, slot.column) if not _overlaps(a, b, taken)
        ]
        own = slot.text.strip()
        if own:
            pattern = r"(?<![A-Za-z0-9])" + re.escape(own).replace(r"\ ", r"\s+") + r"(?![A-Za-z0-9])"
            for m in re.finditer(pattern, question, flags=re.I):
                if not _overlaps(m.start(), m.end(), taken):
                    found.append((m.start(), m.end(), slot.value))
        if not found:
            continue
        # The longest value, unless a shorter one leaves the words around it as the example has them
        # around its value: "total tf residual output" is 'tf residual' where the example says
        # "total {value} output", though 'tf residual output' is a label too.
        start, end, value = max(
            found,
            key=lambda f: (
                _context_agrees(question, f[0], f[1], template, slot),
                f[1] - f[0],
                f[2] == slot.value,
            ),
        )
        text = question[start:end]
        bound = value
        if slot.uses and all(u.like for u in slot.uses):
            bound = apply_case(text.strip(), slot.uses[0].case)
        work.bindings[slot.name] = Binding(slot.name, VALUE, slot.text, text, bound, 1.0, False, slot.column)
        work.placed[slot.name] = Span(_TEXT, text, start, end, text)
        taken.append((start, end))


def _context_agrees(question: str, start: int, end: int, template: Template, slot: Slot) -> int:
    """How many of the words just before and just after a value are those around the example's value."""

    def around(text: str, a: int, b: int) -> tuple[str, str]:
        before = [t.lower for t in tokenize(text[:a])]
        after = [t.lower for t in tokenize(text[b:])]
        return (before[-1] if before else ""), (after[0] if after else "")

    mine, theirs = around(question, start, end), around(template.question, slot.start, slot.end)
    return sum(1 for x, y in zip(mine, theirs, strict=True) if x and x == y)


def _overlaps(start: int, end: int, ranges: list[tuple[int, int]]) -> bool:
    return any(start < b and a < end for a, b in ranges)


def bare_column(column: str) -> str:
    """ "mimiciv_hosp.d_items.label" and "d_items.label" are the same column for value linking."""
    return ".".join(column.lower().split(".")[-2:])


def _bound_column_words(work: _Work) -> set[str]:
    """Words a bound value says by what it is: "via po" says route (prescriptions.route), a diagnosis
    title says diagnosis (d_icd_diagnoses.long_title). The table and column names of named values."""
    words = set()
    for b in work.bindings.values():
        if b.type == VALUE and b.column:
            for part in re.split(r"[._]", ".".join(b.column.split(".")[-2:])):
                if len(part) >= 3:
                    words.add(canonical(stem(part)))
    return words


def _same_stem(a: str, b: str) -> bool:
    """ "admitt" and "admission", "discharg" and "discharged": the same word for the guard."""
    if a == b:
        return True
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n >= 4 and n >= 0.6 * min(len(a), len(b))


def ops_key(ops: dict[str, Any]) -> tuple:
    """A question's operator words as one comparable value (all keys, soft ones too)."""
    return tuple(sorted((k, v) for k, v in ops.items() if v))


def paraphrase_missing(said: set[str], family: Family, ops: dict[str, Any] | None = None) -> int:
    """How many content words the paraphrase nearest to the question says and the question does not,
    plus one when its operator words are not the question's (`ops`).

    Zero when some paraphrase says nothing the question leaves out; a question of a sibling template
    ("the admission type" for "how old … at admission") leaves out a word of every paraphrase, even
    when no single word is in all of them (the template's `core`).
    """
    mine = ops_key(ops) if ops is not None else None
    known: dict[str, bool] = {}  # paraphrases share most words: each is judged once

    def is_said(w: str) -> bool:
        if w not in known:
            known[w] = (
                w in said
                or w in family.neutral
                or any(_same_stem(w, x) or x in family.synonyms.get(w, ()) for x in said)
            )
        return known[w]

    best = None
    for words, theirs in family.paraphrases:
        n = sum(1 for w in words if not is_said(w)) + int(mine is not None and theirs != mine)
        best = n if best is None else min(best, n)
        if best == 0:
            break
    return best or 0


def _question_words(question: str, typed: list[Span], work: _Work) -> list[str]:
    """Stems of the question's content words outside its values."""
    taken = [(s.start, s.end) for s in typed] + [(p.start, p.end) for p in work.placed.values()]
    return [
        canonical(stem(t.text))
        for t in tokenize(question)
        if not _overlaps(t.start, t.end, taken)
        and t.lower not in NEUTRAL_WORDS
        and not _NUMERIC.fullmatch(t.text)
    ]


def _unexplained(question: str, typed: list[Span], work: _Work, family: Family) -> list[str]:
    """Content words of the question that no paraphrase, bound value or common word accounts for."""
    taken = [(s.start, s.end) for s in typed] + [(p.start, p.end) for p in work.placed.values()]
    named = _bound_column_words(work)  # "the drug vancomycin": a drug value says "drug"
    out = []
    for token in tokenize(question):
        if _overlaps(token.start, token.end, taken) or token.lower in NEUTRAL_WORDS:
            continue
        if _NUMERIC.fullmatch(token.text):
            continue
        word = canonical(stem(token.text))
        if (
            family.says(word)
            or (word in family.neutral and word not in family.subjects)
            or word in GUARD_FILLER
        ):
            continue
        if any(_same_stem(word, w) for w in named):
            continue
        if len(word) >= 5 and any(fuzz.ratio(word, w) >= 90 for w in family.words if len(w) >= 5):
            continue
        out.append(token.text)
    return out


_NUMERIC = re.compile(r"[\d.,:/-]+%?")


def value_probes(template: Template, sql: str) -> list[str]:
    """Queries that must return a row for the bound named values to make sense.

    A value is linked to its column alone, but the SQL may also filter its table with fixed
    categorical conditions: 'foley' is a d_items label, yet not one with linksto = 'inputevents'.
    For each named-value literal, its own condition and the fixed conditions on the same table in
    the same WHERE (no subqueries) become `SELECT 1 FROM table WHERE … LIMIT 1`; none when the value
    is the only condition. Conditions that hold other slots' values (a patient, a second drug) or
    compute anything (a time window, "last year") are left out: that the patient got no such drug
    last year is an answer ("no", 0), not a sign that the value was misread.
    """
    tree = sqlglot.parse_one(sql, dialect=template.dialect)
    literals = list(tree.find_all(exp.Literal))
    slot_literals = {id(literals[u.index]) for s in template.slots for u in s.uses if u.index < len(literals)}
    out: list[str] = []
    for slot in (s for s in template.slots if s.type == VALUE):
        for use in slot.uses:
            if use.index >= len(literals):
                continue
            literal = literals[use.index]
            select = literal.find_ancestor(exp.Select)
            source = select.args.get("from_") or select.args.get("from") if select is not None else None
            where = select.args.get("where") if select is not None else None
            if (
                source is None
                or where is None
                or select.args.get("joins")
                or not isinstance(source.this, exp.Table)
            ):
                continue
            table = source.this
            names = {table.name.lower(), table.alias_or_name.lower(), ""}
            conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
            own = {id(c) for c in conjuncts if any(x is literal for x in c.find_all(exp.Literal))}
            kept = [
                c
                for c in conjuncts
                if id(c) in own
                or (
                    all(isinstance(n, _CATEGORICAL) for n in c.walk())
                    and not any(id(x) in slot_literals for x in c.find_all(exp.Literal))
                )
            ]
            kept = [
                c
                for c in kept
                if not c.find(exp.Select)
                and all(col.table.lower() in names for col in c.find_all(exp.Column))
                and any(True for _ in c.find_all(exp.Column))
            ]
            if len(kept) < 2 or not any(id(c) in own for c in kept):
                continue
            probe = (
                exp.select(exp.Literal.number(1))
                .from_(table.copy())
                .where(exp.and_(*[c.copy() for c in kept]))
            )
            out.append(probe.limit(1).sql(dialect=template.dialect))
    return list(dict.fromkeys(out))


# What a fixed categorical condition is made of (`linksto = 'inputevents'`, `x IN ('a', 'b')`): no
# functions, no ranges, no clock.
_CATEGORICAL = (
    exp.Column, exp.Identifier, exp.Literal, exp.EQ, exp.NEQ, exp.In, exp.Like, exp.ILike, exp.Not,
    exp.Paren, exp.Is, exp.Null, exp.Boolean, exp.Tuple, exp.Or, exp.Lower, exp.Upper,
)  # fmt: skip


def _pieces(run: Span) -> list[Span]:
    """The run itself, then its sub-runs of content words, longest first (at most 10)."""
    tokens = [t for t in tokenize(run.text)]
    out = [run]
    for n in range(len(tokens) - 1, 0, -1):
        for i in range(len(tokens) - n + 1):
            window = tokens[i : i + n]
            if window[0].lower in NEUTRAL_WORDS or window[-1].lower in NEUTRAL_WORDS:
                continue
            text = run.text[window[0].start : window[-1].end]
            out.append(Span(_TEXT, text, run.start + window[0].start, run.start + window[-1].end, text))
    return out[:10]


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9%]+", " ", text.lower()).strip()


def _link(slot: Slot, text: str, lookup: ValueLookup) -> tuple[float, str, str] | None:
    """(score, database value, value to bind) for `text` in the slot's column, or None."""
    if _norm(text) in (_norm(slot.text), _norm(slot.value)):
        return 1.0, slot.value, slot.value  # the example's own value: approved as it stands
    candidates = [(v, float(s)) for v, s in lookup(slot.column, text) if isinstance(v, str) and v.strip()]
    if not candidates:
        return None
    exact = [(v, s) for v, s in candidates if _norm(v) == _norm(text)]
    db_value, score = exact[0] if exact else max(candidates, key=lambda c: c[1])
    score = max(0.0, min(1.0, score))
    bound = db_value
    if slot.uses and all(u.like for u in slot.uses) and _norm(text) in _norm(db_value):
        # A LIKE pattern was written from the question's words ('%fentanyl%'): keep that breadth.
        bound = apply_case(text.strip(), slot.uses[0].case)
    return score, db_value, bound


def _bind_and_check(template: Template, work: _Work, catalog: CatalogSchema | None) -> str | None:
    values = {name: b.value for name, b in work.bindings.items()}
    try:
        sql = bind_sql(template, values)
    except BindError as error:
        work.refuse(
            R.SQL_INVALID, f"This question's values cannot be put into the verified question's SQL ({error})."
        )
        return None
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=template.dialect) if s is not None]
    except Exception:  # fail closed: a bound SQL sqlglot cannot read is not run
        work.refuse(
            R.SQL_INVALID, "The verified question's SQL with this question's values cannot be read back."
        )
        return None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        work.refuse(
            R.SQL_INVALID, "The verified question's SQL with this question's values is not a single query."
        )
        return None
    if catalog is not None:
        try:
            # Checked here so a bad binding is refused with a reason; what runs is generated from
            # the tree again where every answer is executed (prepared.prepare_sql).
            validate_sql(sql, catalog)
        except SqlValidationError as error:
            work.refuse(
                R.SQL_INVALID,
                f"The verified question's SQL with this question's values is not valid here: {error.message}",
            )
            return None
    return sql


def _masked(question: str, template: Template, work: _Work) -> str:
    slot_of = {s.name: s for s in template.slots}
    by_span = {
        (p.start, p.end): slot_of[name].placeholder for name, p in work.placed.items() if name in slot_of
    }
    out, cursor = [], 0
    for (start, end), placeholder in sorted(by_span.items()):
        if start < cursor:
            continue
        out.append(question[cursor:start])
        out.append(placeholder)
        cursor = end
    out.append(question[cursor:])
    return "".join(out)


def _features(
    question: str,
    candidate: TemplateCandidate,
    template: Template,
    work: _Work,
    runs: list[Span],
    quoted: list[Span],
) -> dict[str, float]:
    masked = _masked(question, template, work)
    masked_similarity = fuzz.token_sort_ratio(_plain(masked), _plain(template.masked_question)) / 100
    new_words = set(content_words(masked))
    old_words = set(content_words(template.masked_question))
    union = new_words | old_words
    overlap = len(new_words & old_words) / len(union) if union else 1.0
    placed_words = sum(len(content_words(p.text)) for p in work.placed.values() if p.type == _TEXT)
    leftover = sum(len(content_words(r.text)) for r in runs) + sum(len(content_words(q.text)) for q in quoted)
    extra = max(0, leftover - placed_words)
    missing = sum(1 for w in old_words if not any(_same_word(w, n) for n in new_words))
    value_scores = [b.score for b in work.bindings.values() if b.type == VALUE]
    similarity = candidate.similarity if candidate.similarity is not None else masked_similarity
    slots_bound = all(s.name in work.bindings for s in template.slots)
    return {
        "similarity": round(float(similarity), 4),
        "masked_similarity": round(masked_similarity, 4),
        "lexical_overlap": round(overlap, 4),
        "operators_agree": 1.0,
        "all_slots_bound": float(slots_bound),
        "unplaced_values": float(len(work.unplaced)),
        "extra_words": float(extra),
        "missing_words": float(missing),
        "fuzzy_penalty": round(sum(1 - s for s in value_scores), 4),
        "min_value_score": round(min(value_scores), 4) if value_scores else 1.0,
        "slots": float(len(template.slots)),
    }


def _plain(text: str) -> str:
    text = re.sub(r"\{([^}:]*)(?::[^}]*)?\}", lambda m: f" slot{m.group(1)} ", text.lower())
    return " ".join(t.lower for t in tokenize(text) if t.lower not in FUNCTION_WORDS)


def _same_word(a: str, b: str) -> bool:
    return a == b or (min(len(a), len(b)) >= 5 and fuzz.ratio(a, b) >= 90)


# --- confidence ----------------------------------------------------------------------------------

MODEL_FEATURES = (
    "similarity",
    "masked_similarity",
    "lexical_overlap",
    "extra_words",
    "missing_words",
    "fuzzy_penalty",
)


@dataclass(frozen=True)
class Calibration:
    """A logistic model over match features: confidence = sigmoid(intercept + Σ weight·feature).

    Only matches that pass the hard rules are scored; the rest have confidence 0.
    """

    weights: dict[str, float]
    intercept: float
    threshold: float = DEFAULT_THRESHOLD
    samples: int = 0  # how many held-out matches it was fitted on (0: hand-set defaults)

    def predict(self, features: dict[str, float]) -> float:
        z = self.intercept + sum(w * float(features.get(name, 0.0)) for name, w in self.weights.items())
        return min(MAX_CONFIDENCE, _sigmoid(z))

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights": dict(self.weights),
            "intercept": self.intercept,
            "threshold": self.threshold,
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            weights={k: float(v) for k, v in data["weights"].items()},
            intercept=float(data["intercept"]),
            threshold=float(data.get("threshold", DEFAULT_THRESHOLD)),
            samples=int(data.get("samples", 0)),
        )


# Hand-set so that an exact re-wording (masked similarity ≈ 1, full overlap) scores ≈ 0.99, one extra
# or missing content word falls to about the default threshold, and two fall well below it.
DEFAULT_CALIBRATION = Calibration(
    weights={
        "similarity": 3.0,
        "masked_similarity": 8.0,
        "lexical_overlap": 3.0,
        "extra_words": -2.5,
        "missing_words": -2.5,
        "fuzzy_penalty": -6.0,
    },
    intercept=-9.0,
)


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def fit_calibration(
    samples: Sequence[tuple[dict[str, float], bool]],
    *,
    features: Sequence[str] = MODEL_FEATURES,
    l2: float = 1.0,
    threshold: float = DEFAULT_THRESHOLD,
) -> Calibration:
    """Logistic regression (L2, Newton's method, numpy) on held-out matches: features -> was it right.

    Samples that fail a hard rule are skipped (their confidence is 0 whatever the model says). With
    fewer than two samples of each outcome there is nothing to learn and the defaults are returned.
    """
    usable = [(f, bool(ok)) for f, ok in samples if f.get("hard_ok", 1.0)]
    positives = sum(ok for _, ok in usable)
    if positives < 2 or len(usable) - positives < 2:
        return Calibration(dict(DEFAULT_CALIBRATION.weights), DEFAULT_CALIBRATION.intercept, threshold, 0)
    names = list(features)
    x = np.array([[float(f.get(n, 0.0)) for n in names] for f, _ in usable])
    y = np.array([1.0 if ok else 0.0 for _, ok in usable])
    # Standardise so that one L2 strength suits features of different scales, then map back.
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / std])
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0  # the intercept is not shrunk
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -30, 30)))
        gradient = z.T @ (p - y) + penalty * beta
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(z.shape[1])
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    weights = beta[1:] / std
    intercept = beta[0] - float(np.sum(beta[1:] * mean / std))
    return Calibration(
        {n: round(float(w), 6) for n, w in zip(names, weights, strict=True)},
        round(float(intercept), 6),
        threshold,
        len(usable),
    )


def choose_threshold(
    scored: Sequence[tuple[float, bool]],
    *,
    min_precision: float = 0.95,
    min_answered: int = 5,
    floor: float = 0.5,
    default: float = DEFAULT_THRESHOLD,
) -> float:
    """The lowest confidence threshold at which answering keeps precision ≥ `min_precision`.

    "Keeps": precision must hold at that threshold and at every higher one (precision is not
    monotone in the threshold, and a threshold that only works by luck of one sample is not one to
    trust), with at least `min_answered` answered questions. Never below `floor`. With too little
    held-out data (fewer than `min_answered` correct answers) the conservative `default` is
    returned; when no threshold reaches the target, 1.0: never answer offline.
    """
    points = sorted(((float(c), bool(ok)) for c, ok in scored), key=lambda p: -p[0])
    if sum(ok for _, ok in points) < min_answered:
        return default
    best: float | None = None
    correct = answered = 0
    i = 0
    while i < len(points):
        level = points[i][0]
        while i < len(points) and points[i][0] == level:
            correct += points[i][1]
            answered += 1
            i += 1
        precision = correct / answered
        if precision < min_precision:
            if answered >= min_answered:
                break  # every lower threshold also answers this, so it also fails the "every higher" rule
            continue
        if answered >= min_answered:
            best = level
    if best is None:
        return 1.0
    return max(floor, best)
