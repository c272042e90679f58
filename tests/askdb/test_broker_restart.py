"""A worker survives a restart of its broker: Redis restarted under a real `celery worker` process
while a question is in flight; the worker stays up, reconnects and answers the next question.

Before config/broker.py the worker died at the restart (kombu's Redis transport over a Unix socket:
`AttributeError: 'NoneType' object has no attribute 'hostname'`, with either pool) and questions
waited until someone restarted it."""

from __future__ import annotations

import time

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from askdb import health
from askdb.models import Run
from askdb.services.runs import question_submit
from infra import embedded
from tests.celery_worker import pool_status, wait_for, worker_process
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _slow_sql(seconds: float):
    def reply(_request):
        time.sleep(seconds)  # the question is in flight (its message unacknowledged) meanwhile
        return "SELECT count(*) AS n FROM mimiciv_hosp.patients"

    return reply


def _answers(worker_name: str) -> dict | None:
    """The worker's pool status; None while this process' own broker connection is still the
    broken one (its first use after the restart fails, the next reconnects)."""
    try:
        return pool_status(worker_name)
    except (OSError, RedisError, OperationalError):
        return None


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_redis_restart_under_a_running_worker_leaves_it_answering(source, scripted_llm, tmp_path, pool):
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when("You write one", Reply(_slow_sql(6)), times=1)
    scripted_llm.when("You explain the result", Reply("Forty patients."))
    log = tmp_path / "worker.log"
    user = make_user("r1", "researcher")

    def tail() -> str:
        return log.read_text(errors="replace")[-6000:]

    with worker_process("restarted", log, pool=pool, concurrency=2, llm=scripted_llm) as worker:
        wait_for(lambda: (pool_status(worker.celery_name) or {}).get("up"), timeout=120, message=tail)
        in_flight = question_submit(user=user, text="How many patients are there?", source=source)
        wait_for(
            lambda: Run.objects.filter(pk=in_flight.pk, status=Run.Status.RUNNING).exists(),
            timeout=60,
            message=tail,
        )
        p = embedded.paths()
        try:
            assert embedded.redis_stop(p)
            time.sleep(2)  # the worker notices: its consumer's socket is gone
        finally:
            embedded.redis_start(p)

        # The worker is still there, answers the control channel again, and takes a new question.
        wait_for(lambda: _answers(worker.celery_name), timeout=60, message=tail)
        assert worker.poll() is None, tail()
        assert "Unrecoverable error" not in log.read_text(errors="replace"), tail()
        scripted_llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
        after = question_submit(user=user, text="How many patients are there now?", source=source)
        done = wait_for(
            lambda: Run.objects.filter(pk=after.pk, status__in=Run.TERMINAL).first(),
            timeout=120,
            message=tail,
        )
        assert done.status == Run.Status.SUCCEEDED, (done.outcome, done.message, tail())
        assert done.summary == "Forty patients."
        assert health.worker(timeout=2).ok
        # The question in flight during the restart ends too (answered, or failed with a reason
        # the reaper gives it), never stuck.
        first = wait_for(
            lambda: Run.objects.filter(pk=in_flight.pk, status__in=Run.TERMINAL).first(),
            timeout=120,
            message=tail,
        )
        assert first.status in Run.TERMINAL
        assert worker.poll() is None, tail()
