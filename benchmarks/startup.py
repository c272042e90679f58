"""Management commands from a cold process: `python benchmarks/startup.py [--repeat 3] [--home DIR]`.

Runs `manage.py retrieve QUESTION` and `manage.py ask QUESTION --json` as new processes against
the benchmark's state folder (see pipeline.py) and reports, as medians of --repeat runs:
retrieve's whole wall time, and ask's time from starting the process to the end of its first
stage (the embed stage, read from the app database) and its whole wall time. `ask`
runs with no LLM configured, so it stops after the gate: what is timed is start-up and the
stages before the LLM, not a model. Target: the first stage within 3 s, retrieve within 3 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pipeline
import targets
from _django import ROOT, table

QUESTION = "How many patients had a glucose measurement above 200?"
LLM_ENV = ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY")


def _command(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall-clock start, seconds taken, stdout) of one manage.py command."""
    started = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    taken = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # ask exits 1 when the run failed; start-up is still timed
        raise RuntimeError(f"manage.py {args[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return started, taken, proc.stdout


def measure(repeat: int) -> dict[str, float]:
    from askdb.models import StageEvent

    env = {k: v for k, v in os.environ.items() if k not in LLM_ENV}
    retrieve_wall, ask_wall, first_stage = [], [], []
    for _ in range(repeat):
        _, taken, _ = _command(["retrieve", QUESTION], env)
        retrieve_wall.append(taken)
        started, taken, out = _command(["ask", QUESTION, "--json"], env)
        ask_wall.append(taken)
        run_id = json.loads(out)["run"]
        embed = (
            StageEvent.objects.filter(run_id=run_id, name="embed")
            .values_list("started_at", "duration_ms")
            .first()
        )
        if embed is not None:  # the first stage done: a model loaded inside it counts
            done = embed[0] + dt.timedelta(milliseconds=embed[1] or 0)
            first_stage.append((done - dt.datetime.fromtimestamp(started, tz=dt.UTC)).total_seconds())
    median = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    return {
        "retrieve_wall_s": median(retrieve_wall),
        "ask_wall_s": median(ask_wall),
        "ask_first_stage_s": median(first_stage),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command (median reported)")
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME, help="state folder")
    args = parser.parse_args(argv)
    home = args.home.resolve()
    load_at_start = targets.load_average()
    started = pipeline.prepare(home)
    try:
        values = measure(args.repeat)
    finally:
        from infra import embedded

        embedded.release(started)
    rows = [
        ["manage.py retrieve: whole command", f"{values['retrieve_wall_s']:.2f}"],
        ["manage.py ask: start to the first stage done", f"{values['ask_first_stage_s']:.2f}"],
        ["manage.py ask: whole command (no LLM)", f"{values['ask_wall_s']:.2f}"],
    ]
    print(f"load average at start: {load_at_start}; medians of {args.repeat} runs (seconds)\n")
    print(table(["command", "s"], rows))
    targets.save(home, "startup", values, load_at_start=load_at_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
