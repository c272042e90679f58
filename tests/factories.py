"""Users with roles, for tests."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from askdb.roles import ADMIN, roles_sync

PASSWORD = "correct-horse-battery"


def make_user(username: str, role: str | None = None, **extra):
    roles_sync()
    user = get_user_model().objects.create_user(
        username=username, password=PASSWORD, is_staff=(role == ADMIN), **extra
    )
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user
