"""Real Celery workers for tests, on the embedded Redis broker.

`running_worker`: Celery's own testing worker, tasks in threads of this process, so they use
pytest-django's test database; messages still go through the real broker.
`worker_process`: a separate `celery worker` process (prefork or solo) on the test database,
connected as the app's runtime role like production, for tests that kill workers or their pool
processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from celery.contrib.testing.worker import start_worker

from config.celery import app

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def running_worker(concurrency: int = 2):
    app.loader.import_module("celery.contrib.testing.tasks")  # the ping task start_worker checks
    with start_worker(
        app, pool="threads", concurrency=concurrency, perform_ping_check=True, shutdown_timeout=10
    ):
        yield app


def database_url_for_tests(user: str | None = None) -> str:
    """The test database on the embedded server, as `user` (default: the owner)."""
    from django.db import connection

    from infra import embedded

    kwargs = {"user": user} if user else {}
    return embedded.pg_dsn(connection.settings_dict["NAME"], **kwargs)


@contextlib.contextmanager
def worker_process(name: str, log: Path, *, pool: str = "prefork", concurrency: int = 1, llm=None):
    """A `celery worker` process of its own session (so a test can kill it and its children)."""
    from django.conf import settings

    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url_for_tests(settings.ASKDB_APP_ROLE or None),
        # Celery prefers a configured pool to `--pool prefork`, which it cannot tell from its default.
        "ASKDB_WORKER_POOL": pool,
    }
    if llm is not None:
        env |= {"LLM_BASE_URL": llm.base_url, "LLM_MODEL": "scripted", "LLM_MAX_RETRIES": "0"}
    hostname = f"{name}-{os.getpid()}@%h"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", pool,
             "--concurrency", str(concurrency), "--loglevel", "INFO", "--hostname", hostname],
            cwd=ROOT, env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        proc.celery_name = hostname.replace("%h", _hostname())
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def _hostname() -> str:
    import socket

    return socket.gethostname()


def pool_status(worker_name: str, timeout: float = 1.0) -> dict | None:
    """What `askdb_pool` says of one worker's pool processes, or None when it does not answer."""
    # A connection of its own each time: a pooled one may still point at a broker an earlier test
    # restarted (a broken pipe).
    with app.connection_for_write() as conn:
        replies = (
            app.control.broadcast(
                "askdb_pool", destination=[worker_name], reply=True, timeout=timeout, connection=conn
            )
            or []
        )
    for reply in replies:
        if worker_name in reply:
            return reply[worker_name]
    return None


def wait_for(predicate, timeout: float = 30.0, message=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(message() if callable(message) else message or "condition not met in time")
