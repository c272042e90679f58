"""Where a calibration's time goes, and what it decides: `python benchmarks/profile_calibration.py
[--home DIR] [--valid] [--processes N] [--profile] [--report FILE] [--top 30]`.

Runs the service calibrate_library runs (calibration.library_cross_validate) on library_scale.py's
`ehrsql` source (import it first: `library_scale.py --parts import`), in this process, and prints
its wall and CPU seconds (this process and its worker processes). `--report FILE`: the report as
JSON without its time stamp, to diff two versions' decisions (the same samples give the same risk
model, threshold and counts); `--same-as FILE`: exit 1 unless the report is byte-identical to FILE
(another version's `--report`, with 1 or 2 processes: the report is the same either way). `--profile`: cProfile of this process (with `--processes 1`, all the
work), saved beside the results, its top functions printed, and the sqlglot parses counted by
caller. `--valid`: the 1,163 valid questions too, for time only (their accuracy is not read here).
`--gc-young N`: the calibration's young-collection threshold (calibration_worker.GC_YOUNG) for this
run, in every process, to compare collectors side by side. `--fresh`: the library's own questions asked again even when an earlier calibration of the same
library kept their samples (askdb.services.calibration_reuse); they are kept either way. It also
prints this process's garbage collections, their wall time and their CPU time by generation
(calibration_worker.fewer_collections): on a loaded machine wall time says little, CPU time does;
and each worker process's (its start wrapped here: _traced_start), with every process's peak RSS.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import gc
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import library_scale
import pipeline
import profile_question


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME)
    parser.add_argument("--valid", action="store_true", help="with the valid questions (time only)")
    parser.add_argument("--processes", type=int, default=None, help="default: the setting")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--report", type=Path, default=None, help="write the report here (JSON)")
    parser.add_argument("--same-as", type=Path, default=None,
                        help="a --report of another version: exit 1 unless this report is byte-identical")  # fmt: skip
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--fresh", action="store_true", help="read no samples kept by an earlier calibration")
    parser.add_argument("--gc-young", type=int, default=None,
                        help="calibration_worker.GC_YOUNG for this run, here and in the workers (to compare)")  # fmt: skip
    args = parser.parse_args(argv)
    if not library_scale.available():
        print(f"{library_scale.DATA} is not there: nothing to profile")
        return 1
    home = args.home.resolve()
    started = pipeline.prepare(home)
    try:
        from askdb.models import Example
        from askdb.services.calibration import library_cross_validate
        from infra.formats import load_items

        source = library_scale.ensure_source()
        if not Example.objects.filter(source=source).exists():
            print("the ehrsql library is empty: run library_scale.py --parts import first")
            return 1
        items = None
        if args.valid:
            valid = library_scale.DATA / "valid"
            loaded = load_items(str(valid / "data.json"), str(valid / "label.json"))
            items = [{"question": i.question, "sql": i.gold_sql} for i in loaded]
        if args.profile:
            profile_question.install_counters()
        profile = cProfile.Profile()
        if args.gc_young is not None:
            os.environ[_GC_YOUNG] = str(args.gc_young)  # a spawned worker inherits it (_traced_start)
        traced = _trace_workers()
        collected = _gc_timer()
        os.environ[_EPOCH] = str(time.time())  # the timelines' zero, in every process
        timeline = _timeline()
        t0, c0 = time.perf_counter(), time.process_time()
        k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if args.profile:
            profile.enable()
        report = library_cross_validate(
            source=source, items=items, processes=args.processes, reuse=not args.fresh
        )
        if args.profile:
            profile.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        gc.callbacks.remove(collected["callback"])
        k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = (k1.ru_utime + k1.ru_stime) - (k0.ru_utime + k0.ru_stime)
    finally:
        from infra import embedded

        embedded.release(started)
    print(f"calibration{' + valid' if args.valid else ''}: {wall:.1f} s wall, {cpu:.1f} s CPU here, "
          f"{children:.1f} s CPU in workers; load {_load()}")  # fmt: skip
    by_generation = ", ".join(f"gen {g}: {n} taking {collected['cpu'][g]:.1f} s CPU, freeing {collected['freed'][g]:,}"
                              for g, n in enumerate(collected["by"]))  # fmt: skip
    print(f"garbage collections here: {collected['n']} ({collected['gen2']} of the oldest generation), "
          f"{collected['s']:.1f} s wall; {by_generation}")  # fmt: skip
    print(f"peak RSS here: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    for worker in _workers_traced(traced):
        by = ", ".join(
            f"gen {g}: {n} taking {worker['cpu'][g]:.1f} s CPU, freeing {worker['freed'][g]:,}"
            for g, n in enumerate(worker["by"])
        )
        print(f"worker {worker['pid']}: {worker['process_cpu']:.1f} s CPU, peak RSS {worker['maxrss_mb']:.0f} MB; "
              f"garbage collections {worker['n']} ({worker['gen2']} of the oldest generation), {by}")  # fmt: skip
    _print_timelines(timeline, _workers_traced(traced))
    print({k: v for k, v in report.items() if k not in ("risk", "at")})
    written = json.dumps({k: v for k, v in report.items() if k != "at"}, indent=1, sort_keys=True)
    if args.report is not None:
        args.report.write_text(written)
    if args.same_as is not None and args.same_as.read_text() != written:
        print(f"the report differs from {args.same_as}: the calibration decides differently")
        return 1
    if args.same_as is not None:
        print(f"the report is byte-identical to {args.same_as}")
    if args.profile:
        saved = home / "results" / "profile_calibration.prof"
        saved.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(saved)
        print(f"\ncProfile saved in {saved}")
        print("sqlglot parses by caller:")
        for caller, value in profile_question.PARSED_BY.most_common(15):
            print(f"  {caller}: {value}")
        print(f"\ntop {args.top} by own time:\n{profile_question._top(profile, 'tottime', args.top)}")
        print(
            f"\ntop {args.top} by cumulative time:\n{profile_question._top(profile, 'cumulative', args.top)}"
        )
    return 0


def _gc_timer() -> dict:
    """Counts this process's garbage collections and the wall and CPU time they take (gc.callbacks),
    the count and CPU time by generation (a young collection and a full one cost very differently)."""
    out: dict = {
        "n": 0,
        "gen2": 0,
        "s": 0.0,
        "at": 0.0,
        "cpu_at": 0.0,
        "by": [0, 0, 0],
        "cpu": [0.0, 0.0, 0.0],
        "freed": [0, 0, 0],
    }

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            out["at"], out["cpu_at"] = time.perf_counter(), time.process_time()
            return
        generation = info.get("generation", 0)
        out["n"] += 1
        out["gen2"] += generation == 2
        out["s"] += time.perf_counter() - out["at"]
        out["by"][generation] += 1
        out["cpu"][generation] += time.process_time() - out["cpu_at"]
        out["freed"][generation] += info.get("collected", 0)

    out["callback"] = callback
    gc.callbacks.append(callback)
    return out


_TRACE_DIR = "ASKDB_PROFILE_WORKER_GC"  # where each traced worker writes its collector's figures


def _trace_workers() -> Path:
    """Each worker process started from now on (calibration_worker.start, its pool's initializer)
    counts its collections as this process does (_gc_timer) and writes them, its CPU time and its
    peak RSS to a file in the returned directory as it ends (before calibration_worker.leave)."""
    from askdb.services import calibration_worker

    _young()
    folder = Path(tempfile.mkdtemp(prefix="askdb-profile-workers-"))
    os.environ[_TRACE_DIR] = str(folder)  # a spawned worker inherits it
    calibration_worker.start = _traced_start  # type: ignore[assignment]
    return folder


def _traced_start(*args) -> None:
    """calibration_worker.start in a worker, its collector timed (_trace_workers). The worker
    imported calibration_worker afresh: its `start` there is the module's own."""
    import django

    from askdb.services import calibration_worker

    collected = _gc_timer()
    django.setup()  # as start does first: the modules _timeline wraps import Django's models
    timeline = _timeline()
    _young()
    calibration_worker.start(*args)

    def written() -> None:  # registered after start's leave: runs before it
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out = {k: collected[k] for k in ("n", "gen2", "by", "cpu", "freed")}
        out.update(pid=os.getpid(), process_cpu=time.process_time(), maxrss_mb=usage.ru_maxrss / 1024)
        out["timeline"] = timeline
        Path(os.environ[_TRACE_DIR], f"{os.getpid()}.json").write_text(json.dumps(out))

    atexit.register(written)


_GC_YOUNG = "ASKDB_PROFILE_GC_YOUNG"  # --gc-young, for the workers too


def _young() -> None:
    """calibration_worker.GC_YOUNG as --gc-young says, in this process (each process sets its own)."""
    from askdb.services import calibration_worker

    if os.environ.get(_GC_YOUNG):
        calibration_worker.GC_YOUNG = int(os.environ[_GC_YOUNG])


_EPOCH = "ASKDB_PROFILE_EPOCH"  # time.time() when the calibration started, for every process's timeline


def _timeline() -> list:
    """This process's steps of a calibration as (what, start s, end s, CPU s) from _EPOCH: its
    library built, written or read, its warm-up, and each part (core.match.run_part, as the calling
    process and a worker each call it); the functions wrapped here, in this process only."""
    from askdb.services import calibration, calibration_context, calibration_worker
    from core import match
    from core.match import calibrate

    steps: list = []
    epoch = float(os.environ[_EPOCH])

    def timed(name, fn):
        def run(*args, **kwargs):
            t, c = time.time() - epoch, time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                what = name if name != "part" else f"{args[0].kind} {args[0].fold} {args[0].start}"
                steps.append(
                    (what, round(t, 2), round(time.time() - epoch, 2), round(time.process_time() - c, 2))
                )

        return run

    calibration.cv_context = timed("library", calibration.cv_context)
    calibration.cv_prepare = timed("write", calibration.cv_prepare)
    calibration_context.cv_context = timed("library", calibration_context.cv_context)
    calibration_worker._warm_up = timed("warm-up", calibration_worker._warm_up)
    calibrate.run_part = timed("part", calibrate.run_part)
    match.run_part = timed("part", match.run_part)
    return steps


def _print_timelines(here: list, workers: list[dict]) -> None:
    """Each process's steps (_timeline) summed: library, warm-up, parts (count, wall, CPU), its
    first and last part's times, and the tail: how long each process ended before the last."""
    processes = [("here", here)] + [(f"worker {w['pid']}", w.get("timeline", [])) for w in workers]
    ends = {name: max((s[2] for s in steps if " " in s[0]), default=0.0) for name, steps in processes}
    for name, steps in processes:
        parts = [s for s in steps if " " in s[0]]
        other = [f"{s[0]} {s[1]:.1f}-{s[2]:.1f} s ({s[3]:.1f} s CPU)" for s in steps if " " not in s[0]]
        busy, cpu = sum(s[2] - s[1] for s in parts), sum(s[3] for s in parts)
        first = min((s[1] for s in parts), default=0.0)
        print(f"{name}: {'; '.join(other)}; {len(parts)} parts {first:.1f}-{ends[name]:.1f} s, "
              f"{busy:.1f} s wall, {cpu:.1f} s CPU in them; tail {max(ends.values()) - ends[name]:.1f} s")  # fmt: skip


def _workers_traced(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _load() -> str:
    import os

    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
