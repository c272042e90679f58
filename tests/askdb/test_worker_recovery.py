"""A worker recovers from losing a pool process: the replacement comes up (its model warm-up no
longer outlasts Celery's start-up allowance), /healthz counts only processes really up, and a
question asked afterwards is answered."""

from __future__ import annotations

import os
import signal
import time

import pytest

from askdb import health
from askdb.models import Run
from askdb.services.runs import question_submit
from tests.celery_worker import pool_status, wait_for, worker_process
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_killed_pool_process_is_replaced_and_the_next_question_answered(source, scripted_llm, tmp_path):
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
    scripted_llm.when("You explain the result", Reply("Forty patients."))
    log = tmp_path / "worker.log"

    def tail() -> str:
        return log.read_text(errors="replace")[-4000:]

    def pool_up(worker, without: int | None = None) -> dict | None:
        status = pool_status(worker.celery_name)
        if status and status["up"] == 2 and without not in status["pids"]:
            return status
        return None

    with worker_process("recovering", log, pool="prefork", concurrency=2, llm=scripted_llm) as worker:
        first = wait_for(lambda: pool_up(worker), timeout=120, message=tail)
        assert health.worker(timeout=2).ok
        victim = first["pids"][0]
        os.kill(victim, signal.SIGKILL)
        # The replacement must come up and stay up: the bug killed every replacement a few seconds
        # after it was forked, so it is checked again well past Celery's old 4 s allowance.
        status = wait_for(lambda: pool_up(worker, without=victim), timeout=120, message=tail)
        time.sleep(8)
        assert wait_for(lambda: pool_up(worker), timeout=10, message=tail)["pids"] == status["pids"], tail()
        assert worker.poll() is None
        run = question_submit(
            user=make_user("r9", "researcher"), text="How many patients are there?", source=source
        )
        done = wait_for(
            lambda: Run.objects.filter(pk=run.pk, status__in=Run.TERMINAL).first(), timeout=120, message=tail
        )
        assert done.status == Run.Status.SUCCEEDED, (done.outcome, done.message, tail())
        assert done.summary == "Forty patients." and done.worker.startswith("recovering-")
        assert "Timed out waiting for UP message" not in log.read_text(errors="replace")
