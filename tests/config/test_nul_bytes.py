"""A NUL character (\\x00) is refused with a sentence wherever input enters: every page and API
route (form fields, JSON bodies, query strings), imported files (page, API, command) and the
services commands use. PostgreSQL's text cannot hold one: before, a NUL gave a 500."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from askdb.models import Example, Run
from askdb.roles import ADMIN
from askdb.services.runs import QuestionError, question_submit
from tests.factories import make_user
from tests.test_urls import PATTERNS, _concrete

pytestmark = pytest.mark.django_db

SENTENCE = "contains a NUL character (\\x00)"
FIELDS = {"question": "How many\x00 patients?", "sql": "SELECT 1\x00", "note": "ok\x00", "text": "a\x00b"}
ROUTES = [(pattern, name) for pattern, name in PATTERNS if not pattern.startswith("static")]


@pytest.mark.parametrize(("pattern", "name"), ROUTES, ids=[p for p, _ in ROUTES])
def test_every_route_refuses_a_nul_in_a_form_field(client, pattern, name):
    client.force_login(make_user("root", ADMIN))
    response = client.post(_concrete(pattern), {"question": "How many\x00 patients?"})
    assert response.status_code == 400, (pattern, response.status_code)
    is_json = response["Content-Type"] == "application/json"
    text = response.json()["error"] if is_json else response.content.decode()
    assert SENTENCE in text and "question" in text


@pytest.mark.parametrize(("pattern", "name"), [r for r in ROUTES if r[0].startswith("api/")])
def test_every_api_route_refuses_a_nul_in_a_json_body(pattern, name):
    api = APIClient()
    api.force_authenticate(make_user("root", ADMIN))
    response = api.post("/" + _concrete(pattern).lstrip("/"), FIELDS, format="json")
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert SENTENCE in response.json()["error"]


def test_a_nul_in_a_query_string_is_refused(client):
    client.force_login(make_user("root", ADMIN))
    response = client.get("/runs/", {"q": "x\x00"})
    assert response.status_code == 400 and SENTENCE in response.content.decode()


def test_the_ask_form_and_the_api_store_nothing(client, source):
    user = make_user("rita", "researcher")
    client.force_login(user)
    assert client.post("/", {"question": "How many\x00 patients?"}).status_code == 400
    api = APIClient()
    api.force_authenticate(user)
    response = api.post("/api/runs/", {"question": "How many\x00 patients?"}, format="json")
    assert response.status_code == 400 and SENTENCE in response.json()["error"]
    assert not Run.objects.exists()
    with pytest.raises(QuestionError, match="NUL"):  # the service too (the `ask` command uses it)
        question_submit(user=user, text="How many\x00 patients?", source=source)


def test_an_api_import_with_a_nul_imports_nothing(source):
    api = APIClient()
    api.force_authenticate(make_user("root", ADMIN))
    examples = [{"question": "How many patients?", "sql": "SELECT count(*) FROM mimiciv_hosp.patients\x00"}]
    response = api.post("/api/examples/import/", {"examples": examples}, format="json")
    assert response.status_code == 400 and SENTENCE in response.json()["error"]
    assert not Example.objects.exists()


def test_an_uploaded_file_with_a_nul_is_refused_with_the_sentence(client, source):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(make_user("root", ADMIN))
    body = json.dumps([{"question": "How many\x00 patients?", "sql": "SELECT 1"}]).encode()
    upload = SimpleUploadedFile("lib.json", body, content_type="application/json")
    response = client.post("/library/import/", {"file": upload})
    assert response.status_code == 400
    assert SENTENCE in response.content.decode() and "lib.json" in response.content.decode()
    assert not Example.objects.exists()


def test_import_examples_refuses_a_file_with_a_nul(source, tmp_path):
    path = tmp_path / "lib.json"
    path.write_text(json.dumps([{"question": "How many patients?", "sql": "SELECT 1", "id": "a\x00"}]))
    with pytest.raises(CommandError, match="NUL"):
        call_command("import_examples", str(path))
    assert not Example.objects.exists()
