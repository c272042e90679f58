"""The role that runs generated SQL can read the clinical database and change nothing."""

from __future__ import annotations

import psycopg
import pytest

from infra import embedded


@pytest.fixture(scope="module")
def clinical_table():
    """A table in the clinical database, granted to the reader the way the loader grants."""
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS roletest")
        conn.execute("CREATE TABLE IF NOT EXISTS roletest.t (id int primary key, v text)")
        conn.execute("INSERT INTO roletest.t VALUES (1, 'a') ON CONFLICT DO NOTHING")
        conn.execute(f"GRANT USAGE ON SCHEMA roletest TO {embedded.READER_ROLE}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA roletest TO {embedded.READER_ROLE}")
    yield "roletest.t"
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB), autocommit=True) as conn:
        conn.execute("DROP SCHEMA roletest CASCADE")


def _reader():
    return psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB, user=embedded.READER_ROLE), autocommit=True)


def test_reader_can_select(clinical_table):
    with _reader() as conn:
        assert conn.execute(f"SELECT v FROM {clinical_table}").fetchall() == [("a",)]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO roletest.t VALUES (2, 'b')",
        "UPDATE roletest.t SET v = 'z'",
        "DELETE FROM roletest.t",
        "TRUNCATE roletest.t",
        "CREATE TABLE roletest.evil (x int)",
        "CREATE TABLE public.evil (x int)",
        "CREATE SCHEMA evil",
        "DROP TABLE roletest.t",
        "ALTER TABLE roletest.t ADD COLUMN w int",
        "CREATE TEMP TABLE scratch (x int)",
    ],
)
def test_reader_cannot_write_even_in_a_read_write_transaction(clinical_table, statement):
    with _reader() as conn:
        # Explicitly asking for a read-write transaction must not help: privileges are the barrier.
        with pytest.raises(psycopg.Error), conn.transaction():
            conn.execute("SET TRANSACTION READ WRITE")
            conn.execute(statement)
        assert conn.execute(f"SELECT count(*), min(v) FROM {clinical_table}").fetchone() == (1, "a")


def test_reader_is_read_only_by_default(clinical_table):
    with _reader() as conn:
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
        # Only a superuser may read pg_authid; pg_roles itself is revoked from the readers.
        assert (
            conn.execute("SELECT has_table_privilege('pg_catalog.pg_authid', 'SELECT')").fetchone()[0]
            is False
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
