"""The review and example-library REST API (askdb/apis.py) over HTTP: the queue, reviewing a run,
browsing, retiring and importing examples, and who may do each."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from askdb.models import Example, Question, Review, Run
from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from askdb.services.exports import examples_import
from infra.audit.models import AuditEvent
from tests.factories import make_user

pytestmark = pytest.mark.django_db

COUNT_SQL = "SELECT COUNT(*) AS patients FROM mimiciv_hosp.patients"
FEMALE_SQL = "SELECT COUNT(*) AS women FROM mimiciv_hosp.patients WHERE gender = 'F'"
BAD_SQL = "SELECT weight_kg FROM mimiciv_hosp.patients"


@pytest.fixture(autouse=True)
def _fresh_throttle_history():
    cache.clear()
    yield
    cache.clear()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def answered_run(
    user, source, text: str = "How many patients are there?", sql: str = COUNT_SQL, **extra
) -> Run:
    """A succeeded run waiting for review, as the worker leaves it."""
    fields = {"status": Run.Status.SUCCEEDED, "outcome": "answered", "sql": sql,
              "review_status": Run.Review.PENDING, "model": "scripted", "confidence": 0.8} | extra  # fmt: skip
    return Run.objects.create(question=Question.objects.create(user=user, source=source, text=text), **fields)


def review_url(run: Run) -> str:
    return f"/api/runs/{run.pk}/review/"


# --------------------------------------------------------------------------- the queue


def test_the_queue_lists_pending_runs_oldest_first_for_reviewers_only(source):
    asker = make_user("rita", RESEARCHER)
    first = answered_run(asker, source)
    second = answered_run(asker, source, text="How many women?", sql=FEMALE_SQL)
    answered_run(asker, source, text="Already approved", review_status=Run.Review.APPROVED)
    evaluation = answered_run(asker, source, text="Benchmark question")
    Question.objects.filter(pk=evaluation.question_id).update(channel="evaluation")

    response = client_for(make_user("rev", REVIEWER)).get("/api/reviews/")
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [r["run"] for r in rows] == [first.pk, second.pk]
    assert rows[0]["sql"] == COUNT_SQL and rows[0]["user"] == "rita" and rows[0]["confidence"] == 0.8

    refused = client_for(asker).get("/api/reviews/")
    assert refused.status_code == 403 and "reviewer" in refused.json()["error"]


# --------------------------------------------------------------------------- reviewing


def test_approving_creates_a_library_example_and_shows_on_the_run(source):
    run = answered_run(make_user("rita", RESEARCHER), source)
    reviewer = client_for(make_user("rev", REVIEWER))

    response = reviewer.post(review_url(run), {"action": "approve", "comment": "looks right"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    example = Example.objects.get()
    assert body | {"created_at": None} == {
        "id": Review.objects.get().pk, "run": run.pk, "action": "approve", "category": "", "comment": "looks right",
        "reviewer": "rev", "created_at": None, "sql_before": COUNT_SQL, "sql_after": COUNT_SQL, "diff": "",
        "example": example.pk,
    }  # fmt: skip
    assert example.question == "How many patients are there?" and example.origin_run == run
    assert example.approved_by.username == "rev" and example.status == Example.Status.ACTIVE

    detail = reviewer.get(f"/api/runs/{run.pk}/").json()
    assert detail["review_status"] == "approved"
    assert [(r["action"], r["reviewer"], r["comment"]) for r in detail["reviews"]] == [
        ("approve", "rev", "looks right")
    ]
    assert {k: detail[k] for k in ("confidence", "model", "answered_by", "example", "examples_used")} == {
        "confidence": 0.8, "model": "scripted", "answered_by": "", "example": None, "examples_used": [],
    }  # fmt: skip
    assert "catalog_version" in detail


def test_reviewing_your_own_question_is_403_and_changes_nothing(source):
    reviewer = make_user("rev", REVIEWER)
    run = answered_run(reviewer, source)
    for payload in ({"action": "approve"}, {"action": "correct", "sql": FEMALE_SQL}):
        response = client_for(reviewer).post(review_url(run), payload, format="json")
        assert response.status_code == 403
        assert response.json() == {
            "error": "You cannot approve or correct your own question; an admin can assign it to another reviewer."
        }
    run.refresh_from_db()
    assert run.review_status == Run.Review.PENDING and run.sql == COUNT_SQL
    assert not Example.objects.exists() and not Review.objects.exists()


def test_a_correction_with_invalid_sql_is_400_and_nothing_is_saved(source):
    run = answered_run(make_user("rita", RESEARCHER), source)
    response = client_for(make_user("rev", REVIEWER)).post(
        review_url(run), {"action": "correct", "sql": BAD_SQL}, format="json"
    )
    assert response.status_code == 400
    assert (
        response.json()["error"].startswith("The SQL is not valid")
        and "weight_kg" in response.json()["error"]
    )
    run.refresh_from_db()
    assert run.sql == COUNT_SQL and run.review_status == Run.Review.PENDING
    assert not Example.objects.exists() and not Review.objects.exists()


def test_a_valid_correction_replaces_the_sql_and_keeps_the_diff(source):
    run = answered_run(make_user("rita", RESEARCHER), source, text="How many female patients are there?")
    response = client_for(make_user("rev", REVIEWER)).post(
        review_url(run), {"action": "correct", "sql": FEMALE_SQL, "comment": "only women"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["action"] == "correct" and body["sql_before"] == COUNT_SQL
    assert "-SELECT COUNT(*) AS patients" in body["diff"] and "+SELECT COUNT(*) AS women" in body["diff"]
    example = Example.objects.get(pk=body["example"])
    assert example.origin == "correction" and "gender" in example.sql
    run.refresh_from_db()
    assert run.review_status == Run.Review.CORRECTED and run.result_columns == ["women"]


def test_flagging_needs_a_category_and_unanswerable_keeps_a_negative_example(source):
    run = answered_run(
        make_user("rita", RESEARCHER), source, text="Which patients will be admitted next week?"
    )
    reviewer = client_for(make_user("rev", REVIEWER))
    missing = reviewer.post(review_url(run), {"action": "flag"}, format="json")
    assert missing.status_code == 400 and missing.json()["error"].startswith("Pick a category:")

    no_comment = reviewer.post(review_url(run), {"action": "flag", "category": "unanswerable"}, format="json")
    assert no_comment.status_code == 400 and "comment" in no_comment.json()["error"]
    response = reviewer.post(
        review_url(run),
        {"action": "flag", "category": "unanswerable", "comment": "future data"},
        format="json",
    )
    assert response.status_code == 200 and response.json()["category"] == "unanswerable"
    assert Example.objects.get().kind == Example.Kind.UNANSWERABLE


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"action": "delete"}, 'action: "delete" is not a valid choice.'),
        ({}, "action: This field is required."),
    ],
)
def test_a_malformed_review_is_400_with_the_field(source, payload, message):
    run = answered_run(make_user("rita", RESEARCHER), source)
    response = client_for(make_user("rev", REVIEWER)).post(review_url(run), payload, format="json")
    assert response.status_code == 400 and response.json()["error"] == message


def test_researchers_cannot_review_and_unknown_runs_are_404(source):
    asker = make_user("rita", RESEARCHER)
    run = answered_run(make_user("other", RESEARCHER), source)
    refused = client_for(asker).post(review_url(run), {"action": "approve"}, format="json")
    assert refused.status_code == 403 and not Example.objects.exists()
    missing = client_for(make_user("rev", REVIEWER)).post("/api/runs/999999/review/", {"action": "approve"})
    assert missing.status_code == 404


# --------------------------------------------------------------------------- the library


@pytest.fixture
def library(source):
    """Three examples: two answerable over patients, one unanswerable."""
    report = examples_import(
        source=source,
        items=[
            {"id": "a", "question": "How many patients are there?", "sql": COUNT_SQL},
            {"id": "b", "question": "How many female patients are there?", "sql": FEMALE_SQL},
            {"id": "c", "question": "Which patients will be admitted next week?", "sql": None},
        ],
    )
    assert not report.failed
    return {e.question: e for e in Example.objects.all()}


def listed(client: APIClient, **params) -> list[str]:
    response = client.get("/api/examples/", params)
    assert response.status_code == 200, response.json()
    return sorted(e["question"] for e in response.json()["results"])


def test_examples_list_filters_and_detail(library):
    client = client_for(make_user("rev", REVIEWER))
    assert len(listed(client)) == 3
    assert listed(client, q="female") == ["How many female patients are there?"]
    assert listed(client, q="gender") == ["How many female patients are there?"]
    assert listed(client, kind="unanswerable") == ["Which patients will be admitted next week?"]
    assert listed(client, table="patients") == listed(client, table="mimiciv_hosp.patients") == [
        "How many female patients are there?", "How many patients are there?",
    ]  # fmt: skip
    assert listed(client, table="mimiciv_icu.icustays") == []
    assert listed(client, status="needs_review") == []

    bad = client.get("/api/examples/", {"kind": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"] == "kind: Use one of: answerable, unanswerable."

    example = library["How many patients are there?"]
    detail = client.get(f"/api/examples/{example.pk}/").json()
    assert detail["sql"] == example.sql and detail["tables"] == ["mimiciv_hosp.patients"]
    assert detail["kind"] == "answerable" and detail["answered_runs"] == [] and "template" in detail
    assert client.get("/api/examples/999999/").status_code == 404


def test_retire_and_restore_through_the_api(library):
    client = client_for(make_user("rev", REVIEWER))
    example = library["How many patients are there?"]

    response = client.post(f"/api/examples/{example.pk}/retire/", {"note": "superseded"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "retired"
    assert response.json()["note"] == "superseded"
    assert "How many patients are there?" not in listed(client)
    assert listed(client, status="retired") == ["How many patients are there?"]
    assert AuditEvent.objects.filter(action="example.retired", target_id=str(example.pk)).exists()

    assert client.post(f"/api/examples/{example.pk}/restore/").json()["status"] == "active"

    Example.objects.filter(pk=example.pk).update(status=Example.Status.RETIRED, sql=BAD_SQL)
    refused = client.post(f"/api/examples/{example.pk}/restore/")
    assert refused.status_code == 400 and refused.json()["error"].startswith("The SQL is not valid")
    example.refresh_from_db()
    assert example.status == Example.Status.RETIRED


def test_import_through_the_api_reports_each_failure(source):
    client = client_for(make_user("rev", REVIEWER))
    response = client.post(
        "/api/examples/import/",
        {"examples": [
            {"id": "ok", "question": "How many patients are there?", "sql": COUNT_SQL},
            {"id": "broken", "question": "What does each patient weigh?", "sql": BAD_SQL},
            {"id": "none", "question": "Will it rain tomorrow?", "sql": None},
        ]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["summary"] == "2 added, 0 merged into existing examples, 1 failed"
    assert [(f["id"], f["question"]) for f in body["failed"]] == [("broken", "What does each patient weigh?")]
    assert body["failed"][0]["error"].startswith("The SQL is not valid")
    assert sorted(Example.objects.values_list("kind", flat=True)) == ["answerable", "unanswerable"]
    assert set(body["created"]) == set(Example.objects.values_list("pk", flat=True))
    assert Example.objects.get(kind="answerable").approved_by.username == "rev"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"examples": [{"question": "How many?", "sql": COUNT_SQL}, {"sql": COUNT_SQL}]},
         'examples: item 2 has no "question" key.'),
        ({"examples": []}, "examples: the list is empty; send at least one example."),
        ({"examples": "all of them"}, 'examples: Expected a list of items but got type "str".'),
        ({"source": "nope", "examples": [{"question": "How many?", "sql": ""}]},
         "source: No clinical source named 'nope' (known: mimic)."),
    ],
)  # fmt: skip
def test_a_malformed_import_is_400_and_imports_nothing(source, payload, message):
    response = client_for(make_user("rev", REVIEWER)).post("/api/examples/import/", payload, format="json")
    assert response.status_code == 400 and response.json()["error"] == message
    assert not Example.objects.exists()


def test_researchers_may_read_the_library_as_on_its_pages_but_not_change_it(library, client):
    example = library["How many patients are there?"]
    rita = make_user("rita", RESEARCHER)
    researcher = client_for(rita)
    assert researcher.get("/api/examples/").status_code == 200  # the page lets them browse too:
    assert researcher.get(f"/api/examples/{example.pk}/").status_code == 200
    client.force_login(rita)
    assert (
        client.get("/library/").status_code == 200
        and client.get(f"/library/{example.pk}/").status_code == 200
    )
    calls = [
        ("post", f"/api/examples/{example.pk}/retire/", {}),
        ("post", f"/api/examples/{example.pk}/restore/", {}),
        ("post", "/api/examples/import/", {"examples": [{"question": "How many?", "sql": ""}]}),
    ]
    for method, url, data in calls:
        response = (
            getattr(researcher, method)(url, data, format="json") if data is not None else researcher.get(url)
        )
        assert response.status_code == 403, (method, url)
    example.refresh_from_db()
    assert example.status == Example.Status.ACTIVE and Example.objects.count() == 3

    admin = client_for(make_user("ada", ADMIN))
    assert admin.get("/api/examples/").status_code == 200
    assert admin.post(f"/api/examples/{example.pk}/retire/").status_code == 200


@pytest.mark.parametrize(
    ("method", "url"),
    [("get", "/api/reviews/"), ("post", "/api/runs/1/review/"), ("get", "/api/examples/"),
     ("get", "/api/examples/1/"), ("post", "/api/examples/1/retire/"), ("post", "/api/examples/import/")],
)  # fmt: skip
def test_anonymous_clients_are_refused(method, url):
    assert getattr(APIClient(), method)(url).status_code in (401, 403)


def test_the_schema_documents_the_review_and_library_endpoints():
    schema = client_for(make_user("rev", REVIEWER)).get("/api/schema/", {"format": "json"}).json()
    paths = schema["paths"]
    assert "get" in paths["/api/reviews/"]
    assert {"200", "400", "403"} <= set(paths["/api/runs/{run_id}/review/"]["post"]["responses"])
    assert {p["name"] for p in paths["/api/examples/"]["get"]["parameters"]} >= {
        "q",
        "table",
        "kind",
        "status",
    }
    assert "post" in paths["/api/examples/{example_id}/retire/"] and "post" in paths["/api/examples/import/"]
    run_detail = schema["components"]["schemas"]["RunDetail"]["properties"]
    assert {"review_status", "reviews", "confidence", "answered_by", "example", "examples_used",
            "catalog_version", "model"} <= set(run_detail)  # fmt: skip
