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
