"""Glue between the framework-free pipeline and Django: ports over the catalog and executor,
and a recorder that writes stage events, SQL attempts and LLM calls as they happen."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import sqlglot
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from rapidfuzz import fuzz
from sqlglot import exp

from askdb.answerability.scorer import gate_verdict
from askdb.models import Example, LlmCall, Run, SqlAttempt, StageEvent
from askdb.pipeline import offline, prompts
from askdb.pipeline.engine import ExecutionFailure, RetrievalView
from askdb.pipeline.offline import TemplateCandidate
from askdb.pipeline.templates import Template, template_is_current
from askdb.pipeline.types import CatalogSchema, ChatResult, ExampleContext, TableContext
from askdb.services.examples import example_template
from askdb.services.sql import audit_sql_executed
from infra.adapters.catalog_search import examples_nearest
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from metadata_admin.models import ClinicalSource, ColumnDoc
from metadata_admin.selectors import catalog_snapshot, retrieve
from metadata_admin.services import source_executor


class DjangoPorts:
    """What the pipeline needs from the world, for one source."""

    def __init__(
        self, source: ClinicalSource, *, chat, timeout_s: float, row_cap: int, run: Run | None = None
    ):
        self.source = source
        self.run = run  # for the audit of the SQL it executes
        self.chat = chat
        self.embedder = get_embedder()
        # The catalog as of this run, loaded once per catalog change (not per question).
        self.snapshot = catalog_snapshot(source)
        self.executor = source_executor(source, schemas=self.snapshot.schemas)
        self._catalog = self.snapshot.schema
        self.timeout_s = timeout_s
        self.row_cap = row_cap
        self._nearest_for: list[float] | None = None
        self._nearest_list: list[tuple[int, float]] = []
        self._sensitive_columns: frozenset[str] | None = None

    def embed(self, question: str) -> list[float]:
        return self.embedder.embed([question])[0]

    def retrieve(
        self, question: str, vector: list[float], k: int, examples: list[ExampleContext]
    ) -> RetrievalView:
        example_tables: dict[str, float] = {}
        for e in examples:  # a table read by a close verified example is likely needed again
            for table in e.tables:
                example_tables[table] = max(example_tables.get(table, 0.0), e.score)
        r = retrieve(
            source=self.source, question=question, k=k, question_vector=vector, example_tables=example_tables,
            snapshot=self.snapshot,
        )  # fmt: skip
        return RetrievalView(
            tables=r.tables, values=r.values, best_doc_score=r.best_doc_score, timings_ms=r.timings_ms
        )

    def _nearest(self, vector: list[float]) -> list[tuple[int, float]]:
        """The closest active answerable examples, searched once per question: the few-shot
        examples and the template candidates are both taken from this one list."""
        if self._nearest_for is not vector:
            k = max(settings.ASKDB_EXAMPLES_K, LIBRARY_CANDIDATES)
            self._nearest_list = examples_nearest(
                source_id=self.source.pk, vector=vector, model=self.embedder.model, k=k
            )
            self._nearest_for = vector
        return self._nearest_list

    def examples(self, question: str, vector: list[float]) -> list[ExampleContext]:
        """The closest reviewer-verified pairs, as few-shot examples. Never unverified ones: those
        measurably hurt accuracy, so only active library examples are eligible."""
        nearest = [
            (i, s) for i, s in self._nearest(vector)[: settings.ASKDB_EXAMPLES_K]
            if s >= settings.ASKDB_EXAMPLE_MIN_SIMILARITY
        ]  # fmt: skip
        found = Example.objects.in_bulk([i for i, _ in nearest])
        return [
            ExampleContext(
                question=found[i].question,
                sql=found[i].sql,
                score=s,
                example_id=i,
                tables=tuple(found[i].tables),
            )
            for i, s in nearest
            if i in found
        ]

    def library_match(self, question: str, vector: list[float]) -> tuple[list, float]:
        """Verified templates scored for this question (best first) and the answering threshold."""
        calibration = offline.Calibration.from_dict(self.source.library_calibration["calibration"]) if (
            self.source.library_calibration.get("calibration")
        ) else None  # fmt: skip
        threshold = calibration.threshold if calibration else offline.DEFAULT_THRESHOLD
        candidates = library_candidates(self._nearest(vector)[:LIBRARY_CANDIDATES])
        if not candidates:
            return [], threshold
        results = offline.match(
            question, candidates, lookup=self.lookup_value, catalog=self._catalog, calibration=calibration
        )
        return results, threshold

    def answerability(self, question: str, values: list) -> dict | None:
        """The answerability gate's verdict: the trained model with its rules, or the rules alone
        when no model is trained for the source (they need no training)."""
        return gate_verdict(self.source, question)

    def lookup_value(self, table_column: str, text: str) -> list[tuple[str, float]]:
        """Real values of one column like `text`, from the clinical database itself (read-only):
        exact (case-insensitive) matches score 1.0, values containing the text by fuzzy ratio.
        A column the catalog marks sensitive is never searched: its values are not linked."""
        table, _, column = table_column.rpartition(".")
        if f"{table.rpartition('.')[2]}.{column}".lower() in self._sensitive():
            return []
        return column_values_like(self.executor, table_column, text, dialect=self.source.dialect)

    def _sensitive(self) -> frozenset[str]:
        if self._sensitive_columns is None:
            pairs = ColumnDoc.objects.filter(table__source=self.source, sensitive=True).values_list(
                "table__name", "name"
            )
            self._sensitive_columns = frozenset(f"{t}.{c}".lower() for t, c in pairs)
        return self._sensitive_columns

    def table_context(self, tables: list[str]) -> list[TableContext]:
        return self.snapshot.table_contexts(tables)

    def catalog(self) -> CatalogSchema:
        return self._catalog

    def explain(self, sql: str) -> None:
        # EXPLAIN plans (and folds constants) on clinical data, so each one is audited like a query.
        actor = self.run.question.user if self.run is not None else None
        start = time.perf_counter()
        try:
            self.executor.explain(sql, timeout_s=min(self.timeout_s, 10))
        except ExecutionError as exc:
            with relaxed_commit():
                audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="explain", rows=None,
                                   duration_ms=(time.perf_counter() - start) * 1000, outcome=exc.code,
                                   run=self.run, error=exc.message, action="sql.explained")  # fmt: skip
            raise ExecutionFailure(exc.message, exc.code) from exc
        with relaxed_commit():
            audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="explain", rows=None,
                               duration_ms=(time.perf_counter() - start) * 1000, outcome="ok", run=self.run,
                               action="sql.explained")  # fmt: skip

    def execute(self, sql: str):
        outcome = self._run_sql(sql)
        self._audit_executed(sql, outcome)
        if isinstance(outcome, ExecutionError):
            raise ExecutionFailure(outcome.message, outcome.code) from outcome
        return outcome

    def execute_many(self, sqls: list[str]) -> list:
        """Several statements side by side, each on its own read-only connection (the sampled
        candidates: the clinical database, not this process, is what they wait on). Results in
        order, an ExecutionFailure for a statement that failed; audited here, in the caller's thread."""
        if len(sqls) <= 1:
            outcomes = [self._run_sql(sql) for sql in sqls]
        else:
            workers = min(len(sqls), settings.ASKDB_CANDIDATE_CONNECTIONS)
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="askdb-candidate") as pool:
                outcomes = list(pool.map(self._run_sql, sqls))
        out = []
        for sql, outcome in zip(sqls, outcomes, strict=True):
            self._audit_executed(sql, outcome)
            failed = isinstance(outcome, ExecutionError)
            out.append(ExecutionFailure(outcome.message, outcome.code) if failed else outcome)
        return out

    def _run_sql(self, sql: str):
        """The result, or the ExecutionError; touches no Django connection (runs in any thread)."""
        try:
            return self.executor.execute(
                sql, timeout_s=self.timeout_s, row_cap=self.row_cap, max_bytes=settings.ASKDB_RESULT_MAX_BYTES
            )
        except ExecutionError as exc:
            return exc

    def _audit_executed(self, sql: str, outcome) -> None:
        failed = isinstance(outcome, ExecutionError)
        with relaxed_commit():
            audit_sql_executed(
                actor=self.run.question.user if self.run is not None else None,
                source=self.source,
                sql=sql,
                purpose="question",
                rows=None if failed else outcome.row_count,
                duration_ms=None if failed else outcome.elapsed_ms,
                outcome=outcome.code if failed else "ok",
                run=self.run,
                error=outcome.message if failed else "",
            )


@contextlib.contextmanager
def relaxed_commit():
    """A transaction whose commit does not wait for the disk (PostgreSQL's synchronous_commit
    off, for this transaction only): a run's progress rows cost ~0.2 ms instead of a ~1-7 ms
    fsync each. Nothing is lost when the app crashes, and PostgreSQL writes its log in order, so
    the run's final, synchronous commit makes every row written before it durable; only a crash
    of the database server itself can lose the last fraction of a second of a running run."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit = off")
        yield


class _Stage:
    def __init__(self, event: StageEvent):
        self.event = event
        self.status = StageEvent.Status.OK

    def note(self, **detail: Any) -> None:
        self.event.detail.update(detail)

    def finish(self, status: str) -> None:
        self.status = status


# Stages that can wait on something outside this process (the LLM, the clinical database): their
# "running" row is written when they start, so the live run page shows what the run waits for.
# The quick stages (embed, retrieve, match, prompt) are written complete, with the next flush.
LIVE_STAGES = frozenset({"gate", "generate", "validate", "execute", "summarize"})
# A stage boundary looks for a cancel at most this often: quick stages follow each other within
# milliseconds, and a boundary after a wait (an LLM call, a query) always looks.
CANCEL_CHECK_S = 0.2


class DjangoRecorder:
    """Writes a run's stage events, SQL attempts and LLM calls in a few transactions per run.

    What the stages record is held in memory and written in one relaxed-commit transaction (see
    relaxed_commit) when a live stage starts, together with that stage's "running" row, and by
    `flush()` when the run ends: about five transactions per question instead of ~30 autocommits,
    while the run page still shows every stage as it happens. An LLM call's row and its audit
    event are written in the same transaction, as before.
    """

    def __init__(self, run: Run, *, time_limit_s: float | None = None):
        self.run = run
        # The run's soft time limit, checked at every stage boundary: the threads pool cannot
        # interrupt a task as the prefork pool's signal does, so the run stops itself.
        limit = settings.CELERY_TASK_SOFT_TIME_LIMIT if time_limit_s is None else time_limit_s
        self._deadline = time.monotonic() + limit if limit else None
        self._new: list[StageEvent] = []  # complete events not written yet
        self._ended: list[StageEvent] = []  # written "running" events that have ended since
        self._attempts: list[SqlAttempt] = []
        self._calls: list[tuple[LlmCall, dict]] = []  # with their audit event's fields
        self._run_fields: dict[str, Any] = {}
        self._tokens = [0, 0, Decimal(0)]  # prompt, completion, cost not yet added to the run
        self._cancel_checked = time.monotonic()  # the run was claimed (not cancelled) just now

    @contextlib.contextmanager
    def stage(self, name: str):
        event = StageEvent(
            run=self.run, name=name, started_at=timezone.now(), status=StageEvent.Status.RUNNING, detail={}
        )
        if name in LIVE_STAGES:
            self.flush(running=event)
        handle = _Stage(event)
        start = time.perf_counter()
        try:
            yield handle
        except Exception as exc:
            event.status = StageEvent.Status.FAILED
            event.detail.setdefault("error", f"{type(exc).__name__}: {exc}"[:500])
            raise
        else:
            event.status = handle.status
        finally:
            event.duration_ms = round((time.perf_counter() - start) * 1000, 2)
            (self._ended if event.pk else self._new).append(event)

    def flush(self, running: StageEvent | None = None) -> None:
        """Write everything recorded since the last flush (and `running`, the live stage just
        starting) in one transaction; the run's heartbeat is refreshed with it."""
        if running is not None:
            self._new.append(running)
        elif not (
            self._new or self._ended or self._attempts or self._calls or self._run_fields or any(self._tokens)
        ):
            return
        try:
            with relaxed_commit():
                self._write()
        except BaseException:
            for row in [*self._new, *self._attempts, *(call for call, _ in self._calls)]:
                row.pk = None  # rolled back: the next flush inserts them again
            if running is not None:
                self._new.remove(running)
            raise
        self._new, self._ended, self._attempts, self._calls, self._run_fields = [], [], [], [], {}
        self._tokens = [0, 0, Decimal(0)]

    def _write(self) -> None:
        if self._new:
            StageEvent.objects.bulk_create(self._new)  # sets pk (PostgreSQL returns the ids)
        if self._ended:
            StageEvent.objects.bulk_update(self._ended, ["status", "duration_ms", "detail"])
        if self._attempts:
            SqlAttempt.objects.bulk_create(self._attempts)
        for call, audit in self._calls:
            call.save(force_insert=True)
            audit_record(action="llm.call", target=self.run, **audit)
        prompt, completion, cost = self._tokens
        fields = {**self._run_fields, "heartbeat_at": timezone.now()}
        if prompt or completion or cost:
            fields.update(
                tokens_prompt=F("tokens_prompt") + prompt,
                tokens_completion=F("tokens_completion") + completion,
                cost_usd=F("cost_usd") + cost,
            )
        Run.objects.filter(pk=self.run.pk).update(**fields)

    def attempt(
        self, *, number: int, sql: str, origin: str, valid: bool, error_code: str = "", error: str = ""
    ) -> None:
        self._attempts.append(
            SqlAttempt(
                run=self.run,
                number=number,
                sql=capped_text(sql, MAX_STORED_SQL),
                origin=origin,
                valid=valid,
                error_code=error_code,
                error=capped_text(error, MAX_STORED_ERROR),
            )
        )

    def llm_call(
        self, *, purpose: str, messages: list[dict], result: ChatResult | None, error: str = ""
    ) -> None:
        call = LlmCall(
            run=self.run,
            purpose=purpose,
            model=result.model if result else "",
            prompt_version=prompts.PROMPT_VERSION,
            messages=messages,
            response=capped_text("\n---\n".join(result.texts), MAX_STORED_RESPONSE) if result else "",
            prompt_tokens=result.prompt_tokens if result else 0,
            completion_tokens=result.completion_tokens if result else 0,
            cost_usd=Decimal(str(result.cost_usd)) if result else 0,
            duration_ms=result.duration_ms if result else 0,
            error=error,
        )
        audit = {
            "message": f"{purpose}: {error or 'ok'}"[:500],
            "detail": {
                "purpose": purpose, "model": result.model if result else "",
                "prompt_version": prompts.PROMPT_VERSION,
                "prompt_tokens": result.prompt_tokens if result else 0,
                "completion_tokens": result.completion_tokens if result else 0,
                "cost_usd": result.cost_usd if result else 0.0, "error": error[:500],
            },
        }  # fmt: skip
        self._calls.append((call, audit))
        if result:
            self._tokens[0] += result.prompt_tokens
            self._tokens[1] += result.completion_tokens
            self._tokens[2] += Decimal(str(result.cost_usd))

    def retrieval(self, view: RetrievalView, examples: list[ExampleContext]) -> None:
        data = {
            "examples": [
                {"id": e.example_id, "score": round(e.score, 4), "question": e.question} for e in examples
            ],
            "tables": [
                {
                    "table": t.qualified,
                    "score": t.score,
                    "doc_score": t.doc_score,
                    "via": t.via,
                    "reasons": list(t.reasons),
                }
                for t in view.tables
            ],
            "values": [
                {
                    "table": v.table,
                    "column": v.column,
                    "value": v.value,
                    "code": v.code,
                    "score": v.score,
                    "term": v.term,
                }
                for v in view.values[:20]
            ],
            "best_doc_score": view.best_doc_score,
        }
        self._run_fields.update(
            retrieval=data, examples_used=[e.example_id for e in examples if e.example_id is not None]
        )

    def cancelled(self) -> bool:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise SoftTimeLimitExceeded  # ends the run as "time_limit", like Celery's own
        if time.monotonic() - self._cancel_checked < CANCEL_CHECK_S:
            return False
        self._cancel_checked = time.monotonic()
        return Run.objects.filter(pk=self.run.pk, status=Run.Status.CANCELLED).exists()


# What is stored of each SQL attempt, error and LLM reply: a 1 MB reply must not become megabytes
# of attempts. Validation refuses SQL longer than 20 000 characters, so nothing useful is lost.
MAX_STORED_SQL = 20_000
MAX_STORED_ERROR = 2_000
MAX_STORED_RESPONSE = 100_000


def capped_text(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [cut: {len(text) - limit} more characters not stored]"


LIBRARY_CANDIDATES = 8  # closest verified examples whose templates the matcher tries


def library_candidates(nearest: list[tuple[int, float]]) -> list:
    """Template candidates from (example id, similarity) pairs; stale templates are rebuilt."""
    found = Example.objects.in_bulk([i for i, _ in nearest])
    out = []
    for example_id, score in nearest:
        example = found.get(example_id)
        if example is None:
            continue
        if not template_is_current(example.template):
            example.template = example_template(example)
            Example.objects.filter(pk=example.pk).update(template=example.template)
        if not example.template:
            continue
        template = Template.from_dict(example.template)
        if template.usable:
            out.append(TemplateCandidate(example_id, template, score, example.question))
    return out


def column_values_like(executor, table_column: str, text: str, *, dialect: str, limit: int = 5):
    """(value, score) of one column's values equal to or containing `text`, most frequent first."""
    table, _, column = table_column.rpartition(".")
    text = text.strip()
    if not table or not column or not text:
        return []
    col = exp.cast(exp.column(column, quoted=True), "text")
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    query = (
        sqlglot.select(col.as_("v"), exp.Count(this=exp.Star()).as_("n"))
        .from_(exp.to_table(table))
        .where(exp.ILike(this=col.copy(), expression=exp.Literal.string(pattern)))
        .group_by(col.copy())
        .order_by("n DESC")
        .limit(200)
    )
    try:
        result = executor.execute(query.sql(dialect=dialect), timeout_s=5, row_cap=200)
    except ExecutionError:
        return []
    wanted = text.lower()
    scored = []
    for value, _ in result.rows:
        if value is None:
            continue
        value = str(value)
        score = 1.0 if value.lower() == wanted else round(fuzz.ratio(wanted, value.lower()) / 100 * 0.95, 4)
        scored.append((value, score))
    scored.sort(key=lambda p: -p[1])
    return scored[:limit]
