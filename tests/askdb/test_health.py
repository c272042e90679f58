"""/healthz reports every part; system checks explain misconfiguration with stable ids."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from askdb import checks
from askdb.roles import ADMIN, RESEARCHER
from infra import embedded
from tests.celery_worker import running_worker
from tests.factories import make_user

pytestmark = pytest.mark.django_db


PARTS = {"app_database", "clinical_database", "broker", "worker", "llm"}


# A real worker's start-up closes this thread's connections: outside a test transaction.
@pytest.mark.django_db(transaction=True)
def test_anonymous_healthz_shows_status_only(client, settings, scripted_llm):
    with running_worker():
        # A worker just started may miss the first broadcast on a loaded machine: ask again.
        for _ in range(5):
            response = client.get("/healthz")
            if response.status_code == 200:
                break
    body = response.content.decode()
    report = json.loads(body)
    assert set(report) == {"ok", "status", "components", "down"}
    assert report["down"] == [] and response.status_code == 200
    assert set(report["components"]) == PARTS
    assert set(report["components"].values()) <= {"ok", "down"}
    assert report["components"]["app_database"] == "ok"
    assert report["status"] in ("ok", "degraded") and report["ok"] is True
    # nothing that names an endpoint, a database, a role or a host
    for secret in (scripted_llm.base_url, "127.0.0.1", "askdb_clinical", "askdb_reader", "pgvector", "@"):
        assert secret not in body


def test_healthz_details_with_the_token(client, settings):
    settings.ASKDB_HEALTHZ_TOKEN = "s3cret-monitoring-token"
    assert "detail" not in client.get("/healthz", HTTP_AUTHORIZATION="Bearer wrong").content.decode()
    report = json.loads(client.get("/healthz", HTTP_AUTHORIZATION="Bearer s3cret-monitoring-token").content)
    assert "pgvector" in report["app_database"]["detail"]


def test_healthz_details_for_admins_only(client):
    make_user("rita", RESEARCHER)
    client.force_login(make_user("root", ADMIN))
    assert "detail" in json.loads(client.get("/healthz").content)["app_database"]
    client.force_login(get_user_model().objects.get(username="rita"))
    assert "components" in json.loads(client.get("/healthz").content)


# A real worker's start-up closes this thread's connections: outside a test transaction.
@pytest.mark.django_db(transaction=True)
def test_healthz_reports_each_part_to_an_admin(client):
    client.force_login(make_user("root", ADMIN))
    with running_worker():
        response = client.get("/healthz")
    report = json.loads(response.content)
    assert set(report) >= {
        "ok",
        "app_database",
        "clinical_database",
        "broker",
        "worker",
        "llm",
        "llm_configured",
    }
    assert report["app_database"]["ok"] and "pgvector" in report["app_database"]["detail"]
    assert report["clinical_database"]["ok"]
    assert report["broker"]["ok"]
    assert report["ok"] is True and response.status_code == 200


def test_healthz_says_plainly_when_no_llm_is_configured(client, settings):
    settings.LLM_MODEL = ""
    client.force_login(make_user("root", ADMIN))
    report = json.loads(client.get("/healthz").content)
    assert report["llm_configured"] is False
    assert "LLM_BASE_URL" in report["llm"]["detail"]


def test_healthz_is_503_and_names_the_worker_when_no_worker_consumes_the_queue(client):
    # The broker is up and takes questions, but nobody would ever answer them.
    response = client.get("/healthz")
    report = json.loads(response.content)
    assert response.status_code == 503 and report["ok"] is False
    assert report["down"] == ["worker"]
    assert report["components"]["worker"] == "down" and report["components"]["broker"] == "ok"
    client.force_login(make_user("root", ADMIN))
    assert json.loads(client.get("/healthz").content)["worker"]["detail"] == "no worker answered"


def test_healthz_is_503_when_the_broker_is_down(client, settings):
    settings.CELERY_BROKER_URL = "redis+socket:///nonexistent/redis.sock"
    from config.celery import app

    app.conf.broker_url = settings.CELERY_BROKER_URL
    try:
        response = client.get("/healthz")
    finally:
        app.conf.broker_url = embedded.redis_url()
    assert response.status_code == 503
    assert json.loads(response.content)["components"]["broker"] == "down"


def test_configured_system_passes_checks():
    assert checks.check_app_database() == []
    assert checks.check_clinical_database() == []
    assert checks.check_state_folder() == []


def test_clinical_role_that_can_write_is_an_error(settings):
    settings.CLINICAL_DATABASE_URL = embedded.pg_dsn(embedded.CLINICAL_DB)  # the superuser
    errors = checks.check_clinical_database()
    assert [e.id for e in errors] == ["askdb.E002"]
    assert "write" in errors[0].msg
    with pytest.raises(SystemCheckError, match=r"askdb\.E002"):
        call_command("check")


def test_unreachable_clinical_database_is_an_error(settings):
    settings.CLINICAL_DATABASE_URL = "postgresql://nobody@/nowhere?host=/nonexistent"
    assert [e.id for e in checks.check_clinical_database()] == ["askdb.E004"]


def test_missing_state_folder_is_an_error(settings, tmp_path):
    settings.ASKDB_HOME = tmp_path / "missing"
    assert [e.id for e in checks.check_state_folder()] == ["askdb.E003"]


def test_unreachable_broker_is_a_warning(settings):
    from config.celery import app

    app.conf.broker_url = "redis+socket:///nonexistent/redis.sock"
    try:
        warnings = checks.check_broker()
    finally:
        app.conf.broker_url = embedded.redis_url()
    assert [w.id for w in warnings] == ["askdb.W001"]
