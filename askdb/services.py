"""askdb's write use cases. Each is one function; views, tasks, API and commands call these."""

from __future__ import annotations

from typing import Any

from askdb.models import AuditEvent


def audit_record(
    *,
    action: str,
    actor=None,
    target: Any = None,
    message: str = "",
    detail: dict | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """Append one audit event. Call it inside the transaction of the write it records."""
    target_type = target_id = ""
    if target is not None:
        target_type = getattr(getattr(target, "_meta", None), "label_lower", type(target).__name__)
        target_id = str(getattr(target, "pk", target))
    return AuditEvent.objects.create(
        action=action,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        actor_name=getattr(actor, "username", "") or "",
        target_type=target_type,
        target_id=target_id,
        message=message,
        detail=detail or {},
        ip=ip,
    )


DEMO_USERS = (
    # username, password, role — printed by `make demo`; never use these outside a demo.
    ("researcher", "askdb-researcher", "researcher"),
    ("reviewer", "askdb-reviewer", "reviewer"),
    ("admin", "askdb-admin", "admin"),
)


def demo_users_ensure() -> list[tuple[str, str, str]]:
    """Create (or reset) one demo user per role so the printed logins always work."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import transaction

    from askdb.roles import roles_sync

    User = get_user_model()
    roles_sync()
    with transaction.atomic():
        for username, password, role in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.is_staff = role == "admin"  # admins use the Django admin for users and docs
            user.save()
            user.groups.set([Group.objects.get(name=role)])
            if created:
                audit_record(action="user.created", target=user, message=f"demo {role} user")
    return list(DEMO_USERS)
