"""The embedded services start, are reused, stop cleanly, and recover from a crash's leftovers."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from infra import embedded

pytestmark = pytest.mark.slow


@pytest.fixture
def home():
    # Not under pytest's tmp_path: as root the server runs as another user, and a concurrent
    # pytest session resets pytest's root temp folder to 0700, locking that user out mid-test.
    folder = Path(tempfile.mkdtemp(prefix="askdb-embedded-test-"))
    yield folder / "state"
    embedded.stop(home=folder / "state")
    shutil.rmtree(folder, ignore_errors=True)


def _pid(path):
    return int(path.read_text().split()[0])


def test_start_reuse_stop(home):
    assert sorted(embedded.ensure_started(home)) == ["postgresql", "redis"]
    p = embedded.paths(home)
    pg_pid = _pid(p.pgdata / "postmaster.pid")
    assert embedded.ensure_started(home) == []  # reused, not restarted
    assert _pid(p.pgdata / "postmaster.pid") == pg_pid
    with psycopg.connect(embedded.pg_dsn("askdb", home=home)) as conn:
        assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone()
        owner = conn.execute("SELECT current_setting('data_directory')").fetchone()
        assert owner
    assert sorted(embedded.stop(home=home)) == ["postgresql", "redis"]
    assert embedded.status(home) == {"postgresql": False, "redis": False}
    assert not psutil.pid_exists(pg_pid) or psutil.Process(pg_pid).status() == psutil.STATUS_ZOMBIE
    assert embedded.stop(home=home) == []


def test_bootstrap_runs_once_per_server_and_again_after_a_restart(home, monkeypatch):
    embedded.ensure_started(home)
    mark = embedded.paths(home).home / "bootstrap.ok"
    assert mark.exists()
    calls = []
    real = embedded.bootstrap_databases
    monkeypatch.setattr(embedded, "bootstrap_databases", lambda h=None: calls.append(h) or real(h))
    embedded.ensure_started(home)
    assert calls == []  # the same server, the same bootstrap: nothing to do
    mark.write_text(mark.read_text() + " changed")  # another bootstrap's code (or a hand-edited mark)
    embedded.ensure_started(home)
    assert len(calls) == 1
    embedded.stop(["postgresql"], home=home)
    embedded.ensure_started(home)  # a new server instance: roles and grants are checked again
    assert len(calls) == 2
    with psycopg.connect(embedded.pg_dsn("askdb_clinical", home=home)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_postgres_never_runs_as_root(home):
    embedded.ensure_started(home)
    proc = psutil.Process(_pid(embedded.paths(home).pgdata / "postmaster.pid"))
    assert proc.uids().effective != 0


def test_stale_pid_files_after_a_crash_are_recovered(home):
    embedded.ensure_started(home)
    p = embedded.paths(home)
    pg_pid, redis_pid = _pid(p.pgdata / "postmaster.pid"), _pid(p.redis_pidfile)
    # A crash: both servers die without cleaning up their pid files.
    os.kill(pg_pid, signal.SIGKILL)
    os.kill(redis_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (psutil.pid_exists(pg_pid) or psutil.pid_exists(redis_pid)):
        for pid in (pg_pid, redis_pid):
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.1)
    assert (p.pgdata / "postmaster.pid").exists() and p.redis_pidfile.exists()
    assert sorted(embedded.ensure_started(home)) == ["postgresql", "redis"]
    with psycopg.connect(embedded.pg_dsn("askdb", home=home)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_long_state_paths_use_short_socket_folders(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    p = embedded.paths(deep)
    assert len(str(p.pg_socket)) < 108 and str(p.run_dir).startswith("/tmp/askdb-")
    assert embedded.paths(deep).run_dir == p.run_dir  # stable, so settings can compute it


def test_pgvector_self_test_passes_here(home):
    embedded.ensure_started(home)
    assert (embedded.paths(home).home / "pgvector-selftest.ok").exists()
    assert embedded.self_test(home) is False  # once per server build, not at every start
    assert embedded.self_test(home, force=True) is True
    with psycopg.connect(embedded.pg_dsn("postgres", home=home)) as conn:
        names = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    assert embedded.SELF_TEST_DB not in names


def test_a_backend_dying_in_the_self_test_stops_with_one_line(home, monkeypatch):
    # A real backend death, as an AVX-512 build dies on an older CPU: the backend gets SIGILL
    # (COPY TO PROGRAM runs a shell whose parent is the backend itself).
    monkeypatch.setattr(
        embedded,
        "SELF_TEST_SQL",
        (
            *embedded.SELF_TEST_SQL[:4],
            "COPY (SELECT 1) TO PROGRAM 'kill -ILL $PPID'",
            *embedded.SELF_TEST_SQL[4:],
        ),
    )
    with pytest.raises(embedded.EmbeddedError) as failure:
        embedded.ensure_started(home)
    message = str(failure.value)
    assert "\n" not in message
    assert "Illegal instruction" in message and "DATABASE_URL" in message
    assert not embedded.postgres_running(embedded.paths(home))  # nothing half-started is left
    assert not (embedded.paths(home).home / "pgvector-selftest.ok").exists()


GIB = 1024**3


def test_memory_settings_grow_with_the_machine_and_stay_bounded():
    small = embedded.pg_memory_settings(2 * GIB, env={})
    large = embedded.pg_memory_settings(64 * GIB, env={})
    huge = embedded.pg_memory_settings(1024 * GIB, env={})
    assert small == {"shared_buffers": "512MB", "work_mem": "4MB", "effective_cache_size": "1536MB"}
    assert large == {"shared_buffers": "8192MB", "work_mem": "95MB", "effective_cache_size": "49152MB"}
    assert huge["shared_buffers"] == "8192MB" and huge["work_mem"] == "256MB"  # capped
    # Never below PostgreSQL's own defaults, even on a starved machine.
    tiny = embedded.pg_memory_settings(100 * 1024 * 1024, env={})
    assert tiny == {"shared_buffers": "128MB", "work_mem": "4MB", "effective_cache_size": "512MB"}


def test_each_memory_setting_can_be_overridden_and_nothing_else_gets_through():
    env = {
        "ASKDB_PG_SHARED_BUFFERS": "2GB",
        "ASKDB_PG_WORK_MEM": " 64MB ",
        "ASKDB_PG_EFFECTIVE_CACHE_SIZE": "",
    }
    got = embedded.pg_memory_settings(16 * GIB, env=env)
    assert got["shared_buffers"] == "2GB" and got["work_mem"] == "64MB"
    assert got["effective_cache_size"] == "12288MB"  # empty means computed
    # The value goes into pg_ctl's -o string, which a shell splits: another option must not ride along.
    for hostile in ("1GB -c ssl=on", "1GB;rm -rf /", "$(id)", "-1MB", "lots"):
        with pytest.raises(embedded.EmbeddedError, match="ASKDB_PG_WORK_MEM"):
            embedded.pg_memory_settings(16 * GIB, env={"ASKDB_PG_WORK_MEM": hostile})


def test_the_started_server_uses_the_sizes(home, monkeypatch):
    monkeypatch.setenv("ASKDB_PG_SHARED_BUFFERS", "192MB")
    monkeypatch.setenv("ASKDB_PG_WORK_MEM", "12MB")
    monkeypatch.delenv("ASKDB_PG_EFFECTIVE_CACHE_SIZE", raising=False)
    computed = embedded.pg_memory_settings()["effective_cache_size"]
    assert embedded.postgres_start(embedded.paths(home))
    with psycopg.connect(embedded.pg_dsn("postgres", home=home)) as conn:
        shown = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                 for name in ("shared_buffers", "work_mem", "effective_cache_size")}  # fmt: skip
    assert shown["shared_buffers"] == "192MB" and shown["work_mem"] == "12MB"
    # PostgreSQL shows sizes in its own unit (GB when whole); the computed value is what it read.
    to_mb = {"MB": 1, "GB": 1024, "TB": 1024 * 1024}
    mb = int(shown["effective_cache_size"][:-2]) * to_mb[shown["effective_cache_size"][-2:]]
    # Memory available moves between the two readings (other processes run): same size, roughly.
    assert abs(mb - int(computed.removesuffix("MB"))) <= 0.2 * mb


# A process using one ASKDB_HOME's servers, in another interpreter: it leases them (ensure_started),
# says what it started, waits for a line, releases what it started and says what it stopped.
_USER = """
import json, sys
from pathlib import Path
from infra import embedded
home = Path(sys.argv[1])
started = embedded.ensure_started(home)
print(json.dumps(sorted(started)), flush=True)
sys.stdin.readline()
print(json.dumps(sorted(embedded.release(started, home))), flush=True)
"""


def _user(home):
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", _USER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=embedded.BASE_DIR,
    )


def _running(home):
    return embedded.status(home) == {"postgresql": True, "redis": True}


def test_the_process_that_started_the_servers_ending_does_not_stop_them_under_another(home):
    # Two benchmarks on one ASKDB_HOME: the first starts the servers, the second reuses them; the
    # first ends and used to stop PostgreSQL under the second.
    first = _user(home)
    try:
        assert first.stdout.readline().strip() == '["postgresql", "redis"]'
        assert embedded.ensure_started(home) == []  # this process: a second user
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "[]"  # left running for this process
        assert first.wait(30) == 0
        assert _running(home)
        with psycopg.connect(embedded.pg_dsn("askdb", home=home)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # The last user out pays the stop the first one owed, though it started nothing itself.
        assert sorted(embedded.release([], home)) == ["postgresql", "redis"]
        assert embedded.status(home) == {"postgresql": False, "redis": False}
    finally:
        first.kill()


def test_a_lease_of_a_process_that_is_gone_or_reused_does_not_keep_the_servers(home):
    started = embedded.ensure_started(home)
    users = embedded.paths(home).home / "users"
    (users / "999999999").write_text("999999999 0.0")  # a pid no process has
    parent = psutil.Process().ppid()  # alive, but its lease was written by an earlier process
    (users / str(parent)).write_text(f"{parent} 1.0")
    assert sorted(embedded.release(started, home)) == ["postgresql", "redis"]
    assert not (users / "999999999").exists() and not (users / str(parent)).exists()
    (users / "999999999").write_text("999999999 0.0")
    embedded.ensure_started(home)  # a new lease prunes the stale ones too (manage.py never releases)
    assert not (users / "999999999").exists() and (users / str(os.getpid())).exists()


def test_a_process_that_releases_is_not_kept_waiting_by_its_own_children(home):
    # The demo's web server and worker, or a test's subprocess, lease the servers as children of the
    # process that started them; it ends them before it releases, and one still dying must not
    # keep the servers running after the demo has stopped.
    started = embedded.ensure_started(home)
    child = _user(home)
    try:
        assert child.stdout.readline().strip() == "[]"  # it holds a lease now
        assert sorted(embedded.release(started, home)) == ["postgresql", "redis"]
    finally:
        child.kill()
        child.wait(30)
