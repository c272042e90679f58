"""A real Celery worker for tests: the embedded Redis broker, a worker thread in this process.

Celery's own testing worker runs tasks in a thread here, so they use pytest-django's test
database; messages still go through the real broker.
"""

from __future__ import annotations

import contextlib

from celery.contrib.testing.worker import start_worker

from config.celery import app


@contextlib.contextmanager
def running_worker(concurrency: int = 2):
    app.loader.import_module("celery.contrib.testing.tasks")  # the ping task start_worker checks
    with start_worker(
        app, pool="threads", concurrency=concurrency, perform_ping_check=True, shutdown_timeout=10
    ):
        yield app
