"""Are two query results the same answer? The EHRSQL way, shared by evaluation and sampling.

EHRSQL scores execution accuracy by comparing results, not SQL text: numeric cells are
rounded to 3 decimals, rows are sorted, only the first 100 rows count, column order is kept
and column names are ignored. Two different SQL statements that return the same rows are the
same answer; that is what both the evaluation harness (gold vs predicted) and candidate
sampling (one candidate vs another) need to know.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterable, Sequence
from typing import Any

ROUND_DIGITS = 3
ROW_LIMIT = 100


def normalize_cell(value: Any, digits: int = ROUND_DIGITS) -> str:
    """One cell as comparable text: numbers rounded (and 3 == 3.0), None as "null".

    Numeric strings count as numbers too, because SQLite and PostgreSQL disagree on which
    expressions return text; booleans stay booleans.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    number: float | None = None
    if isinstance(value, int | float | decimal.Decimal):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            number = float(text) if text and text.lower() not in {"nan", "inf", "-inf", "infinity"} else None
        except ValueError:
            number = None
        if number is None:
            return text
    elif isinstance(value, dt.datetime):
        return value.replace(tzinfo=None).isoformat(sep=" ")
    elif isinstance(value, dt.date | dt.time):
        return value.isoformat()
    elif isinstance(value, dt.timedelta):
        return f"{value.total_seconds():.{digits}f}s"
    else:
        return str(value)
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    rounded = round(number, digits)
    if rounded == 0:
        rounded = 0.0  # -0.0 and 0.0 are one answer
    return repr(float(rounded))


def normalize_rows(
    rows: Iterable[Sequence[Any]], *, digits: int = ROUND_DIGITS, limit: int = ROW_LIMIT
) -> tuple[tuple[str, ...], ...]:
    """Rows as a canonical, hashable value: cells normalized, rows sorted, first `limit` kept.

    Sorting happens before the cut so that two unordered results of more than `limit` rows
    compare by content, not by the order the engine happened to return.
    """
    normalized = sorted(tuple(normalize_cell(c, digits) for c in row) for row in rows)
    return tuple(normalized[:limit])


def results_match(
    a: Iterable[Sequence[Any]],
    b: Iterable[Sequence[Any]],
    *,
    digits: int = ROUND_DIGITS,
    limit: int = ROW_LIMIT,
) -> bool:
    """True when two results are the same answer by the EHRSQL rules (column names ignored)."""
    return normalize_rows(a, digits=digits, limit=limit) == normalize_rows(b, digits=digits, limit=limit)
