"""Every benchmark, one after another: `python benchmarks/run.py [--home DIR] [--common-cpu]` (what
`make bench` runs; `make bench COMMON_CPU=1` adds --common-cpu).

Prepares the benchmark state folder first (embedded PostgreSQL + Redis under --home, default
`.askdb/bench`, with synthetic MIMIC-IV-shaped data, docs, embeddings and value index; see
pipeline.py), so it works from a fresh clone and never touches the `make demo` state. Then runs
retrieval.py, pipeline.py, startup.py and library_scale.py (its rows say "not measured" without
../shared's EHRSQL data) as subprocesses against that folder, their tables going straight to
stdout, stops the services it started, and prints the targets table (targets.py): each target
with what was measured and met / NOT met. Exits non-zero when a benchmark failed.

`--common-cpu` runs everything with AVX-512 turned off for numpy, torch and OpenBLAS
(targets.common_cpu_env), a stand-in for the many servers without it; the header says which mode
ran and what numpy, torch and OpenBLAS really used, and the run stops if the mode did not take.
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
COMMON_CPU_MARK = "ASKDB_BENCH_COMMON_CPU"  # set once the process runs with targets.common_cpu_env()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME, help="benchmark state folder")
    parser.add_argument(
        "--common-cpu", action="store_true", help="turn AVX-512 off for numpy, torch, OpenBLAS"
    )
    args = parser.parse_args(argv)
    if args.common_cpu and os.environ.get(COMMON_CPU_MARK) != "1":
        # The variables act only before numpy and torch are imported: start again with them set,
        # so this process (which prepares the state) and every benchmark it starts run in the mode.
        env = {**os.environ, **targets.common_cpu_env(), COMMON_CPU_MARK: "1"}
        os.execve(sys.executable, [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)], env)
    home = args.home.resolve()
    in_use = targets.cpu_in_use()
    mode = "common CPU (AVX-512 turned off)" if args.common_cpu else "as the machine is"
    print(f"running on: {targets.machine()}\nmode: {mode}; in use: {in_use}", flush=True)
    if args.common_cpu and not in_use.startswith("numpy AVX-512 off, torch AVX2,"):
        print(f"the common-CPU mode did not take effect ({in_use}): not measuring", file=sys.stderr)
        return 1
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

        embedded.release(started)
    print("\n# targets\n")
    print(f"mode: {mode}; in use: {in_use}\n")
    print(targets.report(home))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
