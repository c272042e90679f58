"""The pipeline's Recorder over Django: a run's stage events, SQL attempts and LLM calls, written
in a few relaxed-commit transactions per run. An adapter: it imports models and infra, no service."""

from __future__ import annotations

import contextlib
import time
from decimal import Decimal
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from askdb.models import LlmCall, Run, SqlAttempt, StageEvent
from core import prompts
from core.engine import RetrievalView
from core.types import ChatResult, ExampleContext
from infra.audit.services import audit_record


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
# Of those, the stages that wait only on the LLM: with no LLM configured they wait on nothing (the
# gate's rules and model are in-process, generate and summarize are skipped), so writing their
# "running" row first would cost a transaction of ~5 statements for a row that lives milliseconds.
LLM_STAGES = frozenset({"gate", "generate", "summarize"})
# Stages written as soon as they end, for the page to show during the stage that follows: the
# estimate of a large query is read while that query runs.
SHOWN_AT_END = frozenset({"estimate"})
# Up to this many ended stages are written by one UPDATE each: bulk_update builds a CASE per field
# and row, whose compiling cost more CPU than the statements it saves (a third of a flush's CPU),
# and under the threads pool every question's CPU waits on the same interpreter.
FEW_ENDED = 2
# A flush with nothing else for the run's row refreshes its heartbeat only this long after the last
# one: the stale-run reaper waits minutes (ASKDB_STALE_RUN_SECONDS), and an UPDATE per quick stage
# boundary was a sixth of a question's recording CPU.
HEARTBEAT_S = 10.0
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

    def __init__(self, run: Run, *, time_limit_s: float | None = None, llm: bool = True):
        self.run = run
        # `llm`: an LLM is configured. Without one, the LLM-only stages are written complete.
        self._live = LIVE_STAGES if llm else LIVE_STAGES - LLM_STAGES
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
        self._beat = time.monotonic()  # and its heartbeat written with the claim

    @contextlib.contextmanager
    def stage(self, name: str):
        event = StageEvent(
            run=self.run, name=name, started_at=timezone.now(), status=StageEvent.Status.RUNNING, detail={}
        )
        if name in self._live:
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
        if name in SHOWN_AT_END:
            self.flush()

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

    def flush_final(self) -> dict[str, Any]:
        """Write what was recorded since the last flush, except the run row's own fields, which are
        returned for the caller's finishing UPDATE of the run. Call it inside the caller's
        (synchronous) transaction that ends the run: the run's last stages, attempts and LLM calls
        and its result are then written together, one transaction fewer per question. The
        returned tokens are F() increments; the run in memory already holds their sums."""
        if transaction.get_autocommit():
            raise RuntimeError("flush_final writes inside the transaction that ends the run")
        try:
            self._write_rows()
        except BaseException:
            for row in [*self._new, *self._attempts, *(call for call, _ in self._calls)]:
                row.pk = None  # rolled back with the caller's transaction
            raise
        fields = self._run_row_fields()
        self._new, self._ended, self._attempts, self._calls, self._run_fields = [], [], [], [], {}
        self._tokens = [0, 0, Decimal(0)]
        return fields

    def _run_row_fields(self) -> dict[str, Any]:
        """The run row's recorded fields not written yet (retrieval, token increments)."""
        fields = dict(self._run_fields)
        prompt, completion, cost = self._tokens
        if prompt or completion or cost:
            fields.update(
                tokens_prompt=F("tokens_prompt") + prompt,
                tokens_completion=F("tokens_completion") + completion,
                cost_usd=F("cost_usd") + cost,
            )
        return fields

    def _write(self) -> None:
        self._write_rows()
        beat_due = time.monotonic() - self._beat >= HEARTBEAT_S
        fields = self._run_row_fields()
        if not (fields or beat_due):
            return  # nothing for the run's row: a heartbeat written seconds ago still says it is alive
        Run.objects.filter(pk=self.run.pk).update(**fields, heartbeat_at=timezone.now())
        self._beat = time.monotonic()

    def _write_rows(self) -> None:
        if self._new:
            StageEvent.objects.bulk_create(self._new)  # sets pk (PostgreSQL returns the ids)
        if len(self._ended) > FEW_ENDED:
            StageEvent.objects.bulk_update(self._ended, ["status", "duration_ms", "detail"])
        else:  # usually the one live stage that just ended: a plain UPDATE compiles in a tenth of the CPU
            for event in self._ended:
                StageEvent.objects.filter(pk=event.pk).update(
                    status=event.status, duration_ms=event.duration_ms, detail=event.detail
                )
        if self._attempts:
            SqlAttempt.objects.bulk_create(self._attempts)
        for call, audit in self._calls:
            call.save(force_insert=True)
            audit_record(action="llm.call", target=self.run, **audit)

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
            # The run in memory is kept as stored (the run is ended without reading it back).
            self.run.tokens_prompt += result.prompt_tokens
            self.run.tokens_completion += result.completion_tokens
            self.run.cost_usd = (self.run.cost_usd + Decimal(str(result.cost_usd))).quantize(COST_STEP)

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
        used = [e.example_id for e in examples if e.example_id is not None]
        self._run_fields.update(retrieval=data, examples_used=used)
        self.run.retrieval, self.run.examples_used = data, used  # as stored, once flushed

    def cancelled(self) -> bool:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise SoftTimeLimitExceeded  # ends the run as "time_limit", like Celery's own
        if time.monotonic() - self._cancel_checked < CANCEL_CHECK_S:
            return False
        self._cancel_checked = time.monotonic()
        return Run.objects.filter(pk=self.run.pk, status=Run.Status.CANCELLED).exists()


COST_STEP = Decimal("0.000001")  # Run.cost_usd's decimal places

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
