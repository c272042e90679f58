"""Broker down at submit: the API and the ask form answer 503 "try again" at once, the question is
kept, and the queued-run reaper sends it when the broker is back, so the run completes."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from askdb.models import Run
from infra import embedded
from tests.celery_worker import running_worker, wait_for
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def broker_down():
    """The test session's embedded Redis, stopped; started again afterwards whatever happens."""
    p = embedded.paths()
    embedded.redis_stop(p)
    try:
        yield lambda: embedded.redis_start(p)
    finally:
        embedded.redis_start(p)


def test_a_question_asked_while_the_broker_is_down_is_answered_when_it_is_back(
    source, scripted_llm, client, broker_down
):
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
    scripted_llm.when("You explain the result", Reply("Forty patients."))
    user = make_user("rita", "researcher")
    api = APIClient()
    api.force_authenticate(user)

    response = api.post("/api/runs/", {"question": "How many patients are there?"}, format="json")
    assert response.status_code == 503, response.content
    body = response.json()
    assert "try again" in body["error"] and "saved" in body["error"] and body["status"] == "queued"
    assert response["Retry-After"]
    by_api = Run.objects.get(pk=body["run"])
    assert by_api.status == Run.Status.QUEUED and by_api.task_id == ""  # kept, never sent

    client.force_login(user)
    page = client.post("/", {"question": "How many admissions are there?"})
    assert page.status_code == 503
    assert "not reachable" in page.content.decode() and "try again" in page.content.decode()
    by_form = Run.objects.exclude(pk=by_api.pk).get(question__text="How many admissions are there?")
    assert by_form.status == Run.Status.QUEUED and by_form.task_id == ""

    broker_down()  # the broker is back: a worker's reaper sends both, and they are answered
    with running_worker():
        for run in (by_api, by_form):
            done = wait_for(lambda run=run: Run.objects.filter(pk=run.pk, status__in=Run.TERMINAL).first(),
                            timeout=90)  # fmt: skip
            assert done.status == Run.Status.SUCCEEDED, (done.outcome, done.message)
            assert done.task_id and done.deliveries == 1


def test_the_reaper_sends_a_run_once_and_fails_one_queued_too_long(source):
    from askdb.models import Question
    from askdb.services.runs import runs_requeue

    user = make_user("rita", "researcher")
    question = Question.objects.create(user=user, source=source, text="How many patients are there?")
    unsent = Run.objects.create(question=question)
    assert runs_requeue(unsent_after_s=0) == {"requeued": 1, "failed": 0}
    sent_as = Run.objects.get(pk=unsent.pk).task_id
    assert sent_as and runs_requeue(unsent_after_s=0) == {"requeued": 0, "failed": 0}  # never twice
    assert runs_requeue(unsent_after_s=0, give_up_after_s=0) == {"requeued": 0, "failed": 1}
    unsent.refresh_from_db()
    assert unsent.status == Run.Status.FAILED and unsent.outcome == "queue_timeout"
    assert "ask again" in unsent.message
    assert unsent.task_id == sent_as
