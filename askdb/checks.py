"""Deploy-time invariants as Django system checks, with stable ids (`manage.py check`).

askdb.E001  pgvector is not installed on the app database server
askdb.E002  the clinical role can write
askdb.E003  the embedded state folder is missing
askdb.E004  the clinical database cannot be reached
askdb.E005  the app database cannot be reached
askdb.W001  the Celery broker cannot be reached
askdb.W010  the app's database role could rewrite the audit log
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from askdb import health
from infra import embedded
from infra.audit.database_roles import audit_rewrite_risks


@checks.register("askdb")
def check_app_database(app_configs=None, **kwargs):
    probe = health.pgvector_available()
    if probe.ok:
        return []
    if "not installed" in probe.detail:
        return [
            checks.Error(
                "pgvector is not installed on the app database server.",
                hint="Install the pgvector extension (https://github.com/pgvector/pgvector) or unset "
                "DATABASE_URL to use the embedded PostgreSQL, which ships it.",
                id="askdb.E001",
            )
        ]
    return [
        checks.Error(
            f"The app database cannot be reached: {probe.detail}",
            hint="Check DATABASE_URL, or unset it to use the embedded PostgreSQL "
            "(`python manage.py services start`).",
            id="askdb.E005",
        )
    ]


@checks.register("askdb")
def check_clinical_database(app_configs=None, **kwargs):
    reachable = health.clinical_database()
    if not reachable.ok:
        return [
            checks.Error(
                f"The clinical database cannot be reached: {reachable.detail}",
                hint="Check CLINICAL_DATABASE_URL, or unset it to use the embedded clinical database.",
                id="askdb.E004",
            )
        ]
    read_only = health.clinical_role_read_only()
    if not read_only.ok:
        return [
            checks.Error(
                f"Generated SQL would run with write access: {read_only.detail}.",
                hint="Point CLINICAL_DATABASE_URL at a role with only CONNECT, USAGE and SELECT "
                "(see README, 'Read-only clinical role').",
                id="askdb.E002",
            )
        ]
    return []


@checks.register("askdb")
def check_state_folder(app_configs=None, **kwargs):
    if not (embedded.uses_embedded_postgres() or embedded.uses_embedded_redis()):
        return []
    if settings.ASKDB_HOME.is_dir():
        return []
    return [
        checks.Error(
            f"The state folder {settings.ASKDB_HOME} does not exist.",
            hint="Run `python manage.py services start` (or `make demo`), "
            "or set ASKDB_HOME to an existing folder.",
            id="askdb.E003",
        )
    ]


@checks.register("askdb")
def check_broker(app_configs=None, **kwargs):
    probe = health.broker()
    if probe.ok:
        return []
    return [
        checks.Warning(
            f"The Celery broker cannot be reached: {probe.detail}",
            hint="Check CELERY_BROKER_URL, or unset it to use the embedded Redis "
            "(`python manage.py services start`).",
            id="askdb.W001",
        )
    ]


@checks.register("askdb")
def check_audit_role(app_configs=None, **kwargs):
    """The app must connect as a role that can add audit events but never change or erase them."""
    try:
        role, risks = audit_rewrite_risks()
    except Exception:  # unreachable or not migrated: askdb.E005 and manage.py say so
        return []
    if not risks:
        return []
    return [
        checks.Warning(
            f"The app's database role {role!r} could rewrite the audit log ({', '.join(risks)}).",
            hint="Connect as a runtime role that owns nothing, with SELECT and INSERT only on "
            "askdb_auditevent, and run migrations as the owner (DATABASE_OWNER_URL); see README, "
            "'Database roles'.",
            id="askdb.W010",
        )
    ]
