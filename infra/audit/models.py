"""The audit log. The table kept its name (askdb_auditevent) when the model moved out of askdb."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("the audit log is append-only")

    def delete(self):
        raise PermissionError("the audit log is append-only")


class AuditEvent(models.Model):
    """One thing that happened: who did what to which object, and what came of it.

    Append-only: the model refuses updates and deletes, and a database trigger refuses them
    too, so not even a bug or a shell session can rewrite history.
    """

    # The database's clock, never the caller's: a default of now() and a trigger that sets it on
    # every insert, whatever the INSERT says (migration 0003).
    at = models.DateTimeField(db_default=Now(), db_index=True, editable=False)
    # A user with audit events cannot be deleted (the rows may not change): deactivate them.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)  # "auth.login", "run.completed", …
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        db_table = "askdb_auditevent"  # its name from when askdb owned it; the append-only trigger is on it
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name or '-'} {self.action}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("the audit log is append-only")
