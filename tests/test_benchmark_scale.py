"""bench-scale's extrapolation to the full MIMIC-IV: a query that grows like its table is scaled by
the table's rows, an index lookup that hardly grew is not, and the targets table says which."""

from __future__ import annotations

import pytest

from tests.benchmark_modules import load_benchmark


@pytest.fixture
def scale(monkeypatch):
    return load_benchmark(monkeypatch, "scale.py", "bench_scale")


def _size(patients: int, labevents: int, templates: list[tuple[str, float, bool]]) -> dict:
    return {
        "patients": patients, "rows": {"labevents": labevents, "d_labitems": 1_622}, "connect_ms": 5.0,
        "load": {"rows": labevents, "rows_per_s": 90_000.0, "generate_s": 1.0}, "refresh_s": 1.0,
        "warm_up_s": 1.0, "calibrate_s": 1.0, "database_bytes": 2**30,
        "questions": {"asked": 2, "answered_by_library": 1, "p50": 40.0, "p95": 60.0, "max": 70.0},
        "templates": [
            {"question": q, "tables": ["labevents", "d_labitems"], "error": "", "single_patient": single,
             "p50": ms, "p95": ms * 1.2, "max": ms * 1.3, "min": ms}
            for q, ms, single in templates
        ],
    }  # fmt: skip


def test_a_scan_is_scaled_by_its_table_and_an_index_lookup_is_not(scale):
    # labevents: 40k rows at the demo size, 4M at the bench size, 118M in the full MIMIC-IV.
    small = _size(100, 40_000, [("top 5 lab tests?", 2.0, False), ("labs of patient 10001217?", 0.5, True)])
    big = _size(
        10_000, 4_000_000, [("top 5 lab tests?", 200.0, False), ("labs of patient 10002222?", 0.5, True)]
    )
    scan, lookup = scale.extrapolate(small, big)
    assert scan["by"] == "labevents" and scan["exponent"] == pytest.approx(1.0)
    assert scan["full_s"] == pytest.approx(0.240 * 118_171_367 / 4_000_000)  # p95 × the table's growth
    assert lookup["exponent"] == pytest.approx(0.0)  # matched across sizes with the patient id masked
    assert lookup["full_s"] == pytest.approx(0.0006)
    text, values = scale.report(small, big)
    assert values == {
        "template_p95_ms": 240.0,
        "single_patient_p95_ms": 0.6,
        "extrapolated_s": scan["full_s"],
    }
    verdicts = [line.rsplit("|", 2)[1].strip() for line in text.splitlines()[-3:]]
    assert verdicts == ["NOT met", "met", "NOT met"]  # 240 ms > 200; 0.6 ms ≤ 50; 7.1 s > 5
