"""The HTML sign-in locks a username from one address after repeated wrong passwords (django-axes),
says so plainly, and audits it; the API token endpoint keeps its own throttle."""

from __future__ import annotations

import pytest

from askdb.roles import RESEARCHER
from infra.audit.models import AuditEvent
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db
LOGIN = "/accounts/login/"


def _attempt(client, password, username="carol", ip="10.0.0.7"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_the_right_password_after_the_limit_is_refused(client, settings):
    make_user("carol", RESEARCHER)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _attempt(client, "wrong").status_code == 200  # the form again, with its error
    locked = _attempt(client, "wrong")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Sign-in locked" in page and "carol" in page and "Try again in 15 minutes" in page
    # the probe: 40 wrong passwords, then the right one
    for _ in range(30):
        assert _attempt(client, "wrong").status_code == 429
    assert _attempt(client, PASSWORD).status_code == 429
    assert client.get("/").status_code == 302  # not signed in
    event = AuditEvent.objects.get(action="auth.locked_out")
    assert "carol" in event.message and event.ip == "10.0.0.7"


def test_the_lock_is_per_username_and_address(client, settings):
    make_user("carol", RESEARCHER)
    make_user("dave", RESEARCHER)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _attempt(client, "wrong")
    assert _attempt(client, PASSWORD).status_code == 429
    # the same user from another address, and another user from this one, still sign in
    assert _attempt(client, PASSWORD, ip="10.0.0.8").status_code == 302
    client.post("/accounts/logout/")
    assert _attempt(client, PASSWORD, username="dave").status_code == 302


def test_a_success_before_the_limit_resets_the_count(client, settings):
    make_user("carol", RESEARCHER)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _attempt(client, "wrong")
    assert _attempt(client, PASSWORD).status_code == 302
    client.post("/accounts/logout/")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _attempt(client, "wrong").status_code == 200


def test_a_locked_username_gets_no_api_token_either(client, settings):
    from rest_framework.throttling import UserRateThrottle

    from askdb.apis import TokenObtainApi

    assert TokenObtainApi.throttle_classes == [UserRateThrottle]  # its own rate limit stays
    make_user("carol", RESEARCHER)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _attempt(client, "wrong")
    response = client.post("/api/token/", {"username": "carol", "password": PASSWORD}, REMOTE_ADDR="10.0.0.7")
    assert response.status_code != 200 and "token" not in response.content.decode()
