"""Composed answers on the demo library, through the app (no LLM): a verified template's SQL with a
condition another verified question expresses, run read-only, shown as composed (never verified),
waiting in the review queue, and one approval away from being a verified question; questions a
composition would answer wrong still abstain."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from askdb.models import Example, Run
from askdb.services.calibration import library_cross_validate
from askdb.services.exports import examples_import
from askdb.services.reviews import review_approve
from askdb.services.runs import question_submit_sync, run_execute
from core.compare import results_match
from infra import embedded
from infra.audit.models import AuditEvent
from tests.factories import make_user

pytestmark = pytest.mark.django_db

TRAIN = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "mimiciv" / "train.json"

# The demo's questions composition is for, and the SQL that answers each (written by hand).
COMPOSED = {
    "how many female patients over 80?": (
        "SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE gender = 'F' AND anchor_age > 80",
        {"count the number of patients older than 65.", "how many female patients are in the database?"},
    ),
    "what is the average age of patients?": (
        "SELECT AVG(anchor_age) FROM mimiciv_hosp.patients",
        {"what is the average age of male patients?"},
    ),
}
# One step further than any composition of two verified questions: abstain (or, for the rule
# kinds, decline with the rule), never answer.
NOT_COMPOSED = [
    "how many female patients over 80 who died in the hospital?",
    "how many female patients under 80 were never admitted?",
    "how many female patients over 80 will be admitted next year?",
    "what is the average age of patients with diabetes?",
]


def clinical_rows(sql: str):
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        return [list(r) for r in conn.execute(sql).fetchall()]


@pytest.fixture
def demo(source, settings):
    settings.LLM_MODEL = ""
    items = [{"question": i["question"], "sql": i.get("sql") or ""} for i in json.loads(TRAIN.read_text())]
    examples_import(source=source, items=items, execute=False, origin="demo")
    source.library_calibration = library_cross_validate(source=source)
    source.save(update_fields=["library_calibration"])
    return {e.question: e.pk for e in Example.objects.filter(source=source)}


def ask(source, text, user=None):
    from django.contrib.auth import get_user_model

    user = (
        user or get_user_model().objects.filter(username="asker").first() or make_user("asker", "researcher")
    )
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def test_the_demo_questions_are_composed_right_shown_as_composed_and_queued(client, source, demo):
    asker = make_user("asker", "researcher")
    for question, (gold, parts) in COMPOSED.items():
        run = ask(source, question, asker)
        assert (run.status, run.answered_by) == ("succeeded", "composed"), (question, run.library_match)
        assert results_match(clinical_rows(run.sql), clinical_rows(gold)), (
            question,
            run.sql,
        )  # before suppression
        assert set(run.library_match["composed_from"]) == {demo[q] for q in parts}
        assert run.review_status == Run.Review.PENDING  # composed: a reviewer must look, whatever the policy

        client.force_login(asker)
        page = client.get(f"/runs/{run.pk}/").content.decode()
        assert "Composed from verified questions" in page and 'id="composed-answer"' in page
        assert "From a verified question in the library" not in page and "From verified example" not in page
        for part in parts:
            assert f'href="/library/{demo[part]}/"' in page
        assert "composed by askdb from verified example" in page  # the methods paragraph says so too


def test_a_reviewer_turns_a_composed_answer_into_a_verified_question_with_one_approval(client, source, demo):
    dropped = ask(source, "what is the average age of patients?")
    run = ask(source, "how many female patients over 80?")
    reviewer = make_user("rev2", "reviewer")
    client.force_login(reviewer)
    queue = client.get("/review/").content.decode()
    assert f"/runs/{run.pk}/" in queue and "composed from verified questions" in queue
    page = client.get(f"/runs/{run.pk}/review/").content.decode()
    assert 'id="composed-note"' in page
    # either verified question can be the base and the other's condition the one added
    assert "the condition “female” added" in page or "the condition “older than 65” added" in page
    assert "a condition left out" in client.get(f"/runs/{dropped.pk}/review/").content.decode()

    review_approve(run=run, reviewer=reviewer)
    example = Example.objects.get(source=source, question="how many female patients over 80?")
    assert example.sql == run.sql and example.approved_by.username == "rev2"  # one click: now verified
    again = ask(source, "how many female patients over 80?")
    assert again.answered_by == "library" and again.example_id == example.pk


def test_a_question_one_step_beyond_a_composition_is_not_answered(source, demo):
    for question in NOT_COMPOSED:
        run = ask(source, question)
        assert run.answered_by == "" and run.status == "declined", (question, run.sql, run.library_match)


def test_a_follow_up_adds_a_condition_to_the_earlier_answer_and_shows_the_thread(client, source, demo):
    asker = make_user("asker", "researcher")
    first = ask(source, "how many female patients are in the database?", asker)
    assert first.answered_by == "library"
    client.force_login(asker)
    assert 'id="follow-up"' in client.get(f"/runs/{first.pk}/").content.decode()

    response = client.post(f"/runs/{first.pk}/follow-up/", {"question": "and how many of them were over 80?"})
    follow = Run.objects.exclude(pk=first.pk).get(question__text="and how many of them were over 80?")
    assert response.status_code == 302 and response["Location"] == f"/runs/{follow.pk}/"
    assert follow.question.follow_up_of == first
    asked = AuditEvent.objects.filter(action="question.asked", target_id=str(follow.pk)).get()
    assert asked.detail["follow_up_of"] == first.pk
    follow = run_execute(run_id=follow.pk, worker="test")  # no worker in this test: run it here

    assert (follow.status, follow.answered_by) == ("succeeded", "composed"), follow.library_match
    gold = "SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE gender = 'F' AND anchor_age > 80"
    assert results_match(clinical_rows(follow.sql), clinical_rows(gold)), follow.sql
    assert follow.library_match["composed_from"] == [demo["count the number of patients older than 65."]]
    page = client.get(f"/runs/{follow.pk}/").content.decode()
    assert 'id="thread"' in page and f'href="/runs/{first.pk}/"' in page and first.question.text in page

    # A follow-up adding nothing the library knows is declined, not read as a question of its own.
    other = question_submit_sync(user=asker, text="and how many of them had sepsis?", follow_up_of=first)
    assert (other.status, other.answered_by) == ("declined", ""), other.sql


def test_only_an_answered_run_can_be_followed_up_and_only_by_who_may_act_on_it(client, source, demo):
    asker = make_user("asker", "researcher")
    declined = ask(source, "how many female patients over 80 who died in the hospital?", asker)
    client.force_login(asker)
    response = client.post(f"/runs/{declined.pk}/follow-up/", {"question": "and of them?"}, follow=True)
    assert "Only an answered question can be followed up" in response.content.decode()
    answered = ask(source, "how many female patients are in the database?", asker)
    client.force_login(make_user("other", "researcher"))
    assert client.post(f"/runs/{answered.pk}/follow-up/", {"question": "and over 80?"}).status_code == 404
