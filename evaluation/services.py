"""Running an evaluation: every benchmark question as a real askdb Question and Run through the
real pipeline, its gold SQL and predicted SQL executed on the same source, compared the EHRSQL
way, scored, and summarised into metrics and a report. The `evaluate` command and any future
page or task call these."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.test.utils import override_settings
from django.utils import timezone

from askdb.models import Example, Question, Run, StageEvent
from askdb.services.runs import run_execute
from core import prompts
from core.compare import results_match
from core.validation import SqlValidationError, validate_sql
from evaluation import metrics
from evaluation.models import Evaluation, EvaluationItem
from evaluation.report import report_render
from evaluation.selectors import evaluation_results
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from infra.formats import BenchmarkItem, load_items
from infra.providers import embeddings
from infra.queue import task_send
from metadata_admin.services import source_catalog_schema, source_executor

log = logging.getLogger(__name__)

EVALUATOR_USERNAME = "askdb-evaluator"
WORKER_NAME = "evaluate"


def evaluator_user():
    """The inactive user evaluation questions are asked as: it cannot log in, and its questions
    (channel "evaluation") stay out of every real user's history and the review queue."""
    user, created = get_user_model().objects.get_or_create(
        username=EVALUATOR_USERNAME, defaults={"is_active": False}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def evaluation_settings_snapshot(*, source, offline: bool = False) -> dict[str, Any]:
    """What produced an evaluation's numbers, so evaluations compare across versions without git."""
    model = "" if offline else (settings.LLM_MODEL or "")
    embedding_model = settings.EMBEDDING_MODEL or (
        embeddings.LOCAL_MODEL if settings.EMBEDDING_PROVIDER == "local" else embeddings.OPENAI_DEFAULT_MODEL
    )
    knobs = {
        name: getattr(settings, name)
        for name in dir(settings)
        if name.startswith("ASKDB_")
        and name not in {"ASKDB_HOME", "ASKDB_QUESTION_MAX_CHARS", "ASKDB_STALE_RUN_SECONDS"}
        and isinstance(getattr(settings, name), bool | int | float | str)
    }
    return {
        "prompt_version": prompts.PROMPT_VERSION,
        "llm_model": model or "none",
        "embedding_provider": settings.EMBEDDING_PROVIDER,
        "embedding_model": embedding_model,
        "library_size": Example.objects.filter(source=source, status=Example.Status.ACTIVE).count(),
        "offline": offline,
        "row_cap": settings.CLINICAL_ROW_CAP,
        "statement_timeout_s": settings.CLINICAL_STATEMENT_TIMEOUT_S,
        **dict(sorted(knobs.items())),
    }


def settings_version(snapshot: dict[str, Any]) -> str:
    """A short, stable name for a settings snapshot: the prompt version plus a hash of the rest."""
    digest = hashlib.sha256(json.dumps(snapshot, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{snapshot.get('prompt_version', '?')}+{digest}"


def evaluation_start(
    *,
    source,
    items: Sequence[BenchmarkItem],
    questions_file: str,
    labels_file: str = "",
    name: str = "",
    out_dir: str = "",
    offline: bool = False,
) -> Evaluation:
    """Create the evaluation and one pending item per question, audited."""
    snapshot = evaluation_settings_snapshot(source=source, offline=offline)
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            source=source,
            name=name or Path(questions_file).stem,
            questions_file=questions_file,
            labels_file=labels_file,
            out_dir=out_dir,
            settings=snapshot,
            version=settings_version(snapshot),
        )
        EvaluationItem.objects.bulk_create(
            EvaluationItem(
                evaluation=evaluation,
                position=n,
                item_id=item.id,
                question=item.question,
                gold_sql=item.gold_sql,
                category=item.category[:64],
                metadata=item.metadata,
            )
            for n, item in enumerate(items)
        )
        audit_record(
            action="evaluation.started",
            target=evaluation,
            message=f"{len(items)} questions from {questions_file} on {source.name}",
            detail={"version": evaluation.version, "settings": snapshot},
        )
    return evaluation


def evaluation_run(
    *, evaluation: Evaluation, workers: int = 4, on_item: Callable[[EvaluationItem], None] | None = None
) -> Evaluation:
    """Run every pending item (items already done are skipped: this is also the resume), then
    compute the metrics and the report. Interrupted (Ctrl-C): marked interrupted, resumable."""
    pending = list(evaluation.items.filter(done=False).values_list("pk", flat=True))
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.RUNNING, finished_at=None)
    offline = bool(evaluation.settings.get("offline"))
    # override_settings changes the process-wide settings, so the worker threads see it too.
    with override_settings(LLM_MODEL="") if offline else _nothing():
        try:
            if workers <= 1:
                for pk in pending:
                    item = evaluation_item_execute(item_pk=pk)
                    if on_item:
                        on_item(item)
            else:
                _run_parallel(pending, workers, on_item)
        except BaseException as exc:
            status = (
                Evaluation.Status.INTERRUPTED
                if isinstance(exc, KeyboardInterrupt)
                else Evaluation.Status.FAILED
            )
            Evaluation.objects.filter(pk=evaluation.pk).update(status=status)
            raise
    return evaluation_finish(evaluation=evaluation)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _run_parallel(pending: list[int], workers: int, on_item) -> None:
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evaluate")
    try:
        futures = [pool.submit(_execute_in_thread, pk) for pk in pending]
        for future in as_completed(futures):
            item = future.result()
            if on_item:
                on_item(item)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _execute_in_thread(item_pk: int) -> EvaluationItem:
    try:
        return evaluation_item_execute(item_pk=item_pk)
    finally:
        connections.close_all()  # a thread's connections are its own; do not leak them


def evaluation_item_execute(*, item_pk: int) -> EvaluationItem:
    """Ask one benchmark question through the real pipeline and score it against gold.

    Idempotent for resuming: a done item is returned as is; an item whose run already ended
    (interrupted between run and scoring) is only scored; a run left 'running' by a killed
    evaluation is failed as worker_lost and the question asked again.
    """
    item = EvaluationItem.objects.select_related("evaluation__source", "run").get(pk=item_pk)
    if item.done:
        return item
    run = item.run
    if run is not None and run.status == Run.Status.RUNNING:
        run_execute(run_id=run.pk, worker=WORKER_NAME)  # fails it as worker_lost
        run = None
    if run is None or run.status == Run.Status.CANCELLED:
        with transaction.atomic():
            question = Question.objects.create(
                user=evaluator_user(), source=item.evaluation.source, text=item.question, channel="evaluation"
            )
            run = Run.objects.create(question=question)
            item.run = run
            item.save(update_fields=["run"])
    if not run.is_terminal:
        run_execute(run_id=run.pk, worker=WORKER_NAME)
    run = Run.objects.get(pk=run.pk)
    _score(item, run)
    return item


def _execute(executor, sql: str, catalog):
    """Gold, predicted and library SQL run like any SQL askdb runs: validated, and the statement
    sent generated from the validated tree (a gold file is input like any other)."""
    try:
        statement = validate_sql(sql, catalog).sql
    except SqlValidationError as exc:
        raise ExecutionError(f"the SQL was refused: {exc.message}", code="sql_invalid") from exc
    return executor.execute(
        statement, timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S, row_cap=settings.CLINICAL_ROW_CAP
    )


def _score(item: EvaluationItem, run) -> None:
    executor = source_executor(item.evaluation.source)
    catalog = source_catalog_schema(item.evaluation.source)
    stages: dict[str, float] = {}
    for name, ms in StageEvent.objects.filter(run=run).values_list("name", "duration_ms"):
        if ms is not None:
            stages[name] = stages.get(name, 0.0) + ms

    abstained = metrics.is_abstention(run.status, run.outcome)
    gold_rows, gold_error = None, ""
    if item.gold_sql:
        try:
            gold_rows = _execute(executor, item.gold_sql, catalog).rows
        except ExecutionError as exc:
            gold_error = exc.message or exc.code

    predicted_rows, predicted_error, correct = None, "", None
    if not abstained:
        predicted_rows, predicted_error = _predicted(executor, run, catalog)
        if not gold_error:
            correct = (
                bool(item.gold_sql)
                and predicted_rows is not None
                and results_match(predicted_rows, gold_rows)
            )

    library = run.library_match or {}
    library_confidence = library.get("confidence")
    library_correct = (
        None if gold_error else _library_correct(executor, catalog, item, run, predicted_rows, gold_rows)
    )

    answerability = run.answerability or {}
    probability = answerability.get("probability")
    probability = probability if isinstance(probability, int | float) else None
    score = metrics.abstention_score(
        abstained=abstained, answerable_probability=probability, confidence=run.confidence
    )
    item.run_status, item.outcome = run.status, run.outcome
    item.predicted_sql = run.sql
    item.abstained, item.correct = abstained, correct
    item.gold_error, item.predicted_error = gold_error, predicted_error
    item.latency_ms = round(sum(stages.values()), 2) if stages else None
    item.tokens_prompt, item.tokens_completion, item.cost_usd = (
        run.tokens_prompt, run.tokens_completion, run.cost_usd or Decimal(0)
    )  # fmt: skip
    item.scores = {
        "abstention_score": score,
        "answerable_probability": probability,
        "confidence": run.confidence,
        "answered_by": run.answered_by,
        "library_confidence": library_confidence if isinstance(library_confidence, int | float) else None,
        "library_correct": library_correct,
        "stages_ms": stages,
        "predicted_rows": len(predicted_rows) if predicted_rows is not None else None,
        "gold_rows": len(gold_rows) if gold_rows is not None else None,
    }
    item.verdict = metrics.outcome(item_score(item))
    item.why = _why(item, run)
    item.done, item.done_at = True, timezone.now()
    item.save()


def _predicted(executor, run, catalog) -> tuple[list | None, str]:
    """The rows of the run's SQL run again (as the gold was), or why there are none."""
    if run.outcome in metrics.ANSWER_OUTCOMES:
        return None, run.message
    try:
        return _execute(executor, run.sql, catalog).rows, ""
    except ExecutionError as exc:
        return None, exc.message or exc.code


def _library_correct(executor, catalog, item: EvaluationItem, run, predicted_rows, gold_rows) -> bool | None:
    """Whether the library's best match (answered or not) gives the gold result; None without one."""
    sql = (run.library_match or {}).get("sql")
    if not sql:
        return None
    if sql == run.sql and predicted_rows is not None:
        library_rows = predicted_rows
    else:
        try:
            library_rows = _execute(executor, sql, catalog).rows
        except ExecutionError:
            library_rows = None
    return bool(item.gold_sql) and library_rows is not None and results_match(library_rows, gold_rows)


def _why(item: EvaluationItem, run) -> str:
    """One line on what went wrong, for the report's failure list ("" when nothing did)."""
    verdict = item.verdict
    if verdict == metrics.GOLD_ERROR:
        return f"the gold SQL failed: {item.gold_error}"
    if verdict == metrics.MISSED:
        return f"abstained ({run.outcome or run.status}): {run.message}".strip()[:500]
    if verdict == metrics.ANSWERED_UNANSWERABLE:
        return "answered a question the benchmark marks unanswerable"
    if verdict == metrics.WRONG:
        if item.predicted_error:
            return f"the predicted SQL failed: {item.predicted_error}"[:500]
        got, want = item.scores.get("predicted_rows"), item.scores.get("gold_rows")
        if got != want:
            return f"different result: {got} rows, gold has {want}"
        return f"different values in the {got} rows (compared rounded to 3 decimals, sorted)"
    return ""


def item_score(item: EvaluationItem) -> metrics.ItemScore:
    """An item as the pure metrics see it."""
    s = item.scores or {}
    return metrics.ItemScore(
        id=item.item_id,
        answerable=item.answerable,
        abstained=bool(item.abstained),
        correct=bool(item.correct),
        gold_error=bool(item.gold_error),
        abstention_score=s.get("abstention_score"),
        confidence=s.get("confidence"),
        answered_by=s.get("answered_by") or "",
        library_confidence=s.get("library_confidence"),
        library_correct=s.get("library_correct"),
        category=item.category,
        run_outcome=item.outcome,
        stages_ms=s.get("stages_ms") or {},
        tokens_prompt=item.tokens_prompt,
        tokens_completion=item.tokens_completion,
        cost_usd=float(item.cost_usd or 0),
    )


def evaluation_finish(*, evaluation: Evaluation) -> Evaluation:
    """Metrics and report from the items done so far; finished when every item is done."""
    items = list(evaluation.items.select_related(None).order_by("position"))
    done = [i for i in items if i.done]
    evaluation.metrics = metrics.summarize([item_score(i) for i in done])
    complete = len(done) == len(items)
    evaluation.status = Evaluation.Status.FINISHED if complete else Evaluation.Status.INTERRUPTED
    evaluation.finished_at = timezone.now() if complete else None
    evaluation.report_html = report_render(evaluation=evaluation, items=items)
    with transaction.atomic():
        evaluation.save()
        audit_record(
            action=f"evaluation.{evaluation.status}",
            target=evaluation,
            message=f"{len(done)} of {len(items)} questions scored",
            detail={"version": evaluation.version, "rs": evaluation.metrics.get("rs", {})},
        )
    return evaluation


def evaluation_write_files(*, evaluation: Evaluation, out_dir: Path) -> dict[str, Path]:
    """results.json and report.html in `out_dir` (plus evaluation.json, which makes it resumable)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "marker": out_dir / "evaluation.json",
        "results": out_dir / "results.json",
        "report": out_dir / "report.html",
    }
    paths["marker"].write_text(json.dumps({"evaluation": evaluation.pk}) + "\n", encoding="utf-8")
    if evaluation.metrics:
        paths["results"].write_text(
            json.dumps(evaluation_results(evaluation), indent=2, default=str) + "\n", encoding="utf-8"
        )
    if evaluation.report_html:
        paths["report"].write_text(evaluation.report_html, encoding="utf-8")
    return paths


def default_out_dir(evaluation: Evaluation) -> Path:
    return Path(settings.ASKDB_HOME) / "evaluations" / str(evaluation.pk)


def evaluation_start_from_files(
    *, source, questions, labels=None, name: str = "", offline: bool = False, limit: int = 0, actor=None
) -> Evaluation:
    """Start an evaluation from uploaded files (the /evaluations/ page): the files are kept under
    ASKDB_HOME/evaluations/uploads/, read like `manage.py evaluate` reads them (a FormatError says
    what is wrong with them), and the run goes to a worker after commit."""
    folder = Path(settings.ASKDB_HOME) / "evaluations" / "uploads" / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for upload in (questions, labels):
        if upload is None:
            paths.append(None)
            continue
        path = folder / Path(upload.name).name
        with path.open("wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        paths.append(path)
    items = load_items(paths[0], paths[1])
    if limit:
        items = items[:limit]
    evaluation = evaluation_start(source=source, items=items, questions_file=str(paths[0]),
                                  labels_file=str(paths[1] or ""), name=name, offline=offline)  # fmt: skip
    evaluation.out_dir = str(default_out_dir(evaluation))
    evaluation.save(update_fields=["out_dir"])
    audit_record(
        action="evaluation.queued", actor=actor, target=evaluation, message=f"{len(items)} questions"
    )

    def enqueue() -> None:
        task_send("evaluation.run_evaluation", evaluation.pk)  # evaluation.tasks.run_evaluation

    transaction.on_commit(enqueue)
    return evaluation


def evaluation_run_and_report(*, evaluation_id: int, workers: int = 2) -> Evaluation | None:
    """Run a queued evaluation to the end and write its files (results.json, report.html)."""
    evaluation = Evaluation.objects.filter(pk=evaluation_id).first()
    if evaluation is None:
        return None
    out = Path(evaluation.out_dir) if evaluation.out_dir else default_out_dir(evaluation)
    evaluation = evaluation_run(evaluation=evaluation, workers=workers)
    evaluation_write_files(evaluation=evaluation, out_dir=out)
    return evaluation
