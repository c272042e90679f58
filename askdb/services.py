"""askdb's write use cases. Each is one function; views, tasks, API and commands call these."""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.audit.services import audit_record

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
            user, _ = User.objects.get_or_create(username=username)  # audited by askdb.signals
            user.set_password(password)
            user.is_staff = role == "admin"  # admins use the Django admin for users and docs
            user.save()
            user.groups.set([Group.objects.get(name=role)])
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
    from askdb.runner import DjangoPorts, DjangoRecorder
    from infra.providers.llm import get_chat_model

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
        candidates=source.candidates or settings.ASKDB_CANDIDATES,
        temperature=settings.ASKDB_CANDIDATES_TEMPERATURE,
        confidence_threshold=source.confidence_threshold or settings.ASKDB_CONFIDENCE_THRESHOLD,
        k=settings.ASKDB_RETRIEVAL_K,
        similarity_floor=settings.ASKDB_SIMILARITY_FLOOR,
        max_repairs=settings.ASKDB_MAX_REPAIRS,
        row_cap=settings.CLINICAL_ROW_CAP,
        timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S,
        row_level_to_llm=source.row_level_to_llm,
    )
    try:
        chat = get_chat_model()
        ports = DjangoPorts(source, chat=chat, timeout_s=config.timeout_s, row_cap=config.row_cap, run=run)
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
        "model": chat.model if chat is not None else "",
        "confidence": outcome.confidence,
        "candidates": outcome.candidates,
        "answered_by": outcome.answered_by,
        "example_id": outcome.example_id,
        "library_match": outcome.library_match,
        "answerability": outcome.answerability,
        "catalog_version": catalog_version(source),
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
        if review_required(run):
            run.review_status = run.Review.PENDING
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


def catalog_version(source) -> str:
    """A short fingerprint of the documentation retrieval and prompting saw (for provenance)."""
    import hashlib

    from metadata_admin.models import TableDoc

    hashes = TableDoc.objects.filter(source=source, exists_in_source=True).order_by("schema_name", "name")
    digest = hashlib.sha256("|".join(hashes.values_list("content_hash", flat=True)).encode()).hexdigest()
    return digest[:12]


def run_export_record(*, run, user, fmt: str, rows: int | None = None, ip: str | None = None) -> None:
    """Every export of a result leaves an audit event: data left askdb, and who took it."""
    audit_record(
        action="run.exported", actor=user, target=run, message=f"{fmt} export",
        detail={"format": fmt, "rows": rows if rows is not None else run.row_count}, ip=ip,
    )  # fmt: skip


# --------------------------------------------------------------------------- review


class ReviewError(ValueError):
    """A review action that cannot be done, with a sentence the reviewer can act on."""


def review_required(run) -> bool:
    """Does this finished run wait for a reviewer, under ASKDB_REVIEW_POLICY?

    "all": every answered run. "low_confidence": runs whose sampled candidates disagreed or whose
    answerability score was low. "first_of_kind": runs no approved example is close to. Runs
    answered from a verified example were reviewed already, through that example.
    """
    from django.conf import settings

    if run.question.channel == "evaluation" or run.status != "succeeded":
        return False
    if run.outcome == "ambiguous":  # the candidates disagreed: a person must look, whatever the policy
        return True
    if not run.sql or run.answered_by == "library":
        return False
    policy = settings.ASKDB_REVIEW_POLICY
    if policy == "low_confidence":
        low = run.question.source.confidence_threshold or settings.ASKDB_CONFIDENCE_THRESHOLD
        score = (run.answerability or {}).get("probability")
        return (run.confidence is not None and run.confidence < low) or (score is not None and score < low)
    if policy == "first_of_kind":
        nearest = max((e.get("score", 0.0) for e in (run.retrieval or {}).get("examples", [])), default=0.0)
        return nearest < settings.ASKDB_FIRST_OF_KIND_SIMILARITY
    return True


def _review_guard(run, reviewer, *, approving: bool) -> None:
    if not reviewer.has_perm("askdb.review_runs"):
        raise ReviewError("Only reviewers can review runs.")
    if approving and run.question.user_id == reviewer.pk:
        raise ReviewError(
            "You cannot approve or correct your own question; an admin can assign it to another reviewer."
        )
    if approving and (run.status != "succeeded" or not run.sql):
        raise ReviewError("Only an answered run with SQL can be approved or corrected.")


def _catalog_and_executor(source):
    from metadata_admin.services import source_catalog_schema, source_executor

    return source_catalog_schema(source), source_executor(source)


def sql_check(
    *, source, sql: str, execute: bool = True, row_cap: int | None = None, actor=None, purpose: str = "check",
    run=None,
):  # fmt: skip
    """Validate SQL against a source's catalog and (optionally) run it read-only, audited.

    Returns (ValidatedSql, QueryResult | None); raises ReviewError with the real error. The one
    path by which people's SQL (corrections, imports, re-validation) reaches the database.
    """
    from django.conf import settings

    from askdb.pipeline.validation import SqlValidationError, validate_sql
    from infra.adapters.clinical import ExecutionError

    catalog, executor = _catalog_and_executor(source)
    try:
        validated = validate_sql(sql, catalog)
    except SqlValidationError as exc:
        raise ReviewError(f"The SQL is not valid: {exc.message}") from exc
    if not execute:
        return validated, None
    try:
        result = executor.execute(
            validated.sql, timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S,
            row_cap=row_cap or settings.CLINICAL_ROW_CAP,
        )  # fmt: skip
    except ExecutionError as exc:
        audit_sql_executed(actor=actor, source=source, sql=validated.sql, purpose=purpose, rows=None,
                           duration_ms=None, outcome=exc.code, run=run, error=exc.message)  # fmt: skip
        raise ReviewError(f"The SQL failed when run: {exc.message}") from exc
    audit_sql_executed(actor=actor, source=source, sql=validated.sql, purpose=purpose, rows=result.row_count,
                       duration_ms=result.elapsed_ms, outcome="ok", run=run)  # fmt: skip
    return validated, result


def _review_save(run, reviewer, action: str, **fields):
    from askdb.models import Review

    review = Review.objects.create(run=run, reviewer=reviewer, action=action, **fields)
    audit_record(
        action=f"review.{action}", actor=reviewer, target=run,
        message=(fields.get("comment") or "")[:500],
        detail={k: v for k, v in fields.items() if k in ("category", "diff") and v} | {"review": review.pk},
    )  # fmt: skip
    return review


def review_approve(*, run, reviewer, comment: str = ""):
    """Approve a run's SQL: the pair becomes (or strengthens) a verified library example."""
    from django.db import transaction

    from askdb.models import Review, Run

    _review_guard(run, reviewer, approving=True)
    with transaction.atomic():
        # Two reviewers acting at once: the second sees the first one's decision, not a stale page.
        locked = Run.objects.select_for_update(of=("self",)).get(pk=run.pk)
        if locked.review_status in (Run.Review.APPROVED, Run.Review.CORRECTED):
            raise ReviewError(f"This run was already {locked.get_review_status_display()}.")
        example = example_upsert(
            source=run.question.source, question=run.question.text, sql=run.sql,
            approved_by=reviewer, origin="review", origin_run=run,
        )  # fmt: skip
        run.review_status = Run.Review.APPROVED
        run.save(update_fields=["review_status"])
        return _review_save(run, reviewer, Review.Action.APPROVE, comment=comment, example=example,
                            sql_before=run.sql, sql_after=run.sql)  # fmt: skip


def review_correct(*, run, reviewer, sql: str, comment: str = ""):
    """Replace a run's SQL with a reviewer's: validated and executed first, so nothing broken is
    saved; the run then shows the corrected result, and the diff is kept."""
    import difflib

    from django.db import transaction

    from askdb.models import Review, Run

    _review_guard(run, reviewer, approving=True)
    if not isinstance(sql, str) or not sql.strip():
        raise ReviewError("Type the corrected SQL.")
    validated, result = sql_check(
        source=run.question.source, sql=sql, actor=reviewer, purpose="correction", run=run
    )
    before = run.sql
    diff = "".join(
        difflib.unified_diff(
            before.strip().splitlines(keepends=True), validated.sql.strip().splitlines(keepends=True),
            fromfile="generated", tofile="corrected", lineterm="\n",
        )
    )  # fmt: skip
    with transaction.atomic():
        example = example_upsert(
            source=run.question.source, question=run.question.text, sql=validated.sql,
            approved_by=reviewer, origin="correction", origin_run=run, note=comment,
        )  # fmt: skip
        run.sql = validated.sql
        run.result_columns = list(result.columns)
        run.result_rows = [list(r) for r in result.rows]
        run.result_truncated = result.truncated
        run.row_count = result.row_count
        run.review_status = Run.Review.CORRECTED
        run.save(update_fields=["sql", "result_columns", "result_rows", "result_truncated", "row_count",
                                "review_status"])  # fmt: skip
        return _review_save(run, reviewer, Review.Action.CORRECT, comment=comment, example=example,
                            sql_before=before, sql_after=validated.sql, diff=diff)  # fmt: skip


def review_flag(*, run, reviewer, category: str, comment: str = ""):
    """Flag a run as wrong. "unanswerable" keeps the question as a negative example for the gate."""
    from django.db import transaction

    from askdb.models import Example, Review, Run

    _review_guard(run, reviewer, approving=False)
    if category not in Review.Category.values:
        raise ReviewError(f"Pick a category: {', '.join(Review.Category.values)}.")
    if not (comment or "").strip():
        raise ReviewError("Say what is wrong: flagging needs a comment.")
    with transaction.atomic():
        example = None
        if category == Review.Category.UNANSWERABLE:
            example = example_upsert(
                source=run.question.source, question=run.question.text, sql="",
                kind=Example.Kind.UNANSWERABLE, approved_by=reviewer, origin="review", origin_run=run,
                note=comment,
            )  # fmt: skip
        run.review_status = Run.Review.FLAGGED
        run.save(update_fields=["review_status"])
        return _review_save(run, reviewer, Review.Action.FLAG, category=category, comment=comment,
                            example=example, sql_before=run.sql)  # fmt: skip


def review_reassign(*, run, admin, reviewer):
    """An admin hands a run to a reviewer (for instance when the only reviewer asked it)."""
    from django.db import transaction

    from askdb.models import Review

    if not admin.has_perm("askdb.manage_users"):
        raise ReviewError("Only admins can reassign reviews.")
    if reviewer is None or not reviewer.has_perm("askdb.review_runs"):
        raise ReviewError("Runs can only be assigned to reviewers.")
    with transaction.atomic():
        run.assigned_to = reviewer
        run.save(update_fields=["assigned_to"])
        return _review_save(run, admin, Review.Action.REASSIGN, comment=f"assigned to {reviewer.username}")


# --------------------------------------------------------------------------- example library


def _normalized(text: str) -> str:
    """Text compared for duplicates: case, spacing and punctuation ignored ("?" and ";" alike)."""
    import re

    return " ".join(re.sub(r"[^\w'%.*<>=!-]+", " ", text.lower()).split()).rstrip(".")


def example_upsert(
    *,
    source,
    question: str,
    sql: str,
    kind: str = "answerable",
    approved_by=None,
    origin: str = "review",
    origin_run=None,
    note: str = "",
    vector: list[float] | None = None,
):
    """Add a verified pair to the library, or merge it into its near-duplicate.

    A near-duplicate is the same question (normalized), or a question at least
    ASKDB_EXAMPLE_MERGE_SIMILARITY close with the same SQL: merging keeps one example (the newest
    SQL and approver) and remembers the other wording as a paraphrase, so the few-shot slots are
    not spent on one question asked three ways.
    """
    from django.conf import settings
    from django.utils import timezone

    from askdb.models import Example
    from infra.adapters import catalog_search
    from infra.providers.embeddings import get_embedder

    question = " ".join(question.split())
    parsed_tables: list[str] = []
    parsed_columns: list[str] = []
    if kind == Example.Kind.ANSWERABLE:
        validated, _ = sql_check(source=source, sql=sql, execute=False)
        sql, parsed_tables, parsed_columns = validated.sql, list(validated.tables), list(validated.columns)
    else:
        sql = ""
    embedder = get_embedder()
    vector = vector or embedder.embed([question])[0]

    same = Example.objects.filter(source=source, kind=kind).exclude(status=Example.Status.RETIRED)
    duplicate = next((e for e in same.filter(question__iexact=question)), None)
    if duplicate is None:
        for example_id, score in catalog_search.examples_nearest(
            source_id=source.pk, vector=vector, model=embedder.model, k=3, kinds=(kind,)
        ):
            if score < settings.ASKDB_EXAMPLE_MERGE_SIMILARITY:
                break
            candidate = Example.objects.get(pk=example_id)
            if _normalized(candidate.sql) == _normalized(sql):
                duplicate = candidate
                break
    now = timezone.now()
    if duplicate is not None:
        if _normalized(duplicate.question) != _normalized(question) and question not in duplicate.paraphrases:
            duplicate.paraphrases = [*duplicate.paraphrases, question]
        duplicate.sql, duplicate.tables, duplicate.columns = sql, parsed_tables, parsed_columns
        duplicate.approved_by, duplicate.approved_at = approved_by, now
        duplicate.status, duplicate.validation_error, duplicate.validated_at = Example.Status.ACTIVE, "", now
        duplicate.note = note or duplicate.note
        duplicate.template = example_template(duplicate)
        duplicate.save()
        audit_record(action="example.merged", actor=approved_by, target=duplicate, message=question[:500])
        return duplicate
    example = Example(
        source=source, question=question, sql=sql, kind=kind, tables=parsed_tables, columns=parsed_columns,
        embedding=vector, embedding_model=embedder.model, origin=origin, origin_run=origin_run,
        approved_by=approved_by, approved_at=now, note=note, validated_at=now,
    )  # fmt: skip
    example.template = example_template(example)
    example.save()
    audit_record(action="example.created", actor=approved_by, target=example, message=question[:500],
                 detail={"kind": kind, "origin": origin, "tables": parsed_tables})  # fmt: skip
    return example


def example_template(example) -> dict:
    """The offline-answering template of an answerable example ({} when there is none yet)."""
    if example.kind != "answerable" or not example.sql:
        return {}
    try:
        from askdb.pipeline.templates import build_template
    except ImportError:  # the template builder is optional for the library itself
        return {}
    try:
        return build_template(example.question, example.sql, dialect=example.source.dialect).to_dict()
    except Exception:  # a template is an optimisation: an example without one is still an example
        import logging

        logging.getLogger(__name__).warning("no template for example %s", example.pk, exc_info=True)
        return {}


def example_set_status(*, example, actor, status: str, note: str = ""):
    """Retire an example (never used again) or bring it back (after checking it still works)."""
    from django.db import transaction

    with transaction.atomic():
        return _example_set_status(example=example, actor=actor, status=status, note=note)


def _example_set_status(*, example, actor, status: str, note: str = ""):
    from askdb.models import Example

    if status not in Example.Status.values:
        raise ReviewError(f"Unknown status {status!r}.")
    if status == Example.Status.ACTIVE and example.kind == Example.Kind.ANSWERABLE:
        sql_check(source=example.source, sql=example.sql, execute=False)
        example.validation_error = ""
    example.status = status
    example.note = note or example.note
    example.save(update_fields=["status", "note", "validation_error", "updated_at"])
    audit_record(action=f"example.{status}", actor=actor, target=example, message=note[:500])
    return example


def examples_revalidate(*, source, execute: bool = False, actor=None) -> dict:
    """Check every library example of a source against today's catalog (and data, if `execute`).

    Broken examples are marked "needs_review" rather than used; examples broken by an earlier
    change that work again are brought back. Called after every catalog or schema change.
    """
    from django.utils import timezone

    from askdb.models import Example

    report = {"checked": 0, "broken": [], "restored": []}
    examples = Example.objects.filter(source=source, kind=Example.Kind.ANSWERABLE).exclude(
        status=Example.Status.RETIRED
    )
    for example in examples:
        report["checked"] += 1
        try:
            sql_check(source=source, sql=example.sql, execute=execute, row_cap=1, actor=actor,
                      purpose="revalidation")  # fmt: skip
            error = ""
        except ReviewError as exc:
            error = str(exc)
        example.validated_at = timezone.now()
        if error and example.status == Example.Status.ACTIVE:
            example.status, example.validation_error = Example.Status.NEEDS_REVIEW, error
            report["broken"].append(example.pk)
        elif not error and example.status == Example.Status.NEEDS_REVIEW and example.validation_error:
            example.status, example.validation_error = Example.Status.ACTIVE, ""
            report["restored"].append(example.pk)
        example.save(update_fields=["status", "validation_error", "validated_at", "updated_at"])
    if report["broken"] or report["restored"]:
        audit_record(
            action="examples.revalidated", actor=actor, target=source,
            message=f"{len(report['broken'])} broken, {len(report['restored'])} restored of {report['checked']}",
            detail=report,
        )  # fmt: skip
    return report


def examples_revalidate_later(source) -> None:
    """Queue a re-validation after the current transaction commits (catalog and schema changes)."""
    from django.db import transaction

    def enqueue():
        from askdb.tasks import revalidate_examples

        try:
            revalidate_examples.delay(source.pk)
        except Exception:  # no broker (a management command on a stopped demo): check inline
            examples_revalidate(source=source)

    transaction.on_commit(enqueue)


def audit_sql_executed(
    *, actor=None, source, sql: str, purpose: str, rows: int | None, duration_ms: float | None,
    outcome: str, run=None, error: str = "",
) -> None:  # fmt: skip
    """An audit event per SQL statement run against clinical data: text, hash, source, size, time."""
    import hashlib

    audit_record(
        action="sql.executed", actor=actor, target=run if run is not None else source,
        message=f"{purpose}: {outcome}",
        detail={
            "sql": sql[:8000], "sha256": hashlib.sha256(sql.encode()).hexdigest(), "source": source.name,
            "rows": rows, "duration_ms": round(duration_ms, 1) if duration_ms is not None else None,
            "outcome": outcome, "purpose": purpose, "error": error[:500],
        },
    )  # fmt: skip


@dataclass
class ImportReport:
    """What an example import did: nothing is imported silently, and nothing fails silently."""

    created: list[int] = field(default_factory=list)
    merged: list[int] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)  # {"id", "question", "error"}

    @property
    def total(self) -> int:
        return len(self.created) + len(self.merged) + len(self.failed)

    def summary(self) -> str:
        return f"{len(self.created)} added, {len(self.merged)} merged into existing examples, {len(self.failed)} failed"


def examples_import(
    *,
    source,
    items: list[dict],
    approved_by=None,
    execute: bool = True,
    origin: str = "import",
    progress=None,
) -> ImportReport:
    """Add verified pairs in bulk (a file, the EHRSQL format, the demo seed).

    Each item is {"id"?, "question", "sql"} with sql "" or None for an unanswerable question.
    Every SQL is validated against the catalog and, with `execute`, run read-only (one row), so a
    pair that does not work is reported with its error instead of entering the library. Each
    item is its own transaction: one bad pair does not lose the good ones.
    """
    from django.db import transaction

    from askdb.models import Example
    from infra.providers.embeddings import get_embedder

    report = ImportReport()
    questions = [" ".join(str(item.get("question") or "").split()) for item in items]
    embedder = get_embedder()
    vectors = embedder.embed([q or "-" for q in questions]) if items else []
    before = set(Example.objects.filter(source=source).values_list("pk", flat=True))
    for n, (item, question, vector) in enumerate(zip(items, questions, vectors, strict=True), start=1):
        ident = str(item.get("id") or n)
        sql = item.get("sql")
        sql = "" if sql is None or str(sql).strip().lower() in ("", "null") else str(sql)
        try:
            if len(question) < 3:
                raise ReviewError("the question is empty")
            if sql and execute:
                sql_check(source=source, sql=sql, row_cap=1, actor=approved_by, purpose="import")
            with transaction.atomic():
                example = example_upsert(
                    source=source, question=question, sql=sql, approved_by=approved_by, origin=origin,
                    kind=Example.Kind.ANSWERABLE if sql else Example.Kind.UNANSWERABLE, vector=vector,
                    note=str(item.get("note") or ""),
                )  # fmt: skip
                extra = [
                    p
                    for p in item.get("paraphrases") or []
                    if isinstance(p, str) and p not in example.paraphrases
                ]
                if extra:  # an export carries them; an import must not lose them
                    example.paraphrases = [*example.paraphrases, *extra]
                    example.save(update_fields=["paraphrases"])
        except ReviewError as exc:
            report.failed.append({"id": ident, "question": question[:300], "error": str(exc)})
        else:
            (report.merged if example.pk in before else report.created).append(example.pk)
            before.add(example.pk)
        if progress:
            progress(n)
    audit_record(action="examples.imported", actor=approved_by, target=source, message=report.summary(),
                 detail={"failed": report.failed[:50]})  # fmt: skip
    return report


def examples_export(*, source, include_retired: bool = False, actor=None) -> list[dict]:
    """The library as plain data (the same shape examples_import reads), oldest first; audited."""
    from askdb.models import Example

    audit_record(action="examples.exported", actor=actor, target=source,
                 message="retired included" if include_retired else "")  # fmt: skip
    qs = Example.objects.filter(source=source).select_related("approved_by").order_by("id")
    if not include_retired:
        qs = qs.exclude(status=Example.Status.RETIRED)
    return [
        {
            "id": e.pk, "question": e.question, "sql": e.sql, "kind": e.kind, "status": e.status,
            "tables": e.tables, "paraphrases": e.paraphrases, "note": e.note,
            "approved_by": e.approved_by.username if e.approved_by else "",
            "approved_at": e.approved_at.isoformat() if e.approved_at else "",
        }
        for e in qs
    ]  # fmt: skip


def run_pick_candidate(*, run, user, group: int):
    """The researcher chooses one of the disagreeing candidates as the answer they meant.

    Its SQL is validated and executed again (the run kept only a preview), the run then shows that
    result, and it stays in the review queue: choosing is not the same as being verified.
    """
    from django.db import transaction

    groups = (run.candidates or {}).get("groups") or []
    if not isinstance(group, int) or not 0 <= group < len(groups):
        raise ReviewError("That candidate does not exist.")
    if run.question.user_id != user.pk and not user.has_perm("askdb.view_all_runs"):
        raise ReviewError("Only the person who asked can choose an answer.")
    _, result = sql_check(source=run.question.source, sql=groups[group]["sql"], actor=user,
                          purpose="candidate", run=run)  # fmt: skip
    with transaction.atomic():
        run.sql = groups[group]["sql"]
        run.result_columns = list(result.columns)
        run.result_rows = [list(r) for r in result.rows]
        run.result_truncated = result.truncated
        run.row_count = result.row_count
        run.outcome = "answered" if result.row_count else "no_rows"
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


def library_calibrate(
    *, source, items: list[dict] | None = None, min_precision: float = 0.95, progress=None
) -> dict:
    """Fit the offline matcher's confidence and choose its answering threshold on held-out questions.

    `items` are labelled questions ({"question", "sql"}) that are not in the library. Without them,
    leave-one-out over the library: each verified example is asked of the library without it, and
    a match counts as correct when its bound SQL returns the example's own result. The threshold
    is the lowest at which precision stays at or above `min_precision` (an abstention is cheap, a
    wrong answer is not).
    """
    from django.utils import timezone

    from askdb.models import Example
    from askdb.pipeline import offline
    from askdb.pipeline.compare import results_match
    from askdb.runner import LIBRARY_CANDIDATES, column_values_like, library_candidates
    from infra.adapters.catalog_search import examples_nearest
    from infra.adapters.clinical import ExecutionError
    from infra.providers.embeddings import get_embedder
    from metadata_admin.services import source_catalog_schema, source_executor

    executor, catalog, embedder = source_executor(source), source_catalog_schema(source), get_embedder()
    timeout = 10

    def rows(sql: str):
        return executor.execute(sql, timeout_s=timeout, row_cap=1000).rows

    def lookup(table_column: str, text: str):
        return column_values_like(executor, table_column, text, dialect=source.dialect)

    held_out = [(None, str(i["question"]), str(i.get("sql") or "")) for i in (items or []) if i.get("sql")]
    if not items:
        held_out = [
            (e.pk, e.question, e.sql)
            for e in Example.objects.filter(source=source, kind="answerable", status="active").order_by("pk")
        ]
    vectors = embedder.embed([q for _, q, _ in held_out]) if held_out else []
    samples: list[tuple[dict, bool]] = []
    for n, ((own_id, question, gold), vector) in enumerate(zip(held_out, vectors, strict=True), start=1):
        nearest = examples_nearest(
            source_id=source.pk, vector=vector, model=embedder.model, k=LIBRARY_CANDIDATES + 1
        )
        candidates = library_candidates([(i, sim) for i, sim in nearest if i != own_id][:LIBRARY_CANDIDATES])
        results = offline.match(question, candidates, lookup=lookup, catalog=catalog)
        if results and results[0].hard_ok and results[0].sql:
            try:
                correct = results_match(rows(results[0].sql), rows(gold))
            except ExecutionError:
                correct = False
            samples.append((results[0].features, correct))
        if progress:
            progress(n)
    calibration = offline.fit_calibration(samples)
    scored = [(calibration.predict(f), ok) for f, ok in samples]
    threshold = offline.choose_threshold(scored, min_precision=min_precision)
    calibration = offline.Calibration(
        calibration.weights, calibration.intercept, threshold, calibration.samples
    )
    answered = [(c, ok) for c, ok in scored if c >= threshold]
    report = {
        "calibration": calibration.to_dict(),
        "held_out": len(held_out), "matched": len(samples), "correct_matches": sum(ok for _, ok in samples),
        "threshold": threshold, "answered": len(answered),
        "precision": round(sum(ok for _, ok in answered) / len(answered), 4) if answered else None,
        "mode": "file" if items else "leave-one-out", "at": timezone.now().isoformat(),
    }  # fmt: skip
    source.library_calibration = report
    source.save(update_fields=["library_calibration"])
    audit_record(action="library.calibrated", target=source,
                 message=f"threshold {threshold:.3f} from {len(samples)} matches", detail=report)  # fmt: skip
    return report


def library_seed_demo(*, source, path, approved_by=None) -> str:
    """Seed an empty library with our benchmark's train split, then calibrate the matcher on it.

    Only for the demo: a fresh demo with no LLM then answers the common questions the library
    covers and politely declines the rest. A library that holds anything is left alone.
    """
    import json
    from pathlib import Path

    from askdb.models import Example

    if Example.objects.filter(source=source).exists():
        return f"library already holds {Example.objects.filter(source=source).count()} examples"
    path = Path(path)
    if not path.is_file():
        return f"no seed file at {path}; the library starts empty"
    items = [
        {"id": i.get("id"), "question": i["question"], "sql": i.get("sql") or ""}
        for i in json.loads(path.read_text())
    ]
    # Validation only: the synthetic demo data has other patients than the release the SQL was
    # checked on, and pairs that read tables this source lacks fail validation and are reported.
    report = examples_import(
        source=source, items=items, approved_by=approved_by, execute=False, origin="demo"
    )
    calibration = library_calibrate(source=source)
    return (
        f"{report.summary()} from {path.name}; offline answering threshold {calibration['threshold']:.2f} "
        f"({calibration['matched']} leave-one-out matches)"
    )
