"""Two database roles, so the running app cannot rewrite its own audit log.

The owner role owns the tables and runs migrations; the runtime role (web, worker, commands)
gets DML on the app's tables but only SELECT and INSERT on the audit table, no TRUNCATE, no
ownership (so no ALTER TABLE … DISABLE TRIGGER), no superuser (so no session_replication_role)
and no temporary tables (so nothing shadows the audit table). The grants are re-applied after every migrate, so new tables are
covered and the audit table's privileges cannot drift.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

AUDIT_TABLE = "askdb_auditevent"

# True when the connected role could change or erase audit rows (askdb.W010 reports it).
AUDIT_REWRITE_PROBE = f"""
SELECT r.rolsuper,
       pg_has_role(current_user, c.relowner, 'USAGE'),
       has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),
       has_table_privilege(c.oid, 'TRUNCATE'), current_user
FROM pg_class c, pg_roles r
WHERE c.oid = to_regclass('{AUDIT_TABLE}') AND r.rolname = current_user
"""


def _quote(conn, name: str) -> str:
    return conn.ops.quote_name(name)


def grant_runtime_role(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Give ASKDB_APP_ROLE what the running app needs and nothing that rewrites the audit;
    False when no separate runtime role is configured (or the database is not PostgreSQL)."""
    role = settings.ASKDB_APP_ROLE
    conn = connections[using]
    if not role or conn.vendor != "postgresql":
        return False
    app = _quote(conn, role)
    with conn.cursor() as cur:
        cur.execute("SELECT current_schema()")
        schema = _quote(conn, cur.fetchone()[0])
        for statement in (
            f"GRANT USAGE ON SCHEMA {schema} TO {app}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {app}",
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {app}",
            f"REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {AUDIT_TABLE} FROM {app}, PUBLIC",
        ):
            cur.execute(statement)
        # No temporary tables: pg_temp comes first on the search path, so a temporary
        # askdb_auditevent would shadow the real one for the session (and take its "audit rows").
        cur.execute("SELECT current_database()")
        database = _quote(conn, cur.fetchone()[0])
        for statement in (
            f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC",
            f"REVOKE TEMPORARY ON DATABASE {database} FROM {app}",
        ):
            cur.execute(statement)
    return True


def grant_after_migrate(sender, using: str = DEFAULT_DB_ALIAS, **kwargs) -> None:
    grant_runtime_role(using)


@contextlib.contextmanager
def as_owner(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Run the body (migrate) as DATABASE_OWNER when one is configured: same database, the
    owner's credentials; the connection is reopened as the runtime role afterwards."""
    owner = settings.DATABASE_OWNER
    conn = connections[using]
    if not owner or using != DEFAULT_DB_ALIAS:
        yield
        return
    keys = ("USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
    saved = {k: conn.settings_dict.get(k) for k in keys}
    conn.close()
    conn.settings_dict.update({k: owner[k] for k in keys if k in owner})
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict.update(saved)


def audit_rewrite_risks(using: str = DEFAULT_DB_ALIAS) -> tuple[str, list[str]]:
    """The connected role's name and what it could do to the audit table beyond INSERT."""
    conn = connections[using]
    if conn.vendor != "postgresql":
        return "", []
    with conn.cursor() as cur:
        cur.execute(AUDIT_REWRITE_PROBE)
        row = cur.fetchone()
    if row is None:  # not migrated yet: nothing to rewrite
        return "", []
    superuser, owner, update, delete, truncate, user = row
    named = {"superuser": superuser, "owner of the audit table": owner, "UPDATE": update,
             "DELETE": delete, "TRUNCATE": truncate}  # fmt: skip
    return user, [name for name, present in named.items() if present]
