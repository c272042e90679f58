"""Jobs go through the real broker to a real worker and reach the app database."""

from __future__ import annotations

import pytest

from askdb import health
from askdb.tasks import ping as ping_task
from tests.celery_worker import running_worker


@pytest.mark.django_db(transaction=True)
def test_ping_job_round_trip_and_worker_heartbeat():
    with running_worker():
        result = ping_task.delay().get(timeout=20)
        assert result["pong"] is True and result["database"] is True
        assert health.worker(timeout=2).ok
