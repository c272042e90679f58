"""Long queries: a question whose query ran out of time, run again in a worker with a higher
limit (ASKDB_LONG_QUERY_TIMEOUT_S), followed on its run page and cancellable.

A long query is a Run of the same question (`long_query_of` the timed-out run) that executes the
timed-out run's SQL, not the pipeline: the same validated statement, on the same privacy path as
any answer outside the pipeline (run_sql_protected: validated once, the asker's rights, the
aggregate rewrite, small cells, the disclosure mode and budget), audited at start and end. Only
the asker, holding run_long_queries, may start one.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from askdb.models import Run
from askdb.selectors import long_query_allowed
from askdb.services.privacy import run_sql_protected
from askdb.services.runs import _enqueue, _run_finish
from askdb.services.sql import ReviewError
from core.estimate import QueryEstimate, timed_out_message
from core.validation import SqlValidationError, validate_sql
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from metadata_admin.selectors import catalog_snapshot

logger = logging.getLogger(__name__)

HEARTBEAT_S = 1.0  # how often a running long query says it is alive and looks for a cancel


class LongQueryError(ValueError):
    """A long query that cannot be started, with a sentence the user can act on."""


def long_query_start(*, run: Run, user, ip: str | None = None) -> Run:
    """A new run of the same question that runs `run`'s SQL in a worker with the long limit.
    Raises LongQueryError (not allowed, or too many going), QueueUnavailable (the run is kept and
    sent when the broker is back)."""
    reason = long_query_allowed(run=run, user=user)
    if reason:
        raise LongQueryError(reason)
    limit = settings.ASKDB_LONG_QUERY_TIMEOUT_S
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(
            pk=user.pk
        ).first()  # one start at a time per user
        going = list(
            Run.objects.filter(
                question__user=user,
                long_query_of__isnull=False,
                status__in=(Run.Status.QUEUED, Run.Status.RUNNING),
            )
        )
        if len(going) >= settings.ASKDB_LONG_QUERIES_PER_USER:
            raise LongQueryError(
                "You already have a long query going; wait for it to end or cancel it (run "
                f"{going[0].pk}) before starting another."
            )
        new = Run.objects.create(
            question=run.question, long_query_of=run, time_limit_s=limit, sql=run.sql,
            answered_by=run.answered_by, example_id=run.example_id, library_match=run.library_match,
        )  # fmt: skip
        audit_record(action="run.long_query_started", actor=user, target=new, ip=ip,
                     message=f"long query of run {run.pk}, limit {limit:g} s",
                     detail={"of_run": run.pk, "limit_s": limit, "sql": run.sql[:4000]})  # fmt: skip
        transaction.on_commit(lambda: long_query_enqueue(run_id=new.pk))
    return new


def long_query_enqueue(*, run_id: int) -> bool:
    """Send a queued long query's job once, as runs are sent (raises QueueUnavailable)."""
    return _enqueue(run_id, long_query=True)


def long_query_execute(*, run_id: int, worker: str = "") -> Run | None:
    """Run a long query's SQL (idempotent: only a queued one is claimed). While it runs, a
    heartbeat thread keeps the run alive for the reaper and turns a cancel of the run (run_cancel,
    from any process) into a cancel of the statement on the database."""
    with transaction.atomic():
        run = (
            Run.objects.select_for_update(of=("self",))
            .select_related("question__source", "question__user")
            .filter(pk=run_id, long_query_of__isnull=False)
            .first()
        )
        if run is None or run.status != Run.Status.QUEUED:
            return run
        now = timezone.now()
        run.status, run.started_at, run.heartbeat_at, run.worker = Run.Status.RUNNING, now, now, worker[:200]
        run.deliveries += 1
        run.save(update_fields=["status", "started_at", "heartbeat_at", "worker", "deliveries"])
    cancel, done = threading.Event(), threading.Event()
    beat = threading.Thread(
        target=_heartbeat, args=(run.pk, cancel, done), name="askdb-long-query", daemon=True
    )
    beat.start()
    try:
        return _long_query_run(run, cancel)
    finally:
        done.set()
        beat.join(HEARTBEAT_S + 5)


def _heartbeat(run_id: int, cancel: threading.Event, done: threading.Event) -> None:
    """Every HEARTBEAT_S: the run is alive (heartbeat_at), or cancelled (then `cancel` is set)."""
    try:
        while not done.wait(HEARTBEAT_S):
            alive = Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(
                heartbeat_at=timezone.now()
            )
            if not alive:
                cancel.set()
                return
    except Exception:  # the app database is away: the statement's own limit still ends it
        logger.warning("long query %s: heartbeat stopped", run_id, exc_info=True)
    finally:
        close_old_connections()
        connection.close()


def _long_query_run(run: Run, cancel: threading.Event) -> Run:
    limit = run.time_limit_s or settings.ASKDB_LONG_QUERY_TIMEOUT_S
    started = timezone.now()
    try:
        validated, result = run_sql_protected(
            run=run,
            sql=run.sql,
            actor=run.question.user,
            purpose="long_query",
            timeout_s=limit,
            cancel=cancel,
        )
    except ReviewError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, ExecutionError) else None
        code = cause.code if cause is not None else "execution_error"
        if code == "cancelled" or cancel.is_set():
            return _ended(run, "cancelled", "", started)
        if code == "timeout":
            return _ended(
                run, "timeout", timed_out_message(limit, _estimate(run), "the long-query limit"), started
            )
        return _ended(run, "execution_error", str(exc), started)
    seconds = (timezone.now() - started).total_seconds()
    fields = dict(
        sql=validated.sql, privacy=result.privacy, result_columns=list(result.columns),
        result_rows=[list(r) for r in result.rows], result_truncated=result.truncated, row_count=result.row_count,
        outcome="answered" if result.row_count else "no_rows",
        message=f"Answered by a long query in {seconds:.0f} s (limit {limit:g} s).",
    )  # fmt: skip
    _finish_if_running(run, status=Run.Status.SUCCEEDED, **fields)
    return Run.objects.get(pk=run.pk)


def _finish_if_running(run: Run, **fields) -> None:
    """End the run as `fields` say, unless it already ended (a cancel, the reaper): the row is
    locked first, so a cancel at this moment is never overwritten by an answer."""
    with transaction.atomic():
        if Run.objects.select_for_update().filter(pk=run.pk, status=Run.Status.RUNNING).exists():
            _run_finish(run, **fields)


def _ended(run: Run, outcome: str, message: str, started) -> Run:
    """A long query that did not answer; a cancel already ended the run (run_cancel), so it is
    only audited here, with how long the statement had run."""
    seconds = (timezone.now() - started).total_seconds()
    if outcome == "cancelled":
        audit_record(
            action="run.long_query_cancelled", target=run, message=f"statement stopped after {seconds:.0f} s"
        )
    else:
        _finish_if_running(run, status=Run.Status.FAILED, outcome=outcome, message=message, sql=run.sql)
    return Run.objects.get(pk=run.pk)


def _estimate(run: Run) -> QueryEstimate | None:
    """How big the long query is, by the catalog's table sizes (the planner was asked the first time)."""
    snapshot = catalog_snapshot(run.question.source)
    try:
        tables = validate_sql(run.sql, snapshot.schema).tables
    except SqlValidationError:
        return None
    return QueryEstimate.from_sizes(tables, snapshot.row_counts)
