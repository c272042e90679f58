"""Reading evaluations: the comparison list, one evaluation, its worst failures, results.json."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from evaluation import metrics
from evaluation.models import Evaluation, EvaluationItem

# Worst first: an answer that is wrong costs -c, a missed answerable question costs nothing
# but is still a failure; broken gold items come last (they are the benchmark's fault).
FAILURE_ORDER = (metrics.WRONG, metrics.ANSWERED_UNANSWERABLE, metrics.MISSED, metrics.GOLD_ERROR)


def evaluation_list() -> QuerySet[Evaluation]:
    return Evaluation.objects.select_related("source").defer("report_html")


def evaluation_get(*, evaluation_id: int) -> Evaluation | None:
    return Evaluation.objects.select_related("source").filter(pk=evaluation_id).first()


def evaluation_failures(*, evaluation: Evaluation, limit: int | None = 25) -> list[EvaluationItem]:
    """The failures, worst kind first, then slowest (a slow wrong answer is the costliest)."""
    items = [i for i in evaluation.items.filter(done=True) if i.verdict in FAILURE_ORDER]
    items.sort(key=lambda i: (FAILURE_ORDER.index(i.verdict), -(i.latency_ms or 0), i.position))
    return items if limit is None else items[:limit]


def evaluation_summary(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "id": evaluation.pk,
        "name": evaluation.name,
        "source": evaluation.source.name,
        "questions_file": evaluation.questions_file,
        "labels_file": evaluation.labels_file,
        "status": evaluation.status,
        "started_at": evaluation.started_at,
        "finished_at": evaluation.finished_at,
        "version": evaluation.version,
        "settings": evaluation.settings,
    }


def evaluation_results(evaluation: Evaluation) -> dict[str, Any]:
    """What results.json holds: the evaluation, its metrics, and every item with its verdict."""
    return {
        "evaluation": evaluation_summary(evaluation),
        "metrics": evaluation.metrics,
        "items": [
            {
                "id": i.item_id,
                "question": i.question,
                "category": i.category,
                "answerable": i.answerable,
                "gold_sql": i.gold_sql,
                "predicted_sql": i.predicted_sql,
                "run": i.run_id,
                "run_status": i.run_status,
                "outcome": i.outcome,
                "verdict": i.verdict,
                "abstained": i.abstained,
                "correct": i.correct,
                "gold_error": i.gold_error,
                "predicted_error": i.predicted_error,
                "why": i.why,
                "latency_ms": i.latency_ms,
                "tokens_prompt": i.tokens_prompt,
                "tokens_completion": i.tokens_completion,
                "cost_usd": float(i.cost_usd or 0),
                "scores": i.scores,
                "metadata": i.metadata,
                "done": i.done,
            }
            for i in evaluation.items.order_by("position")
        ],
    }
