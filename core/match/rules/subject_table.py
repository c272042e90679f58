"""The question's subject must be the template's table: a question about diagnoses is not answered
from procedures, nor input events from output events, however its words fit the template's paraphrases.

Why: EHRSQL's paraphrases are loose ("diagnosed with" is said of some procedure templates), and
procedure and diagnosis titles overlap, so the meaning guard can pass a sibling template over the other
table (issue 26: a procedure template answered a question about diagnoses). The words are read
outside the question's named values ("drainage …, diagnostic" is a procedure's title, "bariatric
surgery status" a diagnosis'), and only a question that names one side and not the other is judged.
"""

from __future__ import annotations

import functools
import re

from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.reading import Reading
from core.match.template import parsed_sql

# subject -> (what the question says of it, the tables that hold it); each pair is one choice.
_DIAGNOSES = ("diagnoses", re.compile(r"\bdiagnos[a-z]*"), frozenset({"diagnoses_icd", "d_icd_diagnoses"}))
_PROCEDURES = (
    "procedures",
    # "the most common treatments": train's every treatment is a procedure
    re.compile(r"\b(?:procedur[a-z]*|surger(?:y|ies)|surgical|operations?|treatments?)\b"),
    frozenset({"procedures_icd", "d_icd_procedures"}),
)
_DRUGS = (
    "drugs",
    re.compile(r"\b(?:drugs?|medications?|medicines?|meds|prescri[a-z]*)\b"),
    frozenset({"prescriptions"}),
)
SUBJECTS = (
    (_DIAGNOSES, _PROCEDURES),
    # "the most common treatments" are not the most prescribed drugs (issue 26, the 10 % library); a
    # pair of its own, so that "prescribed after the diagnosis" still judges diagnoses against procedures
    (_PROCEDURES, _DRUGS),
    (
        ("input events", re.compile(r"\b(?:inputs?|intakes?)\b"), frozenset({"inputevents"})),
        ("output events", re.compile(r"\b(?:outputs?)\b"), frozenset({"outputevents"})),
    ),
)


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    template = candidate.template
    every = template_tables(template.sql_template, template.dialect)
    answered = answer_tables(template.sql_template, template.dialect)
    for pair, said in zip(SUBJECTS, subjects_said(reading.masked), strict=True):
        if len(said) != 1:
            continue
        name, _, own = said[0]
        (other, _, theirs) = next(s for s in pair if s is not said[0])
        # A template that reads both sides ("the top 3 diagnoses after procedure X") is judged by the
        # side it returns: "the top 3 procedures after X" is not its question (issue 26).
        both = every & theirs and every & own
        tables = answered if both and answered & (own | theirs) else every
        if tables & theirs and not tables & own:
            return [
                R.Reason(
                    R.SUBJECT_TABLE, f"This question is about {name}, the verified question about {other}."
                )
            ]
    return []


@functools.lru_cache(maxsize=4096)
def subjects_said(masked: str) -> tuple[tuple[tuple, ...], ...]:
    """For each pair of SUBJECTS, those of its subjects the question says outside its named values
    (`masked`: the question's masked text). Read once per question, not once per template: every
    template and composition tried for a question asks it (67,000 times in a train calibration).
    It reads the text alone (and this module's patterns)."""
    text = re.sub(r"\{[^}]*\}", " ", masked.lower())  # named values out
    return tuple(tuple(s for s in pair if s[1].search(text)) for pair in SUBJECTS)


@functools.lru_cache(maxsize=32768)
def template_tables(sql: str, dialect: str) -> frozenset[str]:
    """The (unqualified, lower-case) tables a template's SQL reads. Kept for as many SQL texts as a
    calibration meets (the library's and ~20,000 compositions', a few names each): a forgotten one
    is parsed again, since the parse cache (template.parsed_sql) holds far fewer."""
    try:
        tree = parsed_sql(sql, dialect)  # the template's one parse: only read here
    except (SqlglotError, ValueError, RecursionError):
        return frozenset()
    return frozenset(t.name.lower() for t in tree.find_all(exp.Table))


@functools.lru_cache(maxsize=32768)
def answer_tables(sql: str, dialect: str) -> frozenset[str]:
    """The tables the outermost SELECT reads itself (its FROM and JOINs, not its subqueries): what
    the template returns rows of. Why: where a template reads both sides of a subject pair, the side
    it answers with is its subject; the other only conditions it."""
    try:
        tree = parsed_sql(sql, dialect)  # the template's one parse: only read here
    except (SqlglotError, ValueError, RecursionError):
        return frozenset()
    if not isinstance(tree, exp.Select):
        return frozenset()
    sources = [tree.args.get("from_"), *(tree.args.get("joins") or [])]
    return frozenset(s.this.name.lower() for s in sources if s is not None and isinstance(s.this, exp.Table))
