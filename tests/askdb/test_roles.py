"""Each role can do what it should and is refused what it should not."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.http import HttpRequest

from askdb.roles import ADMIN, AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER, ROLE_PERMISSIONS
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db

# page → the roles that may open it (others get 403, or the admin's login page)
PAGES = {
    "/": {AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER, ADMIN},
    "/review/": {REVIEWER, ADMIN},
    "/audit/": {ADMIN},
    "/admin/": {ADMIN},
    "/admin/auth/user/": {ADMIN},
    "/api/docs/": {AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER, ADMIN},
}


@pytest.mark.parametrize("role", [AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER, ADMIN])
@pytest.mark.parametrize("page", list(PAGES))
def test_page_access_by_role(client, role, page):
    client.force_login(make_user(f"u_{role}", role))
    response = client.get(page)
    if role in PAGES[page]:
        assert response.status_code == 200, f"{role} should open {page}"
    elif page.startswith("/admin/"):
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    else:
        assert response.status_code == 403, f"{role} must be refused {page}"


def test_roles_are_groups_with_exactly_their_permissions():
    make_user("someone")
    for role in ROLE_PERMISSIONS:
        perms = {
            f"{p.content_type.app_label}.{p.codename}" for p in Group.objects.get(name=role).permissions.all()
        }
        for wanted in ROLE_PERMISSIONS[role]:
            if not wanted.endswith("*"):
                assert wanted in perms

    def codenames(role: str) -> set[str]:
        return set(Group.objects.get(name=role).permissions.values_list("codename", flat=True))

    # Row-level results are a permission of their own: the aggregate-only role asks, nothing more.
    assert codenames(AGGREGATE_RESEARCHER) == {"ask_questions"}
    # Researchers and up may run a timed-out question again as a long query; aggregate-only may not.
    assert codenames(RESEARCHER) == {"ask_questions", "view_row_level", "run_long_queries"}
    assert {"view_row_level", "view_sensitive"} <= codenames(REVIEWER)


def test_user_without_a_role_can_log_in_but_is_told_they_lack_one(client):
    user = make_user("norole")
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 403 and b"Ask an admin" in response.content
    assert client.get("/review/").status_code == 403


def test_login_logout_and_password_change(client):
    make_user("alice", RESEARCHER)
    response = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    response = client.post(
        "/accounts/password/",
        {
            "old_password": PASSWORD,
            "new_password1": "a-much-better-secret-42",
            "new_password2": "a-much-better-secret-42",
        },
    )
    assert response.status_code == 302 and response["Location"].endswith("/accounts/password/done/")
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302
    # django-axes counts sign-ins per request: the test client's login needs one too
    assert not client.login(request=HttpRequest(), username="alice", password=PASSWORD)
    assert client.login(request=HttpRequest(), username="alice", password="a-much-better-secret-42")


def test_wrong_password_is_refused_with_a_message(client):
    make_user("bob", RESEARCHER)
    response = client.post("/accounts/login/", {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content
