"""`make demo` and `demo --smoke` as a newcomer runs them: real processes, real services.

These run manage.py in subprocesses against a state folder of their own, so they exercise
exactly what `make demo` does (services, migrations, data, users, worker, web server) and
check that nothing is left running afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from infra import embedded

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "state"
    yield path
    embedded.stop(home=path)


def _env(home: Path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLM_", "DATABASE_URL", "CELERY_", "CLINICAL_"))
    }
    return env | {
        "ASKDB_HOME": str(home),
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "PYTHONUNBUFFERED": "1",
    }


def _manage(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_smoke_sets_everything_up_sends_a_question_and_stops_everything(home):
    result = _manage(home, "demo", "--smoke")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert "job through broker and worker" in out and "'pong': True" in out
    # no LLM: the seeded library answers from a verified example with the number rebound
    assert "succeeded (answered)" in out and "answered from verified example #" in out
    assert "anchor_age > 70" in out and "smoke test passed" in out
    assert embedded.status(home) == {"postgresql": False, "redis": False}
    assert not (home / "smoke.pid").exists()
    _says_what_it_does(result)


STEP = re.compile(r"^\[\s*\d+\.\d+s\]\s+\S")
NOISE = (
    "INFO",
    "WARNING",
    "Warning",
    "Loading weights",
    "it/s]",
    "!!",
    "****",
    "Traceback",
    "sentence_transformers",
)


def _says_what_it_does(result: subprocess.CompletedProcess) -> None:
    """One line per set-up step with its time, the library step in plain words, and none of the
    libraries' log lines, warnings or progress bars on the screen (they go to the log folder)."""
    out = result.stdout
    steps = [line for line in out.splitlines() if STEP.match(line)]
    for step in ("services ready", "database migrated", "generating synthetic", "clinical data ready",
                 "demo users ready", "example library:", "answerability gate", "Celery worker answering"):  # fmt: skip
        assert any(step in line for line in steps), (step, out)
    library = next(line for line in steps if "example library:" in line)
    # "119 verified questions loaded from train.json; 15 skipped because their SQL needs tables or
    # columns the demo data lacks — listed in …/log/library-seed.txt"
    found = re.search(r"(\d+) verified questions loaded.*; (\d+) skipped .*— listed in ([^;\s]+)", library)
    assert found, library
    skipped_file = ROOT / found.group(3)  # relative to where the demo ran, or absolute
    listed = [line for line in skipped_file.read_text().splitlines() if line.startswith("- ")]
    assert len(listed) == int(found.group(2)) > 0, skipped_file.read_text()
    assert "grouped cross-validation" not in library and "precision" not in library  # in the file instead
    screen = out + result.stderr
    leaked = [line for line in screen.splitlines() if any(n in line for n in NOISE)]
    assert leaked == [], leaked


def test_port_in_use_gives_one_actionable_line_and_leaves_nothing_running(home):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (home / "demo.pid").write_text("999999")  # left by a crash
        result = _manage(home, "demo", "--port", str(port), timeout=120)
    assert result.returncode == 1
    assert "removed a stale demo.pid" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and f"port {port}" in errors[0] and "ASKDB_PORT=" in errors[0]
    assert embedded.status(home) == {"postgresql": False, "redis": False}


def test_demo_serves_and_ctrl_c_stops_every_process(home):
    port = _free_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port)],
        cwd=ROOT, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "askdb is running at" in line:
                break
        warm_seconds = time.monotonic() - started
        for line in proc.stdout:
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        out = "".join(lines)
        assert f"http://127.0.0.1:{port}/" in out, out
        assert "researcher / askdb-researcher" in out and "admin / askdb-admin" in out
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=10) as resp:
            assert resp.status == 200 and b"Log in" in resp.read()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2  # the worker (and its pool) and the web server
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    time.sleep(0.5)
    orphans = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert orphans == [], [c.cmdline() for c in orphans]
    assert embedded.status(home) == {"postgresql": False, "redis": False}
    print(f"warm demo served after {warm_seconds:.1f} s")
    assert warm_seconds < 120
