"""A worker process of a calibration (calibration.library_cross_validate): it reads the library once,
then does the parts of the cross-validation it is given, as the calling process would.

Started with `spawn`, never `fork`: a forked child inherits the parent's database connections and
threads (a fork once hung CI). So this module imports nothing of Django at import time: the child
imports it to find `start` and `part` before Django is set up, and `start` sets it up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_WORKER: dict[str, Any] = {}  # this process's library and callbacks, made once by `start`


def start(source_pk: int, database: str) -> None:
    """Set up Django in this child (the parent's settings, through the environment it inherits) on
    the parent's database (`database`: its name, a test database in tests), and read the library."""
    import django

    django.setup()
    from django.db import connections

    connections["default"].close()
    connections["default"].settings_dict["NAME"] = database
    from askdb.services.calibration_context import cv_context
    from metadata_admin.models import ClinicalSource

    _WORKER.update(cv_context(ClinicalSource.objects.get(pk=source_pk)))


def part(part: Any, labelled: Sequence[tuple[str, str, Sequence[float]]] = ()) -> tuple[list, int]:
    """One part's samples (core.match.calibrate.run_part) and how many questions it asked, for the
    parent's progress. `labelled`: the part's own labelled questions (the part's slice of them)."""
    from core import match

    asked = [0]

    def count(_: int) -> None:
        asked[0] += 1

    # run_part reads labelled[n] for n in a labelled part's slice
    padded = [None] * part.start + list(labelled) if part.kind == "labelled" else []
    found = match.run_part(part, **_WORKER, labelled=padded, progress=count)  # type: ignore[arg-type]
    return found, asked[0]
