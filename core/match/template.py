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
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

from core.match.spans import (
    CALENDAR_FORMS,
    CALENDAR_TYPES,
    DATE,
    DECADE,
    GENDER,
    ID_TYPES,
    NUMBER,
    PERIOD_TYPES,
    VALUE,
    YEAR,
)
from core.match.words import INT_RE, NUMBER_RE

# Bump when the algorithm changes so that stored templates (Example.template) are rebuilt.
TEMPLATE_VERSION = 9  # 9: an age decade ("40s") is a slot; 8: a name written again with a leading % fills its slot again; 7: ICU care units are values; 6: periods ("last year") are slots; a number inside a name is part of it

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
        ("icustays", "first_careunit"),
        ("icustays", "last_careunit"),
        ("admissions", "admission_location"),
        ("admissions", "admission_type"),
        ("admissions", "discharge_location"),
        ("admissions", "insurance"),
    }
)


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
        tree = parse_sql(self.sql_template, self.dialect)
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
    placeholders: dict[int, exp.Expr] = {}
    for slot in template.slots:
        for use in slot.uses:
            shift = f"{use.offset:+d}" if use.offset else ""
            placeholder = f"{use.prefix}{{{slot.type}{shift}}}{use.suffix}"
            placeholders.setdefault(
                use.index, exp.Literal.string(placeholder) if use.is_string else exp.var(placeholder)
            )
    skeleton = _skeleton_of(template)
    if skeleton.parts is not None:  # the same text as the tree's, without copying it (see _Skeleton)
        return skeleton.join({i: _written(p, template.dialect) for i, p in placeholders.items()})
    tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
    literals = list(tree.find_all(exp.Literal))
    for i, placeholder in placeholders.items():
        literals[i].replace(placeholder)
    return tree.sql(
        dialect=dialect_named(template.dialect), copy=False
    )  # our copy: sqlglot need not copy it again


def template_is_current(data: dict[str, Any] | None) -> bool:
    """Whether a stored template was built by this version of the algorithm (else rebuild it)."""
    return bool(data) and data.get("version") == TEMPLATE_VERSION


class BindError(ValueError):
    """A value could not be bound into a template (wrong type, stale template)."""


@functools.lru_cache(maxsize=64)
def dialect_named(name: str) -> Dialect:
    """The sqlglot dialect of a name, made once: pass it where sqlglot takes a dialect.

    Why: sqlglot makes a new Dialect from a name on every parse and every `.sql()` (splitting the name
    for settings, then Dialect.__init__): 1.6 % of a calibration, which parses and writes SQL some
    130,000 times. The same object either way: a Dialect holds its settings alone (version,
    identifier normalisation, the name's settings), which a name always gives alike, and sqlglot
    makes each parser, tokenizer and generator afresh from it, so one shared instance is read,
    never changed (Dialect.get_or_raise hands an instance back as it is)."""
    return Dialect.get_or_raise(name)


def parse_sql(sql: str, dialect: str) -> exp.Expr:
    text = sql.strip().rstrip(";").strip()
    statements = [s for s in sqlglot.parse(text, dialect=dialect_named(dialect)) if s is not None]
    if len(statements) != 1:
        raise ValueError(f"expected one statement, found {len(statements)}")
    return statements[0]


@functools.lru_cache(maxsize=8192)
def parsed_sql(sql: str, dialect: str) -> exp.Expr:
    """One parse per template SQL (about 40 KB a tree: ~330 MB at most; a train calibration asks for
    5,067 texts fold after fold, of which 4,096 kept parsed 8,768 again); callers that change the
    tree copy it first. A composition's SQL is its tree as written (`written`), not parsed."""
    made = _WRITTEN.pop((sql, dialect), None)
    return made if made is not None else without_positions(parse_sql(sql, dialect))


def written(tree: exp.Expr, dialect: str) -> str:
    """The SQL of a tree a composition made (its own copy, never changed after), the tree kept as the
    SQL's parse for parsed_sql, which the composition's template build asks for next. Why: each composed SQL was written and at once parsed again (15,000 parses in a train
    calibration). The same tree either way: sqlglot parses the SQL it writes for these trees back
    to the same nodes in the same walk order (a SELECT's clauses in text order: _in_text_order), so
    parsed_sql hands out the same tree whether kept here or parsed again. Compared for every
    composition of the corpus (test_composed_templates) and of a train calibration
    (benchmarks/composed_templates.py)."""
    sql = tree.sql(dialect=dialect_named(dialect), copy=False)
    if len(_WRITTEN) >= WRITTEN_KEPT:  # written but never built (its template cached): let go
        _WRITTEN.clear()
    _WRITTEN[(sql, dialect)] = _in_text_order(without_positions(tree))
    return sql


def _in_text_order(tree: exp.Expr) -> exp.Expr:
    """Each SELECT's clauses after its FROM in the order its SQL says them, as a parse holds them: a
    WHERE set again (or added) goes last among a node's arguments, after its GROUP BY or ORDER BY,
    and a tree is walked in that order (its literals' indices are a slot's positions)."""
    for select in tree.find_all(exp.Select):
        keys = list(select.args)
        if "from_" not in keys:
            continue
        at = keys.index("from_") + 1
        after = sorted(keys[at:], key=_CLAUSE_ORDER.get)
        if after != keys[at:]:
            select.args = {k: select.args[k] for k in keys[:at] + after}
    return tree


_CLAUSE_ORDER = {key: n for n, key in enumerate(exp.Select.arg_types)}
WRITTEN_KEPT = 256
_WRITTEN: dict[tuple[str, str], exp.Expr] = {}


def without_positions(tree: exp.Expr) -> exp.Expr:
    """The tree with the parser's token positions (each node's `meta`: line, column, offsets) and its
    empty comment lists let go.

    Why: a kept parse is copied again and again (binding, composing, generating SQL, which copies by
    default), and sqlglot deep-copies each node's meta dict in Python: half of a copy's cost. Nothing
    reads the positions of a kept parse (they serve parse-error messages; core.validation parses on
    its own), and the SQL written from a tree never depends on them. Likewise the parser leaves an
    empty comment list on many nodes (a SELECT, an alias, a function: 8 of a typical composition's
    53), which a copy deep-copies one by one (copy.deepcopy: a quarter of such a tree's copy time;
    a train calibration's deepcopy calls 2.24 -> 1.86 million). Every reader of a node's comments (sqlglot's
    generator, add_comments, pop_comments, its serialiser) reads an empty list as None, so the SQL
    written and every decision are the same; a comment that says something is kept."""
    for node in tree.walk():
        node._meta = None
        if not node.comments:
            node.comments = None
    return tree


@functools.lru_cache(maxsize=1024)
def read_back(sql: str, dialect: str) -> tuple[exp.Expr, ...]:
    """The statements of a bound SQL, parsed once: binding reads it back, then the probes and rules
    read the same tree (shared: callers never change it; sqlglot's builders copy what they take).
    A parse error is raised each time, never remembered."""
    return tuple(
        without_positions(s) for s in sqlglot.parse(sql, dialect=dialect_named(dialect)) if s is not None
    )


# --- binding -------------------------------------------------------------------------------------


def bind_sql(template: Template, values: dict[str, str]) -> str:
    """The template's SQL with each slot's literals rebuilt from `values` (slot name -> value).

    Values are checked against the slot type (ids and numbers must be numbers, years four digits,
    dates ISO); names become quoted string literals whatever they contain. The text is the one
    sqlglot writes for the tree with those literals: each literal is written by sqlglot's own
    generator (quotes and backslashes escaped as the dialect escapes them) into the template's
    SQL around its slots (_Skeleton), which a tree copy per binding wrote before (a sixth of a
    calibration's time). The bound SQL is parsed again and validated by the caller either way.
    """
    if not template.usable:
        raise BindError(template.error or "the template has no SQL")
    skeleton = _skeleton_of(template)
    literals = skeleton.literals
    replacements: dict[int, exp.Expr] = {}
    for slot in template.slots:
        if slot.name not in values:
            raise BindError(f"no value for slot {slot.name}")
        value = str(values[slot.name]).strip()
        for use in slot.uses:
            if use.index >= len(literals) or literals[use.index][0] != use.literal:
                raise BindError("the template is stale: its SQL literals moved; rebuild it")
            replacements.setdefault(
                use.index, _literal_for(slot, use, value)
            )  # the first use of a literal wins
    _no_stale_copy(template, values, literals)
    if skeleton.parts is not None and all(_plain(new) for new in replacements.values()):
        return skeleton.join({i: _written(new, template.dialect) for i, new in replacements.items()})
    tree = parsed_sql(template.sql_template, template.dialect).copy()  # parsed once per template
    nodes = list(tree.find_all(exp.Literal))
    for i, new in replacements.items():
        nodes[i].replace(new)
    return tree.sql(
        dialect=dialect_named(template.dialect), copy=False
    )  # our copy: sqlglot need not copy it again


_MARK = "askdbslot{}x"  # a slot literal's stand-in while a skeleton is written


@dataclass(frozen=True)
class _Skeleton:
    """A template's SQL as sqlglot writes it, cut around its slot literals: binding writes each new
    literal alone and puts it between the cuts, which gives the text sqlglot writes for the whole
    tree with that literal (checked when the skeleton is made: the cuts with the template's own
    literals give back its SQL; else `parts` is None and binding copies the tree as before)."""

    literals: tuple[tuple[str, bool], ...]  # every literal of the parse: its text, and whether quoted
    parts: tuple[str, ...] | None  # the SQL before, between and after the slot literals, in text order
    order: tuple[int, ...] = ()  # the slot literals (their index among `literals`) in text order

    def join(self, written: dict[int, str]) -> str:
        assert self.parts is not None
        out = [self.parts[0]]
        for index, part in zip(self.order, self.parts[1:], strict=True):
            out += (written[index], part)
        return "".join(out)


def _skeleton_of(template: Template) -> _Skeleton:
    filled = tuple(sorted({use.index for slot in template.slots for use in slot.uses}))
    return _skeleton(template.sql_template, template.dialect, filled)


@functools.lru_cache(maxsize=32768)
def _skeleton(sql: str, dialect: str, filled: tuple[int, ...]) -> _Skeleton:
    """Made once per template SQL (a few KB each): one tree copy where every binding made one."""
    tree = parsed_sql(sql, dialect)  # read here; the skeleton is written from a copy
    literals = tuple((lit.this, lit.is_string) for lit in tree.find_all(exp.Literal))
    if not filled or filled[-1] >= len(literals):
        return _Skeleton(literals, None)
    try:
        return _cut(tree, literals, filled, sql, dialect)
    except Exception:  # a generator that reads a stand-in's text (an interval's quarters): no cuts
        return _Skeleton(literals, None)


def _cut(
    tree: exp.Expr, literals: tuple[tuple[str, bool], ...], filled: tuple[int, ...], sql: str, dialect: str
) -> _Skeleton:
    copy = tree.copy()
    nodes = list(copy.find_all(exp.Literal))
    for i in filled:
        mark = _MARK.format(i)  # a number's stand-in is a name, as template_key writes it
        nodes[i].replace(exp.Literal.string(mark) if nodes[i].is_string else exp.var(mark))
    text = copy.sql(dialect=dialect_named(dialect), copy=False)
    cuts = []
    for i in filled:
        mark = _MARK.format(i)
        written = _written(exp.Literal.string(mark), dialect) if literals[i][1] else mark
        if text.count(mark) != 1 or text.count(written) != 1:
            return _Skeleton(literals, None)  # written some other way (or the SQL says it): no cuts
        cuts.append((text.index(written), len(written), i))
    cuts.sort()
    parts, at = [], 0
    for start, length, _ in cuts:
        parts.append(text[at:start])
        at = start + length
    parts.append(text[at:])
    skeleton = _Skeleton(literals, tuple(parts), tuple(i for _, _, i in cuts))
    own = {i: _written(exp.Literal(this=literals[i][0], is_string=literals[i][1]), dialect) for i in filled}
    return skeleton if skeleton.join(own) == sql else _Skeleton(literals, None)


def _plain(node: exp.Expr) -> bool:
    """A literal a skeleton may take: any string, or an unsigned number (a signed one is a Neg that
    sqlglot writes apart from a minus before it: "- -5", never the comment "--5")."""
    if not isinstance(node, exp.Literal):
        return False
    return node.is_string or re.fullmatch(r"\d+(?:\.\d+)?", node.this) is not None


def _written(node: exp.Expr, dialect: str) -> str:
    """A literal (or a template key's placeholder name) as sqlglot writes it in this dialect
    (Generator.literal_sql and var_sql: a number and a name as they stand, a string quoted)."""
    if isinstance(node, exp.Literal) and node.is_string:
        return _string_written(node.this, dialect)
    if isinstance(node, (exp.Literal, exp.Var)) and isinstance(node.this, str):
        return node.this
    return node.sql(dialect=dialect_named(dialect), copy=False)


@functools.lru_cache(maxsize=65536)
def _string_written(text: str, dialect: str) -> str:
    return exp.Literal.string(text).sql(dialect=dialect_named(dialect), copy=False)


def _no_stale_copy(
    template: Template, values: dict[str, str], literals: tuple[tuple[str, bool], ...]
) -> None:
    """Refuse a binding that changes a named value or an id while a literal no slot fills still says
    the old one: the SQL would ask about the new item in one subquery and the old one in another
    ('% hemoglobin a1c' kept in the first-value subquery of a question about "mesothelial cell").
    Whatever way the template came to leave that copy fixed, the bound SQL is wrong."""
    filled = {use.index for slot in template.slots for use in slot.uses}
    fixed = [lit for i, lit in enumerate(literals) if i not in filled]
    if not fixed:
        return
    for slot in template.slots:
        if slot.type != VALUE and slot.type not in ID_TYPES:
            continue
        new = str(values.get(slot.name, "")).strip()
        olds = {literal_core(use).strip() for use in slot.uses} | {slot.value.strip().lower()}
        if not new or new.lower() in olds:
            continue  # the example's own value: nothing changes
        for this, is_string in fixed:
            text = this.strip("%").strip().lower() if is_string else this
            if (text in olds) if slot.type == VALUE else text == slot.value.strip():
                raise BindError(f"the SQL names {slot.name}'s old value {this!r} where no slot fills it")


def literal_core(use: LiteralUse) -> str:
    """The value a slot's literal holds, without its prefix, suffix and a LIKE's wildcards, lowercased:
    '% hemoglobin a1c' (a name that starts with %) as ' hemoglobin a1c', '%fentanyl%' as 'fentanyl'."""
    end = len(use.literal) - len(use.suffix)
    return use.literal[len(use.prefix) : end].strip("%").lower()


def _literal_for(slot: Slot, use: LiteralUse, value: str) -> exp.Expr:
    if slot.type in (*ID_TYPES, NUMBER):
        if not NUMBER_RE.fullmatch(value) or (slot.type in ID_TYPES and not INT_RE.fullmatch(value)):
            raise BindError(f"{slot.name} needs a number, not {value!r}")
        core = value
        decimals = re.fullmatch(r"[+-]?\d+\.(\d+)", use.literal)
        if decimals and "." not in core:  # `valuenum = 85.0` stays a real number: 92 is written 92.0
            core = f"{core}.{'0' * len(decimals.group(1))}"
    elif slot.type == DECADE:
        if not re.fullmatch(r"[1-9]0", value):
            raise BindError(f"{slot.name} needs a decade of age (10, 20, … 90), not {value!r}")
        core = str(int(value) + use.offset)
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
        if not re.fullmatch(CALENDAR_FORMS[slot.type], value):
            raise BindError(f"{slot.name} needs the form {CALENDAR_FORMS[slot.type]}, not {value!r}")
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


def apply_case(text: str, case: str) -> str:
    return {"lower": text.lower, "upper": text.upper, "title": text.title}.get(case, lambda: text)()


TIME_COLUMN = re.compile(r"(?:time|date)$|^dod$")


def answer_kind(template: Template) -> str:
    """What the template's SQL returns: "time" (a time column, its first or last), "number" (a count,
    sum, average or arithmetic), "column" (another column: a name, a label, a value) or "other".

    The question's asked-for thing must agree with it: "the name of the input" is not answered
    with the time of the input, however close the wording.
    """
    return _answer_kind(template.sql_template, template.dialect) if template.usable else "other"


@functools.lru_cache(
    maxsize=32768
)  # a short text per SQL: the library's and its compositions' (no parse again)
def _answer_kind(sql: str, dialect: str) -> str:
    try:
        tree = parsed_sql(sql, dialect)  # the template's one parse: only read here
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
        return "time" if TIME_COLUMN.search(node.name.lower()) else "column"
    return "other"


def interchangeable(template: Template, slot_names: tuple[str, ...]) -> bool:
    """Whether these slots' values may be bound in any order: each is used once, all in one IN list."""
    slots = [s for s in template.slots if s.name in slot_names]
    if not template.usable or len(slots) < 2 or any(len(s.uses) != 1 for s in slots):
        return False
    return _one_in_list(template.sql_template, template.dialect, tuple(s.uses[0].index for s in slots))


@functools.lru_cache(maxsize=32768)
def _one_in_list(sql: str, dialect: str, indices: tuple[int, ...]) -> bool:
    literals = list(parse_sql(sql, dialect).find_all(exp.Literal))
    if any(i >= len(literals) for i in indices):
        return False
    parents = {id(literals[i].parent) for i in indices}
    parent = literals[indices[0]].parent
    return len(parents) == 1 and isinstance(parent, exp.In)
