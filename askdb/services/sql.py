"""People's SQL checked against the catalog and run read-only, audited: the one path by which
corrections, imports, re-validation and chosen candidates reach the clinical database."""

from __future__ import annotations

import hashlib

from django.conf import settings

from askdb.pipeline import privacy
from askdb.pipeline.prepared import prepare_sql, protect_prepared
from askdb.pipeline.validation import SqlValidationError, validate_sql
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_event
from metadata_admin.services import source_catalog_schema, source_executor


class ReviewError(ValueError):
    """A review action that cannot be done, with a sentence the reviewer can act on.

    Raised by sql_check, so by every review, library and candidate action built on it; it lives
    here, below them all."""


def _catalog_and_executor(source):
    return source_catalog_schema(source), source_executor(source)


def sql_check(
    *, source, sql: str, execute: bool = True, row_cap: int | None = None, actor=None, purpose: str = "check",
    run=None, policy: privacy.PrivacyPolicy | None = None, refusal_prefix: str = "",
):  # fmt: skip
    """Validate SQL against a source's catalog and (optionally) run it read-only, audited.

    Returns (ValidatedSql, result | None); raises ReviewError with the real error. The one path
    by which people's SQL (corrections, imports, re-validation, picked candidates) reaches the
    database, and what is sent is always generated from the validated tree. With `policy` (whose
    rights the result is for), the rights are checked on that tree before anything runs, an
    aggregate-only query is rewritten to count the people behind each row, and the result
    returned is the protected one (privacy.ProtectedResult).
    """
    catalog, executor = _catalog_and_executor(source)
    try:
        validated = validate_sql(sql, catalog)
    except SqlValidationError as exc:
        raise ReviewError(f"The SQL is not valid: {exc.message}") from exc
    if not execute:
        return validated, None
    prepared = None
    if policy is not None:
        try:
            prepared = prepare_sql(validated, catalog, policy)
        except privacy.PrivacyRefusal as exc:
            raise ReviewError(f"{refusal_prefix}{exc.message}") from exc
    statement = prepared.sql if prepared is not None else validated.sql
    try:
        result = executor.execute(
            statement, timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S,
            row_cap=row_cap or settings.CLINICAL_ROW_CAP,
        )  # fmt: skip
    except ExecutionError as exc:
        audit_sql_executed(actor=actor, source=source, sql=statement, purpose=purpose, rows=None,
                           duration_ms=None, outcome=exc.code, run=run, error=exc.message)  # fmt: skip
        raise ReviewError(f"The SQL failed when run: {exc.message}") from exc
    audit_sql_executed(actor=actor, source=source, sql=statement, purpose=purpose, rows=result.row_count,
                       duration_ms=result.elapsed_ms, outcome="ok", run=run)  # fmt: skip
    if prepared is not None:
        return validated, protect_prepared(prepared, result, policy)
    return validated, result


def audit_sql_executed(
    *, actor=None, source, sql: str, purpose: str, rows: int | None, duration_ms: float | None,
    outcome: str, run=None, error: str = "", action: str = "sql.executed",
) -> None:  # fmt: skip
    """An audit event per SQL statement run against clinical data: text, hash, source, size, time.

    `action` is "sql.explained" for the EXPLAINs a run makes while checking its candidates.
    """
    sql_audit_event(actor=actor, source=source, sql=sql, purpose=purpose, rows=rows, duration_ms=duration_ms,
                    outcome=outcome, run=run, error=error, action=action).save()  # fmt: skip


def sql_audit_event(
    *, actor=None, source, sql: str, purpose: str, rows: int | None, duration_ms: float | None,
    outcome: str, run=None, error: str = "", action: str = "sql.executed",
):  # fmt: skip
    """The event audit_sql_executed records, unsaved (a bulk import writes thousands at once)."""
    return audit_event(
        action=action, actor=actor, target=run if run is not None else source,
        message=f"{purpose}: {outcome}",
        detail={
            "sql": sql[:8000], "sha256": hashlib.sha256(sql.encode()).hexdigest(), "source": source.name,
            "rows": rows, "duration_ms": round(duration_ms, 1) if duration_ms is not None else None,
            "outcome": outcome, "purpose": purpose, "error": error[:500],
        },
    )  # fmt: skip
