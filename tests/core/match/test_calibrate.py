"""The one decision to answer (calibrate.decide_answer) the engine's logic and the benchmark share,
and the rules' list (rules.RULES)."""

from __future__ import annotations

import dataclasses

import pytest

from core.match import RULES, MatchResult, decide_answer, read_question
from core.match import reasons as R
from core.match.rules import BOUND, QUESTION, SQL, TEMPLATE


def result(example_id: int, sql: str, confidence: float) -> MatchResult:
    return MatchResult(example_id, f"question {example_id}", sql, (), {"hard_ok": 1.0}, confidence)


class Failed(Exception):
    pass


def run_on(tables: dict[str, list]):
    def run(sql: str):
        if sql not in tables:
            raise Failed(f"no such table in {sql}")
        return tables[sql]

    return run


def test_the_best_confident_result_answers_when_its_competitors_agree():
    results = [result(1, "a", 0.99), result(2, "b", 0.95), result(3, "c", 0.2)]
    answer = decide_answer(results, 0.9, run_on({"a": [(1,)], "b": [(1,)]}), failure=Failed)
    assert answer.best is results[0] and answer.rows == [(1,)] and not answer.refusal
    assert [c.example_id for c in answer.competitors] == [2]


def test_competitors_that_disagree_leave_the_question_unanswered():
    results = [result(1, "a", 0.99), result(2, "b", 0.95)]
    answer = decide_answer(results, 0.9, run_on({"a": [(1,)], "b": [(2,)]}), failure=Failed)
    assert answer.best is None and answer.refusal == R.DISAGREE


def test_a_competitor_that_fails_leaves_the_question_unanswered():
    results = [result(1, "a", 0.99), result(2, "b", 0.95)]
    answer = decide_answer(results, 0.9, run_on({"a": [(1,)]}), failure=Failed)
    assert answer.best is None and answer.refusal == R.SQL_FAILED


def test_what_is_not_a_failure_goes_to_the_caller():
    """A privacy refusal (any exception the caller does not name as a failure) is not swallowed."""

    def run(sql: str):
        raise PermissionError("aggregate-only")

    with pytest.raises(PermissionError):
        decide_answer([result(1, "a", 0.99)], 0.9, run, failure=Failed)


def test_nothing_confident_is_no_answer_and_runs_nothing():
    def run(sql: str):
        raise AssertionError("ran SQL for an abstention")

    assert decide_answer([result(1, "a", 0.5)], 0.9, run, failure=Failed).best is None


def test_a_result_refused_by_a_rule_never_answers_whatever_its_confidence():
    refused = dataclasses.replace(result(1, "a", 0.99), features={"hard_ok": 0.0})
    assert decide_answer([refused], 0.5, run_on({"a": [(1,)]}), failure=Failed).best is None


def test_rules_run_in_stage_order_and_each_names_its_stage():
    stages = [r.stage for r in RULES]
    order = [QUESTION, TEMPLATE, BOUND, SQL]
    assert stages == sorted(stages, key=order.index)
    assert len({r.name for r in RULES}) == len(RULES)


def test_the_reading_is_frozen():
    reading = read_question("what was the first glucose value of patient 10004235 in 2150?")
    assert [s.type for s in reading.typed] == ["patient_id", "year"]
    assert reading.ops["order"] == "first"
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.question = "something else"  # type: ignore[misc]
