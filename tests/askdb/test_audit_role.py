"""From the app's own database connection the audit log cannot be rewritten: not by TRUNCATE,
DELETE or UPDATE, not by switching triggers off, not by replica mode. The test database gets the
runtime role's grants exactly as production does (after migrate), and these tests connect as it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.core import management
from django.db import connection
from django.db.models import ProtectedError

from askdb.checks import check_audit_role
from askdb.roles import ADMIN, RESEARCHER
from infra import embedded
from infra.audit.models import AuditEvent
from infra.audit.services import audit_record
from tests.factories import make_user

ROOT = Path(__file__).resolve().parents[2]
REWRITES = [
    "TRUNCATE askdb_auditevent",
    "TRUNCATE askdb_auditevent CASCADE",
    "DELETE FROM askdb_auditevent",
    "UPDATE askdb_auditevent SET message = 'rewritten'",
    "SET session_replication_role = replica",
    "ALTER TABLE askdb_auditevent DISABLE TRIGGER ALL",
    "ALTER TABLE askdb_auditevent DISABLE TRIGGER askdb_audit_append_only",
    "DROP TRIGGER askdb_audit_append_only ON askdb_auditevent",
    "ALTER TABLE askdb_auditevent OWNER TO askdb_app",
    "GRANT DELETE ON askdb_auditevent TO askdb_app",
    "SET ROLE postgres",
]


@pytest.fixture
def app_connection():
    """A connection to the test database as the runtime role, with autocommit (no rollback hides
    anything: each statement stands or fails on its own)."""
    assert settings.ASKDB_APP_ROLE == embedded.APP_ROLE
    dsn = embedded.pg_dsn(connection.settings_dict["NAME"], user=settings.ASKDB_APP_ROLE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sql", REWRITES)
def test_the_app_role_cannot_rewrite_the_audit_log(app_connection, sql):
    audit_record(action="test.kept", message="original")
    app_connection.execute(
        "INSERT INTO askdb_auditevent (at, actor_name, action, target_type, target_id, message, detail)"
        " VALUES (now(), '', 'test.appended', '', '', 'by the app', '{}')"
    )  # the app may add events…
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # …never change them
        app_connection.execute(sql)
        # a trick that got through would now be followed by the rewrite it enables
        app_connection.execute("DELETE FROM askdb_auditevent")
    assert sorted(AuditEvent.objects.values_list("action", "message")) == [
        ("test.appended", "by the app"),
        ("test.kept", "original"),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_app_role_does_its_work_on_the_other_tables(app_connection):
    user = make_user("dora", RESEARCHER)
    row = app_connection.execute(
        "UPDATE auth_user SET first_name = 'Dora' WHERE id = %s RETURNING first_name", (user.pk,)
    ).fetchone()
    assert row == ("Dora",)
    app_connection.execute("DELETE FROM django_session")
    assert app_connection.execute("SELECT count(*) FROM askdb_auditevent").fetchone()[0] >= 1
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # and creates nothing
        app_connection.execute("CREATE TABLE askdb_sneaky (id int)")


@pytest.mark.django_db
def test_a_user_with_audit_events_is_deactivated_not_deleted(client):
    user = make_user("erin", RESEARCHER)
    audit_record(action="test.thing", actor=user)
    with pytest.raises(ProtectedError):
        user.delete()
    admin = make_user("root", ADMIN, is_superuser=True)
    client.force_login(admin)
    page = client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})
    assert page.status_code == 200  # the admin explains instead of failing
    assert "protected related objects" in page.content.decode()
    assert type(user).objects.filter(pk=user.pk, is_active=True).exists()


@pytest.mark.django_db
def test_check_warns_when_the_app_role_could_rewrite_the_audit():
    # the test's own "default" connection is the owner: exactly what the check must flag
    warnings = check_audit_role()
    assert [w.id for w in warnings] == ["askdb.W010"]
    assert "superuser" in warnings[0].msg and "owner of the audit table" in warnings[0].msg


def test_the_runtime_connects_as_the_app_role_and_migrates_as_the_owner():
    code = (
        "from config.settings import local as s;"
        "print(s.DATABASES['default']['USER'], s.DATABASE_OWNER['USER'], s.ASKDB_APP_ROLE)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_OWNER_URL")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["askdb_app", "postgres", "askdb_app"], out.stderr


@pytest.mark.django_db
def test_migrate_reapplies_the_grants(app_connection):
    with connection.cursor() as cur:
        cur.execute("GRANT DELETE, TRUNCATE ON askdb_auditevent TO askdb_app")
    management.call_command("migrate", verbosity=0)
    can = app_connection.execute(
        "SELECT has_table_privilege('askdb_auditevent', 'DELETE'), has_table_privilege('askdb_auditevent', 'TRUNCATE')"
    ).fetchone()
    assert can == (False, False)


@pytest.mark.django_db(transaction=True)
def test_the_app_role_cannot_shadow_the_audit_table_with_a_temporary_one(app_connection):
    for sql in (
        "CREATE TEMPORARY TABLE askdb_auditevent (LIKE public.askdb_auditevent)",
        "CREATE TEMP TABLE anything (id int)",
        "CREATE TABLE pg_temp.askdb_auditevent (id int)",
        "CREATE TEMP VIEW askdb_auditevent AS SELECT 1 AS id",
        "CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2001-01-01'::timestamptz $$",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app_connection.execute(sql)
    assert not app_connection.execute(
        "SELECT has_database_privilege(current_database(), 'TEMPORARY')"
    ).fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_the_embedded_app_database_grants_no_temporary_tables():
    with psycopg.connect(embedded.pg_dsn(embedded.APP_DB, user=embedded.APP_ROLE), autocommit=True) as conn:
        assert not conn.execute("SELECT has_database_privilege(current_database(), 'TEMPORARY')").fetchone()[
            0
        ]


@pytest.mark.django_db(transaction=True)
def test_audit_rows_take_their_time_and_actor_name_from_the_database_not_the_insert(app_connection):
    rita = make_user("rita", RESEARCHER)
    app_connection.execute(
        "INSERT INTO askdb_auditevent (at, actor_id, actor_name, action, target_type, target_id, message, detail)"
        " VALUES ('2001-01-01T00:00:00Z', %s, 'root', 'test.forged', '', '', '', '{}')",
        (rita.pk,),
    )
    db_now = app_connection.execute("SELECT now()").fetchone()[0]
    event = AuditEvent.objects.get(action="test.forged")
    assert event.actor_name == "rita"  # the user behind actor_id, not the name the INSERT gave
    assert abs((event.at - db_now).total_seconds()) < 3600 and event.at.year != 2001
    # Django's own writes too: `at` comes back from the database
    saved = audit_record(action="test.saved", actor=rita)
    assert saved.at is not None and saved.at == AuditEvent.objects.get(pk=saved.pk).at


@pytest.mark.django_db
def test_in_a_request_the_actor_is_the_signed_in_user_whatever_the_caller_names(rf):
    from infra.audit.middleware import _request

    rita, root = make_user("rita", RESEARCHER), make_user("root", ADMIN)
    request = rf.get("/")
    request.user = rita
    token = _request.set(request)
    try:
        event = audit_record(action="test.named", actor=root)
    finally:
        _request.reset(token)
    assert (event.actor, event.actor_name) == (rita, "rita")
    assert audit_record(action="test.worker", actor=root).actor == root  # outside a request: as named
