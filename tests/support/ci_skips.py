"""With CI=true a test that cannot run fails instead of skipping, so CI cannot be silently green.

A skipped browser test (no Chromium), a missing data set or an `importorskip` all become failures
that name the reason; xfail stays what it is. Loaded by tests/conftest.py (and usable as `-p`).
"""

from __future__ import annotations

import os

import pytest


def ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}


def _as_failure(report) -> None:
    if not (ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _as_failure(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield  # a module-level skip or importorskip skips the whole module at collection
    _as_failure(report)
    return report
