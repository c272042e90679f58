"""The audit log records authentication and cannot be rewritten, not even with raw SQL."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from askdb.roles import ADMIN, RESEARCHER
from infra.audit.models import AuditEvent
from infra.audit.services import audit_record
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db


def test_login_and_failed_login_are_audited(client):
    make_user("carol", RESEARCHER)
    client.post("/accounts/login/", {"username": "carol", "password": "wrong"})
    client.post("/accounts/login/", {"username": "carol", "password": PASSWORD})
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor_name"))
    assert ("auth.login_failed", "") in actions
    assert ("auth.login", "carol") in actions


def test_audit_rows_refuse_update_and_delete():
    event = audit_record(action="test.thing", message="original")
    event.message = "rewritten"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(message="x")
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()


@pytest.mark.parametrize("sql", ["UPDATE askdb_auditevent SET message = 'x'", "DELETE FROM askdb_auditevent"])
def test_database_trigger_refuses_raw_rewrites(sql):
    audit_record(action="test.thing", message="original")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql)
    assert AuditEvent.objects.get(action="test.thing").message == "original"


def test_admin_reads_the_audit_log_with_search(client):
    admin = make_user("root", ADMIN)
    audit_record(action="test.alpha", actor=admin, message="first needle")
    audit_record(action="test.beta", actor=admin, message="second")
    client.force_login(admin)
    page = client.get("/audit/", {"q": "needle"}).content.decode()
    assert "first needle" in page and "second" not in page
    page = client.get("/audit/", {"action": "test.b"}).content.decode()
    assert "test.beta" in page and "test.alpha" not in page
