"""Schema catalog use cases: clinical data loading and documentation curation."""

from __future__ import annotations


def clinical_demo_ensure(*, stdout=None) -> str:
    return "not yet available"
