"""What one process needs to do parts of a calibration: the library as stored, read once, and the
database callbacks, each asking the database once per process (calibration.library_cross_validate
and its worker processes, calibration_worker, both read it)."""

from __future__ import annotations

import os
import pickle
from collections import Counter
from typing import Any

from django.conf import settings

from askdb.adapters.library_cache import LIBRARY
from askdb.adapters.ports import source_probe, value_lookup
from core.compare import results_match
from infra.adapters.clinical import ExecutionError
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_catalog_schema, source_executor


def cv_context(source, prepared: str | None = None, timeouts: Counter | None = None) -> dict[str, Any]:
    """What one process needs to do parts of a calibration (match.run_part's arguments but the part's
    own): the library as stored, read once, and the database callbacks of _cv_callbacks.

    `prepared`: a file cv_prepare wrote from the calling process's context (a worker process then
    reads the library, its values and what composing reads of it in a second, instead of reading
    the database and rebuilding them: most of a worker's start). `timeouts`: counts the callbacks'
    statements that ran out of time, by what asked them (TIMEOUT_KINDS)."""
    executor = source_executor(source)
    if prepared:
        with open(prepared, "rb") as file:  # written by this calibration's own process (cv_prepare)
            index, values, catalog = pickle.load(file)
    else:
        catalog = source_catalog_schema(source)
        index, values = LIBRARY.index(source, executor, get_embedder())
    lookup, probe, same = _cv_callbacks(executor, source, Counter() if timeouts is None else timeouts)
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


def _cv_callbacks(executor, source, timeouts: Counter):
    """Value lookups, probes and result comparisons for one calibration, each asked of the database
    once (results, lookups and probes are remembered across its questions); `timeouts` counts those
    that ran out of time (_Timed; a value lookup in the library's own tables too)."""
    results: dict[str, Any] = {}
    lookups: dict[tuple[str, str], list] = {}
    probes: dict[str, bool] = {}
    probing, stating = _Timed(executor, timeouts, "probes"), _Timed(executor, timeouts, "statements")

    def rows(sql: str):
        if sql not in results:
            try:
                limit_s = settings.ASKDB_CALIBRATION_QUERY_TIMEOUT_S
                results[sql] = stating.execute(sql, timeout_s=limit_s, row_cap=1000).rows
            except ExecutionError as exc:
                results[sql] = exc
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
            probes[sql] = source_probe(probing, sql)
        return probes[sql]

    return lookup, probe, same
