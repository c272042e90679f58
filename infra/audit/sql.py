"""The audit event of one SQL statement run against clinical data: one helper for every caller
(the pipeline's ports, reviewers' checks, imports), below the apps so an adapter can use it."""

from __future__ import annotations

import hashlib

from infra.audit.services import audit_event


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
