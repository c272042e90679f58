"""Confidence from disagreement, end to end in one process: K candidates from the scripted LLM,
validated and executed read-only against the synthetic data, grouped by result."""

from __future__ import annotations

import pytest

from askdb.models import Run, SqlAttempt
from askdb.services.runs import question_submit_sync, run_pick_candidate
from askdb.services.sql import ReviewError
from infra.audit.models import AuditEvent
from tests.factories import make_user
from tests.support.scripted_llm import Error, Reply

pytestmark = pytest.mark.django_db

GATE, WRITE, SUMMARY = "You screen questions", "You write one", "You explain the result"
DIAG = "SELECT count(DISTINCT subject_id) AS n FROM mimiciv_hosp.diagnoses_icd WHERE icd_code LIKE 'I10%'"
PROC = "SELECT count(DISTINCT subject_id) AS n FROM mimiciv_hosp.procedures_icd WHERE icd_code LIKE '0%'"


@pytest.fixture
def llm(scripted_llm, settings):
    settings.ASKDB_CANDIDATES = 5
    settings.ASKDB_CONFIDENCE_THRESHOLD = 0.7
    scripted_llm.when(GATE, Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when(SUMMARY, Reply("summary"))
    return scripted_llm


def ask(source, text="How many patients had code I10?"):
    user = make_user("asker", "researcher")
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def test_agreeing_candidates_give_one_answer_with_high_confidence(source, llm):
    variants = [
        "SELECT count(*) AS n FROM mimiciv_hosp.patients",
        "select COUNT(*) as total from mimiciv_hosp.patients p",
        "SELECT count(subject_id) FROM mimiciv_hosp.patients",
        "SELECT count(DISTINCT subject_id) AS n FROM mimiciv_hosp.patients",
        "SELECT count(*) AS n FROM mimiciv_hosp.patients",
    ]
    llm.when(WRITE, Reply(variants))
    run = ask(source, "How many patients are there?")

    assert run.status == "succeeded" and run.outcome == "answered" and run.confidence == 1.0
    assert run.result_rows == [[40]] and len(run.candidates["groups"]) == 1
    assert run.candidates["k"] == 5 and not run.candidates["ambiguous"]
    body = next(b for b in llm.chat_bodies() if WRITE in b["messages"][0]["content"])
    assert body["n"] == 5 and body["temperature"] == pytest.approx(0.7)  # one request with n
    # the identical SQL was executed once: four distinct statements
    assert AuditEvent.objects.filter(action="sql.executed", target_id=str(run.pk)).count() == 4


def test_split_candidates_are_shown_not_presented_as_fact(client, source, llm):
    llm.when(WRITE, Reply([DIAG, PROC, DIAG, PROC, DIAG]))
    run = ask(source)

    assert run.status == "succeeded" and run.outcome == "ambiguous"
    assert run.confidence == pytest.approx(0.6) and run.sql == "" and run.result_rows == []
    groups = run.candidates["groups"]
    assert [len(g["members"]) for g in groups] == [3, 2]
    assert run.candidates["disagreement"]["part"] == "tables"
    assert "diagnoses_icd" in run.message and "procedures_icd" in run.message
    assert run.review_status == Run.Review.PENDING  # marked for review whatever the policy
    assert not run.summary

    client.force_login(run.question.user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "3 of 5" in page and "2 of 5" in page and f"/runs/{run.pk}/pick/" in page
    response = client.post(f"/runs/{run.pk}/pick/", {"group": "1"})
    assert response.status_code == 302
    chosen = Run.objects.get(pk=run.pk)
    assert (
        chosen.sql == PROC.replace("count(", "COUNT(")
        and chosen.outcome in ("answered", "no_rows")
        and chosen.candidates["picked"] == 1
    )
    with pytest.raises(ReviewError):
        run_pick_candidate(run=run, user=make_user("other", "researcher"), group=0)
    with pytest.raises(ReviewError):
        run_pick_candidate(run=run, user=run.question.user, group=7)


def test_invalid_candidates_count_as_disagreement_and_never_execute(source, llm, settings):
    settings.ASKDB_CONFIDENCE_THRESHOLD = 0.5
    count = "SELECT count(*) AS n FROM mimiciv_hosp.patients"
    llm.when(WRITE, Reply([count, "DROP TABLE mimiciv_hosp.patients", count, "no sql here", count]))
    run = ask(source, "How many patients are there?")

    assert run.outcome == "answered" and run.confidence == pytest.approx(0.6)
    assert {f["index"] for f in run.candidates["failures"]} == {1, 3}
    attempts = SqlAttempt.objects.filter(run=run, origin="candidate")
    assert attempts.count() == 5 and attempts.filter(valid=False).count() == 2
    executed = [
        e.detail["sql"] for e in AuditEvent.objects.filter(action="sql.executed", target_id=str(run.pk))
    ]
    assert executed == [count.replace("count(", "COUNT(")]  # the DROP never reached the database


def test_endpoint_without_n_gets_parallel_requests(source, llm):
    llm.when(lambda body: (body.get("n") or 1) > 1, Error(400, "n is not supported by this model"))
    llm.when(WRITE, Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
    run = ask(source, "How many patients are there?")

    assert run.outcome == "answered" and run.confidence == 1.0 and run.candidates["k"] == 5
    singles = [
        b for b in llm.chat_bodies() if WRITE in b["messages"][0]["content"] and (b.get("n") or 1) == 1
    ]
    assert len(singles) == 5
