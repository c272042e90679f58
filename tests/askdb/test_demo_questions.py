"""A new researcher's questions on the demo (tests/askdb/demo_questions.py), through the app's own match
stage with the demo library, and no LLM: none answered wrong, and at least a floor answered right.

Right means the answer's rows are the hand-written SQL's rows on the same clinical database (each
column of the hand-written result is a column of the answer, same values, same row count); a
question whose expected outcome is None must be declined. A decline is never wrong here (the
researcher is told why and can ask for an answer); a wrong answer always is.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from askdb.adapters.ports import DjangoPorts
from askdb.services.calibration import library_cross_validate
from askdb.services.exports import examples_import
from core import match
from core.engine import ExecutionFailure
from tests.askdb.demo_questions import DEMO_QUESTIONS

pytestmark = pytest.mark.django_db

TRAIN = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "mimiciv" / "train.json"
# Answered right with the demo library, measured when the questions were written (baseline 39 of 67;
# 47 with spelling, number words and synonyms; 50 with group-by wording or the aggregate swap)
# and raised as the reading improves: a change that answers fewer fails here.
RIGHT_FLOOR = 50


@pytest.fixture
def ports(source):
    items = [{"question": i["question"], "sql": i.get("sql") or ""} for i in json.loads(TRAIN.read_text())]
    examples_import(source=source, items=items, execute=False, origin="demo")
    source.library_calibration = library_cross_validate(source=source)
    source.save(update_fields=["library_calibration"])
    return DjangoPorts(source, chat=None, timeout_s=30, row_cap=1000)


def _cell(value):
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float | Decimal):
        return round(float(value), 3)
    return str(value)


def _columns(result) -> list[list]:
    rows = [tuple(_cell(v) for v in row) for row in result.rows]
    width = len(result.columns)
    return [sorted((row[i] for row in rows), key=repr) for i in range(width)]


def same_answer(answer, expected) -> bool:
    """Every column of the expected result is a column of the answer (same values), same row count."""
    if len(answer.rows) != len(expected.rows):
        return False
    got = _columns(answer)
    return all(column in got for column in _columns(expected))


def _fill(ports, text: str) -> str:
    patient = ports.execute(
        "SELECT subject_id FROM mimiciv_hosp.admissions GROUP BY subject_id ORDER BY COUNT(*) DESC, subject_id LIMIT 1"
    ).rows[0][0]
    year = ports.execute(
        "SELECT EXTRACT(YEAR FROM admittime) AS y FROM mimiciv_hosp.admissions GROUP BY y "
        "ORDER BY COUNT(*) DESC, y LIMIT 1"
    ).rows[0][0]
    return text.replace("{patient}", str(patient)).replace("{year}", str(int(year)))


def outcomes(ports) -> dict[str, list[str]]:
    """Each question's outcome: right, wrong or declined (the wrong ones with what answered them)."""
    out: dict[str, list[str]] = {"right": [], "wrong": [], "declined": []}
    for question, expected_sql in DEMO_QUESTIONS:
        question = _fill(ports, question)
        results, threshold = ports.library_match(question, ports.embed(question))
        # As the engine decides: confident competitors that bind to other SQL must agree.
        best = match.decide_answer(results, threshold, ports.execute, failure=ExecutionFailure,
                                   rows_of=lambda result: result.rows).best  # fmt: skip
        if best is None:
            why = ",".join(results[0].reason_codes) if results else "no template"
            out["declined" if expected_sql else "right"].append(f"{question} [{why}]")
        elif expected_sql is None:
            out["wrong"].append(f"{question} -> {best.example_question}")
        elif same_answer(ports.execute(best.sql), ports.execute(_fill(ports, expected_sql))):
            out["right"].append(question)
        else:
            out["wrong"].append(f"{question} -> {best.example_question}: {best.sql}")
    return out


def test_a_new_researchers_questions_are_answered_right_or_declined(ports):
    found = outcomes(ports)
    print(json.dumps({k: len(v) for k, v in found.items()}), json.dumps(found, indent=1))
    assert not found["wrong"], found["wrong"]
    assert len(found["right"]) >= RIGHT_FLOOR, found


def test_the_questions_are_many_and_of_both_kinds():
    assert len(DEMO_QUESTIONS) >= 60
    assert len({q for q, _ in DEMO_QUESTIONS}) == len(DEMO_QUESTIONS)
    assert sum(sql is None for _, sql in DEMO_QUESTIONS) >= 5
