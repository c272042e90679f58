"""askdb's write use cases. Each is one function; views, tasks, API and commands call these."""

from __future__ import annotations

from typing import Any

from askdb.models import AuditEvent


def audit_record(
    *,
    action: str,
    actor=None,
    target: Any = None,
    message: str = "",
    detail: dict | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """Append one audit event. Call it inside the transaction of the write it records."""
    target_type = target_id = ""
    if target is not None:
        target_type = getattr(getattr(target, "_meta", None), "label_lower", type(target).__name__)
        target_id = str(getattr(target, "pk", target))
    return AuditEvent.objects.create(
        action=action,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        actor_name=getattr(actor, "username", "") or "",
        target_type=target_type,
        target_id=target_id,
        message=message,
        detail=detail or {},
        ip=ip,
    )


DEMO_USERS = (
    # username, password, role — printed by `make demo`; never use these outside a demo.
    ("researcher", "askdb-researcher", "researcher"),
    ("reviewer", "askdb-reviewer", "reviewer"),
    ("admin", "askdb-admin", "admin"),
)


def demo_users_ensure() -> list[tuple[str, str, str]]:
    """Create (or reset) one demo user per role so the printed logins always work."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import transaction

    from askdb.roles import roles_sync

    User = get_user_model()
    roles_sync()
    with transaction.atomic():
        for username, password, role in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.is_staff = role == "admin"  # admins use the Django admin for users and docs
            user.save()
            user.groups.set([Group.objects.get(name=role)])
            if created:
                audit_record(action="user.created", target=user, message=f"demo {role} user")
    return list(DEMO_USERS)


# --------------------------------------------------------------------------- questions and runs


WORKER_LOST_MESSAGE = (
    "The worker running this question stopped before it finished. Nothing was lost: ask again to retry."
)


class QuestionError(ValueError):
    """A question that cannot be accepted, with a sentence the user can act on."""


def _clean_question(text: str) -> str:
    from django.conf import settings

    if not isinstance(text, str):
        raise QuestionError("The question must be text.")
    cleaned = " ".join("".join(ch for ch in text if ch.isprintable() or ch.isspace()).split())
    if len(cleaned) < 3:
        raise QuestionError("Please type a question (at least a few words).")
    if len(cleaned) > settings.ASKDB_QUESTION_MAX_CHARS:
        raise QuestionError(
            f"The question is too long ({len(cleaned)} characters; at most {settings.ASKDB_QUESTION_MAX_CHARS})."
        )
    return cleaned


def question_submit(*, user, text: str, source=None, ip: str | None = None):
    """Accept a question and queue its first run; the worker picks it up after commit."""
    from django.db import transaction

    with transaction.atomic():
        run = _question_create(user=user, text=text, source=source, ip=ip)
        transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def _question_create(*, user, text: str, source=None, ip: str | None = None):
    """A question and its first (queued) run, audited; the caller owns the transaction."""
    from askdb.models import Question, Run
    from metadata_admin.services import source_get

    cleaned = _clean_question(text)
    question = Question.objects.create(user=user, source=source or source_get(None), text=cleaned)
    run = Run.objects.create(question=question)
    audit_record(action="question.asked", actor=user, target=run, message=cleaned[:500], ip=ip)
    return run


def _enqueue(run_id: int) -> None:
    from askdb.models import Run
    from askdb.tasks import run_question as run_question_task

    result = run_question_task.delay(run_id)
    Run.objects.filter(pk=run_id).update(task_id=result.id or "")


def run_retry(*, run, user, ip: str | None = None):
    """A new run of the same question (after a failure, a lost worker or a cancel)."""
    from django.db import transaction

    from askdb.models import Run

    with transaction.atomic():
        new = Run.objects.create(question=run.question)
        audit_record(action="run.retried", actor=user, target=new, message=f"retry of run {run.pk}", ip=ip)
        transaction.on_commit(lambda: _enqueue(new.pk))
    return new


def run_cancel(*, run, user) -> bool:
    """Stop a queued or running run at the next stage boundary. False if it already ended."""
    from django.db import transaction
    from django.utils import timezone

    from askdb.models import Run

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
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone

    from askdb.models import Run
    from askdb.pipeline.engine import Pipeline, PipelineConfig, PipelineRequest
    from askdb.providers.llm import get_chat_model
    from askdb.runner import DjangoPorts, DjangoRecorder

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
    config = PipelineConfig(
        k=settings.ASKDB_RETRIEVAL_K,
        similarity_floor=settings.ASKDB_SIMILARITY_FLOOR,
        max_repairs=settings.ASKDB_MAX_REPAIRS,
        row_cap=settings.CLINICAL_ROW_CAP,
        timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S,
        row_level_to_llm=source.row_level_to_llm,
    )
    try:
        ports = DjangoPorts(source, chat=get_chat_model(), timeout_s=config.timeout_s, row_cap=config.row_cap)
        outcome = Pipeline(ports, DjangoRecorder(run), config).run(
            PipelineRequest(
                question=run.question.text,
                dialect=source.dialect,
                as_of=source.as_of.strftime("%Y-%m-%d %H:%M:%S") if source.as_of else "",
            )
        )
    except Exception as exc:  # an unexpected bug must still end the run, with its reason
        import logging

        from celery.exceptions import SoftTimeLimitExceeded

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
    run.refresh_from_db()
    if run.status == Run.Status.CANCELLED:
        return run
    fields = {
        "outcome": outcome.outcome,
        "message": outcome.message,
        "sql": outcome.sql,
        "summary": outcome.summary,
        "gate_category": outcome.gate_category,
        "gate_reason": outcome.gate_reason,
    }
    if outcome.result is not None:
        fields.update(
            result_columns=list(outcome.result.columns),
            result_rows=[list(r) for r in outcome.result.rows],
            result_truncated=outcome.result.truncated,
            row_count=outcome.result.row_count,
        )
    _run_finish(run, status=outcome.status, **fields)
    return run


def _run_finish(run, *, status: str, **fields) -> None:
    from django.db import transaction
    from django.utils import timezone

    from askdb.pipeline import prompts

    with transaction.atomic():
        for key, value in fields.items():
            setattr(run, key, value)
        run.status = status
        run.finished_at = timezone.now()
        run.prompt_version = prompts.PROMPT_VERSION
        run.save()
        audit_record(
            action=f"run.{status}",
            target=run,
            message=(fields.get("message") or fields.get("outcome") or "")[:500],
            detail={
                "outcome": fields.get("outcome", ""),
                "sql": fields.get("sql", "")[:4000],
                "rows": fields.get("row_count"),
            },
        )


def runs_reap_stale(*, older_than_s: int | None = None) -> int:
    """Fail runs whose worker died: running with no heartbeat for longer than any task may take."""
    import datetime as dt

    from django.conf import settings
    from django.utils import timezone

    from askdb.models import Run

    limit = older_than_s if older_than_s is not None else settings.ASKDB_STALE_RUN_SECONDS
    cutoff = timezone.now() - dt.timedelta(seconds=limit)
    stale = Run.objects.filter(status=Run.Status.RUNNING, heartbeat_at__lt=cutoff)
    count = 0
    for run in stale:
        _run_finish(run, status=Run.Status.FAILED, outcome="worker_lost",
                    message=WORKER_LOST_MESSAGE)  # fmt: skip
        count += 1
    return count


def question_submit_sync(*, user, text: str, source=None):
    """The same use case as question_submit, run in this process (the `ask` command, benchmarks)."""
    from django.db import transaction

    with transaction.atomic():
        run = _question_create(user=user, text=text, source=source)
    return run_execute(run_id=run.pk, worker="manage.py ask")


def user_token_issue(*, user, ip: str | None = None):
    """An API token for scripts (created once, handed out again after), audited."""
    from django.db import transaction
    from rest_framework.authtoken.models import Token

    with transaction.atomic():
        token, created = Token.objects.get_or_create(user=user)
        audit_record(action="auth.token", actor=user, target=user,
                     message="API token created" if created else "API token handed out", ip=ip)  # fmt: skip
    return token
