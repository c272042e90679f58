"""Binding: the new question's values to a template's slots (typed values by type and place, named values
through the value index and lookup), and the bound SQL checked."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from rapidfuzz import fuzz
from sqlglot import exp

from core.match import reasons as R
from core.match.checked import validation_error
from core.match.index import Family
from core.match.reading import Reading
from core.match.spans import TEXT, VALUE, Span, extract_typed_spans, quoted_spans
from core.match.template import BindError, Slot, Template, apply_case, bind_sql, interchangeable, read_back
from core.match.values import ValueFinder, ValueLookup, bare_column
from core.match.words import (
    FUNCTION_WORDS,
    NEUTRAL_WORDS,
    NUMERIC,
    Token,
    canonical,
    content_words,
    is_neutral,
    name_pattern,
    norm,
    overlaps,
    stem,
    tokenize,
)
from core.types import CatalogSchema

MIN_VALUE_SCORE = 0.7  # a named value linked below this score is no match at all


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


@dataclass
class Bound:
    """What binding made of one question for one template, and the refusals so far (rules read it).

    Filled in order by matcher.match_one: the refusals of the rules and of binding itself, the slots'
    bindings and the question spans they took, the leftover word runs, then the bound SQL.
    """

    reasons: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    bindings: dict[str, Binding] = field(default_factory=dict)
    placed: dict[str, Span] = field(default_factory=dict)  # slot name -> the new question's span
    unplaced: list[Span] = field(default_factory=list)
    # Slots of one type whose values the question's wording does not place, bound in the question's
    # order with the text to refuse with: they answer only if every other order gives the same result.
    unordered: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    runs: list[Span] = field(default_factory=list)  # runs of content words left for named values
    # What the question says outside its values (stems), and that with what its bound values say by
    # their column ("via po" says route): read by the meaning guard, set once values are bound.
    words: list[str] = field(default_factory=list)
    said: set[str] = field(default_factory=set)
    sql: str | None = None  # the bound, validated SQL
    probe: Callable[[str], bool] | None = None  # asks the source whether a query returns a row

    def refuse(self, code: str, text: str) -> None:
        self.codes.append(code)
        self.reasons.append(text)


def _token_status(token: Token, fixed: frozenset[str]) -> str:
    return _status(token.text, token.lower, fixed)


@functools.lru_cache(maxsize=1 << 16)
def _status(text: str, lower: str, fixed: frozenset[str]) -> str:
    """_token_status, judged once per word and set of fixed words. Why: a question's templates and
    the compositions built on them bind against the same few families, each word against all of a
    family's words by edit distance (730,000 judgements in a train calibration). It reads the word
    and the (frozen) set alone; the lock of lru_cache makes it safe for a web worker's threads."""
    if lower in NEUTRAL_WORDS:
        return "neutral"
    s = stem(text)
    if s in fixed or (len(s) >= 5 and any(fuzz.ratio(s, f) >= 90 for f in fixed if len(f) >= 5)):
        return "fixed"
    return "content"


def family_fixed_words(family: Family) -> frozenset[str]:
    """The family's words and the words the library uses for them ("sex" for "gender"): what
    leftover_runs leaves out of the runs named values are looked for in. Made once per family (a
    family is frozen; a library that changes builds new ones), not once per template tried: one
    question binds against the same few families again and again. Read once (`.get`) and stored
    whole: two threads of a web worker may both make it, alike."""
    fixed = family.__dict__.get("_fixed_words")
    if fixed is None:
        fixed = frozenset(family.words | {w for w, same in family.synonyms.items() if same & family.words})
        family.__dict__["_fixed_words"] = fixed
    return fixed


_BREAK = re.compile(r"[,;?!()]")  # punctuation between two words ends a run of them


def leftover_runs(
    question: str,
    tokens: list[Token],
    spans: list[Span],
    template: Template,
    fixed_words: frozenset[str] | None = None,
) -> list[Span]:
    """Runs of content words that are neither the template's fixed words nor typed values."""
    fixed = (
        frozenset(fixed_words)
        if fixed_words is not None
        else frozenset(content_words(template.masked_question))
    )
    taken = [(s.start, s.end) for s in spans]
    runs: list[list[Token]] = [[]]
    for token in tokens:
        inside = any(a <= token.start and token.end <= b for a, b in taken)
        status = "typed" if inside else _token_status(token, fixed)
        current = runs[-1]
        gap = question[current[-1].end : token.start] if current else ""
        if status == "content" and not _BREAK.search(gap):
            current.append(token)
        elif status == "content":
            runs.append([token])
        elif status == "neutral" and token.lower in FUNCTION_WORDS and current and not _BREAK.search(gap):
            current.append(token)  # may join "disorders of lipoid metabolism"; trimmed below
        else:
            runs.append([])
    out = []
    for run in runs:
        while run and run[-1].lower in NEUTRAL_WORDS:
            run.pop()
        if run:
            text = question[run[0].start : run[-1].end]
            out.append(Span(TEXT, text, run[0].start, run[-1].end, text))
    return out


def assign_typed(template: Template, question: str, spans: list[Span], work: Bound) -> None:
    """Ids, numbers, years, dates and genders to slots of the same type, in order (checked by context)."""
    for slot_type in sorted({s.type for s in spans} | {s.type for s in template.slots if s.type != VALUE}):
        slots = [s for s in template.slots if s.type == slot_type]
        found = [s for s in spans if s.type == slot_type]
        if len(found) > len(slots):
            extra = found[len(slots) :] if slots else found
            work.unplaced += extra
            work.refuse(
                R.EXTRA_VALUE,
                f"This question gives {describe(slot_type, len(found))}, the verified question has "
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
                    f"askdb cannot tell which {describe(slot_type, 2)[2:]} of this question goes where in the verified question.",
                )
            )
        for slot, span in zip(slots, order, strict=True):
            work.bindings[slot.name] = Binding(
                slot.name, slot.type, slot.text, span.text, span.value, 1.0, False, slot.column
            )
            work.placed[slot.name] = span


def column_words(column: str) -> str:
    """'prescriptions.drug' -> 'drug' (the column a value belongs to, as a researcher names it)."""
    return column.rsplit(".", 1)[-1].replace("_", " ")


def describe(slot_type: str, n: int) -> str:
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


def assign_values(
    template: Template,
    runs: list[Span],
    lookup: ValueLookup,
    min_value_score: float,
    work: Bound,
    skip: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:
    """Named-value slots to runs of the question, each linked to a real database value."""
    free = list(runs)
    for slot in (s for s in template.slots if s.type == VALUE and s.name not in work.bindings):
        if slot.name in skip:
            work.refuse(
                R.VALUE_NOT_FOUND,
                f"This question names no {column_words(slot.column)} that is in the database.",
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
                    f"No {column_words(slot.column)} in the database is close enough to '{closest[1]}' "
                    f"(the closest is '{closest[2]}').",
                )
            elif free:
                texts = ", ".join(repr(r.text) for r in free)
                work.refuse(
                    R.VALUE_NOT_FOUND, f"No {column_words(slot.column)} in the database matches {texts}."
                )
            else:
                work.refuse(
                    R.VALUE_MISSING,
                    f"This question names no {column_words(slot.column)}, which the verified question needs.",
                )
            continue
        score, piece, db_value, bound = best
        fuzzy = norm(db_value) != norm(piece.text)
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
                free.append(Span(TEXT, rest, offset, offset + len(rest), rest))


def assign_contained(
    template: Template, question: str, typed: list[Span], values: ValueFinder, work: Bound
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
        _contained_together(template, question, slots, values, work, taken)
    for slot in (s for s in template.slots if s.type == VALUE and s.name not in work.bindings):
        _contained_one(template, question, slot, values, work, taken)


def _contained_together(
    template: Template, question: str, slots: list[Slot], values: ValueFinder, work: Bound, taken: list
) -> None:
    """Several values of one column ("X … after Y"): the longest named values, placed as the
    example places them (by the word before each); unclear placement refuses."""
    chosen: list[tuple[int, int, str]] = []
    for a, b, v in sorted(values.contained(question, slots[0].column), key=lambda f: f[0] - f[1]):
        if not overlaps(a, b, taken + [(x, y) for x, y, _ in chosen]):
            chosen.append((a, b, v))
    if len(chosen) != len(slots):
        return  # left to the one-by-one linking, which reports what is missing
    spans = [Span(TEXT, question[a:b], a, b, v) for a, b, v in sorted(chosen)]
    order = _ordering(template, question, slots, spans)
    if order is None:
        order = list(spans)
        where = f"askdb cannot tell which {column_words(slots[0].column)} of this question goes where in the verified question."
        work.unordered.append((tuple(s.name for s in slots), where))
    for slot, span in zip(slots, order, strict=True):
        _bind_named(slot, span.text, span.value, span, work)
        taken.append((span.start, span.end))


def _contained_one(
    template: Template, question: str, slot: Slot, values: ValueFinder, work: Bound, taken: list
) -> None:
    found = [(a, b, v) for a, b, v in values.contained(question, slot.column) if not overlaps(a, b, taken)]
    own = slot.text.strip()
    if own:
        for m in name_pattern(own).finditer(question):
            if not overlaps(m.start(), m.end(), taken):
                found.append((m.start(), m.end(), slot.value))
    if not found:
        return
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
    _bind_named(slot, text, value, Span(TEXT, text, start, end, text), work)
    taken.append((start, end))


def _bind_named(slot: Slot, text: str, value: str, span: Span, work: Bound) -> None:
    """A named value contained in the question, bound as it stands (a LIKE pattern written from the
    question's own words, in the example's case)."""
    bound = value
    if slot.uses and all(u.like for u in slot.uses):
        bound = apply_case(text.strip(), slot.uses[0].case)
    work.bindings[slot.name] = Binding(slot.name, VALUE, slot.text, text, bound, 1.0, False, slot.column)
    work.placed[slot.name] = span


def _context_agrees(question: str, start: int, end: int, template: Template, slot: Slot) -> int:
    """How many of the words just before and just after a value are those around the example's value."""

    def around(text: str, a: int, b: int) -> tuple[str, str]:
        before = [t.lower for t in tokenize(text[:a])]
        after = [t.lower for t in tokenize(text[b:])]
        return (before[-1] if before else ""), (after[0] if after else "")

    mine, theirs = around(question, start, end), around(template.question, slot.start, slot.end)
    return sum(1 for x, y in zip(mine, theirs, strict=True) if x and x == y)


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
            out.append(Span(TEXT, text, run.start + window[0].start, run.start + window[-1].end, text))
    return out[:10]


def _link(slot: Slot, text: str, lookup: ValueLookup) -> tuple[float, str, str] | None:
    """(score, database value, value to bind) for `text` in the slot's column, or None."""
    if norm(text) in (norm(slot.text), norm(slot.value)):
        return 1.0, slot.value, slot.value  # the example's own value: approved as it stands
    candidates = [(v, float(s)) for v, s in lookup(slot.column, text) if isinstance(v, str) and v.strip()]
    if not candidates:
        return None
    exact = [(v, s) for v, s in candidates if norm(v) == norm(text)]
    db_value, score = exact[0] if exact else max(candidates, key=lambda c: c[1])
    score = max(0.0, min(1.0, score))
    bound = db_value
    if slot.uses and all(u.like for u in slot.uses) and norm(text) in norm(db_value):
        # A LIKE pattern was written from the question's words ('%fentanyl%'): keep that breadth.
        bound = apply_case(text.strip(), slot.uses[0].case)
    return score, db_value, bound


def bind_and_check(template: Template, work: Bound, catalog: CatalogSchema | None) -> str | None:
    values = {name: b.value for name, b in work.bindings.items()}
    try:
        sql = bind_sql(template, values)
    except BindError as error:
        work.refuse(
            R.SQL_INVALID, f"This question's values cannot be put into the verified question's SQL ({error})."
        )
        return None
    try:
        statements = read_back(sql, template.dialect)
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
        # Checked here so a bad binding is refused with a reason; what runs is generated from the
        # tree again where every answer is executed (prepared.prepare_sql).
        error = validation_error(sql, catalog)
        if error is not None:
            work.refuse(
                R.SQL_INVALID,
                f"The verified question's SQL with this question's values is not valid here: {error}",
            )
            return None
    return sql


def bound_column_words(work: Bound) -> set[str]:
    """Words a bound value says by what it is: "via po" says route (prescriptions.route), a diagnosis
    title says diagnosis (d_icd_diagnoses.long_title). The table and column names of named values."""
    words = set()
    for b in work.bindings.values():
        if b.type == VALUE and b.column:
            for part in re.split(r"[._]", ".".join(b.column.split(".")[-2:])):
                if len(part) >= 3:
                    words.add(canonical(stem(part)))
    return words


def outside_values(reading: Reading, bound: Bound) -> list[Token]:
    """The question's content-word tokens outside its values (typed or bound).

    Remembered on the reading per set of spans the values take: a question's templates and the
    compositions built on them mostly place its values alike (61,000 bindings in a train calibration,
    a few distinct placements per question). A reading is one question's, made for it."""
    taken = tuple((s.start, s.end) for s in reading.typed) + tuple(
        (p.start, p.end) for p in bound.placed.values()
    )
    memo = reading.__dict__.setdefault("_outside_values", {})
    found = memo.get(taken)
    if found is None:
        tokens, spans = reading.tokens, list(taken)
        found = memo[taken] = tuple(
            t
            for i, t in enumerate(tokens)
            if not overlaps(t.start, t.end, spans)
            and not is_neutral(tokens, i)
            and not NUMERIC.fullmatch(t.text)
        )
    return list(found)


def question_words(reading: Reading, bound: Bound) -> list[str]:
    """Stems of the question's content words outside its values."""
    return [canonical(stem(t.text)) for t in outside_values(reading, bound)]


def said_words(reading: Reading, bound: Bound) -> set[str]:
    """What the question says outside its values, and what its bound values say by their column."""
    return set(question_words(reading, bound)) | bound_column_words(bound)


def fixed_value_hits(reading: Reading, template: Template) -> tuple[list[Span], list[str]]:
    """The question's typed spans less those saying the template's fixed values, and the fixed values
    the question does not say."""
    free, missing = list(reading.typed), []
    for fixed in template.fixed_values:
        hit = next((s for s in free if s.text == fixed), None)
        if hit is None:
            missing.append(fixed)
        else:
            free.remove(hit)
    return free, missing


def bind_values(
    reading: Reading,
    template: Template,
    family: Family | None,
    bound: Bound,
    *,
    lookup: ValueLookup,
    values: ValueFinder | None,
    min_value_score: float,
) -> None:
    """The question's values to the template's slots: typed values by type and place, named values by
    the value index (the longest contained value of the column), then by `lookup` for the rest."""
    question = reading.question
    free, _missing = fixed_value_hits(reading, template)
    assign_typed(template, question, free, bound)
    fixed = family_fixed_words(family) if family else None
    if values is not None:
        assign_contained(template, question, list(reading.typed), values, bound)
    taken = list(reading.typed) + list(reading.quoted) + list(bound.placed.values())
    bound.runs = leftover_runs(question, list(reading.tokens), taken, template, fixed)
    # A column whose every value is indexed needs no fuzzy lookup: the value is in the question or not.
    covered = {
        s.name for s in template.slots if values is not None and s.type == VALUE and values.covers(s.column)
    }
    assign_values(template, list(reading.quoted) + bound.runs, lookup, min_value_score, bound, skip=covered)
    bound.words = question_words(reading, bound)
    bound.said = set(bound.words) | bound_column_words(bound)


def extract_values(question: str, template: Template | None = None) -> list[Span]:
    """Typed value spans of a question (ids, numbers, years, dates, genders, quoted names), in order.

    With a template, also the runs of content words that are not the template's fixed words
    (type "text"): the candidates for its named-value slots.
    """
    spans = extract_typed_spans(question)
    spans += quoted_spans(question, spans)
    if template is not None:
        spans += leftover_runs(question, tokenize(question), spans, template)
    return sorted(spans, key=lambda s: (s.start, s.end))
