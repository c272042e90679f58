"""The Celery task that trains the answerability model (the admin's "train" action queues it)."""

from __future__ import annotations

import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="askdb.answerability_train")
def answerability_train_task(source_id: int, activate: bool = True) -> dict:
    """Train on the source's library, store and (by default) activate a new version. Each
    progress line goes to the worker log; the result names the version and its numbers."""
    from askdb.answerability.data import answerability_train
    from metadata_admin.models import ClinicalSource

    source = ClinicalSource.objects.get(pk=source_id)
    report = answerability_train(
        source=source,
        activate=activate,
        progress=lambda line: logger.info("answerability %s: %s", source.name, line),
    )
    m = report.manifest
    return {"version": report.version, "metrics": report.metrics, "seconds": m["seconds"],
            "peak_memory_mb": m["peak_memory_mb"]}  # fmt: skip
