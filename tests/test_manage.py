"""manage.py on a state that is not set up: one line saying what to run, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from infra import embedded

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_home():
    folder = Path(tempfile.mkdtemp(prefix="askdb-fresh-"))  # see tests/test_embedded.py: not tmp_path
    yield folder / "state"
    embedded.stop(home=folder / "state")
    shutil.rmtree(folder, ignore_errors=True)


def _manage(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "ASKDB_HOME": str(home),
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        **env,
    }
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CI"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("export_examples",),
        ("ask", "how many patients are there?"),
        ("createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.org"),
        ("retrieve", "heart rate"),
    ],
    ids=lambda args: args[0],
)
def test_a_command_before_migrate_says_what_to_run(fresh_home, args):
    result = _manage(fresh_home, *args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "askdb: the database is not set up yet (or not migrated to this version); "
        "run `make demo` (or `python manage.py migrate`) first"
    ], result.stderr


def test_an_unreachable_database_is_named_with_a_hint(fresh_home):
    result = _manage(fresh_home, "export_examples", DATABASE_URL="postgresql://askdb@127.0.0.1:9/askdb")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "askdb.E005" in result.stderr and "Check DATABASE_URL" in result.stderr
