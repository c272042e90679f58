"""scripts/step.py, which runs each `make install` step: one line with its time, the command's own
output only in the log, and on failure the command's exit code and the last lines of *its* output."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

STEP = Path(__file__).resolve().parent.parent / "scripts" / "step.py"


def _step(label: str, log: Path, *cmd: str) -> subprocess.CompletedProcess:
    # Not a terminal here (as in CI or a piped log): no spinner, just the step's line.
    return subprocess.run([sys.executable, str(STEP), label, str(log), "--", *cmd],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_step_prints_one_line_with_its_time_and_keeps_the_noise_in_the_log(tmp_path):
    log = tmp_path / "log" / "install.log"
    noisy = (
        "print('Collecting torch==2.13.0'); print('WARNING: Location ignored'); print('!! setuptools box !!')"
    )
    result = _step("installing torch (CPU build)", log, sys.executable, "-c", noisy)
    assert result.returncode == 0 and result.stderr == ""
    assert re.fullmatch(r"\[\s*\d+\.\ds\] installing torch \(CPU build\) — done\n", result.stdout), (
        result.stdout
    )
    assert "WARNING: Location ignored" in log.read_text() and "setuptools box" in log.read_text()


def test_a_failed_step_says_so_with_its_code_and_the_end_of_its_own_output(tmp_path):
    log = tmp_path / "install.log"
    _step("upgrading pip", log, sys.executable, "-c", "print('an earlier step said this')")
    result = _step("installing askdb", log, sys.executable, "-c",
                   "import sys; print('ERROR: No matching distribution found for nosuchpkg'); sys.exit(3)")  # fmt: skip
    assert result.returncode == 3
    first, *tail = result.stdout.splitlines()
    assert re.match(r"\[\s*\d+\.\ds\] installing askdb — FAILED \(exit 3\); the last lines of ", first), first
    assert any("No matching distribution found for nosuchpkg" in line for line in tail)
    assert not any("an earlier step said this" in line for line in tail)  # only this step's lines


def test_a_missing_command_is_refused_with_usage(tmp_path):
    result = subprocess.run(
        [sys.executable, str(STEP), "label only"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "usage" in result.stderr


def test_a_program_that_is_not_there_fails_the_step_in_one_line(tmp_path):
    result = _step(
        "creating the virtualenv", tmp_path / "install.log", "/nonexistent/python3.11", "-m", "venv"
    )
    assert result.returncode == 127 and result.stderr == ""
    assert "creating the virtualenv — FAILED: cannot run /nonexistent/python3.11" in result.stdout
