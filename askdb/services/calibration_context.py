"""What one process needs to do parts of a calibration: the library as stored, read once, and the
database callbacks, each asking the database once per process (calibration.library_cross_validate
and its worker processes, calibration_worker, both read it)."""

from __future__ import annotations

import os
import pickle
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings

from askdb.adapters.library_cache import LIBRARY
from askdb.adapters.ports import source_probe, value_lookup
from core.compare import results_match
from infra.adapters.clinical import ExecutionError
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_catalog_schema, source_executor


def cv_context(
    source, prepared: str | None = None, timeouts: Counter | None = None, shared: str | None = None
) -> dict[str, Any]:
    """What one process needs to do parts of a calibration (match.run_part's arguments but the part's
    own): the library as stored, read once, and the database callbacks of _cv_callbacks.

    `prepared`: a file cv_prepare wrote from the calling process's context (a worker process then
    reads the library, its values and what composing reads of it in a second, instead of reading
    the database and rebuilding them: most of a worker's start). `timeouts`: counts the callbacks'
    statements that ran out of time, by what asked them (TIMEOUT_KINDS). `shared`: the answers file
    every process of this calibration reads and adds to (shared_answers: each probe and compared
    result asked of the database once in all of them, not once in each)."""
    executor = source_executor(source)
    if prepared:
        with open(prepared, "rb") as file:  # written by this calibration's own process (cv_prepare)
            index, values, catalog = pickle.load(file)
    else:
        catalog = source_catalog_schema(source)
        index, values = LIBRARY.index(source, executor, get_embedder())
    lookup, probe, same = _cv_callbacks(
        executor, source, Counter() if timeouts is None else timeouts, _Shared(shared) if shared else None
    )
    return {
        "index": index, "vectors_of": lambda held: index.matrix[held], "values": values, "catalog": catalog,
        "is_correct": lambda entry, best: same(best.sql, entry.template.sql),
        "lookup": lookup, "probe": probe, "same": same,
    }  # fmt: skip


def cv_prepare(context: dict[str, Any], path: str) -> None:
    """Write what cv_context(source, prepared=path) reads back: the context's library, values and
    catalog (the callbacks hold connections and are made anew). Written whole, then renamed into
    place, so no reader ever sees half a file."""
    partial = f"{path}.partial"
    with open(partial, "wb") as file:
        pickle.dump(
            (context["index"], context["values"], context["catalog"]), file, protocol=pickle.HIGHEST_PROTOCOL
        )
    os.replace(partial, path)


def shared_answers(prepared: str | Path) -> str:
    """The answers file of the calibration whose library file is `prepared` (cv_prepare): beside it,
    in the calibration's own temporary folder, so it goes when the calibration ends."""
    return str(Path(prepared).with_name("answers.sqlite"))


class _Shared:
    """Answers of the source that the processes of one calibration share (cv_context's `shared`): a
    probe's (does it return a row) and a compared statement's rows, by kind and SQL, in an SQLite file
    each process opens on its first use (after spawn: a connection is never inherited).

    Why: each process remembers what it asked (_cv_callbacks), yet the same probes came back in the
    other process (a question of one process's ordinary fold is asked again in the other's sibling
    pass, with the same candidates): ~800 probes run in both on the EHRSQL train library. An answer
    is a pure function of the SQL on one source, so reading another process's is the same answer.
    Only answers got without any failure are shared (a timeout is the machine's load, not the
    data's: the other process asks for itself and counts its own). Any trouble with the file (locked
    too long, full disk) and this process asks the database as before: the file saves time, never
    decides."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._broken = False

    def _open(self) -> sqlite3.Connection | None:
        if self._db is None and not self._broken:
            try:
                db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the other process's writer
                db.execute("PRAGMA synchronous=OFF")  # a cache of one calibration: no durability needed
                db.execute(
                    "CREATE TABLE IF NOT EXISTS answers (kind TEXT, sql TEXT, value BLOB, PRIMARY KEY (kind, sql))"
                )
                self._db = db
            except sqlite3.Error:
                self._broken = True
        return self._db

    def get(self, kind: str, sql: str) -> tuple[bool, Any]:
        """(True, the answer) when some process of this calibration shared one, else (False, None)."""
        db = self._open()
        if db is None:
            return False, None
        try:
            row = db.execute("SELECT value FROM answers WHERE kind = ? AND sql = ?", (kind, sql)).fetchone()
            return (True, pickle.loads(row[0])) if row is not None else (False, None)
        except (sqlite3.Error, pickle.UnpicklingError):
            return False, None

    def put(self, kind: str, sql: str, value: Any) -> None:
        db = self._open()
        if db is None:
            return
        try:
            blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            db.execute("INSERT OR IGNORE INTO answers VALUES (?, ?, ?)", (kind, sql, blob))
        except (sqlite3.Error, pickle.PicklingError, TypeError, AttributeError):
            return


# What the report's "timeouts" counts: the probes (rules asking the source, matching) and the other
# statements (results compared, value lookups and scans) that ran out of time.
TIMEOUT_KINDS = ("probes", "statements")


class _Timed:
    """The source's executor, counting in `timeouts[kind]` the statements that run out of time. Why:
    a statement's time limit is wall time, so a loaded machine may time out what an idle one answers;
    a calibration that decides otherwise under load then shows whether a timeout decided."""

    def __init__(self, executor, timeouts: Counter, kind: str) -> None:
        self._executor, self._timeouts, self._kind = executor, timeouts, kind

    def execute(self, sql: str, **kwargs: Any):
        try:
            return self._executor.execute(sql, **kwargs)
        except ExecutionError as exc:
            self._timeouts[self._kind] += exc.code == "timeout"
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._executor, name)


def _cv_callbacks(executor, source, timeouts: Counter, shared: _Shared | None = None):
    """Value lookups, probes and result comparisons for one calibration, each asked of the database
    once (results, lookups and probes are remembered across its questions; with `shared`, probes and
    results across its processes too); `timeouts` counts those that ran out of time (_Timed; a value
    lookup in the library's own tables too)."""
    results: dict[str, Any] = {}
    lookups: dict[tuple[str, str], list] = {}
    probes: dict[str, bool] = {}
    probing, stating = _Timed(executor, timeouts, "probes"), _Timed(executor, timeouts, "statements")

    def rows(sql: str):
        if sql not in results:
            known, answer = shared.get("rows", sql) if shared is not None else (False, None)
            if known:
                results[sql] = answer
                return answer
            try:
                limit_s = settings.ASKDB_CALIBRATION_QUERY_TIMEOUT_S
                results[sql] = stating.execute(sql, timeout_s=limit_s, row_cap=1000).rows
            except ExecutionError as exc:
                results[sql] = exc
            else:
                if shared is not None:
                    shared.put("rows", sql, results[sql])
        return results[sql]

    def same(sql: str, gold: str) -> bool:
        if " ".join(sql.lower().split()) == " ".join(gold.lower().split()):
            return True
        a, b = rows(sql), rows(gold)
        return not isinstance(a, Exception) and not isinstance(b, Exception) and results_match(a, b)

    def lookup(table_column: str, text: str):
        key = (table_column, text.lower())
        if key not in lookups:
            problems: list[str] = []
            lookups[key] = value_lookup(source, stating, table_column, text, problems=problems)
            timeouts["statements"] += sum("ran out of time" in p for p in problems)  # the library's table
        return lookups[key]

    def probe(sql: str) -> bool:
        if sql not in probes:
            known, answer = shared.get("probe", sql) if shared is not None else (False, None)
            if not known:
                failed: list[str] = []
                answer = source_probe(probing, sql, problems=failed)
                if shared is not None and not failed:
                    shared.put("probe", sql, answer)
            probes[sql] = answer
        return probes[sql]

    return lookup, probe, same
