"""Celery tasks. Thin: take ids, call a service. Named like their service."""

from __future__ import annotations

import logging
import socket
import threading

from celery import shared_task
from celery.signals import worker_init, worker_process_init
from celery.worker.control import inspect_command
from django.conf import settings
from django.db import DatabaseError, connection, connections

from askdb.answerability.tasks import answerability_train_task  # noqa: F401  (registered with the worker)
from askdb.services.examples import example_embed, examples_revalidate, library_refresh, library_warm_up
from askdb.services.imports import import_job_run
from askdb.services.long_queries import long_query_execute
from askdb.services.requests import request_embed, requests_reask
from askdb.services.runs import run_execute
from infra.providers.embeddings import get_embedder
from metadata_admin.models import ClinicalSource


@worker_init.connect
def _load_before_fork(**kwargs) -> None:
    """Load the models once in the worker's main process, before the pool forks: every pool
    process, and every replacement of a lost one, starts with them in memory (copy-on-write), so
    neither start-up nor the first question pays for loading them. torch runs one thread
    (ASKDB_TORCH_THREADS), so no thread pool is forked half-alive."""
    worker_warm_up()


@worker_process_init.connect
def _warm_up(**kwargs) -> None:
    """Finish warming a new pool process in the background, never in this handler: Celery gives
    a new pool process worker_proc_alive_timeout to say it is up, and when loading took longer on a
    busy machine Celery killed every replacement of a lost process, forever. With the models
    loaded before the fork this is quick; a question that comes first waits on the loaders' locks."""
    threading.Thread(target=worker_warm_up, name="askdb-warm-up", daemon=True).start()


def worker_warm_up() -> None:
    embedder = None
    try:
        if settings.EMBEDDING_PROVIDER == "local":
            embedder = get_embedder()
            embedder.warm_up()
    except Exception:  # the first question loads it again, and says what is wrong
        logging.getLogger(__name__).warning("embedding model warm-up failed", exc_info=True)
    _warm_up_sources(embedder)


def _warm_up_sources(embedder) -> None:
    """Load each source's trained answerability model, and (with the local embedder, which needs
    no network) its library, values and question vectors, now: loading them takes seconds, and the
    first question a worker takes must not pay for it; and the gate's column docs' vectors where
    docs were embedded before they were kept (a file check otherwise). A missing or broken model is
    not an error."""
    try:
        # local, inside the try: a broken answerability install must not stop the worker starting
        from askdb.answerability.scorer import column_doc_vectors_compute, get_scorer

        for source in ClinicalSource.objects.all():
            get_scorer(source)
            column_doc_vectors_compute(source)  # kept since the docs were embedded: a file check
            if embedder is not None:
                try:
                    library_warm_up(source, embedder)
                except Exception:  # an unreachable source: its first question says so
                    logging.getLogger(__name__).warning(
                        "library warm-up of %s skipped", source, exc_info=True
                    )
    except Exception:
        logging.getLogger(__name__).warning("answerability warm-up skipped", exc_info=True)
    finally:
        connections.close_all()  # the forked worker opens its own connections per task


@inspect_command()
def askdb_pool(state) -> dict:
    """Pool processes that are really up (`celery inspect askdb_pool`; /healthz uses it): started
    and reported ready to Celery, not merely forked and waiting for their deadline."""
    pool = state.consumer.pool
    concurrency = getattr(pool, "limit", None) or 0
    inner = getattr(pool, "_pool", None)
    processes = getattr(inner, "_pool", None)
    if processes is None:  # the threads and solo pools have no processes to lose
        return {"concurrency": concurrency, "up": concurrency, "pids": []}
    waiting = getattr(inner, "_waiting_to_start", set())
    up = [p.pid for p in list(processes) if p not in waiting and p._is_alive()]
    return {"concurrency": concurrency, "up": len(up), "pids": up}


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
    ignore_result=True,  # the run's state lives in the app database; nothing reads a task result
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


@shared_task(
    name="askdb.run_long_query",
    bind=True,
    acks_late=True,
    ignore_result=True,
    # the statement's own timeout ends it first; these only back it up (the prefork pool)
    soft_time_limit=settings.ASKDB_LONG_QUERY_TIMEOUT_S + 60,
    time_limit=settings.ASKDB_LONG_QUERY_TIMEOUT_S + 120,
    autoretry_for=(DatabaseError,),  # claiming is idempotent: only a queued long query is claimed
    retry_backoff=1,
    max_retries=5,
)
def run_long_query(self, run_id: int) -> dict:
    run = long_query_execute(run_id=run_id, worker=self.request.hostname or socket.gethostname())
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


@shared_task(name="askdb.embed_example", acks_late=True, soft_time_limit=120, time_limit=150)
def embed_example(example_id: int) -> dict:
    """A reviewer's new library example gets its vector here, not in their request."""
    example = example_embed(example_id=example_id)
    if example is not None:  # its template key and masked vector stored now, not rebuilt by every question
        library_refresh(source=example.source)
    return {"example": example_id, "now": example.pk if example is not None else None}


@shared_task(name="askdb.import_examples", acks_late=True, soft_time_limit=3600, time_limit=3660)
def import_examples(job_id: int) -> dict:
    """A large library import (askdb.services.imports), off the web process."""
    job = import_job_run(job_id=job_id)
    if job is None:
        return {"job": job_id, "status": "missing"}
    return {"job": job.pk, "status": job.status, "done": job.done}


@shared_task(name="askdb.embed_request", acks_late=True, soft_time_limit=120, time_limit=150)
def embed_request(request_id: int) -> dict:
    """A request's masked question and vector (for grouping), read here, not in the asker's request."""
    request = request_embed(request_id=request_id)
    return {"request": request_id, "embedded": request is not None}


@shared_task(name="askdb.reask_requests", acks_late=True, soft_time_limit=900, time_limit=960)
def reask_requests(request_ids: list[int], reviewer_id: int | None = None) -> dict:
    """After a request was answered: the requests grouped with it are asked again, each a new run
    (idempotent: requests answered meanwhile are skipped)."""
    answered = requests_reask(request_ids=request_ids, reviewer_id=reviewer_id)
    return {"asked": request_ids, "answered": [r.pk for r in answered]}
