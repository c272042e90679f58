"""The match stage's refusal rules, in the order they run: ONE list, `RULES`.

A rule is a function `(reading, candidate, bound) -> list[Reason]`: the question as read once
(`reading.Reading`), the template tried with its family of paraphrases (`candidate.TemplateCandidate`)
and what binding made of the question's values (`binding.Bound`), to the reasons it refuses the
template for (usually one; none when it has nothing against it). A rule only reads its arguments.

Each runs at one stage of matching one template:
- QUESTION: before any value is looked up (a template refused here costs nothing more);
- TEMPLATE: what the template itself needs said (its anchors, its fixed values);
- BOUND: after the question's values are bound to the template's slots (the meaning guard);
- SQL: after the bound SQL is built and validated (questions to the source, through `bound.probe`).
`alone`: the rule runs only when no rule (and no binding step) has refused yet.

Binding itself refuses what it cannot place (binding.py: extra_value, value_missing, value_not_found,
and sql_invalid when the bound SQL does not validate); those are steps of binding, not rules.
Refusals that compare the results of several templates for one question (one word read as values
of two columns) are in `value_ambiguous` and run after every template was tried.

To add a rule: a module here with its word lists beside it, a code in `reasons.py`, a line in
`RULES`, and fixture cases (tests/core/match/fixtures): `--update` shows what it changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.reading import Reading
from core.match.rules import (
    anchors,
    asks_for,
    contrary_words,
    operators,
    subject_table,
    value_longer,
    value_placement,
    value_together,
    words_missing,
    words_unexplained,
)

QUESTION, TEMPLATE, BOUND, SQL = "question", "template", "bound", "sql"

Check = Callable[[Reading, TemplateCandidate, Bound], list[R.Reason]]


@dataclass(frozen=True)
class Rule:
    name: str
    stage: str
    check: Check
    alone: bool = True


RULES: tuple[Rule, ...] = (
    Rule("operators", QUESTION, operators.check, alone=False),
    Rule("asks_for_name", QUESTION, asks_for.name),
    Rule("asks_for_time", QUESTION, asks_for.time),
    Rule("asks_for_value", QUESTION, asks_for.value),
    Rule("subject_table", QUESTION, subject_table.check),
    Rule("anchor", TEMPLATE, anchors.anchor, alone=False),
    Rule("fixed_value", TEMPLATE, anchors.fixed_value, alone=False),
    Rule("contrary_words", BOUND, contrary_words.check),
    Rule("words_missing", BOUND, words_missing.check),
    Rule("words_unexplained", BOUND, words_unexplained.check),
    Rule("value_placement", SQL, value_placement.check),
    Rule("value_together", SQL, value_together.check),
    Rule("value_longer", SQL, value_longer.check),
)

_BY_STAGE = {stage: tuple(r for r in RULES if r.stage == stage) for stage in (QUESTION, TEMPLATE, BOUND, SQL)}


def apply_rules(stage: str, reading: Reading, candidate: TemplateCandidate, bound: Bound) -> None:
    """Run the rules of one stage in order, recording their refusals on `bound` (an SQL-stage
    refusal also drops the bound SQL: it is not to be run)."""
    for rule in _BY_STAGE[stage]:
        if rule.alone and (bound.reasons or (stage == SQL and bound.sql is None)):
            continue
        for reason in rule.check(reading, candidate, bound):
            bound.refuse(reason.code, reason.text)
            if stage == SQL:
                bound.sql = None
