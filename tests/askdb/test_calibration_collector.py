"""A calibration tells the garbage collector what it holds (calibration_worker.fewer_collections),
and leaves the process's collector as it found it: a Celery worker or a web process goes on. A
worker process ends without freeing what it held object by object (calibration_worker.leave)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import pytest

from askdb.services.calibration_worker import GC_YOUNG, fewer_collections


def test_the_library_is_frozen_and_young_collections_rarer_while_calibrating_then_all_as_before():
    before = gc.get_threshold()
    library = [{"template": [i]} for i in range(1000)]  # lives through the calibration
    with fewer_collections():
        assert gc.get_freeze_count() >= len(library)
        assert gc.get_threshold() == (max(before[0], GC_YOUNG), *before[1:])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_collector_is_restored_when_the_calibration_fails():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a part failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_made_while_calibrating_are_still_freed():
    class Node:
        pass

    with fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a sqlglot tree's parent pointers make such cycles
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None


def test_a_worker_ends_without_the_interpreters_teardown_its_output_flushed():
    """calibration_worker.leave, registered at a worker's start: what the worker wrote reaches its
    parent and it ends 0, yet nothing of the interpreter's exit after it runs (the handler registered
    before it stands for the teardown that frees the worker's gigabyte object by object)."""
    code = (
        "import atexit, sys, django\n"
        "django.setup()\n"
        "from askdb.services import calibration_worker\n"
        "atexit.register(print, 'the teardown ran', flush=True)\n"
        "atexit.register(calibration_worker.leave)\n"
        "sys.stdout.write('a part done')\n"
        "sys.exit(0)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "a part done"), done.stderr


@pytest.mark.django_db
def test_what_runs_between_the_library_and_the_fit_sees_the_library_frozen(
    source, settings, tmp_path, monkeypatch
):
    """The content hash (and the workers' file, the masking) once ran between the library's build
    and the fit with the default collector, whose collections walked the whole library: ~300 of a
    one-process train calibration's ~520 collections, a full one among them."""
    from askdb.services import calibration
    from tests.askdb.test_calibration_progress import calibration_library

    settings.ASKDB_HOME = tmp_path
    calibration_library(source, patients=5, examples=4)
    seen: list[tuple[int, int]] = []
    content_hash = calibration.content_hash

    def hashed(context):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return content_hash(context)

    monkeypatch.setattr(calibration, "content_hash", hashed)
    before = gc.get_threshold()
    calibration.library_cross_validate(source=source, processes=1, reuse=False)
    assert len(seen) == 1
    threshold, frozen = seen[0]
    assert threshold == max(before[0], GC_YOUNG)
    assert frozen > 0  # the library read just before is frozen: no collection walks it
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


class _Kept:
    """What a part leaves for the next ones (a composition, a parse): a cycle, as sqlglot trees are."""

    def __init__(self) -> None:
        self.me = self


def _parts_that_keep_and_drop(monkeypatch, module) -> list[dict]:
    """module.run_part replaced by one that, at each part's start, says whether what the earlier
    parts kept is out of the collector's generations (frozen), then keeps one cycle and drops one."""
    kept: list[_Kept] = []
    dropped: list[weakref.ref] = []
    seen: list[dict] = []

    def run_part(part, *args, **kwargs):
        tracked = {id(o) for o in gc.get_objects()}  # the generations: frozen objects are not in them
        seen.append({"frozen": [id(k) not in tracked for k in kept], "dropped": [d() for d in dropped]})
        kept.append(_Kept())
        gone = _Kept()
        dropped.append(weakref.ref(gone))
        del gone
        return []

    monkeypatch.setattr(module, "run_part", run_part)
    return seen


@pytest.mark.django_db
def test_what_each_part_keeps_is_frozen_for_the_next_and_what_it_drops_is_freed_first(
    source, settings, tmp_path, monkeypatch
):
    """calibration_worker.settle after each part of this process: the caches a part built (a
    gigabyte of sqlglot trees by the end) leave the generations the collector walks, while a cycle
    the part made and dropped is collected before the freeze, never frozen (that would be a leak
    until the calibration ends)."""
    from askdb.services import calibration
    from core.match import calibrate
    from tests.askdb.test_calibration_progress import calibration_library

    settings.ASKDB_HOME = tmp_path
    calibration_library(source, patients=5, examples=4)
    seen = _parts_that_keep_and_drop(monkeypatch, calibrate)
    gc.disable()  # no collection but settle's: what is freed, settle freed
    try:
        calibration.library_cross_validate(source=source, processes=1, reuse=False)
    finally:
        gc.enable()
    assert len(seen) > 2
    for n, at in enumerate(seen):
        assert at["frozen"] == [True] * n  # on the old code: [False, ...]
        assert at["dropped"] == [None] * n
    assert gc.get_freeze_count() == 0  # the process's collector as it was


def test_a_worker_freezes_what_its_part_kept_and_frees_what_it_dropped(monkeypatch):
    """The same in a worker process (calibration_worker.part): each part begins with what the
    earlier ones kept frozen and what they dropped freed."""
    from askdb.services import calibration_worker
    from core import match
    from core.match.calibrate import Part

    monkeypatch.setattr(calibration_worker, "_WORKER", {})
    seen = _parts_that_keep_and_drop(monkeypatch, match)
    gc.disable()
    try:
        for start in (0, 250, 500):
            calibration_worker.part(Part("fold", 0, start, start + 250))
            # a worker's parts each run in fewer_collections, which unfreezes at its end: what the
            # part kept goes back to the oldest generation, and the next part freezes it again
    finally:
        gc.enable()
    assert [at["dropped"] for at in seen] == [[], [None], [None, None]]
    assert [at["frozen"] for at in seen] == [[], [True], [True, True]]
    assert gc.get_freeze_count() == 0
