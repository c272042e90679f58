"""What the clinical database's read-only role may not execute: revoked by the loader after a
load and by the embedded server's bootstrap (below both, so neither imports the other)."""

from __future__ import annotations

import logging

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)


# Functions and views no generated query needs that let one session reach another or the server:
# signalling, advisory locks, sleeps, settings, activity, notifications, and SQL run from a string.
# Validation refuses them by allow-list; revoking them is what holds if validation is ever bypassed.
# LIKE patterns, matched against pg_proc.proname in pg_catalog (and any installed extension).
RESTRICTED_FUNCTIONS = (
    "pg\\_sleep%",
    "pg\\_advisory%",
    "pg\\_try\\_advisory%",
    "pg\\_cancel\\_backend",
    "pg\\_terminate\\_backend",
    "pg\\_notify",
    "pg\\_listening\\_channels",
    "pg\\_notification\\_queue\\_usage",
    "set\\_config",
    "current\\_setting",
    "pg\\_show\\_all\\_settings",
    "pg\\_stat\\_get\\_activity",
    "pg\\_stat\\_get\\_backend%",
    "pg\\_stat\\_reset%",
    "pg\\_blocking\\_pids",
    "pg\\_safe\\_snapshot\\_blocking\\_pids",
    "pg\\_backend\\_pid",
    "ts\\_stat",
    "ts\\_rewrite",
    "query\\_to\\_xml%",
    "cursor\\_to\\_xml%",
    "table\\_to\\_xml%",
    "schema\\_to\\_xml%",
    "database\\_to\\_xml%",
    "dblink%",
    "lo\\_%",
    "nextval",
    "setval",
)
RESTRICTED_VIEWS = ("pg_stat_activity", "pg_settings", "pg_locks", "pg_stat_ssl", "pg_stat_gssapi")


def restrict_functions(conn: psycopg.Connection, role: str) -> list[str]:
    """Revoke EXECUTE on RESTRICTED_FUNCTIONS (and SELECT on RESTRICTED_VIEWS) from PUBLIC and `role`.

    Function privileges live in each database's own catalog, so this changes the clinical
    database only. It needs the owner of pg_catalog (a superuser); without that it logs a warning
    and the README's production steps apply. Returns the functions revoked.
    """
    r = sql.Identifier(role)
    signatures = [
        row[0]
        for row in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.prokind IN ('f', 'a', 'w') "
            "AND p.proname LIKE ANY(%s) ORDER BY 1",
            (list(RESTRICTED_FUNCTIONS),),
        )
    ]
    try:
        with conn.transaction():
            for signature in signatures:
                conn.execute(
                    sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC, {}").format(sql.SQL(signature), r)
                )
            for view in RESTRICTED_VIEWS:
                conn.execute(
                    sql.SQL("REVOKE SELECT ON {} FROM PUBLIC, {}").format(
                        sql.Identifier("pg_catalog", view), r
                    )
                )
    except psycopg.errors.InsufficientPrivilege as exc:
        logger.warning("could not restrict server functions for %s: %s (see README, Security)", role, exc)
        return []
    return signatures


# The catalog columns askdb's own introspection reads as a reader (PostgresExecutor.tables, the
# health probe): every other table and view of pg_catalog and information_schema is revoked from
# PUBLIC in the clinical database, and these are granted back column by column, so that a query
# that slips past validation cannot list roles (pg_roles, pg_user, pg_auth_members), grants
# (information_schema.role_table_grants, table_privileges, pg_class.relacl, pg_attribute.attacl),
# databases, settings or other sessions. What PostgreSQL cannot take away: functions that read the
# catalogs without a privilege check (has_*_privilege, pg_get_*def, format_type, to_regclass,
# current_user, version()), which validation refuses by allow-list; and the names of the schemas,
# tables and columns (granted here: askdb's catalog shows them to its users anyway).
INTROSPECTION_COLUMNS = {
    "pg_class": ("oid", "relname", "relnamespace", "relkind", "reltuples"),
    "pg_namespace": ("oid", "nspname"),
    "pg_attribute": ("attrelid", "attnum", "attname", "atttypid", "atttypmod", "attnotnull", "attisdropped"),
    "pg_constraint": ("conrelid", "conname", "contype", "conkey", "confrelid", "confkey"),
}


def restrict_catalogs(conn: psycopg.Connection, role: str, *, introspects: bool) -> bool:
    """Revoke SELECT on pg_catalog's and information_schema's tables and views from PUBLIC (and
    `role`) in this database; give INTROSPECTION_COLUMNS back to `role` when it `introspects`.

    Needs a superuser (the catalogs' owner); without one it logs a warning, changes nothing and
    returns False, and the README's production steps apply. Other non-superuser roles that connect
    to the clinical database lose catalog access too: grant them what they need by name.
    """
    r = sql.Identifier(role)
    try:
        with conn.transaction():
            for catalog_schema in ("pg_catalog", "information_schema"):
                conn.execute(
                    sql.SQL("REVOKE SELECT ON ALL TABLES IN SCHEMA {} FROM PUBLIC, {}").format(
                        sql.Identifier(catalog_schema), r
                    )
                )
            if introspects:
                for catalog, columns in INTROSPECTION_COLUMNS.items():
                    conn.execute(
                        sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(
                            sql.SQL(", ").join(map(sql.Identifier, columns)),
                            sql.Identifier("pg_catalog", catalog),
                            r,
                        )
                    )
    except psycopg.errors.InsufficientPrivilege as exc:
        logger.warning("could not restrict the catalogs for %s: %s (see README, Database roles)", role, exc)
        return False
    return True
