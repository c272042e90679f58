"""The request desk: a declined question sent to reviewers, answered in SQL, the asker told, the
library taught, and the grouped requests answered from the library (no LLM anywhere)."""

from __future__ import annotations

import psycopg
import pytest

from askdb.models import AnswerRequest, Example, Notification, Review, Run
from askdb.services.examples import example_upsert
from askdb.services.requests import (
    RequestError,
    request_answer,
    request_create,
    request_embed,
    request_groups,
    request_preview,
    requests_reask,
    sql_code_check,
)
from askdb.services.runs import question_submit_sync
from askdb.services.sql import ReviewError
from infra import embedded
from infra.audit.models import AuditEvent
from tests.factories import make_user

pytestmark = pytest.mark.django_db

AF_QUESTION = "how many patients were diagnosed with atrial fibrillation?"
# What a first answer often looks like: the ICD-9 code only.
AF_NARROW = (
    "SELECT COUNT(DISTINCT subject_id) AS n_patients FROM mimiciv_hosp.diagnoses_icd "
    "WHERE icd_code = '42731' AND icd_version = 9"
)
AF_WIDE = (
    "SELECT COUNT(DISTINCT di.subject_id) AS n_patients FROM mimiciv_hosp.diagnoses_icd AS di "
    "JOIN mimiciv_hosp.d_icd_diagnoses AS d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version "
    "WHERE LOWER(d.long_title) LIKE '%atrial fibrillation%'"
)


def clinical_rows(sql: str):
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture
def people(source, settings):
    settings.LLM_MODEL = ""  # no LLM: only the library answers
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    settings.ASKDB_EMAIL_NOTIFICATIONS = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    reviewer = make_user("rita", "reviewer", email="rita@example.org")
    # A library that knows something else, so that the matcher has a library to read.
    example_upsert(source=source, question="how many patients are there?",
                   sql="SELECT COUNT(*) FROM mimiciv_hosp.patients", approved_by=reviewer)  # fmt: skip
    return {
        "reviewer": reviewer,
        "ann": make_user("ann", "researcher", email="ann@example.org"),
        "bob": make_user("bob", "researcher"),
    }


def ask(user, text, source):
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def test_a_declined_question_is_answered_by_a_reviewer_and_the_library_learns_it(
    source, people, mailoutbox, django_capture_on_commit_callbacks
):
    ann, bob, rita = people["ann"], people["bob"], people["reviewer"]
    declined = ask(ann, AF_QUESTION, source)
    assert declined.status == "declined" and declined.outcome == "no_llm"

    request = request_create(run=declined, user=ann, note="for the cardiology audit")
    assert request_create(run=declined, user=ann) == request  # one click twice is one request
    request_embed(request_id=request.pk)
    other = ask(bob, "count the patients who were diagnosed with atrial fibrillation", source)
    assert other.status == "declined"
    bobs = request_embed(request_id=request_create(run=other, user=bob).pk)
    unrelated = request_embed(
        request_id=request_create(
            run=ask(bob, "which patients had a heart transplant abroad?", source), user=bob
        ).pk
    )

    groups = request_groups(source=source)
    assert [len(g) for g in groups] == [2, 1]  # the two ways of asking are one group, ranked first
    assert {r.pk for r in groups[0]} == {request.pk, bobs.pk} and groups[1][0].pk == unrelated.pk

    # The preview runs as the asker would see it, and the code check names the ICD-10 codes missed.
    _, result = request_preview(request=request, reviewer=rita, sql=AF_NARROW)
    assert list(result.columns) == ["n_patients"]
    checks = sql_code_check(source=source, sql=AF_NARROW, actor=rita)
    missing = {m["code"] for c in checks for m in c["missing"]}
    held = {r[0].strip() for r in clinical_rows(
        "SELECT DISTINCT di.icd_code FROM mimiciv_hosp.diagnoses_icd AS di JOIN mimiciv_hosp.d_icd_diagnoses AS d "
        "USING (icd_code, icd_version) WHERE di.icd_version = 10 AND d.long_title ILIKE '%atrial fibrillation%'"
    )}  # fmt: skip
    assert held and held <= missing, (held, checks)

    with django_capture_on_commit_callbacks() as after_commit:
        done = request_answer(request=request, reviewer=rita, sql=AF_WIDE, comment="ICD-9 and ICD-10")
    # The email goes after commit. The re-ask of the group is sent to the broker after commit too;
    # it is not sent here (no worker in this test would take it): it is run below, as a worker would.
    for callback in after_commit:
        if callback.__name__ == "send":
            callback()
    assert done.status == "answered" and done.answered_by == rita
    run = Run.objects.get(pk=declined.pk)
    count = clinical_rows(AF_WIDE)[0][0]
    expected = "<11" if 0 < count < source.min_cell_size else count  # the asker's privacy rules apply
    assert run.status == "succeeded" and run.answered_by == "reviewer" and run.result_rows == [[expected]]
    assert run.reviews.get().action == Review.Action.ANSWER
    example = Example.objects.get(origin_run=run)
    assert example.origin == "request" and example.approved_by == rita and example.status == "active"
    assert Notification.objects.filter(user=ann, read_at__isnull=True).count() == 1
    assert [m.to for m in mailoutbox] == [["ann@example.org"]]
    assert AuditEvent.objects.filter(action__in=["request.created", "request.answered"]).count() == 4

    # The grouped request is asked again (the worker's job) and answered from the library.
    answered = requests_reask(request_ids=[bobs.pk], reviewer_id=rita.pk)
    assert [r.pk for r in answered] == [bobs.pk]
    bobs.refresh_from_db()
    assert bobs.status == "answered" and bobs.answer_run.answered_by == "library"
    assert bobs.answer_run.result_rows == [[expected]]
    assert Notification.objects.filter(user=bob).count() == 1
    assert AnswerRequest.objects.get(pk=unrelated.pk).status == "pending"

    # A paraphrase asked afterwards is answered from the library.
    later = ask(bob, "number of patients diagnosed with atrial fibrillation", source)
    assert later.status == "succeeded" and later.answered_by == "library", later.message


def test_only_the_asker_requests_only_a_declined_run_and_never_answers_it(source, people):
    ann, bob, rita = people["ann"], people["bob"], people["reviewer"]
    answered = ask(ann, "how many patients are there?", source)
    assert answered.status == "succeeded"
    with pytest.raises(RequestError, match="declined or could not answer"):
        request_create(run=answered, user=ann)
    declined = ask(ann, AF_QUESTION, source)
    with pytest.raises(RequestError, match="Only the person who asked"):
        request_create(run=declined, user=bob)
    request = request_create(run=declined, user=ann)
    with pytest.raises(RequestError, match="Only reviewers"):
        request_answer(request=request, reviewer=bob, sql=AF_WIDE)
    # A write smuggled into an answer is refused by the pipeline's validation; nothing is saved.
    with pytest.raises(ReviewError, match="not valid"):
        request_answer(request=request, reviewer=rita, sql="DELETE FROM mimiciv_hosp.patients")
    with pytest.raises(ReviewError, match="not valid"):
        request_preview(request=request, reviewer=rita, sql="SELECT 1; DROP TABLE mimiciv_hosp.patients")
    assert AnswerRequest.objects.get(pk=request.pk).status == "pending"
    assert not Example.objects.filter(origin="request").exists()


def test_a_reviewer_cannot_answer_their_own_request(source, people):
    rita = people["reviewer"]
    declined = ask(rita, AF_QUESTION, source)
    request = request_create(run=declined, user=rita)
    with pytest.raises(RequestError, match="your own request"):
        request_answer(request=request, reviewer=rita, sql=AF_WIDE)


def test_the_code_check_names_other_item_ids_of_a_label_and_other_names_of_a_drug(source, people):
    rita = people["reviewer"]
    (itemid, other_id), *_ = clinical_rows(
        "SELECT MIN(itemid), MAX(itemid) FROM mimiciv_hosp.d_labitems GROUP BY LOWER(label) HAVING COUNT(*) > 1"
    )
    items = sql_code_check(source=source, actor=rita,
                           sql=f"SELECT AVG(valuenum) FROM mimiciv_hosp.labevents WHERE itemid = {itemid}")  # fmt: skip
    assert [m["code"] for m in items[0]["matched"]] == [str(itemid)]
    assert str(other_id) in [m["code"] for m in items[0]["missing"]]

    drugs = sql_code_check(source=source, actor=rita,
                           sql="SELECT COUNT(*) FROM mimiciv_hosp.prescriptions WHERE drug = 'Aspirin'")  # fmt: skip
    held = {
        r[0]
        for r in clinical_rows(
            "SELECT DISTINCT drug FROM mimiciv_hosp.prescriptions WHERE drug ILIKE 'aspirin%'"
        )
    }
    assert [m["code"] for m in drugs[0]["matched"]] == ["Aspirin"]
    assert {m["code"] for m in drugs[0]["missing"]} == held - {"Aspirin"} != set()
    # every lookup ran as the reader and is in the audit
    assert AuditEvent.objects.filter(action="sql.executed", detail__purpose="code_check").count() >= 4


def test_an_answer_the_asker_may_not_see_is_refused_before_anything_is_saved(source, people):
    rita = people["reviewer"]
    agg = make_user("aggie", "aggregate_researcher")
    declined = ask(agg, "list the patients diagnosed with atrial fibrillation", source)
    request = request_create(run=declined, user=agg)
    listing = "SELECT DISTINCT subject_id FROM mimiciv_hosp.diagnoses_icd WHERE icd_code = '42731'"
    with pytest.raises(ReviewError, match="may not see"):
        request_preview(request=request, reviewer=rita, sql=listing)
    with pytest.raises(ReviewError, match="may not see"):
        request_answer(request=request, reviewer=rita, sql=listing)
    assert (
        AnswerRequest.objects.get(pk=request.pk).status == "pending"
        and Run.objects.get(pk=declined.pk).sql == ""
    )


def test_the_library_numbers_count_requests_and_answers_since_each_approval(source, people):
    from askdb.selectors_requests import approvals_answered_since, request_numbers

    ann, rita = people["ann"], people["reviewer"]
    request = request_create(run=ask(ann, AF_QUESTION, source), user=ann)
    assert request_numbers(source=source) | {"median_seconds": None} == {
        "open": 1, "answered": 0, "median_seconds": None, "median_text": "—"}  # fmt: skip
    request_answer(request=request, reviewer=rita, sql=AF_WIDE)
    numbers = request_numbers(source=source)
    assert (numbers["open"], numbers["answered"]) == (0, 1) and numbers["median_seconds"] >= 0
    example = Example.objects.get(origin="request")
    assert approvals_answered_since(examples=[example]) == {}
    for text in (
        "number of patients diagnosed with atrial fibrillation",
        "count patients with atrial fibrillation",
    ):
        ask(people["bob"], text, source)
    answered = Run.objects.filter(example=example, answered_by="library").count()
    assert answered >= 1 and approvals_answered_since(examples=[example]) == {example.pk: answered}


def test_a_request_closed_without_an_answer_tells_the_asker_why(source, people):
    from askdb.services.requests import request_close

    ann, rita = people["ann"], people["reviewer"]
    request = request_create(run=ask(ann, "which patients had a heart transplant abroad?", source), user=ann)
    with pytest.raises(RequestError, match="Say why"):
        request_close(request=request, reviewer=rita, comment=" ")
    closed = request_close(request=request, reviewer=rita, comment="The data holds no care given abroad.")
    assert closed.status == "closed"
    assert "no care given abroad" in Notification.objects.get(user=ann).message
    with pytest.raises(RequestError, match="not waiting"):
        request_close(request=request, reviewer=rita, comment="again")
    assert AuditEvent.objects.filter(action="request.closed").count() == 1
