"""Probes of every part askdb depends on, shared by /healthz, system checks and `demo`.

Each probe answers quickly (short connect timeouts) and never raises: it returns a Probe.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass

from celery import current_app
from django.conf import settings
from django.db import connection

CONNECT_TIMEOUT_S = 3


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str
    ms: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _timed(fn) -> Probe:
    start = time.perf_counter()
    try:
        ok, detail = fn()
    except Exception as exc:  # a probe reports, it never raises
        ok, detail = False, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    return Probe(ok=ok, detail=detail, ms=round((time.perf_counter() - start) * 1000, 1))


def app_database() -> Probe:
    def probe():
        with connection.cursor() as cur:
            cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cur.fetchone()
        return (True, f"pgvector {row[0]}") if row else (False, "pgvector extension not created")

    return _timed(probe)


def pgvector_available() -> Probe:
    def probe():
        with connection.cursor() as cur:
            cur.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
            row = cur.fetchone()
        return (True, f"pgvector {row[0]} available") if row else (False, "pgvector is not installed")

    return _timed(probe)


def _clinical_connect():
    import psycopg

    return psycopg.connect(settings.CLINICAL_DATABASE_URL, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True)


def clinical_database() -> Probe:
    def probe():
        with _clinical_connect() as conn:
            user, db = conn.execute("SELECT current_user, current_database()").fetchone()
        return True, f"{db} as {user}"

    return _timed(probe)


# True when the role behind CLINICAL_DATABASE_URL could change anything in the database. The reader
# may not read pg_roles (the catalogs are revoked, metadata_admin.clinical.loader.restrict_catalogs):
# only a superuser may read pg_authid, so that privilege tells a superuser; the role attributes
# CREATEROLE / CREATEDB are read from pg_roles where it is still readable (CLINICAL_ROLE_ATTRIBUTES).
CLINICAL_ROLE_ATTRIBUTES = "SELECT rolcreaterole OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
CLINICAL_WRITE_PROBE = """
SELECT
  has_table_privilege('pg_catalog.pg_authid', 'SELECT')
  OR has_database_privilege(current_database(), 'CREATE')
  OR EXISTS (
    SELECT 1 FROM pg_namespace n
    WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
      AND has_schema_privilege(n.oid, 'CREATE'))
  OR EXISTS (
    SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema')
      AND (has_table_privilege(c.oid, 'INSERT') OR has_table_privilege(c.oid, 'UPDATE')
           OR has_table_privilege(c.oid, 'DELETE') OR has_table_privilege(c.oid, 'TRUNCATE')))
"""


def clinical_role_read_only() -> Probe:
    def probe():
        if not settings.CLINICAL_DATABASE_URL.startswith(("postgres://", "postgresql://")):
            return True, "not a PostgreSQL source; opened read-only by the executor"
        import psycopg

        with _clinical_connect() as conn:
            can_write = conn.execute(CLINICAL_WRITE_PROBE).fetchone()[0]
            user = conn.execute("SELECT current_user").fetchone()[0]
            # pg_roles revoked: not a superuser (checked above), and the catalogs are locked down.
            with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                can_write = can_write or bool(conn.execute(CLINICAL_ROLE_ATTRIBUTES).fetchone()[0])
        if can_write:
            return False, f"role {user!r} can write to the clinical database"
        return True, f"role {user!r} is read-only"

    return _timed(probe)


def broker() -> Probe:
    def probe():
        # current_app: the project's Celery app, which config (the wiring) created and made current
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_S)
        return True, "reachable"

    return _timed(probe)


def worker(timeout: float = 1.0) -> Probe:
    """Up when some worker has a pool process that is really up. A worker whose main process
    answers while every pool process dies at start (it happened) can take no question."""

    def probe():
        # A connection of its own, not the pool's: a pooled one may still point at a broker that
        # restarted since (a broken pipe, and the probe would call a working worker down).
        with current_app.connection_for_write() as conn:
            replies = (
                current_app.control.broadcast("askdb_pool", reply=True, timeout=timeout, connection=conn)
                or []
            )
        pools = {name: info for reply in replies for name, info in reply.items() if isinstance(info, dict)}
        if not pools:
            return False, "no worker answered"
        up = sum(info.get("up", 0) for info in pools.values())
        total = sum(info.get("concurrency", 0) for info in pools.values())
        names = ", ".join(sorted(pools))
        if not up:
            return False, f"{len(pools)} worker(s) but no pool process is up (0 of {total}): {names}"
        return True, f"{len(pools)} worker(s), {up} of {total} pool processes up: {names}"

    return _timed(probe)


def llm_configured() -> bool:
    return bool(settings.LLM_MODEL)


def llm() -> Probe:
    if llm_configured():
        return Probe(ok=True, detail=f"{settings.LLM_MODEL} at {settings.LLM_BASE_URL or 'api.openai.com'}")
    return Probe(ok=False, detail="no LLM configured: set LLM_BASE_URL, LLM_MODEL and LLM_API_KEY")


def public_health(report: dict) -> dict:
    """What anyone may see of a report: each part's name and state, nothing that names a host,
    a database, a role or an endpoint."""
    parts = {name: value for name, value in report.items() if isinstance(value, dict) and "ok" in value}
    return {
        "ok": report["ok"],
        "status": "ok" if report["ok"] and all(p["ok"] for p in parts.values()) else "degraded",
        "components": {name: "ok" if part["ok"] else "down" for name, part in parts.items()},
        "down": report["down"],
    }


# Without any of these no question is answered: a load balancer must see 503, not 200. A broker
# with no worker consuming it takes questions that then wait forever, so the worker counts too.
ESSENTIAL = ("app_database", "clinical_database", "broker", "worker")


def system_health() -> dict:
    """Everything /healthz reports. `ok` is false when a part askdb cannot work without is down."""
    parts = {
        "app_database": app_database(),
        "clinical_database": clinical_database(),
        "broker": broker(),
        "worker": worker(),
        "llm": llm(),
    }
    down = [name for name in ESSENTIAL if not parts[name].ok]
    return {
        "ok": not down,
        "down": down,
        "llm_configured": llm_configured(),
        **{name: probe.as_dict() for name, probe in parts.items()},
    }
