"""What of a result may be shown to the LLM: aggregates yes, patient-level rows only if allowed."""

from __future__ import annotations

import math

import sqlglot
from sqlglot import exp


def is_aggregate_query(sql: str, dialect: str = "postgres") -> bool:
    """True when every output row summarises many rows (aggregates or GROUP BY at the top)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return False
    selects = [tree] if isinstance(tree, exp.Select) else list(tree.find_all(exp.Select))[:1]
    if isinstance(tree, exp.Union | exp.Except | exp.Intersect):
        return False
    for select in selects:
        if select.args.get("group"):
            return True
        outputs = select.expressions
        if outputs and all(o.find(exp.AggFunc) is not None and o.find(exp.Window) is None for o in outputs):
            return True
    return False


def _is_number(v) -> bool:
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and not (isinstance(v, float) and math.isnan(v))
    )


def result_preview(
    columns: list[str], rows: list[list], *, aggregate: bool, row_level_allowed: bool, max_rows: int = 20
) -> str:
    """Text for the summary prompt: rows when they are aggregates (or allowed), else column statistics."""
    if not rows:
        return "(no rows)"
    if aggregate or row_level_allowed:
        lines = [" | ".join(columns)]
        lines += [" | ".join("NULL" if v is None else str(v) for v in row) for row in rows[:max_rows]]
        if len(rows) > max_rows:
            lines.append(f"… {len(rows) - max_rows} more rows")
        return "\n".join(lines)
    lines = ["(patient-level rows are not shared; column statistics only)"]
    for i, name in enumerate(columns):
        values = [r[i] for r in rows]
        present = [v for v in values if v is not None]
        nulls = len(values) - len(present)
        numbers = [v for v in present if _is_number(v)]
        if present and len(numbers) == len(present):
            mean = sum(numbers) / len(numbers)
            lines.append(f"{name}: min {min(numbers):g}, max {max(numbers):g}, mean {mean:.3g}, {nulls} NULL")
        else:
            lines.append(f"{name}: {len(set(map(str, present)))} distinct values, {nulls} NULL")
    return "\n".join(lines)
