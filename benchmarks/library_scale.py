"""Library operations at real scale: `python benchmarks/library_scale.py [--parts import,calibrate,ask]
[--questions 60] [--home DIR]`.

Uses the EHRSQL-2024 development data in ../shared/ehrsql-2024-dev (when it is absent every row
says "not measured"): its SQLite database is registered in the benchmark's askdb as the source
`ehrsql` (read-only, "now" = 2100-12-31 23:59) and introspected once. Then, as a user would:

- **import**: `manage.py import_examples train/data.json --labels train/label.json --source ehrsql`
  into an emptied library (5,124 pairs, each SQL validated and run), as a new process with its
  output captured (not a terminal), so the progress lines it must print are counted too;
- **calibrate**: `manage.py calibrate_library --source ehrsql --fresh` (grouped cross-validation over
  the library, nothing kept from an earlier calibration read), and again with the 1,163 valid
  questions (`--questions … --labels …`) on the unchanged library, which takes the library's own
  samples kept by the first (askdb.services.calibration_reuse) and asks valid's questions;
- **ask**: `--questions` valid questions through `question_submit_sync` with no LLM configured
  (embed, retrieve, gate, library match, validate, execute, finish: what a run does), p50/p95 of the
  wall time per question after the worker's warm-up (askdb.tasks.worker_warm_up) and one question,
  whose time is reported on its own; the questions are asked in three rounds and the middle round
  (by p50) is the one reported, as the pipeline rows do.

The import leaves the library the later parts use; `--parts calibrate,ask` reuses the last one.
Targets (targets.py): import ≤ 90 s, calibrate ≤ 60 s, ask p50 ≤ 80 ms and p95 ≤ 250 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pipeline
import targets
from _django import ROOT, percentile, table

DATA = Path(os.environ.get("ASKDB_EHRSQL_DIR") or ROOT.parent / "shared" / "ehrsql-2024-dev")
SOURCE = "ehrsql"
AS_OF = "2100-12-31T23:59:00+00:00"  # EHRSQL's "now"
PARTS = ("import", "calibrate", "ask")
# Rounds of the ask part: one round right after calibration swung with the load it left (session 11).
ROUNDS = 3
# A progress line of the commands when their output is not a terminal (askdb.progress).
PROGRESS_LINE = re.compile(r"^\S.*: \d[\d,]* of \d[\d,]*", re.M)


def available() -> bool:
    return all((DATA / p).is_file() for p in ("mimic_iv.sqlite", "train/data.json", "valid/label.json"))


def ensure_source():
    """The `ehrsql` source on the SQLite file, introspected and its docs embedded once."""
    import datetime as dt

    from metadata_admin.models import TableDoc
    from metadata_admin.services import source_introspect, source_register, table_docs_reembed

    source = source_register(
        name=SOURCE,
        url=f"sqlite:///{DATA / 'mimic_iv.sqlite'}",
        as_of=dt.datetime.fromisoformat(AS_OF),
        description="EHRSQL-2024 (MIMIC-IV demo, SQLite), for benchmarks/library_scale.py",
    )
    if not TableDoc.objects.filter(source=source, exists_in_source=True).exists():
        source_introspect(source=source)
    table_docs_reembed(source=source)  # retrieval finds tables by these vectors (no-op when done)
    return source


def _manage(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, the finished process); `proc.cpu_s` is the CPU time it used (the busier the
    machine, the more wall time exceeds it: compare both)."""
    import resource

    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)  # fmt: skip
    taken, cpu1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.cpu_s = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return taken, proc


def part_import(source, env: dict[str, str], values: dict, rows: list) -> None:
    from askdb.models import Example, Run

    Run.objects.filter(question__source=source).delete()
    Example.objects.filter(source=source).delete()
    train = DATA / "train"
    taken, proc = _manage(
        [
            "import_examples",
            str(train / "data.json"),
            "--labels",
            str(train / "label.json"),
            "--source",
            SOURCE,
        ],
        env,
    )
    progress = len(PROGRESS_LINE.findall(proc.stdout + proc.stderr))
    summary = next((line for line in proc.stdout.splitlines() if "added" in line), "")
    values.update(import_s=taken, import_cpu_s=proc.cpu_s, import_progress_lines=progress,
                  import_examples=Example.objects.filter(source=source).count())  # fmt: skip
    rows.append(["import_examples train (5,124 pairs)", f"{taken:.1f} s ({proc.cpu_s:.0f} s CPU)",
                 f"{progress} progress lines; {summary}"])  # fmt: skip


def part_calibrate(source, env: dict[str, str], values: dict, rows: list) -> None:
    # The library's first calibration (--fresh: nothing kept from an earlier one is read); the one
    # with valid follows on the same library, so it asks only valid's questions (calibration_reuse).
    taken, proc = _manage(["calibrate_library", "--source", SOURCE, "--fresh"], env)
    values.update(calibrate_s=taken, calibrate_cpu_s=proc.cpu_s)
    rows.append(["calibrate_library (cross-validation)", f"{taken:.1f} s ({proc.cpu_s:.0f} s CPU)",
                 proc.stdout.strip()[-300:]])  # fmt: skip
    valid = DATA / "valid"
    taken, proc = _manage(
        ["calibrate_library", "--source", SOURCE, "--questions", str(valid / "data.json"),
         "--labels", str(valid / "label.json")],
        env,
    )  # fmt: skip
    values.update(calibrate_valid_s=taken, calibrate_valid_cpu_s=proc.cpu_s)
    rows.append(["calibrate_library + 1,163 valid questions, library unchanged", f"{taken:.1f} s ({proc.cpu_s:.0f} s CPU)",
                 proc.stdout.strip()[-300:]])  # fmt: skip


def part_ask(source, n: int, values: dict, rows: list) -> None:
    from collections import Counter

    from django.conf import settings
    from django.contrib.auth import get_user_model

    from askdb.services.runs import question_submit_sync

    settings.LLM_BASE_URL = settings.LLM_MODEL = settings.LLM_API_KEY = ""  # no LLM: the library or nothing
    data = json.loads((DATA / "valid" / "data.json").read_text())["data"]
    questions = [d["question"] for d in random.Random(18).sample(data, n + 1)]
    user = get_user_model().objects.get(username="researcher")
    from askdb.tasks import worker_warm_up

    t0 = time.perf_counter()
    worker_warm_up()  # what a started worker has loaded (models, the library) before its first question
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    question_submit_sync(user=user, text=questions[0], source=source)
    first_ms = (time.perf_counter() - t0) * 1000
    rounds, outcomes = [], Counter()
    for _ in range(ROUNDS):  # the same questions each round; the middle round's figures are reported
        walls = []
        for text in questions[1:]:
            t0 = time.perf_counter()
            run = question_submit_sync(user=user, text=text, source=source)
            walls.append((time.perf_counter() - t0) * 1000)
            outcomes[f"{run.status}/{run.outcome}"] += 1
        rounds.append((percentile(walls, 50), percentile(walls, 95), max(walls)))
    p50, p95, most = sorted(rounds)[len(rounds) // 2]  # the middle round by p50, as targets.middle
    values.update(ask_p50=p50, ask_p95=p95, ask_max=most, ask_first_ms=first_ms, ask_warm_up_s=warm_s)
    each = " / ".join(f"{a:.0f}–{b:.0f}" for a, b, _ in rounds)
    rows.append([f"no-LLM question, 5,000-example library (n={n}, middle of {ROUNDS} rounds)",
                 f"p50 {p50:.0f} ms, p95 {p95:.0f} ms",
                 f"rounds p50–p95 {each} ms; "
                 + ", ".join(f"{k} x{v // ROUNDS}" for k, v in outcomes.most_common())
                 + f"; first question {first_ms:.0f} ms after the worker's warm-up ({warm_s:.1f} s)"])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="which of import,calibrate,ask")
    parser.add_argument("--questions", type=int, default=60, help="questions asked in the ask part")
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME, help="state folder")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    if not available():
        print(f"{DATA} is not there: the library-scale rows are not measured")
        return 0
    home = args.home.resolve()
    load_at_start = targets.load_average()
    started = pipeline.prepare(home)
    values: dict[str, float] = {}
    rows: list[list[str]] = []
    try:
        env = {k: v for k, v in os.environ.items() if k not in (*pipeline.EXTERNAL_ENV, "LLM_BASE_URL")}
        env.update(ASKDB_TORCH_THREADS="1", OMP_NUM_THREADS="1")
        source = ensure_source()
        previous = targets.results(home).get("library_scale", {}).get("values", {})
        for part in parts:
            load, before = targets.load_average(), len(rows)
            {"import": lambda: part_import(source, env, values, rows),
             "calibrate": lambda: part_calibrate(source, env, values, rows),
             "ask": lambda: part_ask(source, args.questions, values, rows)}[part]()  # fmt: skip
            for row in rows[before:]:
                row.append(load)
            targets.save(home, "library_scale", {**previous, **values}, load_at_start=load_at_start)
    finally:
        from infra import embedded

        embedded.release(started)
    print(f"load average at start: {load_at_start}; running on: {targets.machine()}\n")
    print(table(["what", "measured", "detail", "load at start"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
