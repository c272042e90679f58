"""CI cannot be silently green: under CI=true a skip is a failure, and `make browser` installs
Chromium as root as well as through sudo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SKIPPING = """
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="no chromium here")
def test_browser():
    pass

def test_data():
    pytest.skip("data set missing")

@pytest.mark.xfail(reason="known", strict=True)
def test_known():
    assert False
"""


def _pytest(folder: Path, ci: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.ci_skips", "-p", "no:django",
         "-p", "no:cacheprovider", "-q", "-rA", str(folder)],
        capture_output=True, text=True, env=env, cwd=folder,
    )  # fmt: skip


def test_skips_fail_under_ci(tmp_path):
    (tmp_path / "test_sample.py").write_text(SKIPPING)
    relaxed = _pytest(tmp_path, ci="")
    assert relaxed.returncode == 0, relaxed.stdout
    strict = _pytest(tmp_path, ci="true")
    assert strict.returncode == 1, strict.stdout
    assert "skipped under CI=true, where every test must run: no chromium here" in strict.stdout
    assert "data set missing" in strict.stdout
    # a skip in setup (skipif) is reported as an error, one in the call as a failure
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in strict.stdout


def test_a_module_skipped_at_collection_fails_under_ci(tmp_path):
    (tmp_path / "test_module_skip.py").write_text(
        'import pytest\npytest.importorskip("no_such_module_here")\n'
    )
    (tmp_path / "test_other.py").write_text("def test_runs():\n    pass\n")
    assert _pytest(tmp_path, ci="").returncode == 0
    strict = _pytest(tmp_path, ci="true")
    assert strict.returncode != 0 and "no_such_module_here" in strict.stdout, strict.stdout


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


def _make_browser(
    tmp_path: Path, uid: str, apt_fails: bool = False, ci: str = ""
) -> tuple[int, str, list[str]]:
    """`make browser` on a machine without Chromium, apt-get and sudo replaced by recorders."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    _stub(bin_dir, "id", f"echo {uid}")
    _stub(bin_dir, "sudo", 'echo "sudo $*" >> ' + str(log) + '\nexec /usr/bin/env -i PATH="$PATH" "$@"')
    _stub(
        bin_dir,
        "apt-get",
        f'echo "apt-get DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> {log}\nexit {1 if apt_fails else 0}',
    )
    if not (bin_dir / "env").exists():
        (bin_dir / "env").symlink_to("/usr/bin/env")
    result = subprocess.run(
        ["/usr/bin/make", "--no-print-directory", "-C", str(ROOT), "browser"],
        capture_output=True, text=True, env={"PATH": str(bin_dir), "CI": ci},
    )  # fmt: skip
    lines = log.read_text().splitlines() if log.exists() else []
    return result.returncode, result.stdout + result.stderr, lines


def test_make_browser_installs_chromium_as_root(tmp_path):
    rc, out, calls = _make_browser(tmp_path, uid="0")
    assert rc == 0, out
    assert calls == [
        "apt-get DEBIAN_FRONTEND=noninteractive update -qq",
        "apt-get DEBIAN_FRONTEND=noninteractive install -y -qq chromium",
    ]


def test_make_browser_installs_chromium_through_sudo(tmp_path):
    rc, out, calls = _make_browser(tmp_path, uid="1000")
    assert rc == 0, out
    # sudo resets the environment: DEBIAN_FRONTEND must reach apt-get all the same
    assert "apt-get DEBIAN_FRONTEND=noninteractive install -y -qq chromium" in calls
    assert any(c.startswith("sudo env DEBIAN_FRONTEND=noninteractive apt-get install") for c in calls)


def test_a_failed_chromium_install_fails_under_ci(tmp_path):
    rc, out, _ = _make_browser(tmp_path, uid="0", apt_fails=True, ci="true")
    assert rc != 0 and "CI=true" in out
    rc, out, _ = _make_browser(tmp_path, uid="0", apt_fails=True, ci="")
    assert rc == 0 and "browser tests will be skipped" in out
