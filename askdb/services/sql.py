"""People's SQL checked against the catalog and run read-only, audited: the one path by which
corrections, imports, re-validation and chosen candidates reach the clinical database."""

from __future__ import annotations

from django.conf import settings

from core import privacy
from core.prepared import PreparedSql, prepare_sql, protect_prepared
from core.types import ValidatedSql
from core.validation import SqlValidationError, validate_sql
from infra.adapters.clinical import ExecutionError
from infra.audit.sql import audit_sql_executed
from metadata_admin.services import source_catalog_schema, source_executor


class ReviewError(ValueError):
    """A review action that cannot be done, with a sentence the reviewer can act on.

    Raised by sql_check, so by every review, library and candidate action built on it; it lives
    here, below them all."""


def _catalog_and_executor(source, *, sensitive: bool = True):
    return source_catalog_schema(source), source_executor(source, sensitive=sensitive)


def _asker_may_read_sensitive(run) -> bool:
    """SQL run for a run's result (a correction, a picked candidate) reads as the person who asked
    would: the database refuses them sensitive columns unless they hold view_sensitive (an
    evaluation run keeps its rights, as in askdb.services.privacy.privacy_policy)."""
    question = run.question
    return question.channel == "evaluation" or bool(
        question.user and question.user.has_perm("askdb.view_sensitive")
    )


def sql_check(
    *, source, sql: str, execute: bool = True, row_cap: int | None = None, actor=None, purpose: str = "check",
    run=None, policy: privacy.PrivacyPolicy | None = None, refusal_prefix: str = "",
    timeout_s: float | None = None, cancel=None,
):  # fmt: skip
    """Validate SQL against a source's catalog and (optionally) run it read-only, audited.

    Returns (ValidatedSql, result | None); raises ReviewError with the real error. The one path
    by which people's SQL (corrections, imports, re-validation, picked candidates) reaches the
    database, and what is sent is always generated from the validated tree. With `policy` (whose
    rights the result is for), the rights are checked on that tree before anything runs, an
    aggregate-only query is rewritten to count the people behind each row, and the result
    returned is the protected one (privacy.ProtectedResult). `timeout_s` (default: the statement
    timeout) and `cancel` (a threading.Event) are for a long query; the ReviewError of a failed
    run has the executor's ExecutionError (its code: timeout, cancelled…) as its __cause__.
    """
    if execute and policy is not None:
        prepared, protected = sql_check_protected(source=source, sql=sql, policy=policy, row_cap=row_cap,
                                                  actor=actor, purpose=purpose, run=run,
                                                  refusal_prefix=refusal_prefix, timeout_s=timeout_s,
                                                  cancel=cancel)  # fmt: skip
        return prepared.validated, protected
    catalog, executor = _catalog_and_executor(source, sensitive=run is None or _asker_may_read_sensitive(run))
    validated = _validated(sql, catalog)
    if not execute:
        return validated, None
    return validated, _execute_audited(executor, validated.sql, source=source, row_cap=row_cap, actor=actor,
                                       purpose=purpose, run=run, timeout_s=timeout_s, cancel=cancel)  # fmt: skip


def sql_check_protected(
    *, source, sql: str, policy: privacy.PrivacyPolicy, row_cap: int | None = None, actor=None,
    purpose: str = "check", run=None, refusal_prefix: str = "", timeout_s: float | None = None, cancel=None,
) -> tuple[PreparedSql, privacy.ProtectedResult]:  # fmt: skip
    """sql_check with `policy`, returning the PreparedSql itself: its output analysis (made once,
    on the validated tree) is what the disclosure release then reads, instead of a second parse."""
    catalog, executor = _catalog_and_executor(source, sensitive=run is None or _asker_may_read_sensitive(run))
    validated = _validated(sql, catalog)
    try:
        prepared = prepare_sql(validated, catalog, policy)
    except privacy.PrivacyRefusal as exc:
        raise ReviewError(f"{refusal_prefix}{exc.message}") from exc
    result = _execute_audited(executor, prepared.sql, source=source, row_cap=row_cap, actor=actor,
                              purpose=purpose, run=run, timeout_s=timeout_s, cancel=cancel)  # fmt: skip
    return prepared, protect_prepared(prepared, result, policy)


def _validated(sql: str, catalog) -> ValidatedSql:
    try:
        return validate_sql(sql, catalog)
    except SqlValidationError as exc:
        raise ReviewError(f"The SQL is not valid: {exc.message}") from exc


def _execute_audited(
    executor, statement: str, *, source, row_cap: int | None, actor, purpose: str, run,
    timeout_s: float | None = None, cancel=None,
):  # fmt: skip
    try:
        result = executor.execute(
            statement, timeout_s=timeout_s or settings.CLINICAL_STATEMENT_TIMEOUT_S,
            row_cap=row_cap or settings.CLINICAL_ROW_CAP, cancel=cancel,
        )  # fmt: skip
    except ExecutionError as exc:
        audit_sql_executed(actor=actor, source=source, sql=statement, purpose=purpose, rows=None,
                           duration_ms=None, outcome=exc.code, run=run, error=exc.message)  # fmt: skip
        raise ReviewError(f"The SQL failed when run: {exc.message}") from exc
    audit_sql_executed(actor=actor, source=source, sql=statement, purpose=purpose, rows=result.row_count,
                       duration_ms=result.elapsed_ms, outcome="ok", run=run)  # fmt: skip
    return result
