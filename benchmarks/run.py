"""Every benchmark, one after another: `python benchmarks/run.py [--home DIR]` (what `make bench` runs).

Prepares the benchmark state folder first (embedded PostgreSQL + Redis under --home, default
`.askdb/bench`, with synthetic MIMIC-IV-shaped data, docs, embeddings and value index; see
pipeline.py), so it works from a fresh clone and never touches the `make demo` state. Then runs
retrieval.py, pipeline.py, startup.py and library_scale.py (its rows say "not measured" without
../shared's EHRSQL data) as subprocesses against that folder, their tables going straight to
stdout, stops the services it started, and prints the targets table (targets.py): each target
with what was measured and met / NOT met. Exits non-zero when a benchmark failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pipeline
import targets
from _django import ROOT

HERE = Path(__file__).resolve().parent

BENCHMARKS = ("retrieval.py", "pipeline.py", "startup.py", "library_scale.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME, help="benchmark state folder")
    args = parser.parse_args(argv)
    home = args.home.resolve()
    print(f"running on: {targets.machine()}", flush=True)
    print(f"preparing {home} …", file=sys.stderr, flush=True)
    started = pipeline.prepare(home)  # sets ASKDB_HOME (and the LLM model) in os.environ
    failed = []
    try:
        for script in BENCHMARKS:
            cmd = [sys.executable, str(HERE / script)]
            if script != "retrieval.py":  # retrieval.py finds the folder through ASKDB_HOME
                cmd += ["--home", str(home)]
            print(f"\n# {script}\n", flush=True)
            t0 = time.monotonic()
            rc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ)).returncode
            print(f"\n({script} exited {rc} after {time.monotonic() - t0:.0f} s)", flush=True)
            if rc != 0:
                failed.append(script)
    except KeyboardInterrupt:
        failed.append("interrupted")
    finally:
        from infra import embedded

        embedded.stop(started)
    print("\n# targets\n")
    print(targets.report(home))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
