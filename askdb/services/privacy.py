"""Privacy rules for a user on a source: the policy the pipeline enforces (small-cell size from
the source, row-level and sensitive-column rights from the role, sensitive columns from the
catalog), and the same protection for results that reach a run outside the pipeline."""

from __future__ import annotations

from django.conf import settings

from askdb.pipeline import privacy
from askdb.services.sql import ReviewError, sql_check
from metadata_admin.models import ColumnDoc
from metadata_admin.selectors import reference_tables
from metadata_admin.services import source_catalog_schema


def privacy_policy(*, source, user, evaluation: bool = False) -> privacy.PrivacyPolicy:
    """What `user` may see of `source` (user None: the strictest rights). Row-level results need
    the role's view_row_level permission and a source that is not aggregate-only.

    An evaluation run (`evaluation`) measures askdb's SQL against gold answers for admins; its
    inactive user holds no permission, so the rights come from the channel, not the user. The
    source's small-cell rule applies to it like to any run. Queries that read only the catalog's
    reference tables (code dictionaries) are not patient data and are open to aggregate-only users."""
    sensitive = ColumnDoc.objects.filter(table__source=source, sensitive=True).values_list(
        "table__name", "name"
    )
    return privacy.PrivacyPolicy(
        min_cell_size=source.min_cell_size,
        row_level=evaluation
        or (not source.aggregate_only and bool(user and user.has_perm("askdb.view_row_level"))),
        sensitive_allowed=evaluation or bool(user and user.has_perm("askdb.view_sensitive")),
        sensitive_columns=frozenset(f"{t}.{c}".lower() for t, c in sensitive),
        identifier_columns=frozenset(settings.ASKDB_IDENTIFIER_COLUMNS),
        reference_tables=reference_tables(source, settings.ASKDB_IDENTIFIER_COLUMNS),
    )


def result_protect(*, run, sql: str, result) -> privacy.ProtectedResult:
    """A result that reached a run outside the pipeline, protected for the person who asked.

    Prefer run_sql_protected, which checks the rights before anything runs (and rewrites an
    aggregate-only query); this one is for a result already in hand. Raises ReviewError."""
    source = run.question.source
    policy = privacy_policy(source=source, user=run.question.user)
    analysis = privacy.analyse_output(
        sql, source.dialect, policy=policy, catalog=source_catalog_schema(source)
    )
    try:
        privacy.check_access(analysis, policy, sql=sql, dialect=source.dialect)
    except privacy.PrivacyRefusal as exc:
        raise ReviewError(f"The person who asked may not see this result: {exc.message}") from exc
    return privacy.protect(result, analysis, policy)


def run_sql_protected(*, run, sql: str, actor, purpose: str):
    """Run SQL for a run outside the pipeline (a reviewer's correction, a picked candidate) as
    any answer runs: validated once, the asker's rights checked on that tree before it runs, the
    SQL generated from the tree (rewritten for an aggregate-only asker) sent, the result
    protected. Returns (ValidatedSql, ProtectedResult); raises ReviewError."""
    source = run.question.source
    return sql_check(
        source=source, sql=sql, actor=actor, purpose=purpose, run=run,
        policy=privacy_policy(source=source, user=run.question.user),
        refusal_prefix="The person who asked may not see this result: ",
    )  # fmt: skip
