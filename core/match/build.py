"""Building a template from an approved example: which SQL literal says which question span."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable

from rapidfuzz import fuzz
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.operators import question_operators
from core.match.spans import (
    CALENDAR_TYPES,
    DATE,
    DECADE,
    DECADE_SPAN,
    GENDER,
    ID_COLUMNS,
    ID_TYPES,
    NUMBER,
    PERIOD_TYPES,
    VALUE,
    YEAR,
    Span,
    canonical_number,
    extract_typed_spans,
)
from core.match.template import (
    DEFAULT_VALUE_COLUMNS,
    BindError,
    LiteralUse,
    Slot,
    Template,
    bind_sql,
    dialect_named,
    literal_core,
    parse_sql,
    parsed_sql,
)
from core.match.words import FUNCTION_WORDS, Token, name_pattern, overlaps, tokenize

# --- building ------------------------------------------------------------------------------------


def build_template(
    question: str,
    sql: str,
    *,
    dialect: str = "postgres",
    value_columns: Callable[[str, str], bool] | None = None,
    generated: bool = False,
) -> Template:
    """The template of one approved example. Never raises: an unusable example gets `error` set.

    `value_columns(table, column)` says whether a column's values can be linked (the value index
    holds them); `table` is as the SQL names it ("mimiciv_hosp.prescriptions" or "prescriptions").
    `generated`: the SQL was written by sqlglot in this dialect (a composition's), so it is likely
    its own normal form: one parse then does (the same template either way, see _normalised).
    """
    ops = question_operators(question)
    made = _as_written(question, sql, dialect, value_columns, ops) if generated else None
    return made if made is not None else _built(question, sql, dialect, value_columns, ops, generated)


def _as_written(
    question: str, sql: str, dialect: str, value_columns: Callable[[str, str], bool] | None, ops: dict
) -> Template | None:
    """The template of SQL that sqlglot wrote (a composition's), its text taken as its normal form
    without writing its parse again first; None where that is not proven (then _built decides).

    Why it is the template _built makes: _built takes `sql` as the normal form when its parse writes
    `sql` again, and then builds on that parse, as here. Here the self-check proves the same thing
    instead: binding the example's own values into the parse gives back `sql` exactly (written
    from a tree copy, or from the skeleton of that parse cut around its slot literals, whose cuts
    are checked to give back `sql` with the tree's own literals: template._cut). A template that
    fails its self-check, or any error, goes to _built. Saves one tree copy and one generation per
    composition (a composition's SQL is new, so nothing else writes it again);
    benchmarks/composed_templates.py checks both ways agree on every composition of a calibration."""
    try:
        tree = parsed_sql(sql, dialect)
        template = _template_of_tree(question, sql, dialect, value_columns, ops, tree, sql)
    except Exception:  # whatever it is, the general path meets it again and says what it is
        return None
    return None if template.error else template


def _built(
    question: str,
    sql: str,
    dialect: str,
    value_columns: Callable[[str, str], bool] | None,
    ops: dict,
    generated: bool,
) -> Template:
    """The template by the general path: the SQL's normal form first (_normalised), then its slots."""
    try:
        normalised, tree = _normalised(sql, dialect, generated)
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


def _normalised(sql: str, dialect: str, generated: bool) -> tuple[str, exp.Expr]:
    """The SQL as sqlglot writes it again, and its parse (cached: bind_sql and template_key reuse it;
    only read here, never changed). SQL that sqlglot wrote (`generated`) is parsed as it is and
    kept when it writes back the same, which is then the normal form the general path finds too
    (a parse of that same text); else its normal form is parsed again."""
    if generated:
        tree = parsed_sql(sql, dialect)
        if tree.sql(dialect=dialect_named(dialect)) == sql:  # copies: the cached tree stays as parsed
            return sql, tree
    # A tree of its own, generated without the copy sqlglot makes by default (a third of the cost).
    normalised = parse_sql(sql, dialect).sql(dialect=dialect_named(dialect), copy=False)
    return normalised, parsed_sql(normalised, dialect)


def _unusable_sql(question: str, sql: str, dialect: str, ops: dict, error: object) -> Template:
    return Template(question, sql, dialect, question, (), "", ops, error=f"unusable SQL: {error}")


def _round_trip_error(tree: exp.Expr, normalised: str, dialect: str) -> str:
    """Why the parse of `normalised` does not generate `normalised` again ("" when it does)."""
    try:
        if tree.sql(dialect=dialect_named(dialect)) != normalised:  # copies: the cached tree stays as parsed
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
    """Which question span a literal expresses: ("slot", span, use), ("anchor", words) or None.

    Tried in order, the first kind of literal that fits decides: a calendar piece, a period back
    from now, a number, a year or date inside a date string, a gender code, a name."""
    text, is_string = literal.this, literal.is_string
    if is_string:
        claim = _claim_calendar(spans, index, text, claims)
        if claim is not None:
            return claim
    # A period back from now: '-1 year' next to 'start of year' in one datetime() call is "last year".
    period = re.fullmatch(r"-(\d+) (year|month)", text) if is_string else None
    if period and any(
        isinstance(x, exp.Literal) and x.this == f"start of {period.group(2)}"
        for x in getattr(literal.parent, "expressions", ())
    ):
        return _claim_period(spans, index, text, period)
    # Numbers (ids, counts, years) by value, also inside strings: '6 months', '-6 month', '2150'.
    number = re.fullmatch(r"([+-]?)(\d+(?:\.\d+)?)(\s*[A-Za-z][A-Za-z ]*)?", text)
    if number:
        if not is_string and isinstance(literal.parent, (exp.Mul, exp.Div)):
            return None  # a constant of arithmetic (`365 / 4` for "3-month"), not a value the question names
        return _claim_decade(spans, index, literal) or _claim_number(
            spans, index, literal, number, column, claims
        )
    if not is_string:
        return None
    # Years and dates inside date strings, including the next year's / day's bound of a range.
    date_like = re.fullmatch(r"(%?)(\d{4})((?:-\d{2}(?:-\d{2})?)?(?:[ T]\d{2}:\d{2}(?::\d{2})?)?%?)", text)
    if date_like:
        return _claim_date(spans, index, text, date_like)
    genders = [s for s in spans if s.type == GENDER]
    if genders and (
        column.rsplit(".", 1)[-1] == "gender" or text.strip().lower() in ("f", "m", "female", "male")
    ):
        return _claim_gender(genders, index, text)
    return _claim_name(question, spans, index, literal, column, is_value_column, claims)


def _claim_calendar(spans: list[Span], index: int, text: str, claims: dict) -> tuple | None:
    """Calendar pieces by their SQL form: '2100-12', '05', '11-23', '2100-06-07 05:00:00'."""
    core = text.strip("%")
    hits = [s for s in spans if s.type in CALENDAR_TYPES and s.value == core]
    if not hits:
        return None
    free = [s for s in hits if (s.start, s.end) not in claims] or hits
    prefix, _, suffix = text.partition(core)
    return "slot", free[0], LiteralUse(index, text, True, prefix, suffix)


def _claim_period(spans: list[Span], index: int, text: str, period: re.Match) -> tuple | None:
    hits = [s for s in spans if s.type == PERIOD_TYPES[period.group(2)] and s.value == period.group(1)]
    if len({(s.start, s.end) for s in hits}) == 1:
        return "slot", hits[0], LiteralUse(index, text, True, "-", f" {period.group(2)}")
    return None


def _claim_decade(spans: list[Span], index: int, literal: exp.Literal) -> tuple | None:
    """A bound of the one age decade the question names: `BETWEEN 40 AND 49` for "in their 40s" is
    one slot, its lower bound the decade, its upper bound the decade + 9 (an offset), so the template
    binds another decade whole and never one bound alone."""
    decades = [s for s in spans if s.type == DECADE]
    between = literal.parent
    if len(decades) != 1 or not isinstance(between, exp.Between):
        return None
    low, high = int(decades[0].value), int(decades[0].value) + DECADE_SPAN
    bounds = (between.args.get("low"), between.args.get("high"))
    if [b.this if isinstance(b, exp.Literal) and not b.is_string else None for b in bounds] != [
        str(low),
        str(high),
    ]:
        return None  # not the decade's own range (`BETWEEN 40 AND 59`): a fixed range, no slot
    offset = int(literal.this) - low
    return "slot", decades[0], LiteralUse(index, literal.this, False, offset=offset)


def _claim_number(
    spans: list[Span], index: int, literal: exp.Literal, number: re.Match, column: str, claims: dict
) -> tuple | None:
    """A number the question names once (an id typed by its column: `subject_id = …` is a patient)."""
    text, is_string = literal.this, literal.is_string
    value = canonical_number(number.group(2))
    hits = [
        s
        for s in spans
        if s.type in (*ID_TYPES, NUMBER, YEAR)
        and s.value == value
        and not any(overlaps(s.start, s.end, [k]) for k in claims if k != (s.start, s.end))
    ]
    if len(hits) != 1:
        return None
    span = hits[0]
    col_name = column.rsplit(".", 1)[-1]
    if col_name in ID_COLUMNS and span.type != ID_COLUMNS[col_name]:
        span = Span(ID_COLUMNS[col_name], span.text, span.start, span.end, span.value)
    prefix = number.group(1) if is_string else ""
    suffix = (number.group(3) or "") if is_string else ""
    return "slot", span, LiteralUse(index, text, is_string, prefix, suffix)


def _claim_date(spans: list[Span], index: int, text: str, date_like: re.Match) -> tuple | None:
    """A date or year the question names, in a date string (or the next day's or year's bound)."""
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


def _claim_gender(genders: list[Span], index: int, text: str) -> tuple | None:
    code = text.strip().upper()[:1]
    hits = [s for s in genders if s.value == code]
    if len(hits) == 1:
        return "slot", hits[0], LiteralUse(index, text, True, case=_case_of(text))
    return None


def _claim_name(
    question: str,
    spans: list[Span],
    index: int,
    literal: exp.Literal,
    column: str,
    is_value_column: Callable[[str, str], bool],
    claims: dict,
) -> tuple | None:
    """A name: an exact or fuzzy span of the question; a value slot when its column's values are
    indexed, else an anchor (the words a new question must say)."""
    text = literal.this
    like = isinstance(_climb(literal), (exp.Like, exp.ILike))
    prefix, core, suffix = _split_wildcards(text) if like else ("", text, "")
    if len(re.sub(r"[^A-Za-z]", "", core)) < 2:
        return None
    # The same name used again (a subquery repeats the filter) fills the same slot.
    again = [
        k for k, uses in claims.items() if any(literal_core(u[1]) == core.strip("%").lower() for u in uses)
    ]
    found = again[0] if again else _find_name_span(question, core, spans, claims)
    if found is None:
        return None
    start, end = found
    col_name = column.rsplit(".", 1)[-1]
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


def _find_name_span(question: str, core: str, spans: list[Span], claims: dict) -> tuple[int, int] | None:
    """Where the question names a literal: whole words, case-insensitive, else the best fuzzy window.

    A number inside the name as written ("closed fracture of seven ribs") is part of the name.
    Found once per question, name and what is taken (_name_span)."""
    return _name_span(question, core, tuple((s.start, s.end) for s in spans), tuple(claims))


@functools.lru_cache(maxsize=1 << 14)
def _name_span(
    question: str, core: str, spans: tuple[tuple[int, int], ...], claimed: tuple[tuple[int, int], ...]
) -> tuple[int, int] | None:
    """_find_name_span for the question's value spans and the spans literals claimed before. Why kept:
    a composed question comes back with each SQL composed for it (a template per question and SQL),
    and its names are looked for again in the same question with the same spans taken; the fuzzy
    window search is the costliest part of a composed template's build."""
    claims = list(claimed)
    taken = list(spans) + claims
    for m in name_pattern(core.strip()).finditer(question):
        cut = [(a, b) for a, b in taken if not (m.start() <= a and b <= m.end())]
        if not overlaps(m.start(), m.end(), claims + cut):
            return m.start(), m.end()
    core_words = [w.lower() for w in re.findall(r"[A-Za-z0-9.%]+", core) if w.lower() not in FUNCTION_WORDS]
    if not core_words:
        return None
    tokens = tokenize(question)
    lowered = core.lower()
    near: dict[str, frozenset[str]] = {}  # each word's near spellings among the name's, once per word
    best: tuple[float, int, tuple[int, int]] | None = None
    for i, first in enumerate(tokens):
        if first.lower in FUNCTION_WORDS:
            continue  # no window starts with a function word
        for j in range(i + 1, min(len(tokens), i + len(core_words) + 2) + 1):
            if tokens[j - 1].lower in FUNCTION_WORDS:
                continue
            start, end = first.start, tokens[j - 1].end
            if overlaps(start, end, taken):
                break  # a longer window from the same word overlaps it too
            score = _window_score(question[start:end].lower(), tokens[i:j], lowered, core_words, near)
            if score is None:
                continue
            key = (score, j - i, (start, end))
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else None


def _window_score(
    text: str, window: list[Token], core: str, core_words: list[str], near: dict[str, frozenset[str]]
) -> float | None:
    """How well a window of question words names `core`: the fuzzy ratio of the whole, else (below
    0.88) by its words when every one is a near spelling of a word of the name; None when it is not.
    `near`: each word's near spellings among `core_words`, kept by the caller across its windows
    (a word is in up to a name's length of windows; the same ratios either way)."""
    score = fuzz.ratio(text, core) / 100  # `core` lowercased by the caller, once per name
    if score >= 0.88:
        return score
    words = [t.lower for t in window if t.lower not in FUNCTION_WORDS]
    for w in words:
        if w not in near:
            near[w] = frozenset(c for c in core_words if fuzz.ratio(w, c) >= 85)
    matched = [w for w in words if near[w]]
    covered = set().union(*(near[w] for w in words))
    if len(matched) < len(words) or not words or sum(map(len, words)) < 4:
        return None
    coverage = len(covered) / len(core_words)
    if coverage < 0.5 and core_words[0] not in covered:
        return None
    return 0.6 + 0.25 * coverage


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
