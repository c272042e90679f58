"""Reads for the request desk: the queue, one request's editor context, the inbox, the numbers."""

from __future__ import annotations

import statistics

from django.conf import settings
from django.db.models import Count, Q

from askdb import selectors
from askdb.models import AnswerRequest, Example, Notification, Run
from askdb.outcomes import run_outcome_code
from metadata_admin.models import ColumnDoc, TableDoc


def request_get(*, request_id: int) -> AnswerRequest | None:
    return (
        AnswerRequest.objects.select_related("run__question__source", "requested_by", "source", "answer_run")
        .filter(pk=request_id)
        .first()
    )


def requests_for_run(*, run) -> list[AnswerRequest]:
    return list(AnswerRequest.objects.filter(run=run).select_related("requested_by", "answered_by"))


def run_answered_request(*, run) -> AnswerRequest | None:
    """The answered request whose answer this run carries (the original run or a re-asked one)."""
    return (
        AnswerRequest.objects.filter(answer_run=run, status=AnswerRequest.Status.ANSWERED)
        .select_related("answered_by")
        .first()
    )


def editor_schema(*, source) -> dict:
    """Completion for the SQL editor: {table: [columns]} by qualified and bare table name, and
    {"table.column": meaning} for hover documentation."""
    schema: dict[str, list[str]] = {}
    docs: dict[str, str] = {}
    columns = ColumnDoc.objects.filter(table__source=source, table__exists_in_source=True).select_related(
        "table"
    )
    for column in columns.only("name", "meaning", "table__name", "table__schema_name"):
        table = column.table
        schema.setdefault(table.qualified_name, []).append(column.name)
        if column.meaning:
            docs[f"{table.name}.{column.name}"] = column.meaning[:300]
    for table in TableDoc.objects.filter(source=source, exists_in_source=True).only("name", "schema_name"):
        schema.setdefault(table.qualified_name, [])
    return schema | {"docs": docs}


def inbox_unread_count(*, user) -> int:
    if not getattr(user, "is_authenticated", False):
        return 0
    return Notification.objects.filter(user=user, read_at__isnull=True).count()


def inbox_list(*, user, limit: int = 100) -> list[Notification]:
    return list(Notification.objects.filter(user=user).select_related("run__question")[:limit])


def request_numbers(*, source=None) -> dict:
    """The library page's numbers: requests open and answered, the median time to an answer."""
    requests = AnswerRequest.objects.all()
    if source is not None:
        requests = requests.filter(source=source)
    counts = requests.aggregate(
        open=Count("id", filter=Q(status=AnswerRequest.Status.PENDING)),
        answered=Count("id", filter=Q(status=AnswerRequest.Status.ANSWERED)),
    )
    waits = [
        (a - c).total_seconds()
        for c, a in requests.filter(
            status=AnswerRequest.Status.ANSWERED, answered_at__isnull=False
        ).values_list("created_at", "answered_at")
    ]
    median = statistics.median(waits) if waits else None
    return counts | {"median_seconds": median, "median_text": duration_text(median)}


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def approvals_answered_since(*, examples) -> dict[int, int]:
    """For each example: how many questions the library has answered from it since it was approved
    (runs answered from it, not counting the run it came from)."""
    ids = [e.pk for e in examples]
    rows = (
        Run.objects.filter(example_id__in=ids, answered_by="library", status=Run.Status.SUCCEEDED)
        .values("example_id")
        .annotate(n=Count("id"))
    )
    return {r["example_id"]: r["n"] for r in rows}


def examples_answered_most(*, source=None, limit: int = 10) -> list[dict]:
    """The approvals that answered most questions since, for the library page."""
    examples = Example.objects.filter(
        answered_runs__answered_by="library", answered_runs__status=Run.Status.SUCCEEDED
    )
    if source is not None:
        examples = examples.filter(source=source)
    top = (
        examples.values("id", "question", "approved_by__username", "approved_at")
        .annotate(n=Count("answered_runs"))
        .order_by("-n", "id")[:limit]
    )
    return list(top)


def run_did_you_mean(*, run, policy=None, limit: int = 3) -> list[dict]:
    """The "Did you mean" questions of a run without an answer, as the page and the API show them:
    verified questions askdb can answer whose closeness to this one (the question vectors retrieval
    compared) is at least ASKDB_DID_YOU_MEAN_FLOOR; none for a request to change data (askdb only
    reads) and none for an answered run."""
    if not run.is_terminal or (run.status == Run.Status.SUCCEEDED and run.sql):
        return []
    if run_outcome_code(run) == "read_only":
        return []
    floor = settings.ASKDB_DID_YOU_MEAN_FLOOR
    scores = {
        e["id"]: float(e.get("score") or 0) for e in (run.retrieval or {}).get("examples", []) if e.get("id")
    }
    found = selectors.run_suggestions(run=run, policy=policy, limit=4 * limit)
    kept = [s | {"score": round(scores[s["id"]], 3)} for s in found if scores.get(s["id"], 0.0) >= floor]
    return sorted(kept, key=lambda s: -s["score"])[:limit]
