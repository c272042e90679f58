"""Questions and their runs: submit, execute (the pipeline), retry, cancel, reap, pick a candidate, export."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from askdb.adapters.ports import DjangoPorts
from askdb.adapters.recorder import DjangoRecorder
from askdb.models import Question, Run
from askdb.services.disclosure import DatabaseLedger, disclosure_key
from askdb.services.privacy import release_policies, run_sql_protected
from askdb.services.reviews import review_required
from askdb.services.sql import ReviewError
from core import prompts
from core.engine import Pipeline, PipelineConfig, PipelineRequest
from infra.audit.services import audit_record
from infra.providers.llm import get_chat_model
from infra.queue import task_send
from infra.text import nul_message
from metadata_admin.selectors import catalog_snapshot
from metadata_admin.services import source_get

logger = logging.getLogger(__name__)

WORKER_LOST_MESSAGE = (
    "The worker running this question stopped before it finished. Nothing was lost: ask again to retry."
)


QUEUE_DOWN_MESSAGE = (
    "Your question is saved, but the job queue is not reachable right now. It will be answered "
    "when the queue is back; try again in a minute if it is not."
)
QUEUE_TIMEOUT_MESSAGE = "No worker took this question in time. Nothing was lost: ask again to retry."


class QuestionError(ValueError):
    """A question that cannot be accepted, with a sentence the user can act on."""


class QueueUnavailable(RuntimeError):
    """The broker refused the job. The run is saved (queued, no task id) and the queued-run
    reaper sends it when the broker is back; the caller answers 503 "try again"."""

    def __init__(self, run_id: int):
        super().__init__(QUEUE_DOWN_MESSAGE)
        self.run_id = run_id


def _clean_question(text: str) -> str:
    if not isinstance(text, str):
        raise QuestionError("The question must be text.")
    if "\x00" in text:  # refused, not silently dropped: the asker should know what was sent
        raise QuestionError(nul_message("The question"))
    cleaned = " ".join("".join(ch for ch in text if ch.isprintable() or ch.isspace()).split())
    if len(cleaned) < 3:
        raise QuestionError("Please type a question (at least a few words).")
    if len(cleaned) > settings.ASKDB_QUESTION_MAX_CHARS:
        raise QuestionError(
            f"The question is too long ({len(cleaned)} characters; at most {settings.ASKDB_QUESTION_MAX_CHARS})."
        )
    return cleaned


def question_submit(*, user, text: str, source=None, ip: str | None = None, follow_up_of=None):
    """Accept a question and queue its first run; the worker picks it up after commit.
    `follow_up_of`: the answered run this question follows up (its question and SQL are the context)."""
    task_id = str(uuid.uuid4())  # claimed with the run's INSERT: no second commit to claim it
    with transaction.atomic():
        run = _question_create(
            user=user, text=text, source=source, ip=ip, follow_up_of=follow_up_of, task_id=task_id
        )
        transaction.on_commit(lambda: _send(run.pk, task_id))
    return run


def _question_create(
    *, user, text: str, source=None, ip: str | None = None, follow_up_of=None, task_id: str = ""
):
    """A question and its first (queued) run, audited; the caller owns the transaction. `task_id`:
    the job id the caller sends after commit (none: the run is sent by whoever claims it)."""
    cleaned = _clean_question(text)
    if follow_up_of is not None:
        if follow_up_of.status != Run.Status.SUCCEEDED or not follow_up_of.sql:
            raise QuestionError("Only an answered question can be followed up: ask this one on its own.")
        source = follow_up_of.question.source
    question = Question.objects.create(
        user=user, source=source or source_get(None), text=cleaned, follow_up_of=follow_up_of
    )
    run = Run.objects.create(question=question, task_id=task_id)
    detail = {"follow_up_of": follow_up_of.pk} if follow_up_of is not None else None
    audit_record(action="question.asked", actor=user, target=run, message=cleaned[:500], ip=ip, detail=detail)
    return run


def _enqueue(run_id: int, *, long_query: bool = False) -> bool:
    """Send a queued run's job, once: the task id is claimed before sending, so the submit and
    the reapers never send the same run twice (a second delivery would fail a running run).
    False when someone else sent it or the run ended; QueueUnavailable when the broker is down.
    A long query (services.long_queries) is sent to its own task."""
    task_id = str(uuid.uuid4())
    if not Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, task_id="").update(task_id=task_id):
        return False
    return _send(run_id, task_id, long_query=long_query)


def _send(run_id: int, task_id: str, *, long_query: bool = False) -> bool:
    """Send the job of a run whose task id the caller claimed. When the broker refuses it, the
    claim is undone (the queued-run reaper sends it later) and QueueUnavailable is raised."""
    try:
        if long_query:
            task_send("askdb.run_long_query", run_id, task_id=task_id)  # askdb.tasks.run_long_query
        else:
            task_send("askdb.run_question", run_id, task_id=task_id)  # askdb.tasks.run_question
    except (BrokerError, OSError) as exc:
        Run.objects.filter(pk=run_id, task_id=task_id).update(task_id="")  # the reaper sends it later
        logger.warning("run %s kept queued: the broker is unreachable (%s)", run_id, exc)
        raise QueueUnavailable(run_id) from exc
    return True


def run_retry(*, run, user, ip: str | None = None):
    """A new run of the same question (after a failure, a lost worker or a cancel)."""
    with transaction.atomic():
        new = Run.objects.create(question=run.question)
        audit_record(action="run.retried", actor=user, target=new, message=f"retry of run {run.pk}", ip=ip)
        transaction.on_commit(lambda: _enqueue(new.pk))
    return new


def run_cancel(*, run, user) -> bool:
    """Stop a queued or running run at the next stage boundary. False if it already ended."""
    with transaction.atomic():
        updated = (
            Run.objects.filter(pk=run.pk)
            .exclude(status__in=Run.TERMINAL)
            .update(
                status=Run.Status.CANCELLED,
                outcome="cancelled",
                message="Cancelled by the user.",
                finished_at=timezone.now(),
            )
        )
        if updated:
            audit_record(action="run.cancelled", actor=user, target=run)
    return bool(updated)


def run_execute(*, run_id: int, worker: str = ""):
    """The pipeline for one run. Idempotent: an ended run is left alone, and a run found already
    'running' was started by a worker that died, so it is failed (retryable), not re-run."""
    with transaction.atomic():
        run = (
            # of=("self",): lock only the run, not the source and user rows joined in (a shared
            # source row locked by every starting run deadlocked concurrent submissions).
            Run.objects.select_for_update(of=("self",))
            .select_related("question__source", "question__user")
            .filter(pk=run_id)
            .first()
        )
        if run is None:  # deleted, or a message redelivered from another database's life
            return None
        if run.is_terminal:
            return run
        if run.status == Run.Status.RUNNING:
            _run_finish(run, status=Run.Status.FAILED, outcome="worker_lost",
                        message=WORKER_LOST_MESSAGE)  # fmt: skip
            return run
        run.status, run.started_at, run.heartbeat_at = Run.Status.RUNNING, timezone.now(), timezone.now()
        run.deliveries += 1
        run.worker = worker[:200]
        run.save(update_fields=["status", "started_at", "heartbeat_at", "deliveries", "worker"])

    source = run.question.source
    evaluation = run.question.channel == "evaluation"  # measures SQL: no ledger, no budget spent
    # The catalog as of this run, read once: the privacy policy's catalog part and the ports use it.
    snapshot = catalog_snapshot(source)
    privacy, control = release_policies(
        source=source, user=run.question.user, evaluation=evaluation, snapshot=snapshot
    )
    config = PipelineConfig(
        candidates=source.candidates or settings.ASKDB_CANDIDATES,
        temperature=settings.ASKDB_CANDIDATES_TEMPERATURE,
        confidence_threshold=source.confidence_threshold or settings.ASKDB_CONFIDENCE_THRESHOLD,
        k=settings.ASKDB_RETRIEVAL_K,
        similarity_floor=settings.ASKDB_SIMILARITY_FLOOR,
        max_repairs=settings.ASKDB_MAX_REPAIRS,
        row_cap=settings.CLINICAL_ROW_CAP,
        timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S,
        large_query_rows=settings.ASKDB_LARGE_QUERY_ROWS,
        large_query_cost=settings.ASKDB_LARGE_QUERY_COST,
        row_level_to_llm=source.row_level_to_llm,
        privacy=privacy,
        disclosure=control,
        disclosure_key=disclosure_key(user=run.question.user),
    )
    try:
        chat = get_chat_model()
        recorder = DjangoRecorder(run, llm=chat is not None)
        ports = DjangoPorts(source, chat=chat, timeout_s=config.timeout_s, row_cap=config.row_cap, run=run,
                            sensitive=config.privacy.sensitive_allowed, snapshot=snapshot,
                            sensitive_columns=config.privacy.sensitive_columns, row_level=config.privacy.row_level,
                            ledger=None if evaluation else DatabaseLedger(source=source, user=run.question.user,
                                                                          run=run))  # fmt: skip
        try:
            outcome = Pipeline(ports, recorder, config).run(
                PipelineRequest(
                    question=run.question.text,
                    dialect=source.dialect,
                    as_of=source.as_of.strftime("%Y-%m-%d %H:%M:%S") if source.as_of else "",
                    **_earlier(run),
                )
            )
        except BaseException:
            recorder.flush()  # the stages, attempts and LLM calls recorded since the last live stage
            raise
    except Exception as exc:  # an unexpected bug must still end the run, with its reason
        run.refresh_from_db()
        if isinstance(exc, SoftTimeLimitExceeded):
            outcome, message = (
                "time_limit",
                "Answering took longer than askdb allows and was stopped; try a narrower question.",
            )
        else:
            logging.getLogger(__name__).exception("run %s crashed", run_id)
            outcome, message = (
                "error",
                f"askdb hit an internal error ({type(exc).__name__}); the question is kept, try again.",
            )
        if not run.is_terminal:
            _run_finish(run, status=Run.Status.FAILED, outcome=outcome, message=message)
        return run
    fields = {
        "outcome": outcome.outcome,
        "message": outcome.message,
        "sql": outcome.sql,
        "summary": outcome.summary,
        "gate_category": outcome.gate_category,
        "gate_reason": outcome.gate_reason,
        "model": chat.model if chat is not None else "",
        "confidence": outcome.confidence,
        # The run's JSON is shaped here, from the core's frozen values.
        "candidates": dict(outcome.candidates),
        "answered_by": outcome.answered_by,
        "example_id": outcome.example_id,
        "library_match": outcome.library_match.to_json() if outcome.library_match else {},
        "answerability": outcome.answerability.to_json() if outcome.answerability else {},
        "privacy": dict(outcome.privacy),
        "catalog_version": ports.snapshot.version,  # the catalog this run saw
    }
    if outcome.result is not None:
        fields.update(
            result_columns=list(outcome.result.columns),
            result_rows=[list(r) for r in outcome.result.rows],
            result_truncated=outcome.result.truncated,
            row_count=outcome.result.row_count,
        )
    _run_complete(run, recorder, status=outcome.status, **fields)
    return run


def _refresh(run) -> None:
    """The run as stored now (a cancel), keeping the question, source and user already loaded: a
    run's question never changes, and a plain refresh_from_db forgets every loaded relation."""
    run.refresh_from_db(fields=[f.name for f in Run._meta.concrete_fields if f.name != "question"])


def _run_complete(run, recorder: DjangoRecorder, *, status: str, **fields) -> None:
    """End a run the pipeline finished: the recorder's last rows, the run's result and its audit
    event in one synchronous transaction (which also makes the run's relaxed commits durable). The
    UPDATE skips a run cancelled meanwhile, which keeps its cancel and is then read back as stored
    (as before, a run the stale-run reaper failed still gets the answer it finished with). The run
    in memory is the stored run, without a read."""
    now = timezone.now()
    with transaction.atomic():
        recorded = recorder.flush_final()
        for key, value in fields.items():
            setattr(run, key, value)
        run.status, run.finished_at, run.heartbeat_at = status, now, now
        run.prompt_version = prompts.PROMPT_VERSION  # the recorder kept retrieval and tokens in memory
        if review_required(run):
            run.review_status = run.Review.PENDING
        values = {**fields, **recorded, "status": status, "finished_at": now, "heartbeat_at": now,
                  "prompt_version": run.prompt_version, "review_status": run.review_status}  # fmt: skip
        ended = Run.objects.filter(pk=run.pk).exclude(status=Run.Status.CANCELLED).update(**values)
        if ended:
            _finish_audit(run, status=status, fields=fields)
    if not ended:
        _refresh(run)


def _earlier(run) -> dict[str, str]:
    """A follow-up's context: the earlier question and the SQL that answered it."""
    earlier = run.question.follow_up_of
    if earlier is None or not earlier.sql:
        return {}
    return {"earlier_question": earlier.question.text, "earlier_sql": earlier.sql}


def _run_finish(run, *, status: str, **fields) -> None:
    with transaction.atomic():
        for key, value in fields.items():
            setattr(run, key, value)
        run.status = status
        run.finished_at = timezone.now()
        run.prompt_version = prompts.PROMPT_VERSION
        if review_required(run):
            run.review_status = run.Review.PENDING
        run.save()
        _finish_audit(run, status=status, fields=fields)


def _finish_audit(run, *, status: str, fields: dict) -> None:
    """The audit event of a run's end: what the user was shown, suppression and refusals included."""
    audit_record(
        action=f"run.{status}",
        target=run,
        message=(fields.get("message") or fields.get("outcome") or "")[:500],
        detail={
            "outcome": fields.get("outcome", ""),
            "sql": fields.get("sql", "")[:4000],
            "rows": fields.get("row_count"),
            # suppression and refusals are part of the record of what the user was shown
            "privacy": {k: v for k, v in (fields.get("privacy") or {}).items() if k != "sensitive_positions"},
        },
    )


def runs_reap_stale(*, older_than_s: int | None = None) -> int:
    """Fail runs whose worker died: running with no heartbeat for longer than any task may take."""
    limit = older_than_s if older_than_s is not None else settings.ASKDB_STALE_RUN_SECONDS
    cutoff = timezone.now() - dt.timedelta(seconds=limit)
    stale = Run.objects.filter(status=Run.Status.RUNNING, heartbeat_at__lt=cutoff)
    count = 0
    for run in stale:
        _run_finish(run, status=Run.Status.FAILED, outcome="worker_lost",
                    message=WORKER_LOST_MESSAGE)  # fmt: skip
        count += 1
    return count


def runs_requeue(*, unsent_after_s: float = 5, give_up_after_s: int | None = None) -> dict[str, int]:
    """Queued runs no worker took: send those whose job never reached the broker (it was down at
    submit), and fail (retryable) those queued longer than ASKDB_QUEUED_RUN_SECONDS."""
    now = timezone.now()
    unsent = Run.objects.filter(
        status=Run.Status.QUEUED, task_id="", created_at__lt=now - dt.timedelta(seconds=unsent_after_s)
    ).order_by("pk")
    sent = 0
    for run_id, long_query_of in unsent.values_list("pk", "long_query_of_id")[:200]:
        try:
            sent += _enqueue(run_id, long_query=long_query_of is not None)
        except QueueUnavailable:
            break  # still down: the next reap tries again
    limit = give_up_after_s if give_up_after_s is not None else settings.ASKDB_QUEUED_RUN_SECONDS
    failed = 0
    for run in Run.objects.filter(status=Run.Status.QUEUED, created_at__lt=now - dt.timedelta(seconds=limit)):
        _run_finish(run, status=Run.Status.FAILED, outcome="queue_timeout", message=QUEUE_TIMEOUT_MESSAGE)
        failed += 1
    return {"requeued": sent, "failed": failed}


def runs_reap() -> dict[str, int]:
    """Both reapers, as the worker's timer (config.celery.RunReaper) calls them; never a read."""
    return {"lost": runs_reap_stale(), **runs_requeue()}


def question_submit_sync(*, user, text: str, source=None, follow_up_of=None):
    """The same use case as question_submit, run in this process (the `ask` command, benchmarks)."""
    with transaction.atomic():
        run = _question_create(user=user, text=text, source=source, follow_up_of=follow_up_of)
    return run_execute(run_id=run.pk, worker="manage.py ask")


def catalog_version(source) -> str:
    """A short fingerprint of the documentation retrieval and prompting see (for provenance)."""
    return catalog_snapshot(source).version


def run_export_record(*, run, user, fmt: str, rows: int | None = None, ip: str | None = None) -> None:
    """Every export of a result leaves an audit event: data left askdb, and who took it."""
    audit_record(
        action="run.exported", actor=user, target=run, message=f"{fmt} export",
        detail={"format": fmt, "rows": rows if rows is not None else run.row_count}, ip=ip,
    )  # fmt: skip


def run_pick_candidate(*, run, user, group: int):
    """The researcher chooses one of the disagreeing candidates as the answer they meant.

    Its SQL is validated and executed again (the run kept only a preview), the run then shows that
    result, and it stays in the review queue: choosing is not the same as being verified.
    """
    groups = (run.candidates or {}).get("groups") or []
    if not isinstance(group, int) or not 0 <= group < len(groups):
        raise ReviewError("That candidate does not exist.")
    if run.question.user_id != user.pk and not user.has_perm("askdb.view_all_runs"):
        raise ReviewError("Only the person who asked can choose an answer.")
    validated, result = run_sql_protected(run=run, sql=groups[group]["sql"], actor=user, purpose="candidate")
    with transaction.atomic():
        run.sql = validated.sql
        run.privacy = result.privacy
        run.result_columns = list(result.columns)
        run.result_rows = [list(r) for r in result.rows]
        run.result_truncated = result.truncated
        run.row_count = result.row_count
        cut = not result.row_count and result.truncated  # by the byte cap: the row cap is at least 1
        run.outcome = "answered" if result.row_count else "result_cut" if cut else "no_rows"
        run.candidates = {**run.candidates, "picked": group}
        members = len(groups[group].get("members") or [])
        run.message = (
            f"You chose candidate {group + 1} ({members} of {run.candidates.get('k', '?')} candidates agreed on it). "
            "It has not been verified yet: a reviewer will check it."
        )
        if run.review_status not in (run.Review.APPROVED, run.Review.CORRECTED):
            run.review_status = run.Review.PENDING
        run.save()
        audit_record(action="run.candidate_picked", actor=user, target=run, message=f"group {group}",
                     detail={"sql": run.sql[:4000]})  # fmt: skip
    return run
