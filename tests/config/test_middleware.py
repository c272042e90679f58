"""The app database out of reach or out of connections: 503 with a sentence (JSON on the API, a page
elsewhere), never a 500 and never Django's debug page, against real web processes."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from rest_framework.authtoken.models import Token

from infra import embedded
from tests.celery_worker import database_url_for_tests
from tests.factories import make_user
from tests.web_process import request, web_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DEBUG_MARKERS = (b"Traceback", b"DEBUG = True", b"technical_500", b"Request Method")


def test_postgresql_stopped_is_a_503_page_and_a_json_503_on_the_api_even_with_debug_on(tmp_path):
    down = {
        "DATABASE_URL": f"postgresql://{embedded.APP_ROLE}@/askdb?host=/nonexistent-askdb-socket-dir",
        "DJANGO_DEBUG": "1",
    }
    with web_process(tmp_path / "web.log", down, settings="config.settings.local") as url:
        status, headers, body = request(
            url + "/", headers={"Cookie": "sessionid=abcdefghijklmnopqrstuvwxyz012345"}
        )
        assert status == 503, body[:500]
        assert b"not reachable" in body and headers.get("Retry-After")
        assert not any(marker in body for marker in DEBUG_MARKERS), body[:500]

        status, headers, body = request(
            url + "/api/runs/",
            method="POST",
            headers={"Authorization": "Token 0123456789abcdef", "Content-Type": "application/json"},
            body=b'{"question": "How many patients are there?"}',
        )
        assert status == 503 and headers["Content-Type"] == "application/json", body[:500]
        assert "not reachable" in json.loads(body)["error"]


@pytest.fixture
def limited_role():
    """A login role that inherits the app role's grants but may hold only 3 connections."""
    name = f"askdb_burst_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN CONNECTION LIMIT 3 IN ROLE "{embedded.APP_ROLE}"')
    try:
        yield name
    finally:
        with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')


def _burst(url: str, token: str, n: int, at_once: int = 10) -> list[tuple[int, dict, bytes]]:
    """n questions, at_once at a time (the development server queues at most 10 connections)."""
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def ask(i: int):
        return request(
            url + "/api/runs/",
            method="POST",
            headers=headers,
            body=json.dumps({"question": f"How many patients are older than {i}?"}).encode(),
        )

    with ThreadPoolExecutor(max_workers=at_once) as pool:
        return list(pool.map(ask, range(n)))


@pytest.mark.parametrize("pooled", [True, False], ids=["pool", "no-pool"])
def test_a_burst_of_api_questions_gets_answers_or_503s_never_a_500(source, tmp_path, limited_role, pooled):
    user = make_user("burst", "researcher")
    token = Token.objects.create(user=user).key
    env = {"DATABASE_URL": database_url_for_tests(limited_role), "DJANGO_DEBUG": "1"}
    if pooled:  # the pool stays under the role's limit: a burst waits its turn, or gets a JSON 503
        env |= {"DATABASE_POOL": "1", "DATABASE_POOL_MAX_SIZE": "2", "DATABASE_POOL_TIMEOUT": "20"}
    else:  # a connection per request: PostgreSQL refuses the 4th, and that must be a 503, not a 500
        env |= {"DATABASE_POOL": "0", "DATABASE_CONN_MAX_AGE": "0"}
    with web_process(tmp_path / "web.log", env, settings="config.settings.local") as url:
        replies = _burst(url, token, 24)
    statuses = sorted(status for status, _, _ in replies)
    assert set(statuses) <= {201, 202, 429, 503}, statuses
    for status, headers, body in replies:
        assert headers["Content-Type"] == "application/json", body[:300]
        if status == 503:
            assert "try again" in json.loads(body)["error"].lower()
    if pooled:  # the burst waited its turn (how many wait too long depends on the machine: no count)
        assert 202 in statuses, statuses
    else:
        assert 503 in statuses, statuses  # the limit was really hit
