"""The speed targets `make bench` checks, each with what was measured and `met` / `NOT met`.

A benchmark script saves its numbers with `save(home, name, values)` (a JSON file under
`<home>/results/`, with the load average while it ran); `run.py` prints `report(home)` last.
A benchmark with targets of its own adds its rows to ROWS: each row names the file and the key
it reads, so rows from different benchmarks never touch each other's code.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _django import table


@dataclass(frozen=True)
class Target:
    what: str
    source: str  # the results file (benchmark name) holding the number
    key: str
    limit: float | None  # the number must be <= limit; None: reported, no target
    unit: str = "ms"


ROWS: list[Target] = [
    # pipeline.py, part 1: questions one after another in process
    Target("non-LLM overhead per question, p50 (LLM 0 s)", "pipeline", "overhead_p50@0", 50),
    Target("non-LLM overhead per question, p50 (LLM 0.5 s)", "pipeline", "overhead_p50@0.5", 50),
    Target("  validate stage, p50", "pipeline", "validate_p50", 10),
    Target("  retrieve stage, p50", "pipeline", "retrieve_p50", None),
    Target("  embed stage, p50 (a question not seen before)", "pipeline", "embed_p50", 10),
    Target("wall overhead incl. run set-up and finish, p50", "pipeline", "wall_overhead_p50", 80),
    # pipeline.py, part 2: through the broker and the default worker
    Target(
        "50 questions at once, LLM 0.5 s per call, default worker: wall (middle of 3 batches)",
        "pipeline",
        "batch50_wall@0.5",
        5,
        "s",
    ),
    Target("  same: queue wait p50", "pipeline", "batch50_wait_p50@0.5", None, "s"),
    # startup.py: management commands from a cold process
    Target("manage.py ask: start to the first stage done", "startup", "ask_first_stage_s", 3, "s"),
    Target("manage.py ask: whole command (no LLM)", "startup", "ask_wall_s", None, "s"),
    Target("manage.py retrieve: whole command", "startup", "retrieve_wall_s", 3, "s"),
    # library_scale.py: the EHRSQL-2024 train split as the library (needs ../shared)
    Target("import_examples of 5,124 questions", "library_scale", "import_s", 90, "s"),
    Target("calibrate_library (cross-validation over the library)", "library_scale", "calibrate_s", 60, "s"),
    Target(
        "calibrate_library + 1,163 held-out, library unchanged", "library_scale", "calibrate_valid_s", 60, "s"
    ),
    Target("no-LLM question, 5,000-example library, p50", "library_scale", "ask_p50", 80),
    Target("no-LLM question, 5,000-example library, p95", "library_scale", "ask_p95", 250),
]


def middle(values: list[float]) -> float:
    """The middle of several rounds' values (the upper middle of an even count); NaN for none."""
    return sorted(values)[len(values) // 2] if values else float("nan")


def spread(key: str, values: list[float]) -> dict[str, float]:
    """A row measured in several rounds, as saved: KEY the middle round's value (what met / NOT met
    is decided on), KEY_lo and KEY_hi the range (only with more than one round)."""
    out = {key: middle(values)}
    if len(values) > 1:
        out |= {f"{key}_lo": min(values), f"{key}_hi": max(values)}
    return out


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# Variables that turn AVX-512 off for numpy, torch and OpenBLAS (a stand-in for common servers).
AVX512_OFF_VARIABLES = ("NPY_DISABLE_CPU_FEATURES", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")
# What `--common-cpu` sets: torch's kernels for AVX2 and OpenBLAS's for Haswell (AVX2, no AVX-512).
# numpy's part is the AVX-512 targets this numpy dispatches to (their names change between numpy
# versions: AVX512F, AVX512_SKX … in 1.x, X86_V4, AVX512_ICL … in 2.x), read by common_cpu_env().
COMMON_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell"}
_NUMPY_AVX512_TARGETS = (
    "from numpy._core._multiarray_umath import __cpu_dispatch__ as d;"
    "print(','.join(t for t in d if t.startswith('AVX512') or t == 'X86_V4'))"
)
# What numpy, torch and OpenBLAS use in a process, in one line (cpu_in_use() as a script).
_IN_USE = (
    "import numpy, threadpoolctl, torch;"
    "from numpy._core._multiarray_umath import __cpu_features__ as f;"
    "blas = [i.get('architecture') for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'];"
    "print(f\"numpy AVX-512 {'on' if f.get('AVX512_SKX') else 'off'}, \""
    "f\"torch {torch.backends.cpu.get_cpu_capability()}, OpenBLAS {blas[0] if blas else '?'}\")"
)


def common_cpu_env(python: str = sys.executable) -> dict[str, str]:
    """The variables that make numpy, torch and OpenBLAS use no AVX-512: a stand-in for the common
    servers without it (the same code ran 2.5-3x slower on one). They act only when set before
    numpy and torch are imported, so the benchmark's processes get them in their environment."""
    found = subprocess.run([python, "-c", _NUMPY_AVX512_TARGETS], capture_output=True, text=True, check=True)
    return {"NPY_DISABLE_CPU_FEATURES": found.stdout.strip(), **COMMON_CPU}


def cpu_in_use(env: dict[str, str] | None = None, python: str = sys.executable) -> str:
    """What a new process with `env` really uses ("numpy AVX-512 off, torch AVX2, OpenBLAS Haswell"):
    the proof that a mode took effect, since a misspelt variable is ignored without a word."""
    done = subprocess.run([python, "-c", _IN_USE], capture_output=True, text=True,
                          env=dict(os.environ) if env is None else env)  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else f"unknown ({done.stderr.strip()[-200:]})"


def machine(cpuinfo: str | None = None, env: dict[str, str] | None = None) -> str:
    """Which CPU a benchmark ran on, in one line: the same code is 2.5-3x slower on a server
    without AVX-512, so a number means little without it. Model, cores, AVX-512 (and whether
    numpy, torch or OpenBLAS were told not to use it), load average."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    env = dict(os.environ) if env is None else env
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in cpuinfo.splitlines()) if v
    )
    model = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    avx512 = "avx512f" in fields.get("flags", "").split()
    off = [f"{k}={env[k]}" for k in AVX512_OFF_VARIABLES if env.get(k)]
    avx = "AVX-512 yes" if avx512 else "AVX-512 no"
    if avx512 and off:
        avx += f" (turned off: {', '.join(off)})"
    return f"{model}, {os.cpu_count()} cores, {avx}, load average {load_average()}"


def save(home: Path, name: str, values: dict[str, float], *, load_at_start: str = "") -> Path:
    """Keep one benchmark's numbers for the targets table (replacing an earlier run's)."""
    folder = home / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    payload = {
        "values": values,
        "load_at_start": load_at_start,
        "load_at_end": load_average(),
        "machine": machine(),
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path.write_text(json.dumps(payload, indent=1))
    return path


def results(home: Path) -> dict[str, dict[str, Any]]:
    folder = home / "results"
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def report(home: Path, rows: list[Target] | None = None) -> str:
    found = results(home)
    body = []
    for row in rows or ROWS:
        values = found.get(row.source, {}).get("values", {})
        value = values.get(row.key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            body.append([row.what, "not measured", _limit(row), "-"])
            continue
        shown = f"{value:.1f} {row.unit}" if row.unit == "ms" else f"{value:.2f} {row.unit}"
        if f"{row.key}_lo" in values:  # the middle of several rounds: their range beside it
            shown += f" ({values[f'{row.key}_lo']:.1f}–{values[f'{row.key}_hi']:.1f})"
        verdict = "-" if row.limit is None else ("met" if value <= row.limit else "NOT met")
        body.append([row.what, shown, _limit(row), verdict])
    loads = [
        f"- {name}.py ran at {r.get('at', '?')}, load average {r.get('load_at_start') or '?'} at start, "
        f"{r.get('load_at_end', '?')} at the end (1/5/15 min), on {r.get('machine', 'an unrecorded CPU')}"
        for name, r in found.items()
    ]
    return "\n".join([table(["what", "measured", "target", "verdict"], body), "", *loads])


def _limit(row: Target) -> str:
    return "-" if row.limit is None else f"≤ {row.limit:g} {row.unit}"


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Print the targets table of the last benchmark runs.")
    parser.add_argument(
        "--home", type=Path, default=Path(__file__).resolve().parent.parent / ".askdb" / "bench"
    )
    print(report(parser.parse_args().home.resolve()))
