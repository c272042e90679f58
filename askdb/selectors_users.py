"""Reads for the users page: every account with its role, newest sign-in first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model

from askdb.roles import ADMIN, ROLES


@dataclass(frozen=True)
class UserRow:
    pk: int
    username: str
    email: str
    role: str | None
    is_active: bool
    is_superuser: bool
    last_login: datetime | None
    date_joined: datetime


def _role_of(names: set[str], superuser: bool) -> str | None:
    """The highest role held, as askdb.roles.user_role says, without a query per person."""
    if superuser:
        return ADMIN
    for role in reversed(ROLES):  # ROLES runs from the least to the most
        if role in names:
            return role
    return None


def user_list(*, query: str = "", show_inactive: bool = True) -> list[UserRow]:
    users = get_user_model().objects.prefetch_related("groups").order_by("-is_active", "username")
    if query:
        users = users.filter(username__icontains=query)
    if not show_inactive:
        users = users.filter(is_active=True)
    return [
        UserRow(
            pk=u.pk, username=u.username, email=u.email,
            role=_role_of({g.name for g in u.groups.all()}, u.is_superuser),
            is_active=u.is_active, is_superuser=u.is_superuser,
            last_login=u.last_login, date_joined=u.date_joined,
        )
        for u in users
    ]  # fmt: skip
