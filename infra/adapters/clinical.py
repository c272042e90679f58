"""Executors for clinical databases: the only code that runs generated SQL.

Every statement runs in a READ ONLY transaction with a statement timeout, through a server-side
cursor so that a row cap bounds memory whatever the query returns. PostgreSQL is the default;
SQLite files are opened read-only. Both speak the same small interface.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

import psycopg
from psycopg import sql as psql


class ExecutionError(RuntimeError):
    """A query failed; `message` is one line a user (and the LLM) can act on."""

    def __init__(self, message: str, *, code: str = "sql_error"):
        super().__init__(message)
        self.message = message
        self.code = code  # "sql_error" | "timeout" | "connection" | "permission"


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: list[tuple]
    truncated: bool  # more rows existed than the cap
    elapsed_ms: float
    column_types: tuple[str, ...] = ()

    @property
    def row_count(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class LiveColumn:
    name: str
    data_type: str
    nullable: bool = True


@dataclass(frozen=True)
class LiveTable:
    schema: str
    name: str
    columns: tuple[LiveColumn, ...]
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = ()  # (cols, "s.t", ref cols)
    row_estimate: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


class SqlExecutor(Protocol):
    dialect: str

    def execute(self, sql: str, *, timeout_s: float, row_cap: int) -> QueryResult: ...
    def explain(self, sql: str, *, timeout_s: float) -> str: ...
    def tables(self) -> list[LiveTable]: ...
    def distinct_values(
        self, schema: str, table: str, column: str, *, limit: int
    ) -> list[tuple[Any, int]]: ...
    def ping(self) -> str: ...


def jsonable(value: Any) -> Any:
    """A cell as JSON can carry it (results are stored with the run and sent to the browser)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() and abs(value) < 2**53 else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return str(value)


def _one_line(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) or str(exc).strip().splitlines()[0]
    hint = getattr(diag, "message_hint", None)
    return f"{primary} (hint: {hint})" if hint else primary


class PostgresExecutor:
    dialect = "postgres"

    def __init__(self, url: str, *, search_path: tuple[str, ...] = (), connect_timeout: int = 5):
        self.url = url
        self.search_path = search_path
        self.connect_timeout = connect_timeout

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, connect_timeout=self.connect_timeout, autocommit=False)
        except psycopg.OperationalError as exc:
            raise ExecutionError(
                f"cannot connect to the clinical database: {_one_line(exc)}", code="connection"
            ) from exc

    def _begin(self, conn: psycopg.Connection, timeout_s: float) -> None:
        conn.execute("BEGIN READ ONLY")
        conn.execute(
            psql.SQL("SET LOCAL statement_timeout = {}").format(psql.Literal(f"{int(timeout_s * 1000)}ms"))
        )
        conn.execute("SET LOCAL idle_in_transaction_session_timeout = '60s'")
        if self.search_path:
            conn.execute(
                psql.SQL("SET LOCAL search_path = {}").format(
                    psql.SQL(", ").join(psql.Identifier(s) for s in self.search_path)
                )
            )

    @contextlib.contextmanager
    def _read_only(self, timeout_s: float, timeout_message: str) -> Iterator[psycopg.Connection]:
        """A READ ONLY transaction with a statement timeout; psycopg errors become ExecutionError."""
        with self._connect() as conn:
            try:
                self._begin(conn, timeout_s)
                yield conn
            except psycopg.errors.QueryCanceled as exc:
                raise ExecutionError(timeout_message, code="timeout") from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise ExecutionError(f"not permitted: {_one_line(exc)}", code="permission") from exc
            except psycopg.Error as exc:
                raise ExecutionError(_one_line(exc)) from exc
            finally:
                if not conn.closed:
                    conn.rollback()  # read-only anyway; nothing is ever committed

    def execute(self, sql: str, *, timeout_s: float, row_cap: int) -> QueryResult:
        start = time.perf_counter()
        too_long = (
            f"the query ran longer than {timeout_s:g} s and was stopped; narrow it down "
            "(filter by patient, admission or time) or aggregate"
        )
        with self._read_only(timeout_s, too_long) as conn:
            # A named (server-side) cursor: rows arrive in batches, so the cap bounds memory.
            with conn.cursor(name=f"askdb_{uuid.uuid4().hex[:12]}") as cur:
                cur.itersize = min(max(row_cap + 1, 1), 2000)
                cur.execute(sql)
                rows = cur.fetchmany(row_cap + 1)
                description = cur.description or []
            columns = tuple(d.name for d in description)
            types = tuple(self._type_name(conn, d.type_code) for d in description)
        truncated = len(rows) > row_cap
        return QueryResult(
            columns=columns,
            rows=[tuple(jsonable(v) for v in r) for r in rows[:row_cap]],
            truncated=truncated,
            elapsed_ms=(time.perf_counter() - start) * 1000,
            column_types=types,
        )

    _type_cache: dict[int, str] = {}
    _type_lock = threading.Lock()

    def _type_name(self, conn: psycopg.Connection, oid: int) -> str:
        with self._type_lock:
            if oid in self._type_cache:
                return self._type_cache[oid]
        info = psycopg.adapters.types.get(oid)
        name = info.name if info else "unknown"
        with self._type_lock:
            self._type_cache[oid] = name
        return name

    def explain(self, sql: str, *, timeout_s: float) -> str:
        with self._read_only(timeout_s, f"planning took longer than {timeout_s:g} s") as conn:
            rows = conn.execute(f"EXPLAIN {sql}").fetchall()
        return "\n".join(r[0] for r in rows)

    def ping(self) -> str:
        with self._connect() as conn:
            user, db = conn.execute("SELECT current_user, current_database()").fetchone()
            conn.rollback()
        return f"{db} as {user}"

    def tables(self) -> list[LiveTable]:
        """Tables the connecting role can read, with columns, keys and row estimates."""
        with self._connect() as conn:
            try:
                cols = conn.execute(
                    """
                    SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                           NOT a.attnotnull, c.reltuples::bigint
                    FROM pg_class c
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                    WHERE c.relkind IN ('r', 'p', 'v', 'm')
                      AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                      AND n.nspname NOT LIKE 'pg\\_%'
                      AND has_table_privilege(c.oid, 'SELECT')
                    ORDER BY n.nspname, c.relname, a.attnum
                    """
                ).fetchall()
                keys = conn.execute(
                    """
                    SELECT n.nspname, c.relname, con.contype,
                           ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(attnum, i)
                                 JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
                                 ORDER BY k.i),
                           rn.nspname || '.' || rc.relname,
                           ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(attnum, i)
                                 JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum
                                 ORDER BY k.i)
                    FROM pg_constraint con
                    JOIN pg_class c ON c.oid = con.conrelid
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                    LEFT JOIN pg_class rc ON rc.oid = con.confrelid
                    LEFT JOIN pg_namespace rn ON rn.oid = rc.relnamespace
                    WHERE con.contype IN ('p', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                    """
                ).fetchall()
            finally:
                conn.rollback()
        by_table: dict[tuple[str, str], dict] = {}
        for schema, name, col, typ, nullable, estimate in cols:
            entry = by_table.setdefault(
                (schema, name), {"cols": [], "estimate": estimate, "pk": (), "fks": []}
            )
            entry["cols"].append(LiveColumn(col, typ, nullable))
        for schema, name, kind, columns, ref_table, ref_columns in keys:
            entry = by_table.get((schema, name))
            if entry is None:
                continue
            if kind == "p":
                entry["pk"] = tuple(columns)
            else:
                entry["fks"].append((tuple(columns), ref_table, tuple(ref_columns)))
        return [
            LiveTable(
                schema=s,
                name=n,
                columns=tuple(e["cols"]),
                primary_key=e["pk"],
                foreign_keys=tuple(e["fks"]),
                row_estimate=max(e["estimate"], 0)
                if e["estimate"] is not None and e["estimate"] >= 0
                else None,
            )
            for (s, n), e in sorted(by_table.items())
        ]

    def distinct_values(self, schema: str, table: str, column: str, *, limit: int) -> list[tuple[Any, int]]:
        query = psql.SQL(
            "SELECT {col}, count(*) AS n FROM {tbl} WHERE {col} IS NOT NULL GROUP BY {col} ORDER BY n DESC, {col} LIMIT {lim}"
        ).format(
            col=psql.Identifier(column),
            tbl=psql.Identifier(schema, table) if schema else psql.Identifier(table),
            lim=psql.Literal(limit),
        )
        with self._read_only(120, "sampling values took longer than 120 s") as conn:
            rows = conn.execute(query).fetchall()
        return [(jsonable(v), int(n)) for v, n in rows]

    def count_rows(self, schema: str, table: str) -> int:
        tbl = psql.Identifier(schema, table) if schema else psql.Identifier(table)
        with self._read_only(300, f"counting {table} took longer than 300 s") as conn:
            return int(conn.execute(psql.SQL("SELECT count(*) FROM {}").format(tbl)).fetchone()[0])


class SqliteExecutor:
    """A SQLite file opened read-only (mode=ro, query_only); a progress handler enforces the timeout."""

    dialect = "sqlite"

    def __init__(self, path: str):
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error as exc:
            raise ExecutionError(f"cannot open {self.path}: {exc}", code="connection") from exc
        conn.execute("PRAGMA query_only = ON")
        return conn

    def execute(self, sql: str, *, timeout_s: float, row_cap: int) -> QueryResult:
        start = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        conn = self._connect()
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
        try:
            cur = conn.execute(sql)
            rows = cur.fetchmany(row_cap + 1)
            columns = tuple(d[0] for d in cur.description or [])
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise ExecutionError(
                    f"the query ran longer than {timeout_s:g} s and was stopped", code="timeout"
                ) from exc
            raise ExecutionError(str(exc)) from exc
        except sqlite3.Error as exc:
            raise ExecutionError(str(exc)) from exc
        finally:
            conn.close()
        return QueryResult(
            columns=columns,
            rows=[tuple(jsonable(v) for v in r) for r in rows[:row_cap]],
            truncated=len(rows) > row_cap,
            elapsed_ms=(time.perf_counter() - start) * 1000,
        )

    def explain(self, sql: str, *, timeout_s: float) -> str:
        conn = self._connect()
        try:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        except sqlite3.Error as exc:
            raise ExecutionError(str(exc)) from exc
        finally:
            conn.close()
        return "\n".join(str(r[-1]) for r in rows)

    def ping(self) -> str:
        conn = self._connect()
        conn.close()
        return self.path

    def tables(self) -> list[LiveTable]:
        conn = self._connect()
        try:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            ]
            out = []
            for name in names:
                info = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
                fks = conn.execute(f'PRAGMA foreign_key_list("{name}")').fetchall()
                columns = tuple(LiveColumn(r[1], (r[2] or "").lower(), not r[3]) for r in info)
                pk = tuple(r[1] for r in sorted(info, key=lambda r: r[5]) if r[5])
                out.append(
                    LiveTable(
                        schema="",
                        name=name,
                        columns=columns,
                        primary_key=pk,
                        foreign_keys=tuple(((fk[3],), fk[2], (fk[4],)) for fk in fks),
                    )
                )
            return out
        finally:
            conn.close()

    def distinct_values(self, schema: str, table: str, column: str, *, limit: int) -> list[tuple[Any, int]]:
        conn = self._connect()
        try:
            rows = conn.execute(
                f'SELECT "{column}", count(*) n FROM "{table}" WHERE "{column}" IS NOT NULL '
                f'GROUP BY "{column}" ORDER BY n DESC LIMIT ?',
                (limit,),
            ).fetchall()
        finally:
            conn.close()
        return [(jsonable(v), int(n)) for v, n in rows]

    def count_rows(self, schema: str, table: str) -> int:
        conn = self._connect()
        try:
            return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        finally:
            conn.close()


def executor_for(url: str, *, engine: str = "", search_path: tuple[str, ...] = ()) -> SqlExecutor:
    """The executor for a source URL: postgresql://… or sqlite:///path/to/file.sqlite."""
    scheme = urlparse(url).scheme
    if engine == "sqlite" or scheme == "sqlite":
        # sqlite:///relative/file.sqlite and sqlite:////absolute/file.sqlite, as SQLAlchemy spells them
        path = url.split("sqlite:///", 1)[1] if url.startswith("sqlite:///") else url
        return SqliteExecutor(path)
    if scheme in ("postgres", "postgresql") or engine == "postgresql":
        return PostgresExecutor(url, search_path=search_path)
    raise ExecutionError(
        f"unsupported clinical database URL scheme {scheme!r}; use postgresql:// or sqlite:///"
    )
