"""The users page for admins (askdb/views_users.py, askdb/services/users.py): create with a role and
a one-time password, change a role, deactivate and restore, each audited with its actor; and the
guards: only admins, no self-lockout, never the last admin, a superuser only by a superuser."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from askdb.roles import ADMIN, AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER, user_role
from infra.audit.models import AuditEvent
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def admin(client):
    boss = make_user("boss", ADMIN)
    client.force_login(boss)
    return boss


def _signs_in(client, username: str, password: str) -> bool:
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302


def _messages(response) -> str:
    return " ".join(str(m) for m in response.context["messages"]) if response.context else ""


def test_an_admin_adds_a_person_who_signs_in_with_the_one_time_password(client, admin):
    page = client.get("/users/")
    assert page.status_code == 200 and b"Add a person" in page.content and b"boss" in page.content

    response = client.post("/users/new/", {"username": "nadia", "email": "nadia@example.org",
                                           "role": REVIEWER}, follow=True)  # fmt: skip
    said = _messages(response)
    password = re.search(r"one-time password (\S+)", said).group(1)
    nadia = User.objects.get(username="nadia")
    assert user_role(nadia) == REVIEWER and not nadia.is_staff and nadia.email == "nadia@example.org"
    event = AuditEvent.objects.get(action="user.invited")
    assert event.actor_id == admin.pk and event.detail == {"role": REVIEWER}
    assert password not in str(event.detail) + event.message  # the password is never in the audit

    client.logout()
    assert _signs_in(client, "nadia", password)
    assert client.get("/review/").status_code == 200


def test_role_changes_and_deactivation_take_effect_and_are_audited(client, admin):
    ann = make_user("ann", RESEARCHER)
    token = Token.objects.create(user=ann)

    client.post(f"/users/{ann.pk}/", {"action": "role", "role": ADMIN})
    ann.refresh_from_db()
    assert user_role(ann) == ADMIN and ann.is_staff  # an admin may open the Django admin too
    client.post(f"/users/{ann.pk}/", {"action": "role", "role": AGGREGATE_RESEARCHER})
    ann.refresh_from_db()
    assert user_role(ann) == AGGREGATE_RESEARCHER and not ann.is_staff
    assert not ann.has_perm("askdb.view_row_level")
    changes = AuditEvent.objects.filter(action="user.role_set").order_by("pk")
    assert [e.detail for e in changes] == [
        {"from": RESEARCHER, "to": ADMIN},
        {"from": ADMIN, "to": AGGREGATE_RESEARCHER},
    ]
    assert {e.actor_id for e in changes} == {admin.pk}

    client.post(f"/users/{ann.pk}/", {"action": "deactivate"})
    ann.refresh_from_db()
    assert not ann.is_active
    assert AuditEvent.objects.get(action="user.deactivated").actor_id == admin.pk
    # neither the password nor the API token works any more; the account's records stay
    assert not _signs_in(client, "ann", PASSWORD)
    api = client.get("/api/runs/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert api.status_code in (401, 403)

    client.force_login(admin)
    client.post(f"/users/{ann.pk}/", {"action": "reactivate"})
    ann.refresh_from_db()
    assert ann.is_active and AuditEvent.objects.filter(action="user.reactivated").exists()


@pytest.mark.parametrize("role", [RESEARCHER, AGGREGATE_RESEARCHER, REVIEWER])
def test_only_admins_reach_the_page_or_change_anyone(client, role):
    someone = make_user("someone", role)
    victim = make_user("victim", RESEARCHER)
    client.force_login(someone)
    assert client.get("/users/").status_code == 403
    assert client.post("/users/new/", {"username": "mallory", "role": ADMIN}).status_code == 403
    assert client.post(f"/users/{victim.pk}/", {"action": "deactivate"}).status_code == 403
    assert client.post(f"/users/{someone.pk}/", {"action": "role", "role": ADMIN}).status_code == 403
    assert not User.objects.filter(username="mallory").exists()
    assert user_role(someone) == role and User.objects.get(pk=victim.pk).is_active
    assert not AuditEvent.objects.filter(
        action__in=["user.invited", "user.role_set", "user.deactivated"]
    ).exists()


def test_an_admin_cannot_lock_themself_or_the_project_out(client, admin):
    for data in ({"action": "deactivate"}, {"action": "role", "role": REVIEWER}):
        response = client.post(f"/users/{admin.pk}/", data, follow=True)
        assert "cannot take away your own admin role" in _messages(response)
    admin.refresh_from_db()
    assert admin.is_active and user_role(admin) == ADMIN

    # Someone given the permission by hand (Django admin), not the admin role, still cannot remove
    # the last active admin: the project would have nobody left to manage it.
    from django.contrib.auth.models import Permission

    helper = make_user("helper", REVIEWER)
    helper.user_permissions.add(Permission.objects.get(codename="manage_users"))
    client.force_login(User.objects.get(pk=helper.pk))
    for data in ({"action": "deactivate"}, {"action": "role", "role": RESEARCHER}):
        response = client.post(f"/users/{admin.pk}/", data, follow=True)
        assert "boss is the last active admin" in _messages(response)
    admin.refresh_from_db()
    assert admin.is_active and user_role(admin) == ADMIN


def test_a_superuser_is_changed_only_by_a_superuser(client, admin):
    root = User.objects.create_superuser("root", "root@example.org", "pw-root-123456")
    response = client.post(f"/users/{root.pk}/", {"action": "deactivate"}, follow=True)
    assert "only a superuser may change that account" in _messages(response)
    response = client.post(f"/users/{root.pk}/", {"action": "role", "role": RESEARCHER}, follow=True)
    assert "only a superuser may change that account" in _messages(response)
    root.refresh_from_db()
    assert root.is_active and root.is_superuser


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"username": "boss", "role": RESEARCHER}, "already a user called"),
        ({"username": "BOSS", "role": RESEARCHER}, "already a user called"),  # not a look-alike twin
        ({"username": "eve", "role": "superuser"}, "unknown role"),
        ({"username": "eve", "role": ""}, "unknown role"),
        ({"username": "", "role": RESEARCHER}, "username"),
        ({"username": "eve smith", "role": RESEARCHER}, "username"),
        ({"username": "eve<script>", "role": RESEARCHER}, "username"),
        ({"username": "eve", "email": "not-an-address", "role": RESEARCHER}, "not an email address"),
    ],
)
def test_a_bad_new_account_is_refused_with_a_reason_and_nothing_is_created(client, admin, data, said):
    before = User.objects.count()
    response = client.post("/users/new/", data, follow=True)
    assert said in _messages(response)
    assert User.objects.count() == before
    assert not AuditEvent.objects.filter(action="user.invited").exists()


def test_an_unknown_role_or_action_changes_nothing(client, admin):
    ann = make_user("ann", RESEARCHER)
    response = client.post(f"/users/{ann.pk}/", {"action": "role", "role": "owner"}, follow=True)
    assert "unknown role" in _messages(response)
    response = client.post(f"/users/{ann.pk}/", {"action": "delete"}, follow=True)
    assert "unknown action" in _messages(response)
    ann.refresh_from_db()
    assert ann.is_active and user_role(ann) == RESEARCHER
    assert client.post("/users/999999/", {"action": "deactivate"}).status_code == 404
    assert client.get("/users/new/").status_code == 405  # changes only by POST
