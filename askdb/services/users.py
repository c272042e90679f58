"""People: the demo logins and API tokens."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from rest_framework.authtoken.models import Token

from askdb.roles import roles_sync
from infra.audit.services import audit_record

DEMO_USERS = (
    # username, password, role — printed by `make demo`; never use these outside a demo.
    ("researcher", "askdb-researcher", "researcher"),
    ("reviewer", "askdb-reviewer", "reviewer"),
    ("admin", "askdb-admin", "admin"),
)


def demo_users_ensure() -> list[tuple[str, str, str]]:
    """Create (or reset) one demo user per role so the printed logins always work."""
    User = get_user_model()
    roles_sync()
    with transaction.atomic():
        for username, password, role in DEMO_USERS:
            user, _ = User.objects.get_or_create(username=username)  # audited by askdb.signals
            user.set_password(password)
            user.is_staff = role == "admin"  # admins use the Django admin for users and docs
            user.save()
            user.groups.set([Group.objects.get(name=role)])
    return list(DEMO_USERS)


def user_token_issue(*, user, ip: str | None = None):
    """An API token for scripts (created once, handed out again after), audited."""
    with transaction.atomic():
        token, created = Token.objects.get_or_create(user=user)
        audit_record(action="auth.token", actor=user, target=user,
                     message="API token created" if created else "API token handed out", ip=ip)  # fmt: skip
    return token
