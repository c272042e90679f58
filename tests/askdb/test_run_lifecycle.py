"""Runs through the real broker and worker: submitted, executed, cancelled, lost and retried."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from askdb.models import Run
from askdb.services.runs import question_submit, run_cancel, run_execute, run_retry, runs_reap_stale
from tests.celery_worker import running_worker
from tests.factories import make_user
from tests.support.scripted_llm import Delay, Hang, Reply

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def llm(scripted_llm):
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when("You explain the result", Reply("Forty patients."))
    return scripted_llm


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_question_runs_through_broker_and_worker(source, llm):
    llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
    with running_worker():
        run = question_submit(
            user=make_user("r1", "researcher"), text="How many patients are there?", source=source
        )
        run = wait_for(lambda: Run.objects.filter(pk=run.pk, status=Run.Status.SUCCEEDED).first())
    assert run.result_rows and run.summary == "Forty patients." and run.deliveries == 1
    assert run.task_id and run.worker


def test_cancel_stops_a_running_run_at_the_next_stage(source, llm):
    llm.when("You write one", Delay(1.5, Reply("SELECT 1 AS one")))
    user = make_user("r2", "researcher")
    with running_worker():
        run = question_submit(user=user, text="How many patients are there?", source=source)
        wait_for(lambda: run.stages.filter(name="generate").exists())
        assert run_cancel(run=run, user=user)
        run = wait_for(lambda: Run.objects.filter(pk=run.pk, status=Run.Status.CANCELLED).first())
        time.sleep(2)  # the worker finishes its stage and must not overwrite the cancel
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and not run.sql
    assert not run_cancel(run=run, user=user)  # already ended


def test_a_worker_killed_mid_run_leaves_a_failed_retryable_run(source, llm, tmp_path):
    llm.when("You write one", Hang())
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - read in the assertion message
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": _test_database_url(),
        "LLM_BASE_URL": llm.base_url,
        "LLM_MODEL": "scripted",
        "LLM_MAX_RETRIES": "0",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "--loglevel", "WARNING",
         "--hostname", f"doomed-{os.getpid()}@%h"],
        cwd=ROOT, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        user = make_user("r3", "researcher")
        run = question_submit(user=user, text="How many patients are there?", source=source)
        try:
            wait_for(lambda: run.stages.filter(name="generate").exists(), timeout=60)
        except AssertionError:
            raise AssertionError((tmp_path / "worker.log").read_text()[-3000:]) from None
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING  # what a dead worker leaves behind

    assert runs_reap_stale(older_than_s=0) == 1
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.outcome == "worker_lost"
    assert "ask again" in run.message
    assert runs_reap_stale(older_than_s=0) == 0

    llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))  # appended after Hang
    llm.reset()
    llm.when("You screen questions", Reply('{"category": "answerable", "reason": "ok"}'))
    llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
    llm.when("You explain the result", Reply("ok"))
    with running_worker():
        retry = run_retry(run=run, user=user)
        retry = wait_for(lambda: Run.objects.filter(pk=retry.pk, status=Run.Status.SUCCEEDED).first())
    assert retry.question_id == run.question_id and retry.pk != run.pk


def test_a_redelivered_message_for_a_started_run_fails_it_instead_of_running_twice(source):
    user = make_user("r4", "researcher")
    from askdb.models import Question

    run = Run.objects.create(question=Question.objects.create(user=user, source=source, text="x y z"),
                             status=Run.Status.RUNNING)  # fmt: skip
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.outcome == "worker_lost"
    assert run_execute(run_id=10**9) is None  # a message about a run that no longer exists


def _test_database_url() -> str:
    from config import embedded

    return embedded.pg_dsn(connection.settings_dict["NAME"])
