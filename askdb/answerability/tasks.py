"""The Celery task that trains the answerability model (the admin's "train" action queues it)."""

from __future__ import annotations

import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="askdb.answerability_train", bind=True)
def answerability_train_task(self, source_id: int, activate: bool = True) -> dict:
    """Train on the source's library, store and (by default) activate a new version. Each
    progress line goes to the worker log and to the task's state (state PROGRESS, the line in
    its meta), which the library page polls; the result names the version and its numbers."""
    from askdb.answerability.data import answerability_train
    from metadata_admin.models import ClinicalSource

    source = ClinicalSource.objects.get(pk=source_id)

    def progress(line: str) -> None:
        logger.info("answerability %s: %s", source.name, line)
        if self.request.id:  # not when called directly, without a broker
            self.update_state(state="PROGRESS", meta={"source": source.name, "line": line})

    report = answerability_train(source=source, activate=activate, progress=progress)
    m = report.manifest
    return {"source": source.name, "version": report.version, "metrics": report.metrics,
            "seconds": m["seconds"], "peak_memory_mb": m["peak_memory_mb"]}  # fmt: skip
