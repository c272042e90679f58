"""The bound SQL's validation, remembered per catalog: the same bound SQL comes back question after
question, and fold after fold in a calibration (a quarter of a calibration's validations repeat an
earlier one), and validating it again parses it again.

Pure: validate_sql is a function of the SQL text and the catalog alone, so its verdict is kept on
the catalog object it was asked of (a new catalog, after the source's tables change, starts empty)."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.template import read_back
from core.types import CatalogSchema
from core.validation import SqlValidationError, validate_sql

MAX_KEPT = 20_000  # verdicts kept per catalog (a few MB of SQL text); beyond, start again
UNREADABLE, NOT_ONE_QUERY = "unreadable", "not one query"
_READ_BACK: dict[tuple[str, str], str] = {}  # (bound SQL, dialect) -> read_back_problem's verdict


def read_back_problem(sql: str, dialect: str) -> str:
    """ "" when the bound SQL reads back as a single query (template.read_back), else UNREADABLE or
    NOT_ONE_QUERY: remembered per text (read_back keeps 1,024 trees; the same bound SQL comes back
    fold after fold, long after its tree has gone). Only sqlglot's own verdicts are remembered: any
    other failure is UNREADABLE this time and asked again the next."""
    key = (sql, dialect)
    if key not in _READ_BACK:
        try:
            statements = read_back(sql, dialect)
        except (SqlglotError, ValueError, RecursionError):
            problem = UNREADABLE
        except Exception:  # fail closed, and do not remember what may not happen again
            return UNREADABLE
        else:
            problem = "" if len(statements) == 1 and isinstance(statements[0], exp.Query) else NOT_ONE_QUERY
        if len(_READ_BACK) >= MAX_KEPT:
            _READ_BACK.clear()
        _READ_BACK[key] = problem
    return _READ_BACK[key]


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
