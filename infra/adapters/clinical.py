"""Executors for clinical databases: the only code that runs generated SQL.

Every statement runs in a READ ONLY transaction with a statement timeout, through a server-side
cursor so that a row cap and a byte cap bound memory whatever the query returns. PostgreSQL is the
default; SQLite files are opened read-only. Both speak the same small interface.

These limits hold whatever SQL reaches them: validation is one barrier, this is the next, and the
database itself the last. On PostgreSQL the executor connects as the access tier's reader role,
whose column privileges leave out what the tier may not read (metadata_admin.clinical.loader.
grant_read); on SQLite an authorizer callback does the same job inside the engine (SqliteAuthorizer).

Memory: the worker never receives a row, or a result, larger than the byte cap. PostgreSQL sends a
row whole, so the cap is checked by the server: the query runs wrapped in a running sum of its row
sizes that stops it, with a marker error, before a row that would cross the cap is sent. SQLite runs
in this process, so its string length limit, its heap limit and a progress handler bound it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

import psycopg
import sqlglot
from psycopg import sql as psql
from sqlglot import exp

from core.sql_functions import allowed_functions

# Fetching stops once the rows held reach this many bytes (ASKDB_RESULT_MAX_BYTES; 20 MB).
DEFAULT_RESULT_MAX_BYTES = int(os.environ.get("ASKDB_RESULT_MAX_BYTES") or 20 * 1024 * 1024)
# The server-side byte check: a running sum of pg_column_size over the result's rows, and a cast that
# fails with this marker (and the sum) as soon as it passes the cap, before that row is sent.
_TOO_LARGE = "askdb_result_too_large"
_BYTES_COLUMN = "askdb_bytes"
# Rows fetched per round trip at first; later batches are sized to the bytes still allowed.
_FIRST_BATCH = 100


class ExecutionError(RuntimeError):
    """A query failed; `message` is one line a user (and the LLM) can act on."""

    def __init__(self, message: str, *, code: str = "sql_error"):
        super().__init__(message)
        self.message = message
        self.code = code  # "sql_error" | "timeout" | "cancelled" | "connection" | "permission"


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: list[tuple]
    truncated: bool  # more rows existed than the cap, or the byte cap cut the result
    elapsed_ms: float
    column_types: tuple[str, ...] = ()
    truncated_reason: str = ""  # one line for the user when the result was cut

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

    def execute(
        self,
        sql: str,
        *,
        timeout_s: float,
        row_cap: int,
        max_bytes: int = ...,
        cancel: threading.Event | None = ...,
    ) -> QueryResult: ...
    def explain(self, sql: str, *, timeout_s: float) -> str: ...
    def plan(self, sql: str, *, timeout_s: float) -> tuple[float, float] | None: ...
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


def _cell_bytes(value: Any) -> int:
    """Roughly what a fetched cell costs in memory (and later as JSON)."""
    if value is None or isinstance(value, bool | int | float | decimal.Decimal):
        return 8
    if isinstance(value, str | bytes | bytearray | memoryview):
        return len(value)
    return len(str(value))


def _bytes_cut_message(max_bytes: int, rows: int) -> str:
    if rows == 0:
        return (
            f"the result was cut before its first row because that row alone is over the "
            f"{max_bytes / 1_048_576:g} MB limit on result size; select fewer or narrower columns, "
            "or aggregate"
        )
    return (
        f"the result was cut after {rows} rows because it reached the {max_bytes / 1_048_576:g} MB "
        "limit on result size; select fewer or narrower columns, or aggregate"
    )


def _byte_capped(sql: str, max_bytes: int, *, limit: int | None = None) -> psql.Composed:
    """`sql` wrapped so that the server stops it before sending a row that takes the result past
    max_bytes: rows stream through a running count and a running sum of their sizes (ROWS
    UNBOUNDED PRECEDING needs no look-ahead, and with neither PARTITION nor ORDER BY the window
    keeps the query's order), and the row that crosses the cap fails a cast whose message carries
    _TOO_LARGE and its row number. The two running columns come back last; execute() drops them.
    `limit` stops the wrapped query after that many rows (the rows before a crossing, re-read).
    Newlines around `sql`: a trailing comment in it must not swallow the closing parenthesis."""
    body = sql.strip().rstrip(";").rstrip()
    column = f"{_BYTES_COLUMN}_{uuid.uuid4().hex[:12]}"  # a name no query can already use
    return psql.SQL(
        "SELECT * FROM (SELECT askdb_q.*, sum(pg_column_size(askdb_q)) OVER askdb_run AS {col}, "
        "count(*) OVER askdb_run AS {n} FROM (\n{body}\n) AS askdb_q "
        "WINDOW askdb_run AS (ROWS UNBOUNDED PRECEDING)) AS askdb_w "
        "WHERE CASE WHEN askdb_w.{col} <= {cap} THEN true "
        "ELSE ({marker} || askdb_w.{n})::int IS NULL END{limit}"
    ).format(
        col=psql.Identifier(column),
        n=psql.Identifier(column + "_n"),
        body=psql.SQL(body),
        cap=psql.Literal(int(max_bytes)),
        marker=psql.Literal(_TOO_LARGE + " "),
        limit=psql.SQL(" LIMIT {}").format(psql.Literal(int(limit))) if limit is not None else psql.SQL(""),
    )


def _crossing_row(exc: BaseException) -> int | None:
    """The number of the row that took the result past the byte cap, from the wrapper's error."""
    if not isinstance(exc, psycopg.errors.InvalidTextRepresentation):
        return None
    found = re.search(_TOO_LARGE + r" (\d+)", str(exc))
    return int(found.group(1)) if found else None


def _one_line(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) or str(exc).strip().splitlines()[0]
    hint = getattr(diag, "message_hint", None)
    return f"{primary} (hint: {hint})" if hint else primary


def _fetch_capped(
    fetchmany, row_cap: int, max_bytes: int, *, into: list | None = None, max_batch: int = 2000
) -> tuple[list[tuple], str]:
    """Up to row_cap + 1 rows, stopping once they hold max_bytes; the rows and why they were cut.

    `into` receives the rows as they arrive, so a caller whose fetch fails half way keeps them.
    """
    rows: list[tuple] = into if into is not None else []
    used = 0
    batch = min(_FIRST_BATCH, row_cap + 1, max_batch)
    while len(rows) <= row_cap:
        chunk = fetchmany(max(1, min(batch, row_cap + 1 - len(rows))))
        if not chunk:
            return rows, ""
        for row in chunk:
            rows.append(row)
            used += sum(_cell_bytes(v) for v in row)
            if used > max_bytes:
                rows.pop()
                return rows, _bytes_cut_message(max_bytes, len(rows))
        average = max(used // len(rows), 1)
        batch = max(1, min(max_batch, (max_bytes - used) // average))
    return rows, ""


def _parametrized(sql: str) -> str:
    """`sql` with every constant a numbered parameter ($1, $2::integer, …; numbers typed as numbers),
    interval literals kept (they are short, and `INTERVAL $1` is no syntax)."""
    count = 0

    def swap(node: exp.Expression) -> exp.Expression:
        nonlocal count
        if isinstance(node, exp.Literal) and not isinstance(node.parent, exp.Interval):
            count += 1
            if node.is_string:  # typed by what it meets (a column, a cast)
                return exp.Var(this=f"${count}")
            # a number keeps its kind, or `60 - 5` would be `unknown - unknown`
            kind = "numeric" if not node.is_int else "integer" if abs(int(node.this)) < 2**31 else "bigint"
            return exp.Var(this=f"${count}::{kind}")
        return node

    return sqlglot.parse_one(sql, read="postgres").transform(swap).sql(dialect="postgres")


def _cancel_quietly(conn: psycopg.Connection) -> None:
    with contextlib.suppress(Exception):
        conn.cancel_safe(timeout=2)


@contextlib.contextmanager
def _cancelled_by(cancel: threading.Event | None, conn: psycopg.Connection) -> Iterator[None]:
    """While the block runs, a set `cancel` cancels the connection's running statement."""
    if cancel is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.1) and not done.is_set():
                _cancel_quietly(conn)
                return

    watcher = threading.Thread(target=watch, name="askdb-cancel-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(5)


# Idle connections kept per reader (process, URL): a question runs several statements, each of
# which opened a connection (a new server process, authentication) before. Up to this many wait
# between statements; a burst beyond them connects as before and closes after.
IDLE_CONNECTIONS = int(os.environ.get("ASKDB_CLINICAL_IDLE_CONNECTIONS") or 8)


class _IdleConnections:
    """The warm connections of one reader role in this process. A connection goes back only when
    it is open and idle (every statement ran in a transaction that was rolled back: SET LOCAL,
    the timeout and the search path ended with it); one that failed or was cancelled is closed.
    Keyed by process id too, so a forked worker never shares its parent's sockets."""

    _lock = threading.Lock()
    _idle: dict[tuple[int, str], list[psycopg.Connection]] = {}

    @classmethod
    def take(cls, url: str) -> psycopg.Connection | None:
        with cls._lock:
            stack = cls._idle.get((os.getpid(), url))
            while stack:
                conn = stack.pop()
                if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    return conn
        return None

    @classmethod
    def give_back(cls, url: str, conn: psycopg.Connection) -> None:
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.close()
            return
        try:
            # What a statement could leave on its session past the rollback (a session advisory
            # lock, a cursor WITH HOLD, a LISTEN): gone, so the next user's statement meets a
            # session as new. One round trip, against a connection's several.
            conn.autocommit = True
            conn.execute("DISCARD ALL")
            conn.autocommit = False
        except psycopg.Error:
            conn.close()
            return
        with cls._lock:
            stack = cls._idle.setdefault((os.getpid(), url), [])
            if len(stack) < IDLE_CONNECTIONS:
                stack.append(conn)
                return
        conn.close()

    @classmethod
    def clear(cls) -> None:
        """Close every idle connection of this process (tests; a reader's password changed)."""
        with cls._lock:
            stacks, cls._idle = list(cls._idle.values()), {}
        for stack in stacks:
            for conn in stack:
                conn.close()


# A forked process (Celery's prefork pool, after the warm-up loaded the library in the parent)
# would inherit the parent's sockets, and closing them there ends the parent's sessions: the
# parent closes its idle connections before it forks.
os.register_at_fork(before=_IdleConnections.clear)


class PostgresExecutor:
    dialect = "postgres"

    def __init__(self, url: str, *, search_path: tuple[str, ...] = (), connect_timeout: int = 5):
        self.url = url
        self.search_path = search_path
        self.connect_timeout = connect_timeout

    def _connect(self) -> psycopg.Connection:
        try:
            # No server-side prepared statements: a kept connection is DISCARDed between uses.
            conn = psycopg.connect(
                self.url, connect_timeout=self.connect_timeout, autocommit=False, prepare_threshold=None
            )
            # Every transaction psycopg opens on it is READ ONLY (its own BEGIN carries it).
            conn.read_only = True
            return conn
        except psycopg.OperationalError as exc:
            raise ExecutionError(
                f"cannot connect to the clinical database: {_one_line(exc)}", code="connection"
            ) from exc

    @contextlib.contextmanager
    def _warm(self, timeout_s: float) -> Iterator[psycopg.Connection]:
        """A connection with a READ ONLY transaction begun: an idle one of this reader when there
        is one (a server restart since is noticed at BEGIN, and a new connection taken), else a new
        one. It goes back to the idle ones only if the transaction ends cleanly."""
        conn = _IdleConnections.take(self.url)
        if conn is not None:
            try:
                self._begin(conn, timeout_s)
            except psycopg.OperationalError:
                conn.close()
                conn = None
        if conn is None:
            conn = self._connect()
            try:
                self._begin(conn, timeout_s)
            except BaseException:
                conn.close()
                raise
        clean = False
        try:
            yield conn
            clean = True
        finally:
            if clean and not conn.closed:
                _IdleConnections.give_back(self.url, conn)
            else:
                conn.close()

    def _begin(self, conn: psycopg.Connection, timeout_s: float) -> None:
        """A READ ONLY transaction with this statement's settings, in two round trips: psycopg's
        own BEGIN READ ONLY (the connection is read_only; an explicit BEGIN after it was a second
        round trip and a warning), then every SET LOCAL in one string. It has no parameters, so
        psycopg sends it by the simple query protocol, which runs several statements; the values
        are composed as quoted literals and identifiers."""
        sets = [
            psql.SQL("SET LOCAL statement_timeout = {}").format(psql.Literal(f"{int(timeout_s * 1000)}ms")),
            psql.SQL("SET LOCAL idle_in_transaction_session_timeout = '60s'"),
            # The lexer in validation reads '\' as a plain character; make the server agree.
            psql.SQL("SET LOCAL standard_conforming_strings = on"),
        ]
        if self.search_path:
            sets.append(
                psql.SQL("SET LOCAL search_path = {}").format(
                    psql.SQL(", ").join(psql.Identifier(s) for s in self.search_path)
                )
            )
        conn.execute(psql.SQL("; ").join(sets))

    @contextlib.contextmanager
    def _read_only(self, timeout_s: float, timeout_message: str) -> Iterator[psycopg.Connection]:
        """A READ ONLY transaction with a statement timeout; psycopg errors become ExecutionError.
        The transaction is always rolled back; a connection whose statement failed is closed, not
        kept warm."""
        try:
            with self._warm(timeout_s) as conn:
                try:
                    yield conn
                finally:
                    if not conn.closed:
                        conn.rollback()  # read-only anyway; nothing is ever committed
        except psycopg.errors.QueryCanceled as exc:
            # statement_timeout and a cancel request share one SQLSTATE; the message tells them apart.
            if "statement timeout" in _one_line(exc):
                raise ExecutionError(timeout_message, code="timeout") from exc
            raise ExecutionError(
                f"the query was cancelled before it finished ({_one_line(exc)})", code="cancelled"
            ) from exc
        except psycopg.errors.ConfigurationLimitExceeded as exc:
            raise ExecutionError(
                f"the query needed more temporary disk space than allowed ({_one_line(exc)}); "
                "narrow it down or aggregate",
                code="resource_limit",
            ) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ExecutionError(f"not permitted: {_one_line(exc)}", code="permission") from exc
        except psycopg.Error as exc:
            raise ExecutionError(_one_line(exc)) from exc

    def execute(
        self, sql: str, *, timeout_s: float, row_cap: int, max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
        cancel: threading.Event | None = None,
    ) -> QueryResult:  # fmt: skip
        """`cancel`, when set from another thread, sends the server a cancel request for the
        running statement (as pg_cancel_backend does); it then fails with code "cancelled"."""
        start = time.perf_counter()
        too_long = (
            f"the query ran longer than {timeout_s:g} s and was stopped; narrow it down "
            "(filter by patient, admission or time) or aggregate"
        )
        with self._read_only(timeout_s, too_long) as conn, _cancelled_by(cancel, conn):
            description, rows, cut, crossing = self._fetch(conn, sql, row_cap, max_bytes)
            if crossing is not None and len(rows) < crossing - 1:
                # The failed FETCH took the rows of its batch before the crossing with it: read
                # the result again up to the row before it (LIMIT: the crossing row is never built).
                conn.rollback()
                self._begin(conn, timeout_s)
                description, rows, again, _ = self._fetch(conn, sql, row_cap, max_bytes, limit=crossing - 1)
                cut = again or _bytes_cut_message(max_bytes, len(rows))
            columns = tuple(d.name for d in description)
            types = tuple(self._type_name(conn, d.type_code) for d in description)
        return QueryResult(
            columns=columns,
            rows=[tuple(jsonable(v) for v in r) for r in rows[:row_cap]],
            truncated=len(rows) > row_cap or bool(cut),
            elapsed_ms=(time.perf_counter() - start) * 1000,
            column_types=types,
            truncated_reason=cut,
        )

    @staticmethod
    def _fetch(
        conn: psycopg.Connection, sql: str, row_cap: int, max_bytes: int, *, limit: int | None = None
    ) -> tuple[list, list[tuple], str, int | None]:
        """(columns, rows, why cut, the row that crossed the byte cap) through a named (server-side)
        cursor: rows arrive in batches, so both caps bound memory, and the server refuses to send
        the row that would take the result past max_bytes (the transaction is then aborted)."""
        with conn.cursor(name=f"askdb_{uuid.uuid4().hex[:12]}") as cur:
            cur.execute(_byte_capped(sql, max_bytes, limit=limit))
            description = (cur.description or [])[:-2]  # the running size and count go
            fetched: list[tuple] = []
            try:
                rows, cut = _fetch_capped(cur.fetchmany, row_cap, max_bytes, into=fetched)
            except psycopg.errors.InvalidTextRepresentation as exc:
                crossing = _crossing_row(exc)
                if crossing is None:
                    raise
                conn.rollback()  # the transaction is aborted; nothing more is read from it
                return (
                    description,
                    [r[:-2] for r in fetched],
                    _bytes_cut_message(max_bytes, len(fetched)),
                    crossing,
                )
        return description, [r[:-2] for r in rows], cut, None

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
        """Plan the statement, with the tier's privileges checked, without running it.

        A cursor is declared and never fetched from: PostgreSQL parses, plans and checks privileges
        exactly as for EXPLAIN, but no plan text comes back, because a plan can hold a folded
        constant as large as the query makes it (WHERE x = repeat('x', 9e8) prints 900 MB).
        Planning folds constants (repeat('x', 5e8) runs here), so it runs under its own
        statement_timeout, with a client-side cancel a second later behind it. Returns "".
        """
        with self._read_only(timeout_s, f"planning took longer than {timeout_s:g} s") as conn:
            fired = threading.Event()
            watchdog = threading.Timer(timeout_s + 1, lambda: (fired.set(), _cancel_quietly(conn)))
            watchdog.daemon = True
            watchdog.start()
            try:
                conn.execute(
                    psql.SQL("DECLARE {} NO SCROLL CURSOR FOR {}").format(
                        psql.Identifier(f"askdb_plan_{uuid.uuid4().hex[:12]}"),
                        psql.SQL(sql.strip().rstrip(";")),
                    )
                )
            finally:
                watchdog.cancel()
                if fired.is_set():  # its cancel may land later: this connection is not kept warm
                    conn.close()
        return ""

    def plan(self, sql: str, *, timeout_s: float) -> tuple[float, float]:
        """(the most rows any step of the plan handles, the plan's total cost), as the planner
        expects them, without running the query.

        The plan's text comes back here (unlike explain's), so every constant of the query is first
        made a parameter ($1, $2, …) and a generic plan is asked for (PostgreSQL 16+): nothing can
        be folded into a large value, and the text is no longer than the query. Raises
        ExecutionError (for a parameter the planner cannot type, too), and the caller goes on
        without the planner's figures.
        """
        with self._read_only(timeout_s, f"planning took longer than {timeout_s:g} s") as conn:
            text = "EXPLAIN (FORMAT JSON, GENERIC_PLAN) " + _parametrized(sql)
            (doc,) = conn.execute(text).fetchone()
        root = (doc if isinstance(doc, list) else json.loads(doc))[0]["Plan"]
        most, stack = 0.0, [root]
        while stack:
            node = stack.pop()
            most = max(most, float(node.get("Plan Rows", 0)))
            stack.extend(node.get("Plans", ()))
        return most, float(root.get("Total Cost", 0))

    def ping(self) -> str:
        with self._connect() as conn:
            user, db = conn.execute("SELECT current_user, current_database()").fetchone()
            conn.rollback()
        return f"{db} as {user}"

    def tables(self) -> list[LiveTable]:
        """Tables the connecting role can read, with the columns it may read (column privileges: a
        tier's reader sees only its columns), keys and row estimates."""
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
                      AND has_column_privilege(c.oid, a.attnum, 'SELECT')
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


# SQLite limits on the connections that run generated SQL. LENGTH caps any string, blob or row the
# engine builds (printf('%.*c', 500000000, 'x') gives NULL instead of taking 500 MB); no database may be
# attached; a statement's text is at most 1 MB. The heap limit is the whole process's SQLite heap
# (sqlite3_hard_heap_limit64), a backstop for everything else: past it a query fails "out of memory".
SQLITE_HEAP_LIMIT = int(os.environ.get("ASKDB_SQLITE_HEAP_LIMIT") or 512 * 1024 * 1024)
_SQLITE_LIMITS = (
    (sqlite3.SQLITE_LIMIT_ATTACHED, 0),
    (sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1_000_000),
)


# Operators SQLite runs as functions, so the authorizer is asked about them by these names.
_SQLITE_OPERATOR_FUNCTIONS = frozenset({"like", "glob", "->", "->>"})


class SqliteAuthorizer:
    """SQLite's authorizer callback (sqlite3.Connection.set_authorizer) for generated SQL.

    Asked by the engine while it compiles each statement, so it sees what the statement really
    does, whatever its text looks like: it allows SELECT, reads of the given tables and columns,
    the allow-listed functions and recursive CTEs, and denies everything else: ATTACH, DETACH,
    PRAGMA (PRAGMA query_only = OFF too), VACUUM (VACUUM INTO writes a file), transactions and
    every write or schema change.

    A column the tier may not read is denied (SQLITE_DENY: the statement fails), not ignored:
    SQLITE_IGNORE would read it as NULL, so COUNT(dod) would quietly answer 0 and WHERE dod IS NOT
    NULL nothing, a wrong answer instead of a refusal. PostgreSQL's column privileges fail the
    same way, so both engines refuse the same queries.
    """

    def __init__(self, readable: Mapping[str, frozenset[str]], functions: frozenset[str]):
        self.readable = readable  # lower-case table -> its lower-case readable columns
        self.functions = functions
        self.denied: list[str] = []  # what was refused, for the error message

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
    ) -> int:
        if action == sqlite3.SQLITE_SELECT or action == sqlite3.SQLITE_RECURSIVE:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            table, column = (arg1 or "").lower(), (arg2 or "").lower()
            columns = self.readable.get(table)
            if columns is not None and column in columns:
                return sqlite3.SQLITE_OK
            # An empty column name: rows are counted, no value is read (count(*) over a table or a
            # CTE, whose name is not a table's); never of SQLite's own tables.
            if column == "" and not table.startswith("sqlite_"):
                return sqlite3.SQLITE_OK
            return self._deny(f"reading {table}.{column}" if column else f"reading {table}")
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in self.functions:
                return sqlite3.SQLITE_OK
            return self._deny(f"the function {arg2}()")
        what = _SQLITE_ACTIONS.get(action, f"action {action}")
        return self._deny(f"{what} {arg1}" if arg1 and action != sqlite3.SQLITE_PRAGMA else what)

    def _deny(self, what: str) -> int:
        self.denied.append(what)
        return sqlite3.SQLITE_DENY


# What each authorizer action code means (sqlite3's error codes share its integers, so not from dir()).
_SQLITE_ACTIONS = {
    code: name
    for name, code in (
        (n.removeprefix("SQLITE_").replace("_", " ").lower(), getattr(sqlite3, n, None))
        for n in (
            "SQLITE_CREATE_INDEX SQLITE_CREATE_TABLE SQLITE_CREATE_TEMP_INDEX SQLITE_CREATE_TEMP_TABLE "
            "SQLITE_CREATE_TEMP_TRIGGER SQLITE_CREATE_TEMP_VIEW SQLITE_CREATE_TRIGGER SQLITE_CREATE_VIEW "
            "SQLITE_DELETE SQLITE_DROP_INDEX SQLITE_DROP_TABLE SQLITE_DROP_TEMP_INDEX SQLITE_DROP_TEMP_TABLE "
            "SQLITE_DROP_TEMP_TRIGGER SQLITE_DROP_TEMP_VIEW SQLITE_DROP_TRIGGER SQLITE_DROP_VIEW SQLITE_INSERT "
            "SQLITE_PRAGMA SQLITE_READ SQLITE_SELECT SQLITE_TRANSACTION SQLITE_UPDATE SQLITE_ATTACH "
            "SQLITE_DETACH SQLITE_ALTER_TABLE SQLITE_REINDEX SQLITE_ANALYZE SQLITE_CREATE_VTABLE "
            "SQLITE_DROP_VTABLE SQLITE_FUNCTION SQLITE_SAVEPOINT SQLITE_RECURSIVE"
        ).split()
    )
    if code is not None
}


class SqliteExecutor:
    """A SQLite file opened read-only (mode=ro, query_only); generated SQL runs under an authorizer
    (SqliteAuthorizer) and limits, and a progress handler enforces the timeout.

    `hidden_columns` ("table.column", any case) are columns this tier may not read, e.g. the
    catalog's sensitive columns for a user without view_sensitive; every other column of every
    table and view in the file is readable (sqlite_* internals never are).
    """

    dialect = "sqlite"

    def __init__(self, path: str, *, hidden_columns: Collection[str] = ()):
        self.path = path
        self.hidden_columns = frozenset(c.lower() for c in hidden_columns)
        self._readable: dict[str, frozenset[str]] | None = None

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error as exc:
            raise ExecutionError(f"cannot open {self.path}: {exc}", code="connection") from exc
        conn.execute("PRAGMA query_only = ON")
        return conn

    # Each question makes new executors; reading the file's tables for the authorizer took a query
    # per table each time. Kept per process for one version of the file and one set of hidden
    # columns: a file replaced or changed (its size or modification time) is read again.
    _readable_cache: dict[tuple, dict[str, frozenset[str]]] = {}
    _readable_lock = threading.Lock()

    def readable(self) -> dict[str, frozenset[str]]:
        """Lower-case table -> the columns generated SQL may read (the file's, minus hidden ones)."""
        if self._readable is None:
            try:
                stat = os.stat(self.path)
                key: tuple | None = (
                    self.path,
                    stat.st_ino,
                    stat.st_size,
                    stat.st_mtime_ns,
                    self.hidden_columns,
                )
            except OSError:
                key = None  # _connect says what is wrong with the path
            with self._readable_lock:
                cached = self._readable_cache.get(key) if key is not None else None
            if cached is None:
                cached = self._read_readable()
                if key is not None:
                    with self._readable_lock:
                        self._readable_cache[key] = cached
            self._readable = cached
        return self._readable

    def _read_readable(self) -> dict[str, frozenset[str]]:
        readable = {}
        for table in self.tables():
            name = table.name.lower()
            readable[name] = frozenset(
                c.name.lower() for c in table.columns if f"{name}.{c.name.lower()}" not in self.hidden_columns
            )
        return readable

    def _guarded(self, max_bytes: int) -> tuple[sqlite3.Connection, SqliteAuthorizer]:
        """A connection for generated SQL: limits first, then the authorizer (which denies PRAGMA)."""
        readable = self.readable()
        conn = self._connect()
        conn.execute(f"PRAGMA hard_heap_limit = {int(SQLITE_HEAP_LIMIT)}")
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(int(max_bytes), 1024))
        for limit, value in _SQLITE_LIMITS:
            conn.setlimit(limit, value)
        authorizer = SqliteAuthorizer(readable, allowed_functions("sqlite") | _SQLITE_OPERATOR_FUNCTIONS)
        conn.set_authorizer(authorizer)
        return conn, authorizer

    @staticmethod
    def _error(exc: BaseException, authorizer: SqliteAuthorizer) -> ExecutionError:
        if isinstance(exc, MemoryError):
            return ExecutionError(
                "the query needed more memory than allowed; select less or aggregate", code="resource_limit"
            )
        if authorizer.denied:  # SQLite words it "not authorized", "… is prohibited", "authorization denied"
            return ExecutionError(f"not permitted: {authorizer.denied[-1]} ({exc})", code="permission")
        if "too big" in str(exc) or "out of memory" in str(exc):
            return ExecutionError(
                f"the query built a value larger than allowed ({exc}); select less or aggregate",
                code="resource_limit",
            )
        return ExecutionError(str(exc))

    def execute(
        self, sql: str, *, timeout_s: float, row_cap: int, max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
        cancel: threading.Event | None = None,
    ) -> QueryResult:  # fmt: skip
        """`cancel`, when set from another thread, interrupts the statement (the progress
        handler); it then fails with code "cancelled"."""
        start = time.perf_counter()
        deadline = time.monotonic() + timeout_s

        def stop() -> int:
            return 1 if time.monotonic() > deadline or (cancel is not None and cancel.is_set()) else 0

        conn, authorizer = self._guarded(max_bytes)
        conn.set_progress_handler(stop, 10_000)
        try:
            cur = conn.execute(sql)
            # One row at a time: a few small rows must not size a batch that then holds huge ones.
            rows, cut = _fetch_capped(cur.fetchmany, row_cap, max_bytes, max_batch=1)
            columns = tuple(d[0] for d in cur.description or [])
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc) and cancel is not None and cancel.is_set():
                raise ExecutionError("the query was cancelled before it finished", code="cancelled") from exc
            if "interrupted" in str(exc):
                raise ExecutionError(
                    f"the query ran longer than {timeout_s:g} s and was stopped", code="timeout"
                ) from exc
            raise self._error(exc, authorizer) from exc
        except (sqlite3.Error, MemoryError) as exc:  # MemoryError: SQLite's heap limit (SQLITE_NOMEM)
            raise self._error(exc, authorizer) from exc
        finally:
            conn.close()
        return QueryResult(
            columns=columns,
            rows=[tuple(jsonable(v) for v in r) for r in rows[:row_cap]],
            truncated=len(rows) > row_cap or bool(cut),
            elapsed_ms=(time.perf_counter() - start) * 1000,
            truncated_reason=cut,
        )

    def plan(self, sql: str, *, timeout_s: float) -> None:
        """SQLite has no cost estimate worth showing: the catalog's table sizes stand in."""
        return None

    def explain(self, sql: str, *, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        conn, authorizer = self._guarded(DEFAULT_RESULT_MAX_BYTES)
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
        try:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        except (sqlite3.Error, MemoryError) as exc:
            raise self._error(exc, authorizer) from exc
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


def executor_for(
    url: str, *, engine: str = "", search_path: tuple[str, ...] = (), hidden_columns: Collection[str] = ()
) -> SqlExecutor:
    """The executor for a source URL: postgresql://… or sqlite:///path/to/file.sqlite.

    `hidden_columns` ("table.column") are refused by SQLite's authorizer; on PostgreSQL the URL's
    role decides what it reads (the caller picks the tier's reader), so they are not needed there.
    """
    scheme = urlparse(url).scheme
    if engine == "sqlite" or scheme == "sqlite":
        # sqlite:///relative/file.sqlite and sqlite:////absolute/file.sqlite, as SQLAlchemy spells them
        path = url.split("sqlite:///", 1)[1] if url.startswith("sqlite:///") else url
        return SqliteExecutor(path, hidden_columns=hidden_columns)
    if scheme in ("postgres", "postgresql") or engine == "postgresql":
        return PostgresExecutor(url, search_path=search_path)
    raise ExecutionError(
        f"unsupported clinical database URL scheme {scheme!r}; use postgresql:// or sqlite:///"
    )
