"""The processes of one calibration share the source's answers (calibration_context._Shared): a probe or
a compared result one process asked is read, not asked again, by another; what failed (a timeout
under load) is never shared, and a file that cannot be used only costs the sharing."""

from __future__ import annotations

from collections import Counter

from askdb.services.calibration_context import _cv_callbacks, _Shared, shared_answers
from infra.adapters.clinical import ExecutionError, QueryResult


class Executor:
    """A source that records what it is asked; "slow" statements run out of time, "none" ones
    return no row, and each statement's rows name it (so a wrongly shared answer shows)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def execute(self, sql: str, **_: object) -> QueryResult:
        self.asked.append(sql)
        if "slow" in sql:
            raise ExecutionError("the query ran longer than 5 s and was stopped", code="timeout")
        rows = [] if "none" in sql else [(len(sql), sql[-3:])]
        return QueryResult(columns=("x", "y"), rows=rows, truncated=False, elapsed_ms=1.0)


def _process(path: str):
    """One process's callbacks (a fresh _Shared: its own connection, as after spawn)."""
    executor, timeouts = Executor(), Counter()
    _lookup, probe, same = _cv_callbacks(executor, None, timeouts, _Shared(path))
    return executor, timeouts, probe, same


def test_a_probe_and_a_compared_result_are_asked_once_in_all_processes(tmp_path):
    path = shared_answers(tmp_path / "library.pickle")
    first, _, probe_a, same_a = _process(path)
    second, _, probe_b, same_b = _process(path)
    assert probe_a("SELECT 1 FROM t") is True
    assert probe_a("SELECT 1 FROM none") is False
    assert same_a("SELECT a FROM t", "SELECT b FROM u") is False  # different rows: both ran here
    assert probe_b("SELECT 1 FROM t") is True  # the first process's answers, the same
    assert probe_b("SELECT 1 FROM none") is False
    assert same_b("SELECT a FROM t", "SELECT b FROM u") is False
    assert second.asked == []  # nothing asked again of the database
    assert len(first.asked) == 4
    assert probe_b("SELECT 2 FROM t") is True  # what neither asked yet is asked
    assert second.asked == ["SELECT 2 FROM t"]


def test_a_timeout_is_not_shared_each_process_asks_and_counts_its_own(tmp_path):
    """Attack: a process on a loaded moment times out; had it shared "no row", the other process
    would read a timeout as the data's answer and decide otherwise without counting any timeout."""
    path = shared_answers(tmp_path / "library.pickle")
    _first, timeouts_a, probe_a, same_a = _process(path)
    second, timeouts_b, probe_b, same_b = _process(path)
    assert probe_a("SELECT 1 WHERE slow") is False
    assert same_a("SELECT 2 /* slow */", "SELECT 2 /* gold */") is False
    probe_b("SELECT 1 WHERE slow")
    same_b("SELECT 2 /* slow */", "SELECT 2 /* gold */")
    assert "SELECT 1 WHERE slow" in second.asked and "SELECT 2 /* slow */" in second.asked
    assert timeouts_a == timeouts_b == {"probes": 1, "statements": 1}
    assert "SELECT 2 /* gold */" not in second.asked  # the gold's rows, got without failure, are shared


def test_an_unusable_file_only_costs_the_sharing(tmp_path):
    (tmp_path / "answers.sqlite").mkdir()  # a folder where the file should be: sqlite cannot open it
    executor, _, probe, same = _process(str(tmp_path / "answers.sqlite"))
    assert probe("SELECT 1 FROM t") is True and probe("SELECT 1 FROM none") is False
    assert same("SELECT a FROM t", "SELECT a FROM t") is True
    assert executor.asked == ["SELECT 1 FROM t", "SELECT 1 FROM none"]
