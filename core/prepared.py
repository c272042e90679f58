"""The one road from someone's SQL to the database: validate it once, read the privacy rules off
that same tree, rewrite it when the user may see only aggregates, and send the SQL generated
from the tree, never the text the LLM, a reviewer, an import or a picked candidate wrote.

Every executor call of people's or an LLM's SQL goes through `prepare_sql` (the pipeline, the
library's answers, reviews, picked candidates, imports); its result is then shown through
`protect_prepared`, which suppresses small cells and drops the columns askdb added.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core import aggregate, privacy
from core.types import CatalogSchema, ValidatedSql
from core.validation import validate_sql


@dataclass(frozen=True)
class PreparedSql:
    """SQL ready to run: what was validated, what it outputs, and the statement to send."""

    validated: ValidatedSql  # the tree every check read, and the SQL generated from it
    analysis: privacy.OutputAnalysis
    sql: str  # sent to the database: validated.sql, or its aggregate rewrite
    people_column: str = ""  # the column askdb added (distinct people per row); dropped before display


def prepare_sql(
    sql: str | ValidatedSql, catalog: CatalogSchema, policy: privacy.PrivacyPolicy, *, question: str = ""
) -> PreparedSql:
    """Validate `sql` (or take a ValidatedSql), check the user's rights on its tree and return the
    statement to run. Raises SqlValidationError or privacy.PrivacyRefusal with a sentence."""
    validated = (
        sql if isinstance(sql, ValidatedSql) and sql.tree is not None else validate_sql(_text(sql), catalog)
    )
    tree, dialect = validated.tree, catalog.dialect
    analysis = privacy.analyse_output(tree, dialect, policy=policy, catalog=catalog)
    open_data = policy.row_level or analysis.reads_only(policy.reference_tables)
    # Sensitive columns first (for everyone); then, for an aggregate-only user, a listing is
    # refused with the aggregate askdb can offer instead.
    privacy.check_access(analysis, policy if open_data else replace(policy, row_level=True), sql=validated.sql,
                         question=question, dialect=dialect)  # fmt: skip
    if open_data:
        return PreparedSql(validated=validated, analysis=analysis, sql=validated.sql)
    if not analysis.aggregated:
        privacy.check_access(analysis, policy, sql=validated.sql, question=question, dialect=dialect)
    # Aggregate-only: the query must fall in the safe aggregate fragment, and is rewritten to
    # count the people behind each output row.
    rewrite = aggregate.rewrite(tree, catalog, policy)
    return PreparedSql(
        validated=validated, analysis=rewrite.analysis, sql=rewrite.sql, people_column=aggregate.PEOPLE_COLUMN
    )


def protect_prepared(prepared: PreparedSql, result, policy: privacy.PrivacyPolicy) -> privacy.ProtectedResult:
    """The result as every consumer may see it (page, CSV, XLSX, API, the LLM's summary)."""
    if prepared.people_column:
        return aggregate.protect(result, prepared.analysis, policy, prepared.people_column)
    return privacy.protect(result, prepared.analysis, policy)


def _text(sql: str | ValidatedSql) -> str:
    return sql.sql if isinstance(sql, ValidatedSql) else sql
