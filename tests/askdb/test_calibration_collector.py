"""A calibration tells the garbage collector what it holds (calibration_worker.fewer_collections),
and leaves the process's collector as it found it: a Celery worker or a web process goes on."""

from __future__ import annotations

import gc
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
