"""Writing to the audit log. Every app (catalog, questions, review) records through this."""

from __future__ import annotations

from typing import Any

from infra.audit.middleware import current_request
from infra.audit.models import AuditEvent


def audit_event(
    *,
    action: str,
    actor=None,
    target: Any = None,
    message: str = "",
    detail: dict | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """One audit event, not yet saved: `audit_record_many` writes a bulk operation's events in
    one statement (an import of thousands of pairs records every one of them)."""
    request = current_request()
    if request is not None:
        # In a request the actor is whoever its session (or API token) signed in, whatever the
        # caller says: a bug or a hostile caller cannot write an event in someone else's name.
        # The caller's actor counts only outside requests (workers, commands) or before sign-in.
        signed_in = getattr(request, "user", None)
        if getattr(signed_in, "is_authenticated", False):
            actor = signed_in
    if ip is None and request is not None:
        ip = request.META.get("REMOTE_ADDR")
    target_type = target_id = ""
    if target is not None:
        target_type = getattr(getattr(target, "_meta", None), "label_lower", type(target).__name__)
        target_id = str(getattr(target, "pk", target))
    return AuditEvent(
        action=action,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        actor_name=getattr(actor, "username", "") or "",
        target_type=target_type,
        target_id=target_id,
        message=message,
        detail=detail or {},
        ip=ip,
    )


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
    event = audit_event(action=action, actor=actor, target=target, message=message, detail=detail, ip=ip)
    event.save()
    return event


def audit_record_many(events: list[AuditEvent]) -> None:
    """Append events built by `audit_event`, in order, in a few statements."""
    AuditEvent.objects.bulk_create(events, batch_size=1000)
