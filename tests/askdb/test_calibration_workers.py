"""How a calibration hands its parts to worker processes (askdb.services.calibration._in_workers):
fold by fold, this process from a fold's first part on and the workers from its last one back, so
each asks the families at its own end of every fold (a fold's parts are cut in family order); the
samples come back in the parts' order, and parts a broken pool could not take are done here."""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from askdb.services import calibration
from core.match import calibrate

SIZES = {(kind, f): 1000 for kind in ("fold", "siblings") for f in range(calibrate.CV_FOLDS)}


class Pool:
    """A worker pool in a thread: records the parts it did; `broken_after` parts, it refuses work."""

    def __init__(self, broken_after: int | None = None):
        self.threads = ThreadPoolExecutor(1)
        self.done: list = []
        self.first = threading.Event()
        # Set when this process has taken its first part. The worker's first part ends only then: a
        # worker in a thread is done at once, and on a loaded machine the feeder could hand it every
        # part before this process's thread ran at all (`here == []`, seen once under load 10).
        self.taken = threading.Event()
        self.broken_after = broken_after

    def submit(self, fn, part, rows):
        if self.broken_after is not None and len(self.done) >= self.broken_after:
            raise BrokenProcessPool("gone")
        self.done.append(part)

        def work():
            self.first.set()
            self.taken.wait(10)
            return [("worker", part)], 0, {"probes": 1}  # (samples, asked, timeouts): one timed out

        return self.threads.submit(work)


def _run(pool: Pool):
    parts = calibrate.calibration_parts(0, SIZES)
    here: list = []

    def local(part):
        pool.first.wait(10)  # the worker has taken its first part before this process takes any
        here.append(part)
        pool.taken.set()
        return [("here", part)]

    pool.timeouts = collections.Counter()
    found = calibration._in_workers(pool, 1, [], lambda _: None, pool.timeouts)(parts, local)
    pool.threads.shutdown()
    return parts, here, found


def test_each_fold_is_shared_from_both_ends_and_its_samples_come_back_in_order():
    pool = Pool()
    parts, here, found = _run(pool)
    assert [got[0][1] for got in found] == parts  # every part once, in order
    assert sorted(here + pool.done, key=parts.index) == parts
    assert pool.done and here
    for kind, fold in SIZES:
        mine = [p for p in parts if (p.kind, p.fold) == (kind, fold)]
        done_here = [p in here for p in mine]
        # this process took the fold's first parts, the worker its last ones: never interleaved
        assert done_here == sorted(done_here, reverse=True)
    # the worker did parts of the first fold, not the last parts of the whole calibration
    assert pool.done[0] == [p for p in parts if (p.kind, p.fold) == ("fold", 0)][-1]


def test_parts_a_broken_pool_refuses_are_done_here():
    pool = Pool(broken_after=1)
    parts, here, found = _run(pool)
    assert [got[0][1] for got in found] == parts
    assert len(pool.done) == 1 and sorted(here, key=parts.index) == [p for p in parts if p not in pool.done]


def test_the_workers_timeouts_reach_the_count():
    """calibration_worker.part says how many of its statements ran out of time: the report adds
    every worker part's (a loaded run that decides otherwise shows whether a timeout decided)."""
    pool = Pool()
    _run(pool)
    assert pool.timeouts == {"probes": len(pool.done)} and pool.done
