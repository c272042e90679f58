"""Glue between the framework-free pipeline and Django: ports over the catalog and executor,
and a recorder that writes stage events, SQL attempts and LLM calls as they happen."""

from __future__ import annotations

import contextlib
import time
from decimal import Decimal
from typing import Any

import sqlglot
from django.conf import settings
from django.db.models import F, Prefetch
from django.utils import timezone
from rapidfuzz import fuzz
from sqlglot import exp

from askdb.answerability.scorer import gate_verdict
from askdb.models import Example, LlmCall, Run, SqlAttempt, StageEvent
from askdb.pipeline import offline, prompts
from askdb.pipeline.engine import ExecutionFailure, RetrievalView
from askdb.pipeline.offline import TemplateCandidate
from askdb.pipeline.templates import Template, template_is_current
from askdb.pipeline.types import CatalogSchema, ChatResult, ColumnContext, ExampleContext, TableContext
from askdb.services.examples import example_template
from askdb.services.sql import audit_sql_executed
from infra.adapters.catalog_search import examples_nearest
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from metadata_admin.models import ClinicalSource, ColumnDoc, Relationship, TableDoc
from metadata_admin.selectors import retrieve
from metadata_admin.services import source_catalog_schema, source_executor


class DjangoPorts:
    """What the pipeline needs from the world, for one source."""

    def __init__(
        self, source: ClinicalSource, *, chat, timeout_s: float, row_cap: int, run: Run | None = None
    ):
        self.source = source
        self.run = run  # for the audit of the SQL it executes
        self.chat = chat
        self.embedder = get_embedder()
        self.executor = source_executor(source)
        self._catalog = source_catalog_schema(source)
        self.timeout_s = timeout_s
        self.row_cap = row_cap
        self._contexts: dict[tuple[str, ...], list[TableContext]] = {}
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
            source=self.source, question=question, k=k, question_vector=vector, example_tables=example_tables
        )
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
        key = tuple(tables)
        if key not in self._contexts:  # the gate and the prompt ask for the same tables
            self._contexts[key] = self._table_context(tables)
        return self._contexts[key]

    def _table_context(self, tables: list[str]) -> list[TableContext]:
        wanted = [t.rpartition(".") for t in tables]
        relationships = Prefetch(
            "relationships",
            queryset=Relationship.objects.select_related("to_table").defer("to_table__embedding"),
        )
        docs = {
            d.qualified_name: d
            for d in TableDoc.objects.filter(
                source=self.source, exists_in_source=True, name__in=[n for _, _, n in wanted]
            )
            .defer("embedding")
            .prefetch_related("columns", relationships)
        }
        out = []
        for name in tables:
            d = docs.get(name)
            if d is None:
                continue
            joins = []
            for r in d.relationships.all():
                on = " AND ".join(f"{d.name}.{a} = {r.to_table.name}.{b}" for a, b in r.column_pairs)
                joins.append(f"{r.to_table.qualified_name} ON {on}" + (f" — {r.note}" if r.note else ""))
            out.append(
                TableContext(
                    qualified=name,
                    description=d.description,
                    purpose=d.purpose,
                    grain=d.grain,
                    considerations=tuple(d.considerations),
                    synonyms=tuple(d.synonyms),
                    columns=tuple(
                        ColumnContext(
                            name=c.name,
                            type=c.data_type,
                            meaning=c.meaning,
                            example_values=c.example_values,
                            key="PK" if c.is_primary_key else ("FK" if c.is_foreign_key else ""),
                            sensitive=c.sensitive,
                        )
                        for c in d.columns.all()
                    ),
                    joins=tuple(joins),
                )
            )
        return out

    def catalog(self) -> CatalogSchema:
        return self._catalog

    def explain(self, sql: str) -> None:
        # EXPLAIN plans (and folds constants) on clinical data, so each one is audited like a query.
        actor = self.run.question.user if self.run is not None else None
        start = time.perf_counter()
        try:
            self.executor.explain(sql, timeout_s=min(self.timeout_s, 10))
        except ExecutionError as exc:
            audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="explain", rows=None,
                               duration_ms=(time.perf_counter() - start) * 1000, outcome=exc.code,
                               run=self.run, error=exc.message, action="sql.explained")  # fmt: skip
            raise ExecutionFailure(exc.message, exc.code) from exc
        audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="explain", rows=None,
                           duration_ms=(time.perf_counter() - start) * 1000, outcome="ok", run=self.run,
                           action="sql.explained")  # fmt: skip

    def execute(self, sql: str):
        actor = self.run.question.user if self.run is not None else None
        try:
            result = self.executor.execute(
                sql, timeout_s=self.timeout_s, row_cap=self.row_cap, max_bytes=settings.ASKDB_RESULT_MAX_BYTES
            )
        except ExecutionError as exc:
            audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="question", rows=None,
                               duration_ms=None, outcome=exc.code, run=self.run, error=exc.message)  # fmt: skip
            raise ExecutionFailure(exc.message, exc.code) from exc
        audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="question", rows=result.row_count,
                           duration_ms=result.elapsed_ms, outcome="ok", run=self.run)  # fmt: skip
        return result


class _Stage:
    def __init__(self, event: StageEvent):
        self.event = event
        self.status = StageEvent.Status.OK

    def note(self, **detail: Any) -> None:
        self.event.detail.update(detail)

    def finish(self, status: str) -> None:
        self.status = status


class DjangoRecorder:
    """Writes as it goes (autocommit), so the run page shows each stage while the run continues."""

    def __init__(self, run: Run):
        self.run = run

    @contextlib.contextmanager
    def stage(self, name: str):
        now = timezone.now()
        Run.objects.filter(pk=self.run.pk).update(heartbeat_at=now)
        event = StageEvent.objects.create(
            run=self.run, name=name, started_at=now, status=StageEvent.Status.RUNNING
        )
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
            event.save(update_fields=["status", "duration_ms", "detail"])

    def attempt(
        self, *, number: int, sql: str, origin: str, valid: bool, error_code: str = "", error: str = ""
    ) -> None:
        SqlAttempt.objects.create(
            run=self.run,
            number=number,
            sql=capped_text(sql, MAX_STORED_SQL),
            origin=origin,
            valid=valid,
            error_code=error_code,
            error=capped_text(error, MAX_STORED_ERROR),
        )

    def llm_call(
        self, *, purpose: str, messages: list[dict], result: ChatResult | None, error: str = ""
    ) -> None:
        LlmCall.objects.create(
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
        audit_record(
            action="llm.call", target=self.run, message=f"{purpose}: {error or 'ok'}"[:500],
            detail={
                "purpose": purpose, "model": result.model if result else "",
                "prompt_version": prompts.PROMPT_VERSION,
                "prompt_tokens": result.prompt_tokens if result else 0,
                "completion_tokens": result.completion_tokens if result else 0,
                "cost_usd": result.cost_usd if result else 0.0, "error": error[:500],
            },
        )  # fmt: skip
        if result:
            Run.objects.filter(pk=self.run.pk).update(
                tokens_prompt=F("tokens_prompt") + result.prompt_tokens,
                tokens_completion=F("tokens_completion") + result.completion_tokens,
                cost_usd=F("cost_usd") + Decimal(str(result.cost_usd)),
                heartbeat_at=timezone.now(),
            )

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
        Run.objects.filter(pk=self.run.pk).update(
            retrieval=data, examples_used=[e.example_id for e in examples if e.example_id is not None]
        )

    def cancelled(self) -> bool:
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
