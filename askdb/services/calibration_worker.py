"""A worker process of a calibration (calibration.library_cross_validate): it reads the library once,
then does the parts of the cross-validation it is given, as the calling process would.

Started with `spawn`, never `fork`: a forked child inherits the parent's database connections and
threads (a fork once hung CI). So this module imports nothing of Django at import time: the child
imports it to find `start` and `part` before Django is set up, and `start` sets it up.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

_WORKER: dict[str, Any] = {}  # this process's library and callbacks, made once by `start`
_TIMEOUTS: Counter = Counter()  # this process's statements that ran out of time (cv_context)


def start(source_pk: int, database: str, prepared: str = "") -> None:
    """Set up Django in this child (the parent's settings, through the environment it inherits) on
    the parent's database (`database`: its name, a test database in tests), while the parent reads
    the library. `prepared`: the file where the parent will have written it (cv_prepare) before it
    hands out the first part; the library is read from it then. Without one, read it now."""
    import django

    django.setup()
    from django.db import connections

    connections["default"].close()
    connections["default"].settings_dict["NAME"] = database
    from askdb.services.calibration_context import cv_context, shared_answers
    from metadata_admin.models import ClinicalSource

    source = ClinicalSource.objects.get(pk=source_pk)
    atexit.register(leave)  # the last handler registered runs first: before the interpreter's teardown
    with fewer_collections():  # what it reads lives as long as this process
        if prepared:
            shared = shared_answers(prepared)  # the probes and results every process shares
            _WORKER["_later"] = lambda: cv_context(
                source, prepared=prepared, timeouts=_TIMEOUTS, shared=shared
            )
            _warm_up(source)
        else:
            _WORKER.update(cv_context(source, timeouts=_TIMEOUTS))


def leave() -> None:
    """End this worker process at exit without the interpreter's teardown: its connections closed,
    its logs and output flushed, then `os._exit(0)`.

    Why: the worker holds the library and a calibration's caches (about a gigabyte, millions of
    objects whose sqlglot trees are cycles), and a spawned process ends like any Python program, its
    collector walking and freeing all of them one by one: 17 s of CPU on the EHRSQL train library,
    for which the calling process waits in `pool.shutdown`. The operating system takes the memory
    back at once. Registered with atexit by `start` (a `spawn` child ends with `sys.exit`, which
    runs it), so the pool's own shutdown (results sent, queues closed) is over when it runs."""
    from django.db import connections

    try:
        connections.close_all()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


def _warm_up(source) -> None:
    """While the parent builds the library: read each stored template as every fold will
    (core.match.calibrate.warm_up), so this process's first parts do not parse them."""
    from askdb.models import Example
    from core.match import Template, template_is_current, warm_up

    stored = (
        Example.objects.filter(source=source, status=Example.Status.ACTIVE, kind=Example.Kind.ANSWERABLE)
        .order_by("id")
        .values_list("pk", "template")
    )
    warm_up(
        (pk, Template.from_dict(t), t.get("key") or "")
        for pk, t in stored.iterator()
        if template_is_current(t)
    )


def part(part: Any, labelled: Sequence[tuple[str, str, Sequence[float]]] = ()) -> tuple[list, int, dict]:
    """One part's samples (core.match.calibrate.run_part), how many questions it asked (for the
    parent's progress) and its statements that ran out of time, by kind (for the parent's report).
    `labelled`: the part's own labelled questions (the part's slice of them)."""
    from core import match

    if "_later" in _WORKER:  # the parent's library, written before it handed out any part
        with fewer_collections():  # millions of objects read back: no collection walks them as they come
            _WORKER.update(_WORKER.pop("_later")())
    asked, before = [0], Counter(_TIMEOUTS)

    def count(_: int) -> None:
        asked[0] += 1

    # run_part reads labelled[n] for n in a labelled part's slice
    padded = [None] * part.start + list(labelled) if part.kind == "labelled" else []
    with fewer_collections():
        found = match.run_part(part, **_WORKER, labelled=padded, progress=count)  # type: ignore[arg-type]
        settle()
    return found, asked[0], dict(_TIMEOUTS - before)


def embed(texts: list[str]) -> list:
    """The vectors of the labelled questions' masked texts (the parent masks them), as the parent's
    embedder would give them: the same model and settings, one call, a fresh cache."""
    from infra.providers.embeddings import get_embedder

    return get_embedder().embed(texts)


# Allocations between two collections of the youngest generation while calibrating. Why 20,000, not
# 100,000: a young collection walks what was made since the last one, and a smaller youngest
# generation is still in the CPU's caches when walked (EHRSQL train, 2 processes, side by side at
# load 8: young collections 6.6 -> 3.3 s CPU per process for the same work; 1,000,000 was worse).
GC_YOUNG = 20_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """The cyclic garbage collector told what a calibration holds: the library read before it starts
    (frozen: gc.freeze, no collection walks it again) and no collection every 700 allocations.
    Also while the library is built or read (cv_context, a worker's warm-up, a worker reading the
    parent's file): it is millions of
    objects that live as long as the calibration, which the collector would otherwise walk again and
    again as it grows (a third of the build's CPU time at 5,000 examples).

    Why: a calibration makes millions of small objects (sqlglot trees, whose nodes point at their
    parents: cycles) beside a library that lives as long as it does, and each full collection walks
    all of it. Nothing is decided differently (a collection only frees what nothing refers to).
    The process's collector is as it was afterwards (a worker or a web process goes on). What the
    calibration builds while it runs is frozen after each part (settle)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], GC_YOUNG), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def settle() -> None:
    """After each part of a calibration, in the calling process and in a worker (inside
    fewer_collections): the young and middle generations collected, then everything left frozen.

    Why: a part leaves behind the caches the next parts read (compositions, parses, readings: about
    a gigabyte of sqlglot trees by the end), which fewer_collections' first freeze could not hold
    since they did not exist yet. Left in the oldest generation, they were walked again by each full
    collection (5 of them, 4.2 s of CPU, in the calling process of an EHRSQL train calibration with
    GC_YOUNG's young generation; 0.5 s with this). Collected first: a cycle a part made and dropped
    is freed here, never frozen (frozen garbage would be freed only after the calibration). In a
    worker, whose parts each run in their own fewer_collections (which freezes at its start), it is
    what keeps a part's garbage from being frozen by the next part's start."""
    gc.collect(1)
    gc.freeze()
