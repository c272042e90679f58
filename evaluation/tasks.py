"""Celery tasks of the evaluation app. Thin: take ids, call a service."""

from __future__ import annotations

from celery import shared_task

from evaluation.services import evaluation_run_and_report


# An evaluation asks every question of a benchmark: hours, not the per-question limit.
@shared_task(
    name="evaluation.run_evaluation", acks_late=True, soft_time_limit=6 * 3600, time_limit=6 * 3600 + 60
)
def run_evaluation(evaluation_id: int, workers: int = 2) -> dict:
    evaluation = evaluation_run_and_report(evaluation_id=evaluation_id, workers=workers)
    return {"evaluation": evaluation_id, "status": evaluation.status if evaluation else "missing"}
