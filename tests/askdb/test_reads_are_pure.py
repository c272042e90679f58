"""A read never writes: opening a run's page (polled every second) leaves a stale run as it is;
only the worker's reaper, on its timer, fails it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from askdb.models import Question, Run
from askdb.selectors import run_get_for_user
from askdb.services.runs import runs_reap
from config.celery import RunReaper, app
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def _stale_and_unsent(source, user) -> tuple[Run, Run]:
    long_ago = timezone.now() - dt.timedelta(seconds=settings.ASKDB_STALE_RUN_SECONDS + 60)
    question = Question.objects.create(user=user, source=source, text="How many patients are there?")
    stale = Run.objects.create(question=question, status=Run.Status.RUNNING, heartbeat_at=long_ago)
    queued = Run.objects.create(question=question, status=Run.Status.QUEUED, task_id="sent-long-ago")
    Run.objects.filter(pk=queued.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=settings.ASKDB_QUEUED_RUN_SECONDS + 60)
    )
    return stale, queued


def test_reading_a_stale_run_does_not_change_it(source):
    user = make_user("pure-reader", "researcher")
    stale, queued = _stale_and_unsent(source, user)
    for _ in range(3):  # the run page polls
        assert run_get_for_user(user=user, run_id=stale.pk).status == Run.Status.RUNNING
        assert run_get_for_user(user=user, run_id=queued.pk).status == Run.Status.QUEUED
    stale.refresh_from_db()
    queued.refresh_from_db()
    assert (stale.status, stale.outcome) == (Run.Status.RUNNING, "")
    assert (queued.status, queued.outcome) == (Run.Status.QUEUED, "")


def test_the_worker_reaper_fails_the_stale_run(source):
    user = make_user("pure-reaper", "researcher")
    stale, queued = _stale_and_unsent(source, user)
    runs_reap()  # what the worker's timer (config.celery.reap_runs) calls every ASKDB_REAP_INTERVAL_SECONDS
    stale.refresh_from_db()
    queued.refresh_from_db()
    assert (stale.status, stale.outcome) == (Run.Status.FAILED, "worker_lost")
    assert (queued.status, queued.outcome) == (Run.Status.FAILED, "queue_timeout")


def test_every_worker_runs_the_reaper_on_a_timer():
    """The reaper is a worker bootstep (no beat process to forget): every worker runs it."""
    assert RunReaper in app.steps["worker"]
    assert settings.ASKDB_REAP_INTERVAL_SECONDS > 0
