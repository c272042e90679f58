"""The REST API's contract (askdb/apis.py, askdb/api_urls.py): every error is JSON, a call without
credentials is a 401 that says how to authenticate, a body is read before anything changes, and
the OpenAPI schema states what the server enforces.

Each guard is attacked with the request that got around it before: an id that is not a number,
a page past the end, a path without its slash, a garbage multipart body, an unknown review filter.
"""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from askdb.models import Example, Question, Run
from askdb.roles import RESEARCHER, REVIEWER
from askdb.services.exports import examples_import
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db

COUNT_SQL = "SELECT COUNT(*) AS patients FROM mimiciv_hosp.patients"


@pytest.fixture(autouse=True)
def _fresh_throttle_history():
    cache.clear()
    yield
    cache.clear()


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def example(source) -> Example:
    report = examples_import(
        source=source, items=[{"id": "a", "question": "How many patients?", "sql": COUNT_SQL}]
    )
    assert not report.failed
    return Example.objects.get()


def assert_json_error(response, code: int) -> dict:
    assert response.status_code == code, (response.status_code, response.content[:200])
    assert "json" in response["Content-Type"], response["Content-Type"]  # the schema's is openapi+json
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    return body


# --------------------------------------------------------------------------- JSON for every status


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/runs/abc/"),
        ("get", "/api/runs/1.5/result.csv"),
        ("post", "/api/runs/-1/cancel/"),
        ("get", "/api/examples/%20/"),
        ("post", "/api/examples/x/retire/"),
        ("get", "/api/examples/imports/nope/"),
        ("get", "/api/requests/abc/"),
        ("get", "/api/no-such-endpoint/"),
        ("delete", "/api/runs/abc/"),
    ],
)
def test_a_path_no_route_matches_is_the_apis_json_404_not_djangos_html(method, url):
    user = make_user("rev", REVIEWER)
    body = assert_json_error(getattr(token_client(user), method)(url), 404)
    assert "There is no API endpoint" in body["error"]
    # Anonymous callers get the same JSON 404: it says nothing about any record.
    assert_json_error(getattr(APIClient(), method)(url), 404)


@pytest.mark.parametrize("page", ["abc", "0", "999", "-3", "1e3"])
@pytest.mark.parametrize("url", ["/api/runs/", "/api/reviews/", "/api/examples/"])
def test_a_bad_page_number_is_a_json_404(source, url, page):
    client = token_client(make_user("rev", REVIEWER))
    assert_json_error(client.get(url, {"page": page}), 404)


def test_the_schema_and_docs_still_answer_past_the_catch_all():
    client = token_client(make_user("rev", REVIEWER))
    assert client.get("/api/schema/", {"format": "json"}).json()["openapi"].startswith("3.")
    response = APIClient()
    response.force_login(make_user("ana", RESEARCHER))
    assert response.get("/api/docs/").status_code == 200


def test_a_path_without_its_slash_is_redirected_for_reads_and_refused_in_json_for_writes(source):
    client = token_client(make_user("rita", RESEARCHER))
    redirect = client.get("/api/runs")
    assert redirect.status_code == 301 and redirect["Location"].endswith("/api/runs/")
    body = assert_json_error(client.post("/api/runs", {"question": "How many patients?"}, format="json"), 404)
    assert "did you mean /api/runs/?" in body["error"]
    assert not Run.objects.exists()


def test_options_on_an_unknown_path_is_a_json_404_too():
    assert_json_error(token_client(make_user("rita", RESEARCHER)).options("/api/runs/abc/"), 404)


def test_a_method_the_endpoint_lacks_is_a_json_405():
    assert_json_error(token_client(make_user("rita", RESEARCHER)).delete("/api/runs/"), 405)


# --------------------------------------------------------------------------- 401 with WWW-Authenticate


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/runs/"),
        ("post", "/api/runs/"),
        ("get", "/api/runs/1/"),
        ("get", "/api/runs/1/result.csv"),
        ("post", "/api/runs/1/cancel/"),
        ("get", "/api/reviews/"),
        ("post", "/api/examples/1/retire/"),
        ("post", "/api/examples/import/"),
        ("get", "/api/requests/"),
        ("get", "/api/inbox/"),
        ("get", "/api/token/"),
        ("get", "/api/schema/?format=json"),  # without a format it answers in its own YAML type
    ],
)
def test_a_call_without_credentials_is_401_with_www_authenticate(method, url):
    response = getattr(APIClient(), method)(url)
    body = assert_json_error(response, 401)
    assert response["WWW-Authenticate"] == "Token"
    assert body == {"error": "Authentication credentials were not provided."}


def test_a_wrong_token_is_401_too_and_a_right_one_or_a_session_gets_in(source):
    user = make_user("rita", RESEARCHER)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Token 0000000000000000000000000000000000000000")
    response = wrong.get("/api/runs/")
    assert_json_error(response, 401)
    assert response["WWW-Authenticate"] == "Token"
    assert token_client(user).get("/api/runs/").status_code == 200
    session = APIClient()
    session.force_login(user)  # the browsable pages and the docs still sign in by session
    assert session.get("/api/runs/").status_code == 200


def test_the_token_endpoint_gives_a_token_that_works(source):
    user = make_user("rita", RESEARCHER)
    token = (
        APIClient()
        .post("/api/token/", {"username": "rita", "password": PASSWORD}, format="json")
        .json()["token"]
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/runs/").status_code == 200
    assert Token.objects.get(user=user).key == token


@pytest.mark.parametrize(
    "credentials", [{"username": "", "password": PASSWORD}, {"username": "rita", "password": ""}]
)
def test_blank_credentials_are_a_json_400(credentials):
    make_user("rita", RESEARCHER)
    assert_json_error(APIClient().post("/api/token/", credentials, format="json"), 400)


# --------------------------------------------------------------------------- bodies read before any change

GARBAGE = b"\x00\xffthis is not a multipart body at all\r\n--\r\n"


@pytest.mark.parametrize(
    "content_type",
    [
        "multipart/form-data; boundary=xyz",  # a boundary that never occurs: Django reads "no parts"
        "multipart/form-data",  # no boundary at all
        "multipart/form-data; boundary=",
    ],
)
@pytest.mark.parametrize("action", ["retire", "restore"])
def test_a_garbage_multipart_body_to_retire_or_restore_is_400_and_changes_nothing(
    example, action, content_type
):
    if action == "restore":
        Example.objects.filter(pk=example.pk).update(status=Example.Status.RETIRED)
    before = Example.objects.get(pk=example.pk).status
    client = token_client(make_user("rev", REVIEWER))
    response = client.generic(
        "POST", f"/api/examples/{example.pk}/{action}/", GARBAGE, content_type=content_type
    )
    assert_json_error(response, 400)
    assert Example.objects.get(pk=example.pk).status == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"this is not a form", "application/x-www-form-urlencoded"),  # reads as {"this is not a form": ""}
        (b'{"notes": "typo"}', "application/json"),
        (b"[1, 2]", "application/json"),  # not an object at all
    ],
)
def test_a_body_of_unknown_fields_to_retire_is_400_and_changes_nothing(example, body, content_type):
    client = token_client(make_user("rev", REVIEWER))
    response = client.generic("POST", f"/api/examples/{example.pk}/retire/", body, content_type=content_type)
    assert_json_error(response, 400)
    assert Example.objects.get(pk=example.pk).status == Example.Status.ACTIVE


def test_well_formed_bodies_still_work_empty_json_and_no_body_included(example):
    client = token_client(make_user("rev", REVIEWER))
    assert client.post(f"/api/examples/{example.pk}/retire/", {}, format="json").json()["status"] == "retired"
    assert client.post(f"/api/examples/{example.pk}/restore/").json()["status"] == "active"
    form = client.post(f"/api/examples/{example.pk}/retire/", {"note": "old"}, format="multipart")
    assert form.status_code == 200 and form.json()["note"] == "old"


def test_a_garbage_multipart_question_or_review_changes_nothing(source):
    asker = make_user("rita", RESEARCHER)
    client = token_client(asker)
    response = client.generic("POST", "/api/runs/", GARBAGE, content_type="multipart/form-data; boundary=b")
    assert_json_error(response, 400)
    assert not Question.objects.exists()
    run = Run.objects.create(
        question=Question.objects.create(user=asker, source=source, text="How many patients?"),
        status=Run.Status.SUCCEEDED, sql=COUNT_SQL, review_status=Run.Review.PENDING,
    )  # fmt: skip
    reviewer = token_client(make_user("rev", REVIEWER))
    response = reviewer.generic(
        "POST", f"/api/runs/{run.pk}/review/", GARBAGE, content_type="multipart/form-data; boundary=b"
    )
    assert_json_error(response, 400)
    run.refresh_from_db()
    assert run.review_status == Run.Review.PENDING and not run.reviews.exists()


def test_an_empty_import_is_refused_before_anything(source):
    client = token_client(make_user("rev", REVIEWER))
    body = assert_json_error(client.post("/api/examples/import/", {"examples": []}, format="json"), 400)
    assert body["fields"] == {"examples": ["the list is empty; send at least one example."]}


# --------------------------------------------------------------------------- the review queue's filters


def test_the_review_queue_filters_are_validated_and_applied(source):
    asker = make_user("rita", RESEARCHER)
    reviewer = make_user("rev", REVIEWER)
    mine = Run.objects.create(
        question=Question.objects.create(user=asker, source=source, text="How many patients?"),
        status=Run.Status.SUCCEEDED, sql=COUNT_SQL, review_status=Run.Review.PENDING, assigned_to=reviewer,
    )  # fmt: skip
    Run.objects.create(
        question=Question.objects.create(user=asker, source=source, text="How many women?"),
        status=Run.Status.SUCCEEDED, sql=COUNT_SQL, review_status=Run.Review.APPROVED,
    )  # fmt: skip
    client = token_client(reviewer)

    def runs(**params) -> list[int]:
        response = client.get("/api/reviews/", params)
        assert response.status_code == 200, response.json()
        return [r["run"] for r in response.json()["results"]]

    assert runs() == [mine.pk] and runs(status="") == [mine.pk]
    assert len(runs(status="all")) == 2
    assert runs(mine="true") == [mine.pk] and runs(mine="1") == [mine.pk]
    assert runs(user="RITA") == [mine.pk] and runs(user="nobody") == []
    assert runs(source=source.name) == [mine.pk] and runs(source="elsewhere") == []
    assert runs(table="mimiciv_hosp.patients") == [mine.pk] and runs(table="mimiciv_icu.icustays") == []
    # Before, an unknown status silently showed the pending queue and "mine=yes" was ignored.
    body = assert_json_error(client.get("/api/reviews/", {"status": "done"}), 400)
    assert body["error"].startswith("status:")
    assert_json_error(client.get("/api/reviews/", {"mine": "maybe"}), 400)


# --------------------------------------------------------------------------- the schema states the rules


@pytest.fixture
def schema() -> dict:
    return token_client(make_user("rev", REVIEWER)).get("/api/schema/", {"format": "json"}).json()


def _params(schema: dict, path: str, method: str = "get") -> dict[str, dict]:
    return {p["name"]: p for p in schema["paths"][path][method].get("parameters", [])}


def _request_schema(schema: dict, path: str) -> dict:
    ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def _enum(schema: dict, param: dict) -> set:
    spec = param["schema"]
    if "$ref" in spec:
        spec = schema["components"]["schemas"][spec["$ref"].rsplit("/", 1)[-1]]
    return {value for value in spec.get("enum", []) if value is not None}


def test_the_schema_lists_every_review_queue_filter_with_its_values(schema):
    params = _params(schema, "/api/reviews/")
    assert {"page", "status", "source", "user", "table", "mine"} <= set(params)
    assert _enum(schema, params["status"]) - {""} == {"pending", "approved", "corrected", "flagged", "all"}
    assert params["mine"]["schema"]["type"] == "boolean"


def test_the_schema_lists_kind_and_status_values_of_the_library_filters(schema):
    params = _params(schema, "/api/examples/")
    assert _enum(schema, params["kind"]) >= set(Example.Kind.values)
    assert _enum(schema, params["status"]) >= {*Example.Status.values, "all"}


@override_settings(ASKDB_QUESTION_MAX_CHARS=2000)
def test_the_schema_states_the_question_length_nonblank_credentials_and_a_nonempty_import(schema, settings):
    question = _request_schema(schema, "/api/runs/")["properties"]["question"]
    assert question["maxLength"] == settings.ASKDB_QUESTION_MAX_CHARS
    token = _request_schema(schema, "/api/token/")
    assert (
        token["properties"]["username"]["minLength"] == 1
        and token["properties"]["password"]["minLength"] == 1
    )
    assert {"username", "password"} <= set(token["required"])
    assert _request_schema(schema, "/api/examples/import/")["properties"]["examples"]["minItems"] == 1


def test_a_question_longer_than_the_schema_allows_is_refused(source, settings):
    client = token_client(make_user("rita", RESEARCHER))
    too_long = "How many patients " + "a" * settings.ASKDB_QUESTION_MAX_CHARS
    assert_json_error(client.post("/api/runs/", {"question": too_long}, format="json"), 400)
    assert not Question.objects.exists()


def test_list_endpoints_document_their_404_for_a_bad_page(schema):
    for path in ("/api/runs/", "/api/reviews/", "/api/examples/"):
        assert "404" in schema["paths"][path]["get"]["responses"], path
