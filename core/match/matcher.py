"""One template tried for one question: the rules in order (rules.RULES), binding, risk.

    reading ─► QUESTION rules ─► TEMPLATE rules ─► bind values ─► BOUND rules ─► bind SQL ─► SQL rules ─► risk

Any refusal forces confidence 0 (a wrong answer is far worse than an abstention); what passes gets a
confidence from the calibration (library.match_library replaces it with the fitted P(correct)).

Design, in three decisions:
- Templates (template.py, build.py) turn an approved example into SQL with typed slots. A new
  question that is the example with other values reuses reviewer-approved SQL: reproducible, free,
  milliseconds. Named values are linked to real database values through a caller-supplied lookup
  (the value index), so "fenofibrate" binds only if the prescriptions table has it.
- Hard rules before any score. An embedding barely moves between "first" and "last", "in 2150" and
  "since 2150", "average" and "count", yet the answer changes completely, and a wrong answer is far
  worse than an abstention. So any of these forces confidence 0: an operator differs
  (operators.question_operators), a slot cannot be bound, the question holds a value the template
  cannot place, a named value has no database match good enough, an anchor word of the example is
  missing, the bound SQL does not validate.
- A calibrated confidence for what is left. A small logistic model over match features (embedding
  similarity, masked-text similarity, word overlap, extra/missing content words, fuzziness of value
  links) with hand-set default coefficients; the library replaces it with P(correct)
  fitted by grouped cross-validation (calibrate.calibrate_library). Below the threshold: abstain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.match import reasons as R
from core.match.binding import MIN_VALUE_SCORE, Bound, bind_and_check, bind_values
from core.match.candidate import MatchResult, TemplateCandidate
from core.match.features import (
    masked_with,
    match_features,
    paraphrase_missing,
    refused_features,
    visit_words_compared,
)
from core.match.reading import Reading
from core.match.risk import DEFAULT_CALIBRATION, Calibration
from core.match.rules import BOUND, QUESTION, SQL, TEMPLATE, apply_rules
from core.match.values import ValueFinder, ValueLookup
from core.types import CatalogSchema


def match_one(
    reading: Reading,
    candidate: TemplateCandidate,
    *,
    lookup: ValueLookup,
    catalog: CatalogSchema | None = None,
    values: ValueFinder | None = None,
    probe: Callable[[str], bool] | None = None,
    calibration: Calibration = DEFAULT_CALIBRATION,
    min_value_score: float = MIN_VALUE_SCORE,
) -> MatchResult:
    """`candidate` tried for the question read as `reading`: refused (confidence 0, with its reasons)
    or bound, with the SQL to run and a confidence. `lookup` links named values to the database;
    `catalog` validates the bound SQL; `probe` asks the source the SQL rules' questions."""
    template = candidate.template
    bound = Bound(probe=probe)
    example_question = candidate.question or template.question
    if not template.usable:
        error = template.error or "no SQL"
        bound.refuse(
            R.NOT_USABLE, f"The verified question's SQL cannot be reused with other values ({error})."
        )
        return _result(candidate, example_question, bound, {}, 0.0, reading.question)
    apply_rules(QUESTION, reading, candidate, bound)
    if bound.reasons:  # no lookups for a template that cannot apply
        return _result(candidate, example_question, bound, {"operators_agree": 0.0}, 0.0, reading.question)
    apply_rules(TEMPLATE, reading, candidate, bound)
    bind_values(
        reading,
        template,
        candidate.family,
        bound,
        lookup=lookup,
        values=values,
        min_value_score=min_value_score,
    )
    apply_rules(BOUND, reading, candidate, bound)
    if not bound.reasons:
        bound.sql = bind_and_check(template, bound, catalog)
    apply_rules(SQL, reading, candidate, bound)
    if bound.reasons:  # refused: no risk model reads its features (confidence 0), only why it failed
        return _result(
            candidate, example_question, bound, refused_features(template, bound), 0.0, reading.question
        )
    compared = visit_words_compared(reading.ops, candidate.family)
    features = match_features(
        reading.question, candidate, template, bound, bound.runs, list(reading.quoted), compared
    )
    if candidate.family is not None:
        features["paraphrase_missing"] = float(paraphrase_missing(bound.said, candidate.family, reading.ops))
    confidence = calibration.predict(features)
    return _result(candidate, example_question, bound, features, confidence, reading.question)


def decide(results: Sequence[MatchResult], threshold: float) -> tuple[MatchResult | None, list[MatchResult]]:
    """The result to answer with (or None to abstain) and the other confident results.

    Two confident templates that bind to different SQL may still mean the same thing; the caller can
    execute the competitors and compare results (core.compare.results_match) and abstain
    when they disagree.
    """
    confident = [r for r in results if r.answers(threshold)]
    if not confident:
        return None, []
    best = confident[0]
    return best, [r for r in confident[1:] if r.sql != best.sql]


def _result(candidate, example_question, work, features, confidence, question) -> MatchResult:
    hard_ok = not work.reasons
    features = {"hard_ok": float(hard_ok), **features}
    bindings = tuple(work.bindings[s.name] for s in candidate.template.slots if s.name in work.bindings)
    return MatchResult(
        example_id=candidate.example_id,
        example_question=example_question,
        sql=work.sql if hard_ok else None,
        bindings=bindings,
        features=features,
        confidence=round(confidence, 4) if hard_ok else 0.0,
        reasons=tuple(work.reasons),
        reason_codes=tuple(work.codes),
        masked_question=masked_with(question, candidate.template, work),
    )
