"""Large example imports as background jobs: the API saves the pairs in an ImportJob and a worker
imports them (askdb.tasks.import_examples), telling the job how far it got. Small imports stay in
the request (examples_import), where their report comes back at once."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

from askdb.models import ImportJob
from askdb.services.exports import ImportReport, examples_import
from infra.audit.services import audit_record
from infra.queue import task_send

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0  # the job row is updated at most this often while pairs are imported


class ImportQueueUnavailable(RuntimeError):
    """The broker refused the job: the job is failed with this sentence, nothing was imported."""


def import_is_large(items: list) -> bool:
    return len(items) > settings.ASKDB_IMPORT_SYNC_MAX


def import_job_submit(*, source, items: list[dict], approved_by, execute: bool = True) -> ImportJob:
    """Save the pairs and queue their import; ImportQueueUnavailable when the broker is down."""
    with transaction.atomic():
        job = ImportJob.objects.create(
            source=source, approved_by=approved_by, execute=execute, items=items, total=len(items)
        )
        audit_record(action="examples.import_queued", actor=approved_by, target=source,
                     message=f"{len(items)} pairs", detail={"job": job.pk})  # fmt: skip
    try:
        task_send("askdb.import_examples", job.pk)
    except (BrokerError, OSError) as exc:
        message = "The job queue is not reachable right now; nothing was imported. Try again shortly."
        ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.FAILED, error=message, items=[])
        logger.warning("import job %s not queued: %s", job.pk, exc)
        raise ImportQueueUnavailable(message) from exc
    return job


def report_as_dict(report: ImportReport) -> dict:
    return {"created": report.created, "merged": report.merged, "failed": report.failed,
            "summary": report.summary()}  # fmt: skip


def import_job_run(*, job_id: int) -> ImportJob | None:
    """Import a queued job's pairs (once: a second delivery finds it claimed and does nothing)."""
    if not ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.QUEUED).update(
        status=ImportJob.Status.RUNNING
    ):
        return ImportJob.objects.filter(pk=job_id).first()
    job = ImportJob.objects.select_related("source", "approved_by").get(pk=job_id)
    last = [0.0]

    def progress(done: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or done >= job.total:
            last[0] = now
            ImportJob.objects.filter(pk=job_id).update(done=done)

    try:
        report = examples_import(
            source=job.source, items=job.items, approved_by=job.approved_by, execute=job.execute,
            origin="import", progress=progress,
        )  # fmt: skip
    except Exception as exc:  # the job says why; pairs imported before the failure are kept
        logger.warning("import job %s failed", job_id, exc_info=True)
        ImportJob.objects.filter(pk=job_id).update(
            status=ImportJob.Status.FAILED,
            error=f"The import stopped: {exc}. Pairs checked before this were kept; import again once it is fixed.",
        )
        return ImportJob.objects.get(pk=job_id)
    ImportJob.objects.filter(pk=job_id).update(
        status=ImportJob.Status.SUCCEEDED, done=report.total, report=report_as_dict(report), items=[]
    )
    return ImportJob.objects.get(pk=job_id)
