"""Celery tasks of phenotype runs. Thin: take ids, call a service or the LLM, never wait on a subtask.

With the LLM judge a run is a chord: `phenotype_run` retrieves and judges with ConText (so the
evidence exists whatever the LLM does), then the map -- one `phenotype_snippet_judge` per
candidate snippet, concurrent on the worker's pool -- and the reduce (`phenotype_run_reduce`),
which Celery starts when every map task has returned. A map task that keeps failing records its
error on its snippet and returns, so one snippet never loses the run.
"""

from __future__ import annotations

import time

from celery import chord, shared_task

from phenotypes.models import PhenotypeRun
from phenotypes.services import (
    phenotype_run_execute,
    phenotype_run_reduce,
    phenotype_snippet_judge,
    snippets_for_llm,
)


@shared_task(name="phenotypes.phenotype_run", acks_late=True)
def phenotype_run_task(run_id: int) -> None:
    """The whole run with ConText; with the LLM judge, retrieval then the map/reduce chord."""
    run = PhenotypeRun.objects.get(pk=run_id)
    if run.judge != PhenotypeRun.Judge.LLM:
        phenotype_run_execute(run_id=run_id)
        return
    phenotype_run_execute(run_id=run_id, final=False)
    ids = snippets_for_llm(run_id=run_id)
    PhenotypeRun.objects.filter(pk=run_id).update(total=len(ids), done=0)
    if not ids:
        phenotype_run_reduce(run_id=run_id)
        return
    chord(phenotype_snippet_judge_task.s(evidence_id) for evidence_id in ids)(
        phenotype_run_reduce_task.s(run_id)
    )


@shared_task(
    name="phenotypes.phenotype_snippet_judge",
    bind=True,
    acks_late=True,
    max_retries=2,
    default_retry_delay=0.5,
)
def phenotype_snippet_judge_task(self, evidence_id: int) -> str:
    """Ask the LLM about one snippet; transient failures retry, the last one is recorded."""
    last_try = self.request.retries >= self.max_retries
    return phenotype_snippet_judge(evidence_id=evidence_id, record_failure=last_try, retry=self.retry)


@shared_task(name="phenotypes.phenotype_run_reduce", acks_late=True)
def phenotype_run_reduce_task(results: list[str], run_id: int) -> None:
    phenotype_run_reduce(run_id=run_id)


def phenotype_run_llm_wait(run_id: int, timeout_s: float = 600.0) -> PhenotypeRun:
    """For the command line (not a task): start the run on the workers and poll until it ends."""
    phenotype_run_task.delay(run_id)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = PhenotypeRun.objects.get(pk=run_id)
        if run.status in (PhenotypeRun.Status.DONE, PhenotypeRun.Status.FAILED):
            return run
        time.sleep(0.5)
    return PhenotypeRun.objects.get(pk=run_id)
