"""Execution limits that hold even when validation is bypassed (issue 15, findings 1, 2, 6, 7).

Each test runs the probe that broke a limit against the real embedded PostgreSQL, as the reader
role generated SQL runs as, straight through the executor: no validation in between.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from core.validation import SqlValidationError, validate_sql
from infra import embedded
from infra.adapters.clinical import DEFAULT_RESULT_MAX_BYTES, ExecutionError, PostgresExecutor
from metadata_admin.clinical import loader
from tests.core.test_validation import CATALOG

U_PROBE = 'SELECT U&"\\0070g_sleep"(3) FROM mimiciv_hosp.patients u LIMIT 1'


@pytest.fixture(scope="module")
def reader(clinical_data) -> PostgresExecutor:
    """The executor as the app builds it, after the grants every data load applies."""
    loader.grant_read(clinical_data, embedded.READER_ROLE)
    return PostgresExecutor(embedded.pg_dsn(embedded.CLINICAL_DB, user=embedded.READER_ROLE))


def _refused_by_server(executor: PostgresExecutor, sql: str) -> ExecutionError:
    with pytest.raises(ExecutionError) as info:
        executor.execute(sql, timeout_s=10, row_cap=10)
    return info.value


def test_the_unicode_escaped_pg_sleep_probe_fails_twice(reader):
    with pytest.raises(SqlValidationError) as info:
        validate_sql(U_PROBE, CATALOG)
    assert "pg_sleep" in info.value.message
    error = _refused_by_server(reader, U_PROBE)
    assert error.code == "permission"
    assert "pg_sleep" in error.message


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT U&"\\0070g_sleep"(1)',
        "SELECT U&\"!0070g_sleep\" UESCAPE '!' (1)",
        "SELECT set_config('statement_timeout', '0', false)",
        "SELECT current_setting('data_directory')",
        "SELECT pg_advisory_lock(42)",
        "SELECT pg_try_advisory_xact_lock(42)",
        "SELECT pg_notify('askdb', 'x')",
        "SELECT pg_cancel_backend(0)",
        "SELECT pg_terminate_backend(0)",
        "SELECT pg_catalog.pg_terminate_backend(0)",
        "SELECT * FROM ts_stat('SELECT to_tsvector(rolname) FROM pg_roles')",
        "SELECT query_to_xml('SELECT 1', true, true, '')",
        "SELECT count(*) FROM pg_show_all_settings()",
        "SELECT count(*) FROM pg_stat_get_activity(NULL)",
        "SELECT count(*) FROM pg_stat_activity",
        "SELECT count(*) FROM pg_settings",
        "SELECT lo_create(0)",
    ],
)
def test_the_reader_may_not_call_signalling_settings_or_sql_string_functions(reader, sql):
    assert _refused_by_server(reader, sql).code == "permission"


def test_ordinary_functions_still_run_for_the_reader(reader):
    result = reader.execute(
        "SELECT count(*), round(avg(anchor_age)::numeric, 1), max(date_trunc('year', now())) "
        "FROM mimiciv_hosp.patients",
        timeout_s=10,
        row_cap=10,
    )
    assert result.rows[0][0] > 0


def test_the_repeat_byte_bomb_is_cut_with_a_message(reader):
    result = reader.execute(
        "SELECT repeat('x', 100000) FROM generate_series(1, 10000)",
        timeout_s=30,
        row_cap=10_000,
        max_bytes=2 * 1024 * 1024,
    )
    assert result.truncated
    assert 0 < result.row_count <= 21
    assert "cut" in result.truncated_reason and "2 MB" in result.truncated_reason
    assert DEFAULT_RESULT_MAX_BYTES == 20 * 1024 * 1024


def test_the_row_cap_still_applies_below_the_byte_cap(reader):
    result = reader.execute("SELECT g FROM generate_series(1, 500) g", timeout_s=10, row_cap=100)
    assert (result.row_count, result.truncated, result.truncated_reason) == (100, True, "")


def test_the_reader_has_a_temp_file_limit_it_cannot_lift(reader):
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        settings = conn.execute(
            "SELECT unnest(rolconfig) FROM pg_roles WHERE rolname = %s", (embedded.READER_ROLE,)
        ).fetchall()
    assert (f"temp_file_limit={embedded.READER_TEMP_FILE_LIMIT}",) in settings
    reader_dsn = embedded.pg_dsn(embedded.CLINICAL_DB, user=embedded.READER_ROLE)
    with psycopg.connect(reader_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SET temp_file_limit = -1")


@pytest.fixture
def small_temp_role(clinical_data):
    """A reader-like role whose temp_file_limit is 1 MB, to see the limit stop a query."""
    role = "askdb_temp_limit_test"
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB), autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f"ALTER ROLE \"{role}\" SET temp_file_limit = '1MB'")
        conn.execute(f"ALTER ROLE \"{role}\" SET work_mem = '64kB'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{embedded.CLINICAL_DB}" TO "{role}"')
    yield PostgresExecutor(embedded.pg_dsn(embedded.CLINICAL_DB, user=role))
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB), autocommit=True) as conn:
        conn.execute(f'REVOKE CONNECT ON DATABASE "{embedded.CLINICAL_DB}" FROM "{role}"')
        conn.execute(f'DROP ROLE "{role}"')


def test_temp_file_limit_stops_a_query_that_spills(small_temp_role):
    with pytest.raises(ExecutionError) as info:
        small_temp_role.execute(
            "SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g ORDER BY md5(g::text)",
            timeout_s=30,
            row_cap=10,
        )
    assert info.value.code == "resource_limit"
    assert "temporary" in info.value.message


def test_explain_holds_its_own_timeout(reader):
    with pytest.raises(ExecutionError) as info:
        reader.explain("SELECT length(repeat('x', 500000000))", timeout_s=1)
    assert info.value.code == "timeout"
    assert "planning" in info.value.message


def test_a_recursive_cte_bomb_is_stopped_by_the_timeout(reader):
    with pytest.raises(ExecutionError) as info:
        reader.execute(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
            timeout_s=1,
            row_cap=10,
        )
    assert info.value.code == "timeout"
    assert "longer than 1 s" in info.value.message


def test_a_cancelled_query_is_reported_as_cancelled(reader):
    outcome: dict = {}

    def run() -> None:
        try:
            reader.execute(
                "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
                timeout_s=60,
                row_cap=1,
            )
        except ExecutionError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB), autocommit=True) as admin:
        cancelled = False
        for _ in range(200):  # until the query shows up: a bounded wait, not a timed assertion
            cancelled = admin.execute(
                # A named cursor runs at FETCH, so the active statement is the FETCH, not the SQL.
                "SELECT bool_or(pg_cancel_backend(pid)) FROM pg_stat_activity "
                "WHERE usename = %s AND state = 'active' AND query LIKE 'FETCH%%' AND pid <> pg_backend_pid()",
                (embedded.READER_ROLE,),
            ).fetchone()[0]
            if cancelled:
                break
            time.sleep(0.05)
    worker.join()
    assert cancelled
    error = outcome["error"]
    assert error.code == "cancelled"
    assert "cancelled" in error.message and "longer than" not in error.message
