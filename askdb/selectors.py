"""askdb's reads, shaped for views and the API."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from askdb.models import AuditEvent


def audit_event_list(*, search: str = "", action: str = "") -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor")
    if action:
        qs = qs.filter(action__startswith=action)
    if search:
        qs = qs.filter(Q(actor_name__icontains=search) | Q(message__icontains=search) | Q(target_id=search))
    return qs
