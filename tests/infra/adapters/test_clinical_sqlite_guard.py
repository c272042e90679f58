"""SQLite's authorizer and limits hold with validation skipped (issue 24, items 2 and 5).

Every statement goes straight to SqliteExecutor, as if it had slipped past validation: the engine
itself must refuse ATTACH, VACUUM INTO, PRAGMA, writes, functions off the allow-list, the
internals, and a sensitive column for the tier without view_sensitive; and a query must not make
this process build a huge value.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from infra.adapters.clinical import ExecutionError, SqliteExecutor, executor_for

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def clinical_file(tmp_path) -> Path:
    path = tmp_path / "clinical.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE patients (subject_id INTEGER PRIMARY KEY, gender TEXT, anchor_age INTEGER, dod TEXT);
        CREATE TABLE admissions (hadm_id INTEGER PRIMARY KEY, subject_id INTEGER, deathtime TEXT);
        INSERT INTO patients VALUES (1, 'F', 60, '2180-01-02'), (2, 'M', 70, NULL), (3, 'F', 50, NULL);
        INSERT INTO admissions VALUES (10, 1, '2180-01-02 10:00:00'), (11, 2, NULL);
        CREATE INDEX admissions_subject ON admissions (subject_id);
        CREATE VIEW female AS SELECT subject_id, anchor_age FROM patients WHERE gender = 'F';
        """
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def full(clinical_file) -> SqliteExecutor:
    return SqliteExecutor(str(clinical_file))


@pytest.fixture
def restricted(clinical_file) -> SqliteExecutor:
    return SqliteExecutor(str(clinical_file), hidden_columns=("patients.dod", "admissions.deathtime"))


def _refused(executor: SqliteExecutor, sql: str) -> ExecutionError:
    with pytest.raises(ExecutionError) as info:
        executor.execute(sql, timeout_s=10, row_cap=10)
    return info.value


@pytest.mark.parametrize(
    "sql",
    [
        "ATTACH DATABASE '{dir}/attached.sqlite' AS other",
        "VACUUM INTO '{dir}/copy.sqlite'",
        "VACUUM",
        "DETACH DATABASE main",
        "PRAGMA query_only = OFF",
        "PRAGMA query_only",
        "PRAGMA table_info(patients)",
        "PRAGMA hard_heap_limit = 0",
        "SELECT * FROM pragma_table_info('patients')",
        "SELECT * FROM pragma_database_list",
        "SELECT sql FROM sqlite_master",
        "SELECT * FROM sqlite_schema",
        "SELECT load_extension('/tmp/evil')",
        "SELECT sqlite_version()",
        "SELECT zeroblob(10)",
        "SELECT count(*) FROM sqlite_master",
        "INSERT INTO patients VALUES (4, 'M', 1, NULL)",
        "UPDATE patients SET anchor_age = 0",
        "DELETE FROM patients",
        "CREATE TABLE t (a)",
        "CREATE TEMP TABLE t (a)",
        "CREATE TEMP VIEW v AS SELECT 1",
        "DROP TABLE patients",
        "BEGIN",
        "SAVEPOINT s",
        "ANALYZE",
        "REINDEX",
    ],
)
def test_the_authorizer_denies_it_even_when_validation_is_skipped(full, tmp_path, sql):
    error = _refused(full, sql.format(dir=tmp_path))
    assert error.code == "permission", error.message
    assert not (tmp_path / "attached.sqlite").exists()
    assert not (tmp_path / "copy.sqlite").exists()


def test_attach_is_also_refused_by_the_limit_on_attached_databases(full, tmp_path):
    """Belt and braces: SQLITE_LIMIT_ATTACHED is 0, so ATTACH fails even without the authorizer."""
    conn, _ = full._guarded(1024 * 1024)
    conn.set_authorizer(None)
    with pytest.raises(sqlite3.OperationalError):
        conn.execute(f"ATTACH DATABASE '{tmp_path}/attached.sqlite' AS other")
    conn.close()
    assert not (tmp_path / "attached.sqlite").exists()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT dod FROM patients",
        "SELECT * FROM patients",
        "SELECT p.* FROM patients p",
        "SELECT count(dod) FROM patients",
        "SELECT count(*) FROM patients WHERE dod IS NOT NULL",
        "WITH t(k) AS (SELECT dod FROM patients) SELECT k FROM t",
        "SELECT (SELECT max(dod) FROM patients)",
        'SELECT "DOD" FROM patients',
        "SELECT deathtime FROM admissions",
    ],
)
def test_the_restricted_tier_is_refused_a_sensitive_column_not_given_null(restricted, full, sql):
    """SQLITE_DENY, not SQLITE_IGNORE: COUNT(dod) fails instead of quietly answering 0."""
    error = _refused(restricted, sql)
    assert error.code == "permission"
    assert "dod" in error.message.lower() or "deathtime" in error.message.lower()
    assert full.execute(sql, timeout_s=10, row_cap=10).columns


def test_the_restricted_tier_answers_ordinary_questions(restricted):
    result = restricted.execute(
        "SELECT p.gender, count(*), avg(p.anchor_age), max(strftime('%Y', a.hadm_id || '')) FROM patients p "
        "LEFT JOIN admissions a ON a.subject_id = p.subject_id WHERE p.gender LIKE 'F%' GROUP BY p.gender",
        timeout_s=10,
        row_cap=10,
    )
    assert result.rows[0][:2] == ("F", 2)
    assert restricted.execute("SELECT count(*) FROM patients", timeout_s=10, row_cap=1).rows == [(3,)]
    assert restricted.execute("SELECT * FROM female ORDER BY 1", timeout_s=10, row_cap=5).rows == [
        (1, 60),
        (3, 50),
    ]
    assert "patients" in restricted.explain("SELECT gender FROM patients", timeout_s=5).lower()


def test_explain_is_guarded_too(restricted, tmp_path):
    with pytest.raises(ExecutionError) as info:
        restricted.explain(f"ATTACH DATABASE '{tmp_path}/a.sqlite' AS a", timeout_s=5)
    assert info.value.code == "permission"
    with pytest.raises(ExecutionError):
        restricted.explain("SELECT dod FROM patients", timeout_s=5)


def test_a_source_executor_url_carries_the_hidden_columns(clinical_file):
    executor = executor_for(f"sqlite:///{clinical_file}", hidden_columns=("patients.dod",))
    assert _refused(executor, "SELECT dod FROM patients").code == "permission"


_TEN = "'xxxxxxxxxx'"
_NESTED = "'xxxxxxxxxx'"
for _ in range(9):  # ten times longer at each level: 10^10 characters asked for
    _NESTED = f"replace({_NESTED}, 'x', {_TEN})"


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT length({_NESTED})",
        "SELECT length(group_concat(printf('%.*c', 100000, 'x'))) FROM "
        "(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1000) SELECT n FROM r)",
    ],
)
def test_a_huge_value_fails_at_the_length_limit(full, sql):
    error = _refused(full, sql)
    assert error.code == "resource_limit", error.message


def test_the_printf_memory_bomb_builds_nothing(full):
    """printf('%.*c', 500000000, 'x') gives NULL under the length limit instead of 500 MB."""
    result = full.execute("SELECT printf('%.*c', 500000000, 'x')", timeout_s=10, row_cap=1)
    assert result.rows == [(None,)]


def test_the_bombs_leave_the_process_small(clinical_file):
    """In a fresh process (ru_maxrss is a high-water mark): the bombs above, one after the other."""
    script = f"""
import resource, sys
sys.path.insert(0, {str(ROOT)!r})
from infra.adapters.clinical import ExecutionError, SqliteExecutor
ex = SqliteExecutor({str(clinical_file)!r})
ex.execute("SELECT 1", timeout_s=5, row_cap=1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for sql in ["SELECT printf('%.*c', 500000000, 'x')", "SELECT zeroblob(500000000)",
            "SELECT printf('%.*c', 15000000, 'x') FROM patients, patients b, patients c"]:
    try:
        ex.execute(sql, timeout_s=30, row_cap=10000)
    except ExecutionError:
        pass
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    grown_mb = int(
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    )
    assert grown_mb < 150


def test_many_rows_that_grow_are_cut_one_row_at_a_time(full):
    """A few small rows first must not size a batch that then holds huge ones."""
    result = full.execute(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3000) "
        "SELECT CASE WHEN n > 100 THEN printf('%.*c', 900000, 'x') ELSE 'x' END FROM r",
        timeout_s=30,
        row_cap=10_000,
        max_bytes=2 * 1024 * 1024,
    )
    assert result.truncated and "cut after" in result.truncated_reason
    assert 100 <= result.row_count <= 103


def test_a_recursive_bomb_is_stopped_at_the_timeout(full):
    with pytest.raises(ExecutionError) as info:
        full.execute(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
            timeout_s=1,
            row_cap=1,
        )
    assert info.value.code == "timeout"
