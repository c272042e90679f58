"""The request desk's pages: "Request an answer" on a declined run, the reviewers' queue and SQL
editor (preview, code check, answer), the inbox with its unread count, declines that make sense,
and the library's request numbers."""

from __future__ import annotations

import json
import re

import pytest

from askdb.models import AnswerRequest, Example, Notification, Run
from askdb.services.examples import example_upsert
from askdb.services.requests import request_embed
from askdb.services.runs import question_submit_sync
from tests.factories import make_user

pytestmark = pytest.mark.django_db

AF_QUESTION = "how many patients were diagnosed with atrial fibrillation?"
AF_NARROW = "SELECT COUNT(DISTINCT subject_id) AS n FROM mimiciv_hosp.diagnoses_icd WHERE icd_code = '42731'"
AF_WIDE = (
    "SELECT COUNT(DISTINCT di.subject_id) AS n FROM mimiciv_hosp.diagnoses_icd AS di "
    "JOIN mimiciv_hosp.d_icd_diagnoses AS d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version "
    "WHERE LOWER(d.long_title) LIKE '%atrial fibrillation%'"
)


@pytest.fixture
def desk(source, settings):
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    rita = make_user("rita", "reviewer")
    example_upsert(source=source, question="how many patients are there?",
                   sql="SELECT COUNT(*) FROM mimiciv_hosp.patients", approved_by=rita)  # fmt: skip
    return {"rita": rita, "ann": make_user("ann", "researcher"), "bob": make_user("bob", "researcher")}


def ask(user, text, source):
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def test_the_whole_desk_through_the_pages(client, source, desk):
    ann, bob, rita = desk["ann"], desk["bob"], desk["rita"]
    run = ask(ann, AF_QUESTION, source)
    assert run.status == "declined"

    client.force_login(bob)  # not the asker: no button (bob cannot even see ann's run)
    assert client.get(f"/runs/{run.pk}/").status_code == 404
    assert client.post(f"/runs/{run.pk}/request/").status_code == 404
    assert client.get("/requests/").status_code == 403  # the queue is for reviewers

    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="request-answer"' in page and "Request an answer" in page
    response = client.post(f"/runs/{run.pk}/request/", {"note": "for the AF audit"})
    assert response.status_code == 302
    request = AnswerRequest.objects.get(run=run)
    assert request.note == "for the AF audit" and request.requested_by == ann
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="request-answer"' not in page and "Sent to the reviewers" in page
    request_embed(request_id=request.pk)

    client.force_login(rita)
    queue = client.get("/requests/").content.decode()
    assert AF_QUESTION in queue and f"/requests/{request.pk}/" in queue
    assert 'href="/requests/"' in client.get("/").content.decode()  # the nav link
    editor = client.get(f"/requests/{request.pk}/").content.decode()
    schema = json.loads(re.search(r'data-schema="([^"]*)"', editor).group(1).replace("&quot;", '"'))
    assert "icd_code" in schema["mimiciv_hosp.diagnoses_icd"]
    assert "sql_editor.js" in editor and "data-sql-editor" in editor

    preview = client.post(
        f"/requests/{request.pk}/", {"action": "preview", "sql": AF_NARROW}
    ).content.decode()
    assert 'id="preview-table"' in preview and 'id="code-check"' in preview
    missing = preview[preview.index("Probably missing") :]
    assert "(ICD-10)" in missing and "atrial fibrillation" in missing.lower()
    refused = client.post(
        f"/requests/{request.pk}/", {"action": "preview", "sql": "DELETE FROM mimiciv_hosp.patients"}
    )
    assert refused.status_code == 400 and "not valid" in refused.content.decode()

    done = client.post(f"/requests/{request.pk}/", {"action": "answer", "sql": AF_WIDE})
    assert done.status_code == 302
    request.refresh_from_db()
    assert request.status == "answered"

    client.force_login(ann)
    home = client.get("/").content.decode()
    assert 'id="inbox-unread"' in home and ">1</span>" in home[home.index('id="inbox-unread"') :][:80]
    inbox = client.get("/inbox/").content.decode()
    note = Notification.objects.get(user=ann)
    assert "answered by rita" in inbox and f"/inbox/{note.pk}/" in inbox
    assert client.get(f"/inbox/{note.pk}/")["Location"] == f"/runs/{run.pk}/"
    assert 'id="inbox-unread"' not in client.get("/inbox/").content.decode()
    answer = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="answered-by"' in answer and "Answered by rita" in answer
    assert "LIKE" in answer  # the reviewer's SQL is shown

    library = client.get("/library/").content.decode()
    numbers = library[library.index('id="request-numbers"') :][:400]
    assert "<strong>0</strong> open, <strong>1</strong> answered" in numbers and "median time" in numbers


def test_a_write_request_is_offered_no_did_you_mean_and_the_api_shows_what_the_page_shows(
    client, source, desk
):
    ann = desk["ann"]
    client.force_login(ann)
    write = ask(ann, "delete all patients", source)
    page = client.get(f"/runs/{write.pk}/").content.decode()
    assert "askdb only reads" in page and 'id="did-you-mean"' not in page
    assert 'id="request-answer"' not in page  # nobody can answer a write
    assert client.post(f"/api/runs/{write.pk}/request/", {}).status_code == 400
    assert client.get(f"/api/runs/{write.pk}/").json()["suggestions"] == []

    close = ask(ann, "how many patients are there in total?", source)
    if close.status == "succeeded":  # answered from the library: ask something only near it
        close = ask(ann, "how many patients are there who had a stroke?", source)
    api = client.get(f"/api/runs/{close.pk}/").json()
    page = client.get(f"/runs/{close.pk}/").content.decode()
    for s in api["suggestions"]:
        assert s["score"] >= 0.6 and s["question"] in page
    if not api["suggestions"]:
        assert 'id="did-you-mean"' not in page


def test_did_you_mean_keeps_only_suggestions_above_the_floor(source, desk, settings):
    from askdb.models import Question
    from askdb.selectors_requests import run_did_you_mean

    near = Example.objects.get(question="how many patients are there?")
    question = Question.objects.create(user=desk["ann"], source=source, text="how many pateints r there")
    run = Run.objects.create(question=question, status="declined", outcome="no_llm",
                             retrieval={"examples": [{"id": near.pk, "score": 0.55}]})  # fmt: skip
    settings.ASKDB_DID_YOU_MEAN_FLOOR = 0.6
    assert run_did_you_mean(run=run) == []
    settings.ASKDB_DID_YOU_MEAN_FLOOR = 0.5
    assert [s["id"] for s in run_did_you_mean(run=run)] == [near.pk]


def test_the_review_page_shows_no_diff_for_a_run_without_sql(client, source, desk):
    run = ask(desk["ann"], AF_QUESTION, source)
    run.retrieval = {**run.retrieval, "examples": [{"id": Example.objects.get().pk, "score": 0.7}]}
    run.save(update_fields=["retrieval"])
    client.force_login(desk["rita"])
    page = client.get(f"/runs/{run.pk}/review/").content.decode()
    assert "The same SQL." not in page and "Diff of its SQL" not in page
    assert "This run has no SQL to compare with." in page


def test_a_library_answer_whose_example_went_on_hold_says_so(client, source, desk):
    ann = desk["ann"]
    run = ask(ann, "how many patients are there?", source)
    assert run.answered_by == "library"
    Example.objects.filter(pk=run.example_id).update(status=Example.Status.NEEDS_REVIEW)
    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="example-on-hold"' in page and "From a verified question in the library" not in page
