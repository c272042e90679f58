"""A calibration counts its statements that ran out of time (calibration_context._Timed), so that a
loaded run whose report differs shows whether a timeout decided: a probe's and a compared result's
timeout counted once each (each is asked of the database once), other failures not at all."""

from __future__ import annotations

from collections import Counter

from askdb.services.calibration_context import _cv_callbacks
from infra.adapters.clinical import ExecutionError, QueryResult


class Executor:
    """A source whose "slow" statements run out of time and whose "bad" ones fail otherwise."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def execute(self, sql: str, **_: object) -> QueryResult:
        self.asked.append(sql)
        if "slow" in sql:
            raise ExecutionError("the query ran longer than 5 s and was stopped", code="timeout")
        if "bad" in sql:
            raise ExecutionError("no such column: bad", code="sql_error")
        return QueryResult(columns=("x",), rows=[(1,)], truncated=False, elapsed_ms=1.0)


def test_probes_and_compared_results_that_time_out_are_counted_once_each():
    executor, timeouts = Executor(), Counter()
    _lookup, probe, same = _cv_callbacks(executor, None, timeouts)
    assert probe("SELECT 1 WHERE slow") is False  # a probe that times out confirms nothing
    assert probe("SELECT 1 WHERE slow") is False  # asked again: remembered, not counted again
    assert probe("SELECT 1 WHERE bad") is False  # failed, but no timeout
    assert probe("SELECT 1") is True
    assert timeouts == {"probes": 1}
    assert same("SELECT 2 /* slow */", "SELECT 2 /* gold */") is False  # a result that timed out
    assert same("SELECT 2 /* slow */", "SELECT 2 /* other gold */") is False
    assert same("SELECT 3 /* bad */", "SELECT 3 /* gold */") is False
    assert timeouts == {"probes": 1, "statements": 1}
    assert executor.asked.count("SELECT 1 WHERE slow") == 1
