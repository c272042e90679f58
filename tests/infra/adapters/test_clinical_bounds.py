"""Bounded execution on PostgreSQL (issue 24, item 5), with validation skipped.

The worker must never receive a row, or a result, larger than the byte cap: the server stops the
query first (the executor's running-size wrapper), and a result cut that way says so, also when
it is cut to no row at all. Memory is measured in a fresh process (ru_maxrss is a high-water mark).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra import embedded
from infra.adapters.clinical import ExecutionError, PostgresExecutor
from metadata_admin.clinical import loader

ROOT = Path(__file__).resolve().parents[3]
MB = 1024 * 1024


@pytest.fixture(scope="module")
def reader_dsn(clinical_data) -> str:
    loader.grant_tiers(clinical_data, {embedded.READER_ROLE: ()})
    return embedded.pg_dsn(embedded.CLINICAL_DB, user=embedded.READER_ROLE)


@pytest.fixture(scope="module")
def reader(reader_dsn) -> PostgresExecutor:
    return PostgresExecutor(reader_dsn)


def _in_fresh_process(dsn: str, call: str) -> tuple[int, str]:
    """(MB the process grew by while running `call` on executor `ex`, what the call printed)."""
    script = f"""
import resource, sys
sys.path.insert(0, {str(ROOT)!r})
from infra.adapters.clinical import ExecutionError, PostgresExecutor
ex = PostgresExecutor({dsn!r})
ex.execute("SELECT 1", timeout_s=10, row_cap=1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    out = {call}
except ExecutionError as exc:
    out = "ExecutionError " + exc.code
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
print(out)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grown, printed = done.stdout.split("\n", 1)
    return int(grown), printed.strip()


def test_a_row_larger_than_the_cap_never_reaches_the_worker(reader_dsn):
    grown, printed = _in_fresh_process(
        reader_dsn,
        "(lambda r: (r.row_count, r.truncated, r.truncated_reason))("
        "ex.execute(\"SELECT 1 AS n, repeat('x', 200000000) AS s\", timeout_s=120, row_cap=10, "
        "max_bytes=20 * 1024 * 1024))",
    )
    assert grown < 60, f"the worker grew by {grown} MB"
    assert printed.startswith("(0, True, 'the result was cut before its first row")


def test_rows_that_grow_after_small_ones_are_stopped_by_the_server(reader_dsn):
    """A batch sized by 100 small rows would have asked for 2,000 rows of 19 MB (38 GB)."""
    grown, printed = _in_fresh_process(
        reader_dsn,
        "(lambda r: (r.row_count, r.truncated))(ex.execute("
        "\"SELECT CASE WHEN g > 100 THEN repeat('x', 19000000) ELSE 'x' END FROM generate_series(1, 3000) g\", "
        "timeout_s=120, row_cap=10000, max_bytes=20 * 1024 * 1024))",
    )
    assert grown < 120, f"the worker grew by {grown} MB"
    assert printed == "(101, True)"


def test_a_cut_keeps_the_rows_before_it(reader):
    """The FETCH that hits the cap fails whole; the rows of its batch before the crossing are read again."""
    result = reader.execute(
        "SELECT g, repeat('x', 100000) FROM generate_series(1, 10000) g",
        timeout_s=30,
        row_cap=10_000,
        max_bytes=2 * MB,
    )
    assert result.truncated
    assert 18 <= result.row_count <= 21
    assert [r[0] for r in result.rows] == list(range(1, result.row_count + 1))
    assert result.truncated_reason.startswith(f"the result was cut after {result.row_count} rows")


def test_explain_never_receives_a_folded_constant(reader_dsn):
    grown, printed = _in_fresh_process(
        reader_dsn,
        "ex.explain(\"SELECT 1 FROM mimiciv_hosp.patients WHERE gender = repeat('x', 100000000)\", timeout_s=120)",
    )
    assert grown < 60, f"the worker grew by {grown} MB"
    assert printed == ""


@pytest.mark.parametrize(
    ("sql", "columns", "rows"),
    [
        ("SELECT 1 AS a -- a trailing comment", ("a",), [(1,)]),
        ("SELECT 1 AS a;", ("a",), [(1,)]),
        ("SELECT 1 AS a ; \n", ("a",), [(1,)]),
        ("SELECT 1 AS x, 2 AS x", ("x", "x"), [(1, 2)]),
        ("SELECT g FROM generate_series(1, 4) g ORDER BY g DESC", ("g",), [(4,), (3,), (2,), (1,)]),
        ("SELECT count(*) FROM generate_series(1, 3)", ("count",), [(3,)]),
        ("SELECT 'a%b' AS p, '{x}' AS q", ("p", "q"), [("a%b", "{x}")]),
        ("SELECT 7 AS askdb_bytes, 8 AS askdb_q", ("askdb_bytes", "askdb_q"), [(7, 8)]),
    ],
)
def test_the_wrapper_keeps_the_query_as_written(reader, sql, columns, rows):
    result = reader.execute(sql, timeout_s=10, row_cap=10)
    assert (result.columns, result.rows, result.truncated) == (columns, rows, False)


def test_column_types_come_from_the_query(reader):
    result = reader.execute("SELECT 1::int AS i, 'x'::text AS t, now()::date AS d", timeout_s=10, row_cap=1)
    assert result.column_types == ("int4", "text", "date")


def test_the_900_mb_string_of_the_issue_is_stopped_without_reaching_the_worker(reader_dsn):
    """The issue's probe (2.7 GB in the worker before): the server stops it, at the byte cap or,
    while it is still building the string, at the statement timeout; the worker never holds it."""
    grown, printed = _in_fresh_process(
        reader_dsn,
        "(lambda r: (r.row_count, r.truncated))("
        "ex.execute(\"SELECT repeat('x', 900000000)\", timeout_s=5, row_cap=10))",
    )
    assert grown < 60, f"the worker grew by {grown} MB"
    assert printed in ("(0, True)", "ExecutionError timeout")


def test_a_statement_runs_read_only_on_a_database_that_does_not_default_to_it(scratch_database):
    """READ ONLY must come from the executor, not from the database's defaults: a hospital's server
    need not set default_transaction_read_only. (psycopg opens a transaction before the first
    statement, so an explicit BEGIN READ ONLY after it was only a warning.) Validation is skipped
    here: this is the executor's own guard, with a role that may write."""
    import psycopg

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE s")
    ex = PostgresExecutor(scratch_database)
    for _ in range(2):  # a new connection, then the kept one
        with pytest.raises(ExecutionError, match="read-only transaction"):
            ex.execute("SELECT nextval('s') AS n", timeout_s=5, row_cap=1)  # a write inside a SELECT
        assert ex.execute("SELECT is_called FROM s", timeout_s=5, row_cap=1).rows == [(False,)]


def test_a_statements_settings_are_sent_together_and_hold_for_it_alone(scratch_database):
    """The SET LOCALs go in one string (one round trip): each still holds for its statement, the
    next statement on the kept connection gets its own timeout, and a schema name with a quote and
    a semicolon in it stays one identifier (no second statement)."""
    ex = PostgresExecutor(scratch_database, search_path=("public", 'odd"; SET ROLE nobody; --'))
    shown = (
        "SELECT current_setting('statement_timeout') AS t, current_setting('transaction_read_only') AS ro, "
        "current_setting('standard_conforming_strings') AS scs, current_setting('search_path') AS path, "
        "current_setting('idle_in_transaction_session_timeout') AS idle, current_user AS u"
    )
    timeout, read_only, strings, path, idle, user = ex.execute(shown, timeout_s=2, row_cap=1).rows[0]
    assert (timeout, read_only, strings, idle) == ("2s", "on", "on", "1min")
    assert path == 'public, "odd""; SET ROLE nobody; --"' and user != "nobody"
    assert ex.execute(shown, timeout_s=7.5, row_cap=1).rows[0][0] == "7500ms"  # per statement
    with pytest.raises(ExecutionError) as info:
        ex.execute("SELECT pg_sleep(2) AS s", timeout_s=0.2, row_cap=1)
    assert info.value.code == "timeout"
