"""Load a MIMIC-IV release (the credentialed v2.2 files or the open demo) into PostgreSQL.

Why it is written this way:

- The full release is large (labevents alone is ~120 M rows, ~18 GB of CSV), so nothing is
  ever read whole: each ``.csv.gz`` is decompressed in 1 MiB chunks that go straight into a
  ``COPY ... FROM STDIN`` through psycopg, whose writer waits for the socket to drain. Memory
  stays flat whatever the file size.
- One transaction per table (create/truncate + COPY + primary key + indexes + ANALYZE): a
  failure leaves the table exactly as it was before, never half loaded. Indexes are built after
  the COPY because that is much faster than maintaining them row by row.
- Foreign keys are added at the very end, like the community build scripts do, one statement
  each, so an orphan row costs one reported constraint and not the whole load.
- A bad row must be findable by a person with ``zcat | sed -n``: PostgreSQL reports the record
  number of the data it received (``COPY admissions, line 56``); we skipped the header line,
  so we turn that into the physical line of the file, which is what the report shows.
- A bad table never raises: ``load_release`` returns a report and the caller (the management
  command) decides the exit code.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import re
import select
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Literal

import psycopg
from psycopg import sql
from tqdm import tqdm

from infra.clinical_roles import (  # noqa: F401  (re-exported: the loader's callers name them here)
    INTROSPECTION_COLUMNS,
    RESTRICTED_FUNCTIONS,
    RESTRICTED_VIEWS,
    restrict_catalogs,
    restrict_functions,
)

from . import schema
from .schema import Table

logger = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20
_MAX_HEADER_BYTES = 64 * 1024
# loaded_tables() counts exactly below this many (estimated) rows; above, count(*) would scan
# gigabytes just to show a number, so the planner's estimate (fresh after ANALYZE) is used.
_EXACT_COUNT_BELOW = 1_000_000
# Any subset may be present: a folder holding only note/ adds the notes and leaves hosp/icu as they are.
_MODULES = ("hosp", "icu", "note")

Out = Callable[[str], object]
Status = Literal["loaded", "skipped", "missing", "failed"]


class LoadError(Exception):
    """A release or a file that cannot be loaded, in words a person can act on."""


@dataclass(frozen=True)
class TableResult:
    name: str  # "mimiciv_hosp.admissions"
    status: Status
    rows: int = 0
    seconds: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class ConstraintResult:
    name: str  # constraint name, e.g. "admissions_patients_fk"
    table: str  # the table that owns it, "mimiciv_hosp.admissions"
    status: Literal["added", "exists", "skipped", "failed"]
    message: str = ""


@dataclass(frozen=True)
class LoadReport:
    source: str
    tables: tuple[TableResult, ...]
    constraints: tuple[ConstraintResult, ...] = ()
    seconds: float = 0.0

    def _with(self, status: str) -> tuple[TableResult, ...]:
        return tuple(r for r in self.tables if r.status == status)

    @property
    def loaded(self) -> tuple[TableResult, ...]:
        return self._with("loaded")

    @property
    def skipped(self) -> tuple[TableResult, ...]:
        return self._with("skipped")

    @property
    def missing(self) -> tuple[TableResult, ...]:
        return self._with("missing")

    @property
    def failed(self) -> tuple[TableResult, ...]:
        return self._with("failed")

    @property
    def ok(self) -> bool:
        return not self.failed

    def result(self, name: str) -> TableResult:
        qualified = schema.table(name).qualified_name
        for r in self.tables:
            if r.name == qualified:
                return r
        raise KeyError(name)

    def summary(self) -> str:
        rows = sum(r.rows for r in self.loaded)
        fks = {s: sum(1 for c in self.constraints if c.status == s) for s in ("added", "skipped", "failed")}
        return (
            f"{len(self.loaded)} loaded ({rows:,} rows), {len(self.skipped)} skipped, "
            f"{len(self.missing)} missing, {len(self.failed)} failed in {self.seconds:.1f} s; "
            f"foreign keys: {fks['added']} added, {fks['skipped']} skipped, "
            f"{fks['failed']} failed"
        )


# --------------------------------------------------------------------------- the release


@dataclass(frozen=True)
class _Member:
    """One table's file inside the release, wherever it lives (folder or zip)."""

    relpath: str  # as shown to people: "hosp/admissions.csv.gz"
    size: int  # bytes as stored, i.e. compressed for .csv.gz: what the progress bar counts
    gzipped: bool
    opener: Callable[[], BinaryIO]


class _Release:
    """A release folder or .zip; finds ``<module>/<table>.csv[.gz]`` under one root."""

    _ZIP_NAME = re.compile(
        r"^(?P<prefix>(?:[^/]+/)*?)(?P<module>hosp|icu|note)/(?P<file>[^/]+\.csv(?:\.gz)?)$"
    )

    def __init__(self, path: Path, stack: ExitStack):
        self.path = path
        self._members: dict[str, _Member] = {}
        if not path.exists():
            raise LoadError(f"{path}: no such file or folder")
        if path.is_dir():
            self._index_folder(self._folder_root(path))
        elif zipfile.is_zipfile(path):
            self._index_zip(stack.enter_context(zipfile.ZipFile(path)))
        else:
            raise LoadError(f"{path}: expected a folder or a .zip holding hosp/, icu/ or note/")

    @staticmethod
    def _folder_root(path: Path) -> Path:
        # Downloads nest the release differently (mimic-iv-2.2/, physionet.org/files/mimiciv/2.2/),
        # so accept one unambiguous root a few levels down.
        for depth in range(4):
            pattern = "/".join(["*"] * depth)
            roots = {
                m.parent
                for module in _MODULES
                for m in (path.glob(f"{pattern}/{module}") if depth else [path / module])
                if m.is_dir()
            }
            if len(roots) == 1:
                return roots.pop()
            if len(roots) > 1:
                listed = ", ".join(sorted(str(r) for r in roots))
                raise LoadError(f"{path}: several MIMIC-IV releases inside ({listed}); point at one")
        raise LoadError(f"{path}: no hosp/, icu/ or note/ folder found")

    def _index_folder(self, root: Path) -> None:
        for module in _MODULES:
            folder = root / module
            if not folder.is_dir():
                continue
            for f in sorted(folder.iterdir()):
                if f.is_file() and (f.name.endswith(".csv") or f.name.endswith(".csv.gz")):
                    self._add(
                        module,
                        f.name,
                        _Member(
                            f"{module}/{f.name}",
                            f.stat().st_size,
                            f.name.endswith(".gz"),
                            partial(f.open, "rb", buffering=0),
                        ),
                    )

    def _index_zip(self, zf: zipfile.ZipFile) -> None:
        found: dict[str, list[tuple[str, str, zipfile.ZipInfo]]] = {}
        for info in zf.infolist():
            if info.is_dir() or info.filename.startswith("__MACOSX/"):
                continue
            m = self._ZIP_NAME.match(info.filename)
            if m:
                found.setdefault(m["prefix"], []).append((m["module"], m["file"], info))
        if not found:
            raise LoadError(f"{self.path}: no hosp/, icu/ or note/ folder with CSV files inside the zip")
        if len(found) > 1:
            listed = ", ".join(sorted(p or "(top level)" for p in found))
            raise LoadError(f"{self.path}: several MIMIC-IV releases inside the zip ({listed})")
        for module, name, info in next(iter(found.values())):
            self._add(
                module,
                name,
                _Member(
                    f"{module}/{name}",
                    info.file_size,
                    name.endswith(".gz"),
                    partial(zf.open, info),
                ),
            )

    def _add(self, module: str, filename: str, member: _Member) -> None:
        table_name = filename.removesuffix(".gz").removesuffix(".csv")
        key = f"{module}/{table_name}"
        # Prefer the compressed file when both exist: it is what PhysioNet publishes.
        if key not in self._members or member.gzipped:
            self._members[key] = member

    def find(self, table: Table) -> _Member | None:
        return self._members.get(f"{table.module}/{table.name}")

    @property
    def modules(self) -> set[str]:
        """The modules (hosp, icu, note) this release holds at least one table file of."""
        return {key.split("/", 1)[0] for key in self._members}


class _CountingReader(io.RawIOBase):
    """Counts the stored (compressed) bytes consumed, which is what the progress bar shows."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self.bytes_read += n or 0
        return n


@contextmanager
def _open_stream(member: _Member) -> Iterator[tuple[BinaryIO, _CountingReader]]:
    """The decompressed bytes of a member, read lazily, plus the stored-bytes counter."""
    with member.opener() as raw:
        counter = _CountingReader(raw)
        stream: BinaryIO
        if member.gzipped:
            stream = gzip.GzipFile(fileobj=counter, mode="rb")  # type: ignore[assignment]
        else:
            stream = io.BufferedReader(counter, CHUNK_SIZE)  # type: ignore[assignment]
        with stream:
            yield stream, counter


# --------------------------------------------------------------------------- one table


def _read_header(stream: BinaryIO, table: Table, relpath: str) -> tuple[list[str], list[str]]:
    """Column names from the first line, checked against the table; also the absent columns."""
    line = stream.readline(_MAX_HEADER_BYTES)
    if not line:
        raise LoadError(f"{relpath}: the file is empty (no header line)")
    if not line.endswith(b"\n") and len(line) >= _MAX_HEADER_BYTES:
        raise LoadError(f"{relpath} line 1: no end of header line in the first {_MAX_HEADER_BYTES} bytes")
    try:
        text = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise LoadError(f"{relpath} line 1: the header is not UTF-8 ({exc.reason})") from None
    # Release headers are lower case, except e.g. procedureevents' ORIGINALAMOUNT: match loosely.
    names = [n.strip().lower() for n in next(csv.reader([text]))]
    known = set(table.column_names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise LoadError(
            f"{relpath} line 1: unknown column{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(n) for n in unknown)} in the header; {table.qualified_name} has "
            f"{', '.join(table.column_names)}"
        )
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise LoadError(f"{relpath} line 1: column {', '.join(map(repr, duplicated))} appears twice")
    absent = [c for c in table.columns if c.name not in names]
    required = [c.name for c in absent if not c.nullable]
    if required:
        raise LoadError(
            f"{relpath} line 1: the header lacks {', '.join(map(repr, required))}, which "
            f"{table.qualified_name} requires (NOT NULL)"
        )
    return names, [c.name for c in absent]


def _table_state(conn: psycopg.Connection, table: Table) -> tuple[bool, bool]:
    """(exists, has at least one row)."""
    if conn.execute("SELECT to_regclass(%s)", (table.qualified_name,)).fetchone()[0] is None:
        return False, False
    has_rows = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(table.ident)).fetchone()[0]
    return True, bool(has_rows)


def _existing_columns(conn: psycopg.Connection, table: Table) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (table.qualified_name,),
    ).fetchall()
    return tuple(r[0] for r in rows)


def _prepare_empty_table(conn: psycopg.Connection, table: Table, exists: bool) -> None:
    """Leave an empty table without keys or indexes, ready for a fast COPY (inside the transaction).

    An existing table is emptied rather than dropped so views and grants on it survive; its
    keys and indexes are dropped and rebuilt after the COPY, and foreign keys touching it are
    re-added by add_constraints at the end.
    """
    if exists and _existing_columns(conn, table) != table.column_names:
        # Another layout (an older release, a hand-made table): rebuild it from the spec. Plain
        # DROP, no CASCADE, so a view depending on it fails this table loudly instead of vanishing.
        conn.execute(sql.SQL("DROP TABLE {}").format(table.ident))
        exists = False
    if not exists:
        conn.execute(table.create_sql())
        return
    for owner, fk in schema.foreign_keys():
        if table in (owner, schema.table(fk.references)):
            conn.execute(
                sql.SQL("ALTER TABLE IF EXISTS {} DROP CONSTRAINT IF EXISTS {}").format(
                    owner.ident, sql.Identifier(fk.name)
                )
            )
    if table.primary_key:
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
                table.ident, sql.Identifier(table.pk_name)
            )
        )
    for ix in table.indexes:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(table.schema, ix.name)))
    conn.execute(sql.SQL("TRUNCATE {}").format(table.ident))


def _server_has_spoken(conn: psycopg.Connection) -> bool:
    # During COPY FROM STDIN the server is silent unless it has rejected the data; libpq only
    # notices that when the COPY ends, so without this a bad row on line 57 of labevents would
    # still stream the remaining 18 GB before the error surfaced.
    return bool(select.select([conn.fileno()], [], [], 0)[0])


def _copy(
    conn: psycopg.Connection,
    table: Table,
    columns: list[str],
    stream: BinaryIO,
    counter: _CountingReader,
    bar: tqdm,
) -> int:
    # FREEZE: the table was created or emptied in this transaction, so its rows can be written
    # frozen and its pages marked all-visible. Index-only scans (the covering and year indexes)
    # then read the index alone; without it they fetch every row from the table until a VACUUM.
    statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv, HEADER false, FREEZE true)").format(
        table.ident, sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    newlines = 0
    shown = 0
    interrupted = False
    cur = conn.cursor()
    with cur.copy(statement) as copy:
        while chunk := stream.read(CHUNK_SIZE):
            copy.write(chunk)
            newlines += chunk.count(b"\n")
            bar.update(counter.bytes_read - shown)
            shown = counter.bytes_read
            # Rough (a quoted field may hold a newline); the exact count comes from the server.
            bar.set_postfix_str(f"~{newlines:,} rows", refresh=False)
            if _server_has_spoken(conn):
                interrupted = True
                break
    # Reached only if the server accepted the COPY: an error would have been raised on exit.
    if interrupted:
        raise LoadError("the server interrupted the COPY without reporting an error")
    return max(cur.rowcount, 0)


def _build_keys_and_indexes(conn: psycopg.Connection, table: Table, note: Out = lambda s: None) -> None:
    if (pk := table.primary_key_sql()) is not None:
        note("primary key")
        conn.execute(pk)
    for ix, statement in zip(table.indexes, table.index_sql(), strict=True):
        # On the full labevents each index takes minutes: say which one is being built.
        note(f"index {ix.name}")
        conn.execute(statement)
    # Fresh statistics: the planner (and loaded_tables' estimates) would otherwise see 0 rows.
    conn.execute(sql.SQL("ANALYZE {}").format(table.ident))


_COPY_CONTEXT = re.compile(r"COPY [^,]+, line (?P<record>\d+)(?:, column (?P<column>[^:]+))?")


def _file_line(member: _Member, record: int) -> int:
    """The physical line of the file where data record `record` (1-based, after the header) starts.

    It is record + 1 unless a quoted field spans lines earlier in the file, so re-read the
    file with a CSV parser up to that record. Only runs when a table has already failed.
    """
    try:
        with _open_stream(member) as (stream, _):
            reader = csv.reader(io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=""))
            next(reader)  # header
            for _ in range(record - 1):
                next(reader)
            return reader.line_num + 1
    except (StopIteration, OSError, EOFError, zlib.error, csv.Error):
        return record + 1


def _describe_pg_error(exc: psycopg.Error, member: _Member) -> str:
    diag = exc.diag
    primary = diag.message_primary or str(exc).strip()
    m = _COPY_CONTEXT.search(diag.context or "")
    if m:
        message = f"{member.relpath} line {_file_line(member, int(m['record']))}: {primary}"
        if m["column"]:
            message += f" (column {m['column'].strip()})"
        return message
    message = f"{member.relpath}: {primary}"
    if diag.message_detail:
        message += f" ({diag.message_detail})"
    return message


def _load_table(
    conn: psycopg.Connection,
    table: Table,
    member: _Member,
    *,
    replace: bool,
    progress: bool,
) -> TableResult:
    started = time.monotonic()

    def result(status: Status, rows: int = 0, message: str = "") -> TableResult:
        return TableResult(table.qualified_name, status, rows, round(time.monotonic() - started, 3), message)

    exists, has_rows = _table_state(conn, table)
    if has_rows and not replace:
        rows = _count_rows(conn, table.schema, table.name)
        return result("skipped", rows, f"already holds {rows:,} rows; replace=True reloads it")

    try:
        with _open_stream(member) as (stream, counter):
            columns, absent = _read_header(stream, table, member.relpath)
            with (
                tqdm(
                    total=member.size,
                    unit="B",
                    unit_scale=True,
                    desc=table.qualified_name,
                    disable=not progress,
                    file=sys.stderr,
                    leave=True,
                    dynamic_ncols=True,
                ) as bar,
                conn.transaction(),
            ):
                _prepare_empty_table(conn, table, exists)
                rows = _copy(conn, table, columns, stream, counter, bar)
                _build_keys_and_indexes(
                    conn,
                    table,
                    lambda step: bar.set_postfix_str(f"{rows:,} rows, building {step}", refresh=True),
                )
                bar.set_postfix_str(f"{rows:,} rows", refresh=True)
    except LoadError as exc:
        text = str(exc)
        if not text.startswith(member.relpath):
            text = f"{member.relpath}: {text}"
        return result("failed", message=text)
    except psycopg.Error as exc:
        return result("failed", message=_describe_pg_error(exc, member))
    except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt download
        return result("failed", message=f"{member.relpath}: cannot read the file: {exc}")

    note = f"columns not in the file, left empty: {', '.join(absent)}" if absent else ""
    return result("loaded", rows, note)


# --------------------------------------------------------------------------- public API


def _connect(dsn: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True, client_encoding="UTF8")
    # A loader role may carry the reader's limits; a COPY of labevents takes far longer.
    conn.execute("SET statement_timeout = 0")
    conn.execute("SET maintenance_work_mem = '256MB'")
    return conn


def _targets(tables: list[str] | None) -> list[Table]:
    if not tables:
        return list(schema.TABLES)
    try:
        wanted = {schema.table(name) for name in tables}
    except KeyError as exc:
        raise LoadError(str(exc.args[0])) from None
    return [t for t in schema.TABLES if t in wanted]


def _line(r: TableResult) -> str:
    if r.status == "loaded":
        extra = f" ({r.message})" if r.message else ""
        return f"loaded  {r.name}: {r.rows:,} rows in {r.seconds:.1f} s{extra}"
    if r.status == "skipped":
        return f"skipped {r.name}: {r.message}"
    if r.status == "missing":
        return f"warning: {r.name} skipped: {r.message}"
    return f"FAILED  {r.name}: {r.message}"


def load_release(
    path: Path,
    *,
    dsn: str,
    replace: bool = False,
    progress: bool = True,
    tables: list[str] | None = None,
    out: Out = print,
) -> LoadReport:
    """Load every table file found in a MIMIC-IV release folder or .zip; report, never raise per table.

    `tables` restricts the load ("admissions", "hosp.admissions" or "mimiciv_hosp.admissions").
    A module the release does not hold at all (a notes-only folder has no hosp/ or icu/) is
    reported once and its tables are left as they are. Raises LoadError only when the release
    itself is unusable (no such path, no hosp/, icu/ or note/).
    """
    started = time.monotonic()
    path = Path(path)
    targets = _targets(tables)
    results: list[TableResult] = []
    with ExitStack() as stack:
        release = _Release(path, stack)
        conn = stack.enter_context(_connect(dsn))
        for schema_name in schema.ALL_SCHEMAS:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema_name)))
        present = release.modules
        if "note" in present and any(t.schema == schema.NOTE for t in targets):
            # The notes' trigram indexes need pg_trgm (a trusted extension: a database owner may add it).
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        for module in sorted({t.module for t in targets} - present):
            out(f"note: no {module}/ in {path}; its tables are left as they are")
        for table in targets:
            member = release.find(table)
            if member is None and table.module not in present:
                results.append(TableResult(table.qualified_name, "missing", message=f"no {table.module}/"))
                continue
            if member is None:
                r = TableResult(
                    table.qualified_name,
                    "missing",
                    message=f"no {table.module}/{table.name}.csv.gz (or .csv) in {path}",
                )
            else:
                r = _load_table(conn, table, member, replace=replace, progress=progress)
            results.append(r)
            # With progress bars the bar already shows a loaded table; anything else is news.
            if not progress or r.status != "loaded":
                out(_line(r))
        keep_summaries(conn, reloaded={r.name for r in results if r.status == "loaded"}, out=out)

    skipped_tables = [r.name for r in results if r.status == "skipped"]
    if skipped_tables:
        # A table loaded earlier (by an older askdb) keeps its rows but gets the indexes it lacks.
        build_indexes(dsn, tables=skipped_tables, out=out)
    constraints = add_constraints(dsn)
    for c in constraints:
        if c.status == "failed":
            out(f"warning: foreign key {c.table}.{c.name} not added: {c.message}")
    skipped = [c for c in constraints if c.status == "skipped"]
    if skipped:
        out(f"note: {len(skipped)} foreign key(s) not added because a table is not loaded")

    report = LoadReport(str(path), tuple(results), tuple(constraints), round(time.monotonic() - started, 3))
    out(report.summary())
    return report


@dataclass(frozen=True)
class IndexResult:
    table: str
    name: str
    status: Literal["created", "exists", "failed"]
    seconds: float = 0.0
    message: str = ""


def _base_tables(conn: psycopg.Connection) -> set[tuple[str, str]]:
    """(schema, table) of the real tables of every clinical schema: a view cannot be indexed."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'p')",
        (list(schema.ALL_SCHEMAS),),
    ).fetchall()
    return {(r[0], r[1]) for r in rows}


def _existing_indexes(conn: psycopg.Connection) -> set[tuple[str, str]]:
    rows = conn.execute(
        "SELECT schemaname, indexname FROM pg_indexes WHERE schemaname = ANY(%s)", (list(schema.ALL_SCHEMAS),)
    ).fetchall()
    return {(r[0], r[1]) for r in rows}


def build_indexes(dsn: str, *, tables: list[str] | None = None, out: Out = print) -> list[IndexResult]:
    """Create every index of the layout that a loaded table lacks; report each, never raise per index.

    For a database loaded by other means (the community scripts, an older askdb) that lacks the
    indexes researchers' queries need. Idempotent: an index already there is reported as 'exists'
    and not rebuilt; tables that do not exist are left alone. One line per index built, because
    on the full release each one takes minutes.
    """
    results: list[IndexResult] = []
    with _connect(dsn) as conn:
        present = _base_tables(conn)
        if any(s == schema.NOTE for s, _ in present):
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        existing = _existing_indexes(conn)
        for table in _targets(tables):
            if (table.schema, table.name) not in present:
                continue
            built = False
            for ix, statement in zip(table.indexes, table.index_sql(), strict=True):
                if (table.schema, ix.name) in existing:
                    results.append(IndexResult(table.qualified_name, ix.name, "exists"))
                    continue
                out(f"building index {table.schema}.{ix.name} ({', '.join(ix.columns)}) …")
                started = time.monotonic()
                try:
                    conn.execute(statement)
                except psycopg.Error as exc:
                    message = str(exc).strip().splitlines()[0]
                    results.append(IndexResult(table.qualified_name, ix.name, "failed", message=message))
                    out(f"FAILED  index {table.schema}.{ix.name}: {message}")
                    continue
                seconds = round(time.monotonic() - started, 3)
                results.append(IndexResult(table.qualified_name, ix.name, "created", seconds))
                out(f"created index {table.schema}.{ix.name} in {seconds:.1f} s")
                built = True
            if built:
                # VACUUM sets the visibility map that index-only scans need (a table loaded by
                # other means may never have been vacuumed); ANALYZE gives the planner fresh
                # statistics, of the new expression indexes too.
                out(f"vacuuming {table.qualified_name} …")
                conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(table.ident))
        if tables is None:
            results += keep_summaries(conn, out=out)
    return results


def keep_summaries(
    conn: psycopg.Connection, *, reloaded: Collection[str] = (), out: Out = print
) -> list[IndexResult]:
    """Create each summary (schema.SUMMARIES) whose table is loaded and that does not exist yet;
    refresh the ones whose table is in `reloaded` ('schema.table'). Reported like indexes."""
    present = _base_tables(conn)
    views = {
        (r[0], r[1])
        for r in conn.execute(
            "SELECT schemaname, matviewname FROM pg_matviews WHERE schemaname = ANY(%s)",
            (list(schema.ALL_SCHEMAS),),
        ).fetchall()
    }
    results: list[IndexResult] = []
    for summary in schema.SUMMARIES:
        over = f"{summary.schema}.{summary.over}"
        if (summary.schema, summary.over) not in present:
            continue
        exists = (summary.schema, summary.name) in views
        if exists and over not in reloaded:
            results.append(IndexResult(over, summary.name, "exists"))
            continue
        out(f"{'refreshing' if exists else 'building'} summary {summary.qualified_name} …")
        started = time.monotonic()
        try:
            if exists:
                conn.execute(sql.SQL("REFRESH MATERIALIZED VIEW {}").format(summary.ident))
            else:
                conn.execute(summary.create_sql())
            conn.execute(sql.SQL("ANALYZE {}").format(summary.ident))
        except psycopg.Error as exc:
            message = str(exc).strip().splitlines()[0]
            results.append(IndexResult(over, summary.name, "failed", message=message))
            out(f"FAILED  summary {summary.qualified_name}: {message}")
            continue
        seconds = round(time.monotonic() - started, 3)
        results.append(IndexResult(over, summary.name, "created", seconds))
        out(f"{'refreshed' if exists else 'created'} summary {summary.qualified_name} in {seconds:.1f} s")
    return results


def add_constraints(dsn: str) -> list[ConstraintResult]:
    """Add the community foreign keys whose two tables both exist; report each one, never raise.

    Safe to re-run: constraints already present are reported as 'exists'.
    """
    results: list[ConstraintResult] = []
    with _connect(dsn) as conn:
        present = {t.qualified_name for t in schema.TABLES if _table_state(conn, t)[0]}
        for owner, fk in schema.foreign_keys():
            absent = [n for n in (owner.qualified_name, fk.references) if n not in present]
            if absent:
                message = f"{', '.join(absent)} not loaded"
                results.append(ConstraintResult(fk.name, owner.qualified_name, "skipped", message))
                continue
            already = conn.execute(
                "SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s",
                (owner.qualified_name, fk.name),
            ).fetchone()
            if already:
                results.append(ConstraintResult(fk.name, owner.qualified_name, "exists"))
                continue
            try:
                conn.execute(owner.foreign_key_sql(fk))
            except psycopg.Error as exc:
                detail = exc.diag.message_detail
                message = (exc.diag.message_primary or str(exc)) + (f" ({detail})" if detail else "")
                results.append(ConstraintResult(fk.name, owner.qualified_name, "failed", message))
            else:
                results.append(ConstraintResult(fk.name, owner.qualified_name, "added"))
    return results


def grant_read(dsn: str, role: str, *, hidden: Collection[str] = (), introspects: bool = True) -> None:
    """Let `role` read every column of both schemas except `hidden` ("schema.table.column"); nothing more.

    Column privileges, never a table-wide SELECT: the database itself then refuses a hidden column
    however a query names it (`SELECT dod`, `p::text`, `row_to_json(p)`, `(p).dod`, `SELECT *`),
    and system columns (ctid, xmin, …) are refused to every tier, since only a table-wide SELECT
    grants them. Re-running it replaces the role's grants with exactly these: its SELECT is revoked
    (table and column privileges alike) and granted again in one transaction, so a column flagged
    sensitive since the last run is taken away. A table created later is readable by nobody until
    the next run (no default privileges: closed until the catalog says otherwise).

    `introspects`: the role reads the few catalogs askdb's introspection needs (restrict_catalogs).
    """
    r = sql.Identifier(role)
    hidden = {h.lower() for h in hidden}
    with _connect(dsn) as conn, conn.transaction():
        conn.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(conn.info.dbname), r)
        )
        for schema_name in schema.SCHEMAS:
            s = sql.Identifier(schema_name)
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
            conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(s, r))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, r))
            conn.execute(
                sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(s, r)
            )  # table-wide and column privileges alike
            conn.execute(
                sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} REVOKE SELECT ON TABLES FROM {}").format(s, r)
            )
        for (schema_name, table_name), columns in _relations(conn).items():
            visible = [c for c in columns if f"{schema_name}.{table_name}.{c}".lower() not in hidden]
            if visible:
                conn.execute(
                    sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(
                        sql.SQL(", ").join(map(sql.Identifier, visible)),
                        sql.Identifier(schema_name, table_name),
                        r,
                    )
                )
    with _connect(dsn) as conn:
        restrict_functions(conn, role)
        restrict_catalogs(conn, role, introspects=introspects)


def grant_tiers(dsn: str, tiers: Mapping[str, Collection[str]]) -> None:
    """One reader role per access tier: `tiers` maps each role to the columns hidden from it
    ("schema.table.column"), e.g. {"askdb_reader": (), "askdb_reader_restricted": sensitive}."""
    for role, hidden in tiers.items():
        grant_read(dsn, role, hidden=hidden)


def _relations(conn: psycopg.Connection) -> dict[tuple[str, str], list[str]]:
    """Every table, view and materialised view of the clinical schemas, with its columns in order."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname, a.attname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1, 2, a.attnum",
        (list(schema.SCHEMAS),),
    ).fetchall()
    out: dict[tuple[str, str], list[str]] = {}
    for schema_name, table_name, column in rows:
        out.setdefault((schema_name, table_name), []).append(column)
    return out


def _count_rows(conn: psycopg.Connection, schema_name: str, table_name: str) -> int:
    estimate = conn.execute(
        "SELECT c.reltuples::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema_name, table_name),
    ).fetchone()
    if estimate and estimate[0] >= _EXACT_COUNT_BELOW:
        return int(estimate[0])
    # reltuples is -1 for a never-analyzed table, and estimates are coarse for small ones.
    ident = sql.Identifier(schema_name, table_name)
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident)).fetchone()[0])


def loaded_tables(dsn: str) -> dict[str, int]:
    """'schema.table' -> row count (exact when small, the planner's estimate when large)."""
    with _connect(dsn) as conn:
        names = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'p') ORDER BY 1, 2",
            (list(schema.ALL_SCHEMAS),),
        ).fetchall()
        return {f"{s}.{t}": _count_rows(conn, s, t) for s, t in names}
