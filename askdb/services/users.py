"""People: the demo logins, API tokens, and accounts an admin creates, re-roles and deactivates."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from rest_framework.authtoken.models import Token

from askdb.roles import ADMIN, ROLES, roles_sync, user_role
from infra.audit.services import audit_record

DEMO_USERS = (
    # username, password, role — printed by `make demo`; never use these outside a demo.
    ("analyst", "askdb-analyst", "aggregate_researcher"),  # aggregates only (README "Privacy")
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


class UserChangeError(ValueError):
    """A change to a person's account that askdb refuses, with the reason an admin can act on."""


def _require_admin(actor) -> None:
    if not actor.has_perm("askdb.manage_users"):
        raise PermissionError("only an admin may manage users")


def _set_role(user, role: str) -> None:
    """One role per person (the group), and the Django admin's staff flag only for admins."""
    user.groups.set([Group.objects.get(name=role)])
    staff = role == ADMIN
    if user.is_staff != staff:
        user.is_staff = staff
        user.save(update_fields=["is_staff"])


def _active_admins(exclude_pk: int | None = None):
    admins = (
        get_user_model().objects.filter(is_active=True).filter(Q(is_superuser=True) | Q(groups__name=ADMIN))
    )
    return admins.exclude(pk=exclude_pk).distinct() if exclude_pk else admins.distinct()


def _guard_target(*, actor, user, role: str | None = None, active: bool | None = None) -> None:
    """The changes that would lock the project out, or hand a superuser's account to an admin."""
    if user.is_superuser and not actor.is_superuser:
        raise UserChangeError(f"{user.username} is a superuser; only a superuser may change that account")
    losing_admin = (role is not None and role != ADMIN) or active is False
    if user.pk == actor.pk and losing_admin:
        raise UserChangeError(
            "you cannot take away your own admin role or deactivate yourself; ask another admin"
        )
    if losing_admin and user_role(user) == ADMIN and not _active_admins(exclude_pk=user.pk).exists():
        raise UserChangeError(f"{user.username} is the last active admin; make someone else an admin first")


def user_invite(*, actor, username: str, email: str = "", role: str, ip: str | None = None):
    """Create an account with a one-time password the admin hands over; the person changes it.

    Returns (user, password). The password is shown once and never stored in clear or audited.
    """
    _require_admin(actor)
    username = (username or "").strip()
    if role not in ROLES:
        raise UserChangeError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    User = get_user_model()
    try:
        User.username_validator(username)
    except ValidationError as exc:
        raise UserChangeError(f"username {username!r}: {' '.join(exc.messages)}") from None
    if not username or len(username) > 150:
        raise UserChangeError("a username of 1 to 150 characters is needed")
    email = (email or "").strip()
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise UserChangeError(f"{email!r} is not an email address") from None
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        if User.objects.filter(username__iexact=username).exists():
            raise UserChangeError(f"there is already a user called {username!r}")
        user = User.objects.create_user(username=username, email=email, password=password)
        _set_role(user, role)
        audit_record(action="user.invited", actor=actor, target=user, ip=ip,
                     message=f"{actor.username} created {username} as {role}", detail={"role": role})  # fmt: skip
    return user, password


def user_role_set(*, actor, user, role: str, ip: str | None = None):
    """Give a person one role (researcher, aggregate researcher, reviewer, admin)."""
    _require_admin(actor)
    if role not in ROLES:
        raise UserChangeError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().get(pk=user.pk)
        before = user_role(user)
        _guard_target(actor=actor, user=user, role=role)
        if before == role:
            return user
        _set_role(user, role)
        audit_record(action="user.role_set", actor=actor, target=user, ip=ip,
                     message=f"{actor.username} changed {user.username}'s role from {before or 'none'} to {role}",
                     detail={"from": before, "to": role})  # fmt: skip
    return user


def user_active_set(*, actor, user, active: bool, ip: str | None = None):
    """Deactivate (the person can no longer sign in or use a token; their records stay) or restore."""
    _require_admin(actor)
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().get(pk=user.pk)
        _guard_target(actor=actor, user=user, active=active)
        if user.is_active == active:
            return user
        user.is_active = active
        user.save(update_fields=["is_active"])
        verb = "reactivated" if active else "deactivated"
        audit_record(action=f"user.{verb}", actor=actor, target=user, ip=ip,
                     message=f"{actor.username} {verb} {user.username}")  # fmt: skip
    return user
