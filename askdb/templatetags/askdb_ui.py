"""Template filters for showing results as people read them (rounded numbers, plain outcomes)."""

from __future__ import annotations

from django import template

from askdb.outcomes import run_outcome
from core.answer import format_cell

register = template.Library()


@register.filter
def cell(value, fmt: str = "") -> str:
    """A result cell: numbers rounded sensibly (or as the catalog's format for its column says),
    NULL spelled out (the download keeps every digit)."""
    return format_cell(value, fmt)


@register.filter
def outcome(run):
    """The run's outcome as askdb/outcomes.py words it (label, sentence, next step, tone)."""
    return run_outcome(run)
