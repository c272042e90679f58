"""Celery tasks. Thin: take ids, call a service. Named like their service."""

from __future__ import annotations

import logging
import socket

from celery import shared_task
from celery.signals import worker_process_init
from django.conf import settings
from django.db import DatabaseError, connection, connections

from askdb.services.examples import examples_revalidate
from askdb.services.runs import run_execute
from infra.providers.embeddings import get_embedder
from metadata_admin.models import ClinicalSource


@worker_process_init.connect
def _warm_up(**kwargs) -> None:
    """Load the local embedding model when a worker process starts, not in the first question."""
    if settings.EMBEDDING_PROVIDER == "local":
        get_embedder().warm_up()
    _warm_up_answerability()


def _warm_up_answerability() -> None:
    """Load each source's trained answerability model now: loading it takes seconds, and the
    first question a worker takes must not pay for it. A missing or broken model is not an error."""
    try:
        # local, inside the try: a broken answerability install must not stop the worker starting
        from askdb.answerability.scorer import get_scorer

        for source in ClinicalSource.objects.all():
            get_scorer(source)
    except Exception:
        logging.getLogger(__name__).warning("answerability warm-up skipped", exc_info=True)
    finally:
        connections.close_all()  # the forked worker opens its own connections per task


@shared_task(name="askdb.ping", acks_late=True, soft_time_limit=10, time_limit=20)
def ping() -> dict:
    """Proves the whole path: broker → worker → app database."""
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        db_ok = cur.fetchone()[0] == 1
    return {"pong": True, "worker": socket.gethostname(), "database": db_ok}


@shared_task(
    name="askdb.run_question",
    bind=True,
    acks_late=True,
    # Only claiming the run can raise here (the pipeline's own failures end the run with a reason),
    # and claiming is idempotent, so a database hiccup at that moment is simply tried again. LLM
    # calls are never repeated this way: the openai client already retried them with backoff.
    autoretry_for=(DatabaseError,),
    retry_backoff=1,
    max_retries=5,
)
def run_question(self, run_id: int) -> dict:
    run = run_execute(run_id=run_id, worker=self.request.hostname or socket.gethostname())
    if run is None:
        return {"run": run_id, "status": "missing"}
    return {"run": run.pk, "status": run.status, "outcome": run.outcome}


@shared_task(name="askdb.revalidate_examples", acks_late=True, soft_time_limit=600, time_limit=660)
def revalidate_examples(source_id: int, execute: bool = False) -> dict:
    """After a catalog or schema change: mark library examples that no longer validate."""
    source = ClinicalSource.objects.filter(pk=source_id).first()
    if source is None:
        return {"source": source_id, "status": "missing"}
    return examples_revalidate(source=source, execute=execute)
