"""Glue between the framework-free pipeline and Django: ports over the catalog and executor,
and a recorder that writes stage events, SQL attempts and LLM calls as they happen."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import numpy as np
import sqlglot
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Max
from django.utils import timezone
from rapidfuzz import fuzz
from sqlglot import exp

from askdb.answerability.scorer import gate_verdict
from askdb.models import Example, LlmCall, Run, SqlAttempt, StageEvent
from askdb.pipeline import library, offline, prompts
from askdb.pipeline.compare import results_match
from askdb.pipeline.engine import ExecutionFailure, RetrievalView
from askdb.pipeline.offline import TemplateCandidate
from askdb.pipeline.templates import Template, template_is_current
from askdb.pipeline.types import CatalogSchema, ChatResult, ExampleContext, TableContext
from askdb.services.examples import example_template
from askdb.services.sql import audit_sql_executed
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from metadata_admin.models import ClinicalSource, ColumnDoc, TableDoc
from metadata_admin.selectors import catalog_snapshot, retrieve
from metadata_admin.services import source_catalog_schema, source_executor


class DjangoPorts:
    """What the pipeline needs from the world, for one source."""

    def __init__(
        self, source: ClinicalSource, *, chat, timeout_s: float, row_cap: int, run: Run | None = None,
        ledger=None,
    ):  # fmt: skip
        self.source = source
        self.ledger = ledger  # disclosure.Ledger: the asker's released answers and privacy budget
        self.run = run  # for the audit of the SQL it executes
        self.chat = chat
        self.embedder = get_embedder()
        # The catalog as of this run, loaded once per catalog change (not per question).
        self.snapshot = catalog_snapshot(source)
        # "now" is the source's as-of time (shown in provenance)
        self.executor = source_executor(source, schemas=self.snapshot.schemas)
        self._catalog = self.snapshot.schema
        self.timeout_s = timeout_s
        self.row_cap = row_cap
        self._nearest_for: list[float] | None = None
        self._nearest_list: list[tuple[int, float]] = []
        self._sensitive_columns: frozenset[str] | None = None
        self._version: tuple | None = None

    def embed(self, question: str) -> list[float]:
        return self.embedder.embed([question])[0]

    def _library_version(self) -> tuple:
        """The library's version, read once per run (the few-shot search and the match share it)."""
        if self._version is None:
            self._version = _library_version(self.source)
        return self._version

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
            self._nearest_list = examples_nearest_cached(
                self.source, vector, self.embedder.model, k, version=self._library_version()
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
        found = Example.objects.defer(*VECTOR_FIELDS).in_bulk([i for i, _ in nearest])
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
        """Verified templates scored for this question (best first) and the answering threshold.

        Templates, not single examples: the nearest masked paraphrases vote (askdb.pipeline.library),
        the meaning guard checks the question against all paraphrases of a template, and each
        result's confidence is the calibrated P(correct). The threshold is c / (c + 1) for
        ASKDB_WRONG_ANSWER_COST = c.
        """
        risk = library_risk(self.source)
        index, values = library_index(
            self.source, self.executor, self.embedder, version=self._library_version()
        )
        if not index.entries:
            return [], risk.threshold
        masked = offline.mask_question(question, values)
        masked_vector = self.embedder.embed([masked])[0]
        found = library.match_library(
            question, masked_vector, index, lookup=self.lookup_value, values=values, catalog=self._catalog,
            risk=risk, masked_question=masked, probe=self.probe,
        )  # fmt: skip
        return found.results, risk.threshold

    def answerability(self, question: str, values: list) -> dict | None:
        """The answerability gate's verdict: the trained model with its rules, or the rules alone
        when no model is trained for the source (they need no training)."""
        return gate_verdict(self.source, question)

    def probe(self, sql: str) -> bool:
        """Does this small check query return a row (a bound value under the template's conditions)?"""
        return source_probe(self.executor, sql)

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
# An example's vectors: not loaded where a run only reads its text (parsing one costs ~0.1 ms).
VECTOR_FIELDS = ("embedding", "masked_embedding")


def library_risk(source):
    """The source's calibrated P(correct) model with the threshold of the configured wrong-answer cost."""
    threshold = library.answer_threshold(settings.ASKDB_WRONG_ANSWER_COST)
    data = (source.library_calibration or {}).get("risk")
    if not data:
        base = library.DEFAULT_RISK
        return offline.Calibration(dict(base.weights), base.intercept, threshold)
    risk = offline.Calibration.from_dict(data)
    return offline.Calibration(risk.weights, risk.intercept, threshold, risk.samples)


_LIBRARIES: dict[int, tuple[tuple, object]] = {}  # source id -> (library version, LibraryIndex)
_VALUES: dict[int, object] = {}  # source id -> ValueIndex


def source_values(source, executor):
    """Every value of the source's linkable columns (one DISTINCT query per column, once per process)."""
    if source.pk not in _VALUES:
        docs = TableDoc.objects.filter(source=source, exists_in_source=True).defer("embedding")
        _VALUES[source.pk] = library.load_values(
            executor, {d.name.lower(): d.qualified_name for d in docs}, source.dialect
        )
    return _VALUES[source.pk]


def library_index(source, executor, embedder, version: tuple | None = None):
    """The source's active library as templates with paraphrases, rebuilt when the library changes.

    Masked-question vectors are stored on the examples (computed in one batch for those that lack
    one), so a restart costs one query, and a new example one embedding.
    """
    values = source_values(source, executor)
    # Not the question vectors (examples_nearest_cached holds those): parsing them is a third of a rebuild.
    active = Example.objects.filter(source=source, status=Example.Status.ACTIVE).defer("embedding")
    version = version or _library_version(source)
    cached = _LIBRARIES.get(source.pk)
    if cached is not None and cached[0] == version:
        return cached[1], values
    entries, vectors, missing, changed = [], [], [], []
    for example in active.order_by("id"):
        if example.kind == Example.Kind.ANSWERABLE and not template_is_current(example.template):
            example.template = example_template(example)
            example.masked_embedding = None  # what is masked goes with the templates' version too
            changed.append(example)
        template = Template.from_dict(example.template) if example.template else None
        stored = example.template.get("key") if example.template else None
        entry = library.entry_for(example.pk, example.question, example.sql, template, key=stored)
        if entry is None:
            continue
        key = library.key_hash(entry.key)
        if example.template_key != key or (template is not None and stored != entry.key):
            # The key is kept with the template (it goes with TEMPLATE_VERSION): computing it parses
            # the SQL, which for thousands of examples is most of a rebuild.
            example.template_key = key
            if template is not None:
                example.template = {**example.template, "key": entry.key}
            changed.append(example)
        if example.masked_embedding is None:
            missing.append((len(entries), example))
        entries.append(entry)
        vectors.append(example.masked_embedding)
    if missing:
        masked = [offline.mask_question(e.question, values) for _, e in missing]
        for (i, example), vector in zip(missing, embedder.embed(masked), strict=True):
            vectors[i] = example.masked_embedding = vector
            changed.append(example)
    if changed:
        Example.objects.bulk_update(
            list({e.pk: e for e in changed}.values()),
            ["template", "template_key", "masked_embedding"],
            batch_size=500,
        )
    index = library.LibraryIndex(entries, [list(v) for v in vectors])
    _LIBRARIES[source.pk] = (version, index)
    return index, values


def library_warm_up(source, embedder) -> None:
    """Load what the first question on `source` would otherwise load in its stages: the linkable
    values (one query per column), the library index and the library's question vectors; seconds
    for a library of thousands, paid when a worker starts instead of by a researcher. Raises
    ExecutionError when the source cannot be reached."""
    snapshot = catalog_snapshot(source)
    executor = source_executor(source, schemas=snapshot.schemas)
    # Unreachable now: loading its values would wait on every column and keep none (the first
    # question loads them), so say so once instead.
    executor.execute("SELECT 1", timeout_s=5, row_cap=1)
    version = _library_version(source)
    library_index(source, executor, embedder, version=version)
    examples_nearest_cached(source, [1.0] * embedder.dims, embedder.model, 1, version=version)


_QUESTION_VECTORS: dict[tuple[int, str], tuple[tuple, list[int], np.ndarray]] = {}


def examples_nearest_cached(
    source, vector: list[float], model: str, k: int, version: tuple | None = None
) -> list[tuple[int, float]]:
    """What catalog_search.examples_nearest returns (the k active answerable examples closest to a
    question, best first, ties by id), from the library's question vectors held in memory and
    reloaded when the library changes: a product with a matrix instead of a scan of thousands
    of rows in PostgreSQL for every question."""
    version = version or _library_version(source)
    cached = _QUESTION_VECTORS.get((source.pk, model))
    if cached is None or cached[0] != version:
        rows = Example.objects.filter(
            source=source, status=Example.Status.ACTIVE, kind=Example.Kind.ANSWERABLE, embedding_model=model,
            embedding__isnull=False,
        ).order_by("id").values_list("id", "embedding")  # fmt: skip
        ids = [i for i, v in rows if len(v) == len(vector)]
        matrix = np.asarray([v for _, v in rows if len(v) == len(vector)], dtype=np.float32)
        matrix = matrix.reshape(len(ids), len(vector))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        cached = (version, ids, matrix / np.where(norms == 0, 1.0, norms))
        _QUESTION_VECTORS[(source.pk, model)] = cached
    _, ids, matrix = cached
    if not ids or k <= 0:
        return []
    v = np.asarray(vector, dtype=np.float32)
    sims = matrix @ (v / (np.linalg.norm(v) or 1.0))
    top = np.lexsort((np.asarray(ids), -sims))[:k]  # score descending, then id, as the SQL orders
    return [(ids[i], float(sims[i])) for i in top]


def _library_version(source) -> tuple:
    """Changes when an active example is added, edited, retired or restored (one small query)."""
    active = Example.objects.filter(source=source, status=Example.Status.ACTIVE)
    return tuple(active.aggregate(n=Count("id"), last=Max("updated_at")).values())


def library_candidates(nearest: list[tuple[int, float]]) -> list:
    """Template candidates from (example id, similarity) pairs; stale templates are rebuilt."""
    found = Example.objects.defer(*VECTOR_FIELDS).in_bulk([i for i, _ in nearest])
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


def source_probe(executor, sql: str) -> bool:
    """True when `sql` returns a row; a failing probe counts as no row (the value is not confirmed)."""
    try:
        return executor.execute(sql, timeout_s=5, row_cap=1).row_count > 0
    except ExecutionError:
        return False


CV_FOLDS = library.CV_FOLDS


def library_cross_validate(*, source, items: list[dict] | None = None, progress=None) -> dict:
    """P(correct) for library answers, fitted by cross-validation over the library itself.

    Whole paraphrase groups (same SQL, or the same unanswerable question) are held out together, and
    unanswerable library examples are asked too (any answer to one is wrong). A held-out answer is
    correct when its bound SQL is the example's SQL or returns the same result ("now" as of the
    source). Labelled `items` (questions not in the library) add held-out samples. The report gives
    the threshold c / (c + 1) and the coverage and precision expected at it. The sibling pass
    (library.cross_validate) adds the wrong answers of sibling templates to what the risk learns from,
    not to the expected coverage and precision.

    Nothing is asked of the database twice: the library's vectors and templates are the stored ones,
    and value lookups, probes and results are remembered across questions. One process: folds in
    forked processes once hung CI (a fork inherits the parent's connections and threads), and one
    process already calibrates 5,000 examples well under a minute.
    """
    executor = source_executor(source)
    catalog, embedder = source_catalog_schema(source), get_embedder()
    index, values = library_index(source, executor, embedder)
    labelled = [(str(i["question"]), str(i.get("sql") or "")) for i in (items or [])]
    masked = embedder.embed([offline.mask_question(q, values) for q, _ in labelled]) if labelled else []
    # The ordinary folds, the sibling pass (library.cross_validate: risk training only), the file.
    tasks: list[tuple[str, int]] = (
        [("fold", f) for f in range(CV_FOLDS)]
        + [("siblings", f) for f in range(CV_FOLDS)]
        + ([("items", 0)] if labelled else [])
    )
    count = [0]

    def one_more(_: int) -> None:
        count[0] += 1
        if progress:
            progress(count[0])

    state = dict(index=index, values=values, catalog=catalog, executor=executor, dialect=source.dialect,
                 labelled=labelled, masked=masked, done=one_more, results={}, lookups={}, probes={})  # fmt: skip
    samples, siblings, sample_folds, sibling_folds = [], [], [], []
    for kind, fold in tasks:
        found = _cv_task((kind, fold), state)
        # The file's questions are in no fold of the library: spread them over the folds.
        folds = [fold if kind != "items" else n % CV_FOLDS for n in range(len(found))]
        if kind == "siblings":
            siblings, sibling_folds = siblings + found, sibling_folds + folds
        else:
            samples, sample_folds = samples + found, sample_folds + folds
    cost = settings.ASKDB_WRONG_ANSWER_COST
    risk = library.fit_risk(samples + siblings, wrong_answer_cost=cost)
    # The expected coverage and precision from answers each scored by a risk model that never saw
    # their fold (library.out_of_fold says why), as the benchmark reports them.
    risks = library.fold_risks(samples + siblings, sample_folds + sibling_folds, wrong_answer_cost=cost)
    scored = [(risks[f].predict(x), ok) for (x, ok), f in zip(samples, sample_folds, strict=True)]
    asked = len(index.entries) + len(labelled)
    at = library.expected(scored, risk.threshold, asked)
    return {
        "risk": risk.to_dict(), "threshold": round(risk.threshold, 4),
        "wrong_answer_cost": settings.ASKDB_WRONG_ANSWER_COST,
        "held_out": asked, "matched": len(samples), "correct_matches": sum(ok for _, ok in samples),
        "sibling_matches": len(siblings), "sibling_correct": sum(ok for _, ok in siblings),
        "answered": at["answered"], "expected_coverage": at["coverage"], "precision": at["precision"],
        "templates": len(index.families), "examples": len(index.entries),
        "mode": "grouped cross-validation" + (" + file" if labelled else ""), "at": timezone.now().isoformat(),
    }  # fmt: skip


def _cv_task(task: tuple[str, int], state: dict[str, Any]) -> list:
    """The held-out samples of one fold, or of the labelled questions; results, value lookups and
    probes are remembered in `state` across the tasks of one calibration."""
    executor, index, values, dialect = state["executor"], state["index"], state["values"], state["dialect"]
    results: dict[str, Any] = state["results"]
    lookups: dict[tuple[str, str], list] = state["lookups"]
    probes: dict[str, bool] = state["probes"]

    def rows(sql: str):
        if sql not in results:
            try:
                results[sql] = executor.execute(sql, timeout_s=10, row_cap=1000).rows
            except ExecutionError as exc:
                results[sql] = exc
        return results[sql]

    def same(sql: str, gold: str) -> bool:
        if " ".join(sql.lower().split()) == " ".join(gold.lower().split()):
            return True
        a, b = rows(sql), rows(gold)
        return not isinstance(a, Exception) and not isinstance(b, Exception) and results_match(a, b)

    def lookup(table_column: str, text: str):
        key = (table_column, text.lower())
        if key not in lookups:
            lookups[key] = column_values_like(executor, table_column, text, dialect=dialect)
        return lookups[key]

    def probe(sql: str) -> bool:
        if sql not in probes:
            probes[sql] = source_probe(executor, sql)
        return probes[sql]

    done = state["done"]  # called once per question asked
    kind, fold = task
    if kind in ("fold", "siblings"):
        return library.cross_validate(
            index, lambda held: index.matrix[held], is_correct=lambda entry, best: same(best.sql, entry.template.sql),
            lookup=lookup, values=values, catalog=state["catalog"], folds=CV_FOLDS, only=[fold], probe=probe,
            progress=done if kind == "fold" else None, siblings=kind == "siblings",
        )  # fmt: skip
    samples = []
    for (question, gold), vector in zip(state["labelled"], state["masked"], strict=True):
        best = library.match_library(
            question, vector, index, lookup=lookup, values=values, catalog=state["catalog"], probe=probe
        ).best
        if best is not None and best.hard_ok and best.sql:
            samples.append((best.features, bool(gold) and same(best.sql, gold)))
        if done:
            done(0)
    return samples
