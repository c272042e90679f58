"""The database decides who reads which column (issue 24, item 2), with validation skipped.

Each query goes straight to an executor, as if it had slipped past validation: the restricted
tier's reader (users without view_sensitive) must be refused by PostgreSQL itself, through every
spelling of a sensitive column, while the full tier reads it. Neither may read system columns or
the catalogs that list roles and grants.
"""

from __future__ import annotations

import psycopg
import pytest

from infra import embedded
from infra.adapters.clinical import ExecutionError, PostgresExecutor
from metadata_admin.clinical import loader

HIDDEN = ("mimiciv_hosp.patients.dod", "mimiciv_hosp.admissions.deathtime")

# Every way of reading patients.dod the issue found leaking, and a few more.
SENSITIVE_READS = [
    "SELECT dod FROM mimiciv_hosp.patients",
    "SELECT p::text FROM mimiciv_hosp.patients p",
    "SELECT row_to_json(p) FROM mimiciv_hosp.patients p",
    "SELECT to_jsonb(p) ->> 'dod' FROM mimiciv_hosp.patients p",
    "SELECT (p).dod FROM mimiciv_hosp.patients p",
    "SELECT * FROM mimiciv_hosp.patients",
    "SELECT p.* FROM mimiciv_hosp.patients p",
    'SELECT U&"\\0064od" FROM mimiciv_hosp.patients',
    "SELECT max(dod) FROM mimiciv_hosp.patients",
    "WITH t(k) AS (SELECT dod FROM mimiciv_hosp.patients) SELECT k FROM t",
    "SELECT subject_id FROM mimiciv_hosp.patients p WHERE (SELECT dod FROM mimiciv_hosp.patients q "
    "WHERE q.subject_id = p.subject_id) > '2100-01-01'",
    "SELECT count(*) FROM mimiciv_hosp.patients WHERE dod IS NOT NULL",
    "SELECT deathtime FROM mimiciv_hosp.admissions",
    "SELECT a::text FROM mimiciv_hosp.admissions a",
]

# Outside every tier: system columns (only a table-wide SELECT grants them) and the catalogs.
NOBODY_READS = [
    "SELECT ctid FROM mimiciv_hosp.patients",
    "SELECT xmin, xmax FROM mimiciv_hosp.patients",
    "SELECT tableoid FROM mimiciv_hosp.patients",
    "SELECT rolname FROM pg_roles",
    "SELECT usename FROM pg_user",
    "SELECT rolname FROM pg_authid",
    "SELECT * FROM pg_auth_members",
    "SELECT datname FROM pg_database",
    "SELECT * FROM pg_db_role_setting",
    "SELECT * FROM information_schema.role_table_grants",
    "SELECT * FROM information_schema.table_privileges",
    "SELECT * FROM information_schema.column_privileges",
    "SELECT * FROM information_schema.enabled_roles",
    "SELECT count(*) FROM pg_stat_activity",
    "SELECT count(*) FROM pg_stats",
    "SELECT count(*) FROM pg_proc",
    "SELECT relacl FROM pg_class",
    "SELECT attacl FROM pg_attribute",
    "SELECT c.* FROM pg_class c",
]


@pytest.fixture(scope="module")
def tiers(clinical_data) -> dict[str, PostgresExecutor]:
    """Both readers after the grants a data load applies (the bundled docs' flags, here two)."""
    loader.grant_tiers(clinical_data, {embedded.READER_ROLE: (), embedded.RESTRICTED_READER_ROLE: HIDDEN})
    return {
        role: PostgresExecutor(embedded.pg_dsn(embedded.CLINICAL_DB, user=role))
        for role in (embedded.READER_ROLE, embedded.RESTRICTED_READER_ROLE)
    }


def _run(executor: PostgresExecutor, sql: str):
    return executor.execute(sql, timeout_s=10, row_cap=5)


@pytest.mark.parametrize("sql", SENSITIVE_READS)
def test_the_restricted_reader_is_refused_every_spelling_of_a_sensitive_column(tiers, sql):
    with pytest.raises(ExecutionError) as info:
        _run(tiers[embedded.RESTRICTED_READER_ROLE], sql)
    assert info.value.code == "permission", info.value.message
    assert "permission denied" in info.value.message


@pytest.mark.parametrize("sql", SENSITIVE_READS)
def test_the_full_reader_reads_them(tiers, sql):
    result = _run(tiers[embedded.READER_ROLE], sql)
    assert result.columns


@pytest.mark.parametrize("role", [embedded.READER_ROLE, embedded.RESTRICTED_READER_ROLE])
@pytest.mark.parametrize("sql", NOBODY_READS)
def test_no_tier_reads_system_columns_or_the_role_and_grant_catalogs(tiers, role, sql):
    with pytest.raises(ExecutionError) as info:
        _run(tiers[role], sql)
    assert info.value.code == "permission", info.value.message


def test_the_restricted_reader_still_answers_ordinary_questions(tiers):
    restricted = tiers[embedded.RESTRICTED_READER_ROLE]
    result = _run(
        restricted,
        "SELECT gender, count(*), round(avg(anchor_age), 1) FROM mimiciv_hosp.patients p "
        "JOIN mimiciv_hosp.admissions a USING (subject_id) WHERE a.hospital_expire_flag = 1 GROUP BY gender",
    )
    assert result.rows
    assert _run(restricted, "SELECT count(*) FROM mimiciv_hosp.patients").rows[0][0] > 0
    restricted.explain("SELECT subject_id, anchor_age FROM mimiciv_hosp.patients", timeout_s=5)


def test_planning_checks_the_tier_too(tiers):
    with pytest.raises(ExecutionError) as info:
        tiers[embedded.RESTRICTED_READER_ROLE].explain(
            "SELECT p::text FROM mimiciv_hosp.patients p", timeout_s=5
        )
    assert info.value.code == "permission"
    tiers[embedded.READER_ROLE].explain("SELECT p::text FROM mimiciv_hosp.patients p", timeout_s=5)


def test_each_reader_introspects_only_its_columns(tiers):
    def columns(role: str) -> set[str]:
        tables = {t.qualified: t for t in tiers[role].tables()}
        return {c.name for c in tables["mimiciv_hosp.patients"].columns}

    assert "dod" in columns(embedded.READER_ROLE)
    assert "dod" not in columns(embedded.RESTRICTED_READER_ROLE)
    assert {"subject_id", "gender", "anchor_age"} <= columns(embedded.RESTRICTED_READER_ROLE)


def test_regranting_takes_away_a_column_flagged_since_and_gives_back_one_unflagged(clinical_data, tiers):
    restricted = tiers[embedded.RESTRICTED_READER_ROLE]
    try:
        loader.grant_tiers(
            clinical_data, {embedded.RESTRICTED_READER_ROLE: ("mimiciv_hosp.patients.gender",)}
        )
        with pytest.raises(ExecutionError):
            _run(restricted, "SELECT gender FROM mimiciv_hosp.patients")
        assert _run(restricted, "SELECT dod FROM mimiciv_hosp.patients").columns == ("dod",)
    finally:
        loader.grant_tiers(clinical_data, {embedded.RESTRICTED_READER_ROLE: HIDDEN})
    assert _run(restricted, "SELECT gender FROM mimiciv_hosp.patients").rows


def test_the_restricted_login_cannot_become_the_full_reader(tiers):
    """Separate logins, not SET ROLE: there is no role to return to, so RESET ROLE or SET ROLE in
    the user's SQL (were it ever run as a statement) gains nothing."""
    dsn = embedded.pg_dsn(embedded.CLINICAL_DB, user=embedded.RESTRICTED_READER_ROLE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("RESET ROLE")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT dod FROM mimiciv_hosp.patients")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f'SET ROLE "{embedded.READER_ROLE}"')


def test_a_statement_smuggled_after_the_query_never_runs(tiers):
    """The executor sends one statement (a cursor over a query), so a second one is refused."""
    with pytest.raises(ExecutionError):
        _run(tiers[embedded.RESTRICTED_READER_ROLE], f'SELECT 1; SET ROLE "{embedded.READER_ROLE}"')


def test_a_reader_keeps_its_connection_warm_and_drops_one_whose_statement_failed(tiers):
    """Each question makes new executors: the reader's connection outlives them (no connect per
    statement), and a connection whose statement failed is closed, never kept."""
    import os

    from infra.adapters.clinical import _IdleConnections

    url = tiers[embedded.RESTRICTED_READER_ROLE].url
    _IdleConnections.clear()
    PostgresExecutor(url).execute("SELECT 1", timeout_s=5, row_cap=1)
    [kept] = _IdleConnections._idle[(os.getpid(), url)]
    PostgresExecutor(url).execute("SELECT gender FROM mimiciv_hosp.patients", timeout_s=5, row_cap=1)
    assert _IdleConnections._idle[(os.getpid(), url)] == [kept]
    with pytest.raises(ExecutionError):
        _run(PostgresExecutor(url), "SELECT dod FROM mimiciv_hosp.patients")  # refused by the grants
    assert kept.closed and _IdleConnections._idle[(os.getpid(), url)] == []


def test_nothing_a_statement_leaves_on_its_session_reaches_the_next_user(tiers, clinical_data):
    """A session advisory lock survives a rollback; a kept connection is DISCARDed, so the next
    statement on it (another question, another user) finds none, and the lock is not held on."""
    import os

    from infra.adapters.clinical import _IdleConnections

    url = tiers[embedded.READER_ROLE].url
    _IdleConnections.clear()
    try:
        PostgresExecutor(url).execute("SELECT pg_advisory_lock(4242)", timeout_s=5, row_cap=1)
        assert len(_IdleConnections._idle[(os.getpid(), url)]) == 1  # it ran, and its session was kept
    except ExecutionError:
        pass  # the reader may not take one at all: nothing to carry over either
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB), autocommit=True) as admin:
        held = admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242")
        assert held.fetchone()[0] == 0


def test_a_forked_process_inherits_no_warm_connection(tiers):
    """Celery's prefork pool forks after the warm-up: the child must not share the parent's
    sockets (closing them in the child would end the parent's sessions)."""
    import os

    from infra.adapters.clinical import _IdleConnections

    url = tiers[embedded.READER_ROLE].url
    _run(PostgresExecutor(url), "SELECT 1")
    [kept] = _IdleConnections._idle[(os.getpid(), url)]
    pid = os.fork()
    if pid == 0:  # the child: exit at once, without running pytest's teardown
        os._exit(0)
    os.waitpid(pid, 0)
    assert kept.closed and not _IdleConnections._idle.get((os.getpid(), url))
    assert _run(PostgresExecutor(url), "SELECT 1").rows == [(1,)]  # and connects again when asked
