"""The REST API (askdb/apis.py) over HTTP: permissions, the run lifecycle, results, tokens, limits.

Most tests leave submitted runs queued (no worker; on_commit never fires inside a test's
transaction) or write finished runs straight into the database; one test goes through the real
broker, worker and scripted LLM.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import time
from decimal import Decimal

import psycopg
import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from askdb.models import Question, Run, SqlAttempt, StageEvent
from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from infra import embedded
from infra.audit.models import AuditEvent
from tests.celery_worker import running_worker
from tests.factories import PASSWORD, make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

QUESTIONS = "/api/runs/"


@pytest.fixture(autouse=True)
def _fresh_throttle_history():
    # Throttle history lives in the default (local memory) cache, which outlives a test.
    cache.clear()
    yield
    cache.clear()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def detail_url(run: Run | int) -> str:
    return f"{QUESTIONS}{getattr(run, 'pk', run)}/"


def queued_run(user, source, text: str = "How many patients are there?") -> Run:
    return Run.objects.create(question=Question.objects.create(user=user, source=source, text=text))


COLUMNS = ["subject_id", "gender", "anchor_age"]
ROWS = [
    [10001, "F", 52],
    [10002, "M", None],
    [10003, "F", 71],
    [10004, "M", 19],
    [10005, None, 64],
]


def finished_run(user, source) -> Run:
    """A succeeded run as the worker would leave it, written directly."""
    now = timezone.now()
    run = Run.objects.create(
        question=Question.objects.create(user=user, source=source, text="Age and gender of five patients"),
        status=Run.Status.SUCCEEDED,
        outcome="answered",
        message="",
        started_at=now - dt.timedelta(seconds=3),
        finished_at=now,
        gate_category="answerable",
        gate_reason="the patients table holds this",
        retrieval={"tables": [{"table": "mimiciv_hosp.patients", "score": 0.61}], "values": []},
        sql="SELECT subject_id, gender, anchor_age FROM mimiciv_hosp.patients LIMIT 5",
        result_columns=COLUMNS,
        result_rows=ROWS,
        row_count=len(ROWS),
        summary="Five patients.",
        tokens_prompt=1200,
        tokens_completion=80,
        cost_usd=Decimal("0.001250"),
    )
    for offset, name in enumerate(["gate", "generate", "validate", "execute"]):
        StageEvent.objects.create(
            run=run, name=name, status=StageEvent.Status.OK,
            started_at=now - dt.timedelta(seconds=3 - offset), duration_ms=100.0 + offset, detail={"n": offset},
        )  # fmt: skip
    SqlAttempt.objects.create(
        run=run, number=1, sql="SELECT subject_id, sex FROM mimiciv_hosp.patients", origin="llm",
        valid=False, error_code="unknown_column", error="column `sex` does not exist; did you mean `gender`?",
    )  # fmt: skip
    SqlAttempt.objects.create(run=run, number=2, sql=run.sql, origin="repair", valid=True)
    return run


# --------------------------------------------------------------------------- anonymous clients

ANONYMOUS_CALLS = [
    ("get", QUESTIONS),
    ("post", QUESTIONS),
    ("get", f"{QUESTIONS}1/"),
    ("get", f"{QUESTIONS}1/result.csv"),
    ("post", f"{QUESTIONS}1/cancel/"),
    ("post", f"{QUESTIONS}1/retry/"),
    ("get", "/api/token/"),
    ("get", "/api/schema/"),
]


@pytest.mark.parametrize(("method", "url"), ANONYMOUS_CALLS)
def test_anonymous_clients_are_refused_everywhere(method, url):
    response = getattr(APIClient(), method)(url)
    assert response.status_code in (401, 403), f"{method} {url} answered {response.status_code}"


def test_anonymous_refusal_is_json_with_a_sentence(source):
    run = queued_run(make_user("owner", RESEARCHER), source)
    response = APIClient().get(detail_url(run))
    assert response.status_code in (401, 403)
    assert response.json() == {"error": "Authentication credentials were not provided."}


# --------------------------------------------------------------------------- asking and listing


def test_a_researcher_asks_and_finds_the_run_in_list_and_detail(source):
    researcher = make_user("rita", RESEARCHER)
    client = client_for(researcher)

    response = client.post(QUESTIONS, {"question": "  How many   patients are there? "}, format="json",
                           REMOTE_ADDR="10.1.2.3")  # fmt: skip
    assert response.status_code == 202
    body = response.json()
    run = Run.objects.get(pk=body["run"])
    assert body == {"run": run.pk, "status": "queued", "url": f"/api/runs/{run.pk}/"}
    assert response["Location"] == body["url"]
    assert run.status == Run.Status.QUEUED and run.question.user == researcher
    assert run.question.text == "How many patients are there?" and run.question.source == source
    asked = AuditEvent.objects.get(action="question.asked", target_id=str(run.pk))
    assert asked.actor == researcher and asked.ip == "10.1.2.3"

    listing = client.get(QUESTIONS).json()
    assert listing["count"] == 1
    assert listing["results"] == [
        {
            "run": run.pk,
            "question": "How many patients are there?",
            "user": "rita",
            "source": source.name,
            "status": "queued",
            "outcome": "",
            "outcome_text": {
                "code": "queued",
                "label": "Waiting",
                "tone": "info",
                "next_step": "",
                "sentence": "askdb has the question and will start on it in a moment.",
            },
            "created_at": listing["results"][0]["created_at"],
            "finished_at": None,
            "row_count": None,
        }
    ]

    detail = client.get(body["url"]).json()
    assert detail["run"] == run.pk and detail["status"] == "queued" and detail["user"] == "rita"
    assert detail["stages"] == [] and detail["attempts"] == [] and detail["result"] is None
    assert detail["gate"] == {"category": "", "label": "", "reason": "", "model_version": ""}
    assert detail["tokens"] == {"prompt": 0, "completion": 0}


def test_the_source_can_be_named_and_an_unknown_one_is_400(source):
    client = client_for(make_user("rita", RESEARCHER))
    named = client.post(QUESTIONS, {"question": "How many patients?", "source": source.name}, format="json")
    assert named.status_code == 202

    response = client.post(QUESTIONS, {"question": "How many patients?", "source": "nope"}, format="json")
    assert response.status_code == 400
    assert "no clinical source named 'nope'" in response.json()["error"].lower()
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    ("payload", "sentence"),
    [
        ({"question": ""}, "Please type a question (at least a few words)."),
        ({"question": " \t\n "}, "Please type a question (at least a few words)."),
        ({"question": "x" * 2001}, "The question is too long (2001 characters; at most 2000)."),
        ({}, "question: This field is required."),
    ],
)
def test_an_invalid_question_is_400_with_the_services_sentence(source, settings, payload, sentence):
    settings.ASKDB_QUESTION_MAX_CHARS = 2000
    response = client_for(make_user("rita", RESEARCHER)).post(QUESTIONS, payload, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == sentence
    assert not Run.objects.exists()


def test_a_user_without_a_role_may_list_but_not_ask(source):
    client = client_for(make_user("nobody"))
    assert client.get(QUESTIONS).json()["results"] == []
    response = client.post(QUESTIONS, {"question": "How many patients?"}, format="json")
    assert response.status_code == 403 and "no role" in response.json()["error"]
    assert not Run.objects.exists()


def test_runs_are_private_to_researchers_and_visible_to_reviewers(source):
    rita, sam = make_user("rita", RESEARCHER), make_user("sam", RESEARCHER)
    reviewer = make_user("vera", REVIEWER)
    ritas = queued_run(rita, source, "Rita asks about patients")
    sams = queued_run(sam, source, "Sam asks about admissions")
    veras = queued_run(reviewer, source, "Vera asks about labs")

    sam_client = client_for(sam)
    assert sam_client.get(detail_url(ritas)).status_code == 404
    assert sam_client.get(f"{detail_url(ritas)}result.csv").status_code == 404
    assert [r["run"] for r in sam_client.get(QUESTIONS).json()["results"]] == [sams.pk]
    assert client_for(rita).get(detail_url(sams)).status_code == 404
    # a run that does not exist looks exactly like one that is not yours
    missing = sam_client.get(detail_url(10**9))
    assert (
        missing.status_code == 404 and missing.json()["error"] == f"There is no run {10**9} that you can see."
    )
    assert (
        sam_client.get(detail_url(ritas)).json()["error"] == f"There is no run {ritas.pk} that you can see."
    )

    vera_client = client_for(reviewer)
    everyone = vera_client.get(QUESTIONS).json()
    assert [r["run"] for r in everyone["results"]] == [veras.pk, sams.pk, ritas.pk]  # newest first
    assert vera_client.get(detail_url(ritas)).json()["user"] == "rita"
    mine = vera_client.get(QUESTIONS, {"mine": "1"}).json()
    assert [r["run"] for r in mine["results"]] == [veras.pk]


def test_the_list_filters_by_search_and_status_and_pages(source):
    rita = make_user("rita", RESEARCHER)
    client = client_for(rita)
    done = finished_run(rita, source)
    waiting = queued_run(rita, source, "How many admissions were emergencies?")

    found = client.get(QUESTIONS, {"search": "EMERGENCIES"}).json()["results"]
    assert [r["run"] for r in found] == [waiting.pk]
    by_sql = client.get(QUESTIONS, {"search": "anchor_age"}).json()["results"]
    assert [r["run"] for r in by_sql] == [done.pk]
    succeeded = client.get(QUESTIONS, {"status": "succeeded"}).json()["results"]
    assert [(r["run"], r["outcome"], r["row_count"]) for r in succeeded] == [(done.pk, "answered", 5)]
    assert succeeded[0]["finished_at"] is not None

    bad = client.get(QUESTIONS, {"status": "exploded"})
    assert bad.status_code == 400 and bad.json()["error"].startswith("status:")

    for i in range(55):
        queued_run(rita, source, f"Question number {i}")
    first = client.get(QUESTIONS).json()
    assert first["count"] == 57 and len(first["results"]) == 50 and first["next"]
    assert len(client.get(QUESTIONS, {"page": 2}).json()["results"]) == 7


# --------------------------------------------------------------------------- results


def test_a_finished_run_shows_everything_and_a_sorted_page_of_its_result(source):
    rita = make_user("rita", RESEARCHER)
    run = finished_run(rita, source)
    client = client_for(rita)

    detail = client.get(detail_url(run)).json()
    assert detail["status"] == "succeeded" and detail["outcome"] == "answered"
    assert detail["gate"] == {"category": "answerable", "label": "answerable",
                              "reason": "the patients table holds this", "model_version": ""}  # fmt: skip
    assert detail["retrieval"]["tables"][0]["table"] == "mimiciv_hosp.patients"
    assert [s["name"] for s in detail["stages"]] == ["gate", "generate", "validate", "execute"]
    assert set(detail["stages"][0]) == {"name", "status", "started_at", "duration_ms", "detail"}
    assert detail["stages"][1]["duration_ms"] == 101.0 and detail["stages"][1]["detail"] == {"n": 1}
    assert detail["attempts"] == [
        {"number": 1, "sql": "SELECT subject_id, sex FROM mimiciv_hosp.patients", "origin": "llm",
         "valid": False, "error_code": "unknown_column",
         "error": "column `sex` does not exist; did you mean `gender`?"},
        {"number": 2, "sql": run.sql, "origin": "repair", "valid": True, "error_code": "", "error": ""},
    ]  # fmt: skip
    assert detail["sql"] == run.sql and detail["summary"] == "Five patients."
    assert detail["tokens"] == {"prompt": 1200, "completion": 80}
    assert Decimal(detail["cost_usd"]) == Decimal("0.00125")
    assert detail["result"] == {
        "columns": COLUMNS, "rows": ROWS, "page": 1, "pages": 1, "per_page": 50, "total": 5,
        "sort": "", "descending": False, "truncated": False,
    }  # fmt: skip

    page2 = client.get(detail_url(run), {"per_page": 2, "page": 2}).json()["result"]
    assert page2["rows"] == ROWS[2:4] and (page2["page"], page2["pages"], page2["total"]) == (2, 3, 5)

    by_id_desc = client.get(detail_url(run), {"sort": "subject_id", "desc": "1"}).json()["result"]
    assert [r[0] for r in by_id_desc["rows"]] == [10005, 10004, 10003, 10002, 10001]
    assert by_id_desc["sort"] == "subject_id" and by_id_desc["descending"] is True

    by_age = client.get(detail_url(run), {"sort": "anchor_age", "per_page": 3}).json()["result"]
    assert [r[2] for r in by_age["rows"]] == [19, 52, 64]

    assert client.get(detail_url(run), {"per_page": 0}).status_code == 400
    assert client.get(detail_url(run), {"page": "two"}).json()["error"].startswith("page:")


def test_the_csv_download_is_the_exact_stored_result(source):
    rita = make_user("rita", RESEARCHER)
    run = finished_run(rita, source)
    # An Accept header naming CSV must not trip DRF's content negotiation into a 406.
    response = client_for(rita).get(f"{detail_url(run)}result.csv", HTTP_ACCEPT="text/csv")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == f'attachment; filename="askdb-run-{run.pk}.csv"'
    text = b"".join(response.streaming_content).decode()
    assert list(csv.reader(io.StringIO(text))) == [
        COLUMNS,
        ["10001", "F", "52"],
        ["10002", "M", ""],
        ["10003", "F", "71"],
        ["10004", "M", "19"],
        ["10005", "", "64"],
    ]


def test_a_reviewer_may_download_another_users_csv(source):
    run = finished_run(make_user("rita", RESEARCHER), source)
    response = client_for(make_user("vera", REVIEWER)).get(f"{detail_url(run)}result.csv")
    assert response.status_code == 200 and b"".join(response.streaming_content).startswith(b"subject_id,")


def test_the_csv_of_a_run_without_a_result_is_409(source):
    rita = make_user("rita", RESEARCHER)
    client = client_for(rita)
    waiting = queued_run(rita, source)
    response = client.get(f"{detail_url(waiting)}result.csv")
    assert response.status_code == 409
    assert response.json() == {
        "error": f"Run {waiting.pk} is still queued; its result can be downloaded once it is answered."
    }

    failed = queued_run(rita, source)
    Run.objects.filter(pk=failed.pk).update(status=Run.Status.FAILED, outcome="sql_invalid")
    response = client.get(f"{detail_url(failed)}result.csv")
    assert response.status_code == 409 and "ended failed" in response.json()["error"]


# --------------------------------------------------------------------------- cancel and retry


def test_cancel_is_for_the_asker_or_an_admin(source):
    rita = make_user("rita", RESEARCHER)
    run = queued_run(rita, source)
    cancel = f"{detail_url(run)}cancel/"

    assert client_for(make_user("sam", RESEARCHER)).post(cancel).status_code == 404  # cannot see it
    refused = client_for(make_user("vera", REVIEWER)).post(cancel)  # can see it, may not stop it
    assert refused.status_code == 403 and "Only the person who asked" in refused.json()["error"]
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED

    rita_client = client_for(rita)
    response = rita_client.post(cancel)
    assert response.status_code == 200 and response.json() == {"cancelled": True}
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and run.outcome == "cancelled"
    assert AuditEvent.objects.filter(action="run.cancelled", target_id=str(run.pk), actor=rita).exists()
    assert rita_client.post(cancel).json() == {"cancelled": False}  # already ended

    other = queued_run(rita, source)
    admin = client_for(make_user("ada", ADMIN))
    assert admin.post(f"{detail_url(other)}cancel/").json() == {"cancelled": True}
    assert rita_client.get(f"{detail_url(other)}cancel/").status_code == 405


def test_retry_queues_a_new_run_of_an_ended_one(source):
    rita = make_user("rita", RESEARCHER)
    rita_client = client_for(rita)
    run = queued_run(rita, source)
    retry = f"{detail_url(run)}retry/"

    still_queued = rita_client.post(retry)
    assert still_queued.status_code == 409 and "still queued" in still_queued.json()["error"]

    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, outcome="worker_lost")
    assert client_for(make_user("sam", RESEARCHER)).post(retry).status_code == 404
    assert client_for(make_user("vera", REVIEWER)).post(retry).status_code == 403

    response = rita_client.post(retry, REMOTE_ADDR="10.9.8.7")
    assert response.status_code == 202
    new = Run.objects.get(pk=response.json()["run"])
    assert response.json() == {"run": new.pk, "status": "queued", "url": f"/api/runs/{new.pk}/"}
    assert new.pk != run.pk and new.question_id == run.question_id and new.status == Run.Status.QUEUED
    assert AuditEvent.objects.get(action="run.retried", target_id=str(new.pk)).ip == "10.9.8.7"

    Run.objects.filter(pk=new.pk).update(status=Run.Status.CANCELLED)
    by_admin = client_for(make_user("ada", ADMIN)).post(f"{detail_url(new)}retry/")
    assert by_admin.status_code == 202 and Run.objects.filter(question=run.question).count() == 3


# --------------------------------------------------------------------------- tokens, schema, limits


def test_a_token_from_username_and_password_opens_the_api(source):
    rita = make_user("rita", RESEARCHER)
    run = finished_run(rita, source)
    anonymous = APIClient()

    wrong = anonymous.post("/api/token/", {"username": "rita", "password": "nope"}, format="json")
    assert wrong.status_code == 400 and wrong.json()["error"] == "Unable to log in with provided credentials."

    response = anonymous.post("/api/token/", {"username": "rita", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    assert anonymous.post("/api/token/", {"username": "rita", "password": PASSWORD}).json()["token"] == token
    assert AuditEvent.objects.filter(action="auth.token", actor=rita).count() == 2

    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert [r["run"] for r in script.get(QUESTIONS).json()["results"]] == [run.pk]
    download = script.get(f"{detail_url(run)}result.csv")
    assert download.status_code == 200 and b"".join(download.streaming_content).startswith(b"subject_id,")
    asked = script.post(QUESTIONS, {"question": "How many patients are there?"}, format="json")
    assert asked.status_code == 202  # token clients need no CSRF token

    script.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert script.get(QUESTIONS).status_code in (401, 403)


def test_the_openapi_schema_documents_every_endpoint():
    client = client_for(make_user("rita", RESEARCHER))
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    assert {"post", "get"} <= set(paths["/api/runs/"])
    assert "get" in paths["/api/runs/{run_id}/"]
    assert "text/csv" in paths["/api/runs/{run_id}/result.csv"]["get"]["responses"]["200"]["content"]
    assert "post" in paths["/api/runs/{run_id}/cancel/"]
    assert "202" in paths["/api/runs/{run_id}/retry/"]["post"]["responses"]
    assert "post" in paths["/api/token/"]
    assert "result" in schema["components"]["schemas"]["RunDetail"]["properties"]
    assert client.get("/api/docs/").status_code == 200


def test_too_many_requests_are_throttled_per_user(source, monkeypatch):
    # The rates are read once, when DRF loads; patch the class, not the settings.
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "3/minute"})
    rita, sam = client_for(make_user("rita", RESEARCHER)), client_for(make_user("sam", RESEARCHER))
    assert [rita.get(QUESTIONS).status_code for _ in range(3)] == [200, 200, 200]
    throttled = rita.get(QUESTIONS)
    assert throttled.status_code == 429 and "throttled" in throttled.json()["error"]
    assert int(throttled["Retry-After"]) > 0
    assert sam.get(QUESTIONS).status_code == 200  # the limit is per user


# --------------------------------------------------------------------------- end to end


@pytest.fixture
def llm(scripted_llm):
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when("You write one", Reply("SELECT count(*) AS n FROM mimiciv_hosp.patients"))
    scripted_llm.when("You explain the result", Reply("Forty."))
    return scripted_llm


@pytest.mark.django_db(transaction=True)
def test_a_question_asked_over_http_is_answered_by_a_worker_and_downloaded(source, llm):
    client = client_for(make_user("rita", RESEARCHER))
    with running_worker():
        asked = client.post(QUESTIONS, {"question": "How many patients are there?"}, format="json")
        assert asked.status_code == 202
        url = asked.json()["url"]
        deadline = time.monotonic() + 30
        while (detail := client.get(url).json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, f"run still {detail['status']} after 30 s"
            time.sleep(0.2)

    assert detail["status"] == "succeeded", detail["message"]
    assert (
        detail["summary"] == "Forty."
        and detail["sql"] == "SELECT COUNT(*) AS n FROM mimiciv_hosp.patients"  # generated from the tree
    )
    assert detail["gate"] == {
        "category": "answerable",
        "label": "answerable",
        "reason": "ok",
        "model_version": "",
    }
    assert "execute" in [s["name"] for s in detail["stages"]] and detail["attempts"][0]["valid"]
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        patients = conn.execute("SELECT count(*) FROM mimiciv_hosp.patients").fetchone()[0]
    assert detail["result"]["columns"] == ["n"] and detail["result"]["rows"] == [[patients]]

    download = client.get(f"{url}result.csv")
    assert download.status_code == 200
    rows = list(csv.reader(io.StringIO(b"".join(download.streaming_content).decode())))
    assert rows == [["n"], [str(patients)]]
