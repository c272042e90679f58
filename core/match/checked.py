"""The bound SQL's validation, remembered per catalog: the same bound SQL comes back question after
question, and fold after fold in a calibration (a quarter of a calibration's validations repeat an
earlier one), and validating it again parses it again.

Pure: validate_sql is a function of the SQL text and the catalog alone, so its verdict is kept on
the catalog object it was asked of (a new catalog, after the source's tables change, starts empty)."""

from __future__ import annotations

from core.types import CatalogSchema
from core.validation import SqlValidationError, validate_sql

MAX_KEPT = 20_000  # verdicts kept per catalog (a few MB of SQL text); beyond, start again


def validation_error(sql: str, catalog: CatalogSchema) -> str | None:
    """Why `sql` does not validate against `catalog` (SqlValidationError's message), or None when
    it does: validate_sql's verdict, asked of it once per SQL text and catalog."""
    memo: dict[str, str | None] = catalog.__dict__.setdefault("_validation_errors", {})
    if sql not in memo:
        if len(memo) >= MAX_KEPT:
            memo.clear()
        try:
            validate_sql(sql, catalog)
            memo[sql] = None
        except SqlValidationError as error:
            memo[sql] = error.message
    return memo[sql]
