"""Privacy rules for a user on a source: the policy the pipeline enforces (small-cell size from
the source, row-level and sensitive-column rights from the role, sensitive columns from the
catalog), and the same protection for results that reach a run outside the pipeline."""

from __future__ import annotations

import threading
from dataclasses import replace

from django.conf import settings

from askdb.services.disclosure import DatabaseLedger, disclosure_key, disclosure_policy
from askdb.services.sql import ReviewError, sql_check, sql_check_protected
from core import disclosure, privacy
from core.disclosure import PERTURBING, DisclosurePolicy
from metadata_admin.models import ColumnDoc
from metadata_admin.selectors import CatalogSnapshot, reference_tables
from metadata_admin.services import source_catalog_schema

_CATALOG_PRIVACY_MAX = 16
_catalog_privacy: dict[tuple, tuple[frozenset[str], frozenset[str]]] = {}
_catalog_privacy_lock = threading.Lock()


def _catalog_columns(source, snapshot: CatalogSnapshot | None) -> tuple[frozenset[str], frozenset[str]]:
    """(sensitive "table.column" names, reference tables) of the source's catalog: two queries,
    or none when the run already read the catalog's stamp (`snapshot`): both come from table and
    column docs, whose every change changes the stamp, so they are kept per stamp in this process."""
    identifiers = tuple(settings.ASKDB_IDENTIFIER_COLUMNS)
    key = (source.pk, snapshot.stamp, identifiers) if snapshot is not None else None
    if key is not None and key in _catalog_privacy:
        return _catalog_privacy[key]
    sensitive = ColumnDoc.objects.filter(table__source=source, sensitive=True).values_list(
        "table__name", "name"
    )
    found = (frozenset(f"{t}.{c}".lower() for t, c in sensitive), reference_tables(source, identifiers))
    if key is not None:
        with _catalog_privacy_lock:
            if len(_catalog_privacy) >= _CATALOG_PRIVACY_MAX:
                _catalog_privacy.clear()
            _catalog_privacy[key] = found
    return found


def privacy_policy(
    *, source, user, evaluation: bool = False, snapshot: CatalogSnapshot | None = None
) -> privacy.PrivacyPolicy:
    """What `user` may see of `source` (user None: the strictest rights). Row-level results need
    the role's view_row_level permission and a source that is not aggregate-only.

    An evaluation run (`evaluation`) measures askdb's SQL against gold answers for admins; its
    inactive user holds no permission, so the rights come from the channel, not the user. The
    source's small-cell rule applies to it like to any run. Queries that read only the catalog's
    reference tables (code dictionaries) are not patient data and are open to aggregate-only users.
    `snapshot`: the catalog as this run read it, so the catalog's part costs no query."""
    sensitive, reference = _catalog_columns(source, snapshot)
    return privacy.PrivacyPolicy(
        min_cell_size=source.min_cell_size,
        row_level=evaluation
        or (not source.aggregate_only and bool(user and user.has_perm("askdb.view_row_level"))),
        sensitive_allowed=evaluation or bool(user and user.has_perm("askdb.view_sensitive")),
        sensitive_columns=sensitive,
        identifier_columns=frozenset(settings.ASKDB_IDENTIFIER_COLUMNS),
        reference_tables=reference,
    )


def release_policies(
    *, source, user, evaluation: bool = False, snapshot: CatalogSnapshot | None = None
) -> tuple[privacy.PrivacyPolicy, DisclosurePolicy]:
    """The privacy policy and the disclosure policy a run applies. With a perturbing mode (noise,
    dp) small cells are judged on the released count, after the noise, so privacy.protect gets k = 0
    and the disclosure policy carries k (suppressing on the true count would tell which are small)."""
    policy = privacy_policy(source=source, user=user, evaluation=evaluation, snapshot=snapshot)
    control = disclosure_policy(source=source, user=user, evaluation=evaluation)
    if control.mode in PERTURBING:
        policy = replace(policy, min_cell_size=0)
    return policy, control


def result_protect(*, run, sql: str, result) -> privacy.ProtectedResult:
    """A result that reaches a run outside the pipeline (a reviewer's correction, a picked
    candidate) is protected like any answer, for the person who asked: their rights, the source's k,
    the source's disclosure mode (rounding or noise, the differencing limit, their budget).

    Raises ReviewError with the reason when the asker may not see this output."""
    source, user = run.question.source, run.question.user
    policy, control = release_policies(source=source, user=user)
    analysis = privacy.analyse_output(
        sql, source.dialect, policy=policy, catalog=source_catalog_schema(source)
    )
    try:
        privacy.check_access(analysis, policy, sql=sql, dialect=source.dialect)
        return disclosure.release(
            privacy.protect(result, analysis, policy), analysis, control, sql=sql, dialect=source.dialect,
            catalog=source_catalog_schema(source), ledger=DatabaseLedger(source=source, user=user, run=run),
            key=disclosure_key(user=user), row_level=policy.row_level,
            execute=lambda text: _dp_execute(run=run, sql=text),
        )  # fmt: skip
    except privacy.PrivacyRefusal as exc:
        raise ReviewError(f"The person who asked may not see this result: {exc.message}") from exc


def run_sql_protected(*, run, sql: str, actor, purpose: str, timeout_s: float | None = None, cancel=None):
    """Run SQL for a run outside the pipeline (a reviewer's correction, a picked candidate) as
    any answer runs: validated once, the asker's rights checked on that tree before it runs, the
    SQL generated from the tree (rewritten for an aggregate-only asker) sent, the result
    protected and released in the source's disclosure mode (rounding or noise, the differencing
    limit, the asker's budget). Returns (ValidatedSql, ProtectedResult); raises ReviewError.
    A long query passes its own `timeout_s` and a `cancel` event (see sql_check)."""
    source, user = run.question.source, run.question.user
    policy, control = release_policies(source=source, user=user)
    prefix = "The person who asked may not see this result: "
    prepared, protected = sql_check_protected(
        source=source, sql=sql, actor=actor, purpose=purpose, run=run, policy=policy, refusal_prefix=prefix,
        timeout_s=timeout_s, cancel=cancel,
    )  # fmt: skip
    validated = prepared.validated
    try:
        released = disclosure.release(
            protected, prepared.analysis, control, sql=validated.sql, dialect=source.dialect,
            catalog=source_catalog_schema(source), ledger=DatabaseLedger(source=source, user=user, run=run),
            key=disclosure_key(user=user), row_level=policy.row_level,
            execute=lambda text: _dp_execute(run=run, sql=text),
        )  # fmt: skip
    except privacy.PrivacyRefusal as exc:
        raise ReviewError(f"{prefix}{exc.message}") from exc
    return validated, released


def _dp_execute(*, run, sql: str) -> tuple[list[str], list[list]]:
    """smartnoise-sql's rewritten SQL, validated, executed read-only and audited like any SQL."""
    _, out = sql_check(source=run.question.source, sql=sql, purpose="dp", run=run)
    return list(out.columns), [list(r) for r in out.rows]
