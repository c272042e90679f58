"""Benchmark output says which CPU it ran on: the same code is 2.5-3x slower without AVX-512."""

from __future__ import annotations

import pytest

from tests.benchmark_modules import load_benchmark


@pytest.fixture
def targets(monkeypatch):
    return load_benchmark(monkeypatch, "targets.py", "bench_targets")


EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx2 fma\n"
XEON = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\nflags\t\t: fpu avx2 avx512f avx512bw\n"


def test_the_machine_line_names_the_model_avx512_and_the_load(targets):
    line = targets.machine(EPYC, env={})
    assert line.startswith("AMD EPYC 7B13, ") and "AVX-512 no" in line and "load average " in line
    assert "AVX-512 yes" in targets.machine(XEON, env={})
    # The stand-in for a common server: AVX-512 present but turned off for numpy/torch/OpenBLAS.
    off = targets.machine(XEON, env={"NPY_DISABLE_CPU_FEATURES": "AVX512F", "ATEN_CPU_CAPABILITY": "avx2"})
    assert "AVX-512 yes (turned off: NPY_DISABLE_CPU_FEATURES=AVX512F, ATEN_CPU_CAPABILITY=avx2)" in off


def test_saved_results_and_the_targets_table_carry_the_machine(targets, tmp_path):
    targets.save(tmp_path, "pipeline", {"overhead_p50": 12.0})
    assert "cores, AVX-512" in (tmp_path / "results" / "pipeline.json").read_text()
    assert "cores, AVX-512" in targets.report(tmp_path).splitlines()[-1]


def test_the_common_cpu_mode_really_turns_avx512_off_for_numpy_torch_and_openblas(targets):
    """make bench COMMON_CPU=1: the variables are set before numpy and torch load, and a new
    process with them uses no AVX-512 kernels (on any x86 machine with AVX2, this one included)."""
    import os

    env = targets.common_cpu_env()
    assert env["NPY_DISABLE_CPU_FEATURES"] and env["ATEN_CPU_CAPABILITY"] == "avx2"
    in_use = targets.cpu_in_use({**os.environ, **env})
    assert in_use.startswith("numpy AVX-512 off, torch AVX2, OpenBLAS "), in_use
    assert "SkylakeX" not in in_use and "Cooperlake" not in in_use and "SapphireRapids" not in in_use


def test_a_row_near_its_target_is_decided_by_the_middle_round_with_the_range_beside_it(targets, tmp_path):
    """One noisy round must not decide met / NOT met: the row's value is the middle of its rounds'
    p50s, and the targets table shows their range."""
    values = targets.spread("embed_p50", [9.4, 12.7, 9.1])
    assert values == {"embed_p50": 9.4, "embed_p50_lo": 9.1, "embed_p50_hi": 12.7}
    assert targets.spread("embed_p50", [12.7]) == {"embed_p50": 12.7}  # one round: no range
    targets.save(tmp_path, "pipeline", values)
    row = next(line for line in targets.report(tmp_path).splitlines() if "embed stage" in line)
    assert "9.4 ms (9.1–12.7)" in row and "| met" in row


def test_the_pipeline_rounds_are_the_passes_over_its_questions(targets, monkeypatch):
    """Part 1 asks its questions several times in order: round k is the k-th pass, and a row's p50
    is taken per round (the latencies pooled within a round), failed runs left out."""
    pipeline = load_benchmark(monkeypatch, "pipeline.py", "bench_pipeline")

    def ran(embed_ms: float, status: str = "succeeded"):
        return pipeline.RunTimes(status, "", {"embed": embed_ms}, {}, 0.0)

    one = pipeline.SyncResult(0.0)
    rounds = {0: [8.0, 9.0, 10.0], 1: [30.0, 31.0, 1.0], 2: [7.0, 9.5, 8.0, 99.0]}
    for k, ms in ((k, ms) for k, values in rounds.items() for ms in values):
        one.runs.append(ran(ms, "failed" if ms == 99.0 else "succeeded"))
        one.run_rounds.append(k)
    assert one.rounds == 3
    assert pipeline.round_p50s([one], "embed") == [9.0, 30.0, 8.0]  # round 2 without its failed run
    other = pipeline.SyncResult(0.5, runs=[ran(50.0)] * 3, run_rounds=[0, 1, 2])
    assert pipeline.round_p50s([one, other], "embed") == [10.0, 31.0, 9.5]  # both latencies' runs


def test_the_50_at_once_row_is_the_middle_of_its_batches_and_counts_every_rounds_errors(
    targets, monkeypatch, settings
):
    """One batch of 50 swung ±0.3 s around its 5 s target: the row is the middle of three batches
    by wall time, their range beside it, and an error in any round fails the zero-error verdict."""
    pipeline = load_benchmark(monkeypatch, "pipeline.py", "bench_pipeline")
    settings.CELERY_WORKER_POOL, settings.CELERY_WORKER_CONCURRENCY = "threads", 32

    def batch(wall_s: float, failed: int = 0):
        b = pipeline.Batch(wall_s=wall_s)
        b.runs = [pipeline.RunTimes("succeeded", "answered", {}, {}, 0.0)] * (50 - failed)
        b.runs += [pipeline.RunTimes("failed", "error", {}, {}, 0.0)] * failed
        return b

    res = pipeline.BatchResult.of_rounds(
        0.5, "threads", 32, 50, [batch(5.3), batch(4.6, failed=1), batch(4.9)]
    )
    assert res.batch.wall_s == 4.9 and res.walls == [5.3, 4.6, 4.9] and res.errors == 1
    assert "zero errors at 50 concurrent: NOT met" in "\n".join(pipeline._report_batches([res]))
    assert "batch50_wall@0.5" not in pipeline.target_values([], [res])  # a row with errors is no time
    clean = pipeline.BatchResult.of_rounds(0.5, "threads", 32, 50, [batch(5.3), batch(4.6), batch(4.9)])
    values = pipeline.target_values([], [clean])
    assert (values["batch50_wall@0.5"], values["batch50_wall@0.5_lo"], values["batch50_wall@0.5_hi"]) == (
        4.9, 4.6, 5.3,
    )  # fmt: skip
