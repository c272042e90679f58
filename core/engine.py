"""The question pipeline as a chain of small named stages, free of Django and openai.

embed → retrieve → gate → prompt → generate → validate (repair loop) → execute → summarize

Everything outside the pure stages comes in through `Ports` (retrieval, catalog, executor,
LLM) and everything worth keeping goes out through a `Recorder` (stage events, SQL attempts,
LLM calls), so the same engine serves the Celery task, the `ask` command and the benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from core import disclosure, privacy, prompts
from core.candidates import Candidate, choose_candidate, group_candidates
from core.estimate import QueryEstimate, timed_out_message
from core.extraction import (
    JsonExtractionError,
    SqlExtractionError,
    extract_json_object,
    extract_sql,
)
from core.match import MatchResult, decide, decide_answer
from core.match import reasons as R
from core.outcome import (
    NO_GATE,
    AnswerabilityVerdict,
    GateVerdict,
    MatchBinding,
    MatchInfo,
    Outcome,
)
from core.prepared import PreparedSql, prepare_sql, protect_prepared
from core.results import is_aggregate_query, result_preview
from core.retrieval import LinkedValue, RankedTable
from core.types import CatalogSchema, ChatModel, ChatResult, ExampleContext, LLMError, TableContext
from core.validation import SqlValidationError, validate_sql

NO_LLM_MESSAGE = (
    "No reviewer-verified example matches this question closely enough, and no LLM is configured to write "
    "new SQL, so askdb will not guess. The tables and values it found are shown below. Try wording it like "
    "a question from the example library, or an admin can enable an LLM (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY)."
)


GATE_FALLBACK_REASON = "No table or column in this database seems to hold what this question asks for, so askdb cannot answer it."


@dataclass(frozen=True)
class PipelineConfig:
    k: int = 5
    similarity_floor: float = 0.15
    max_repairs: int = 3
    row_cap: int = 10_000
    timeout_s: float = 30.0
    row_level_to_llm: bool = False
    summarize: bool = True
    candidates: int = 1  # K SQL candidates sampled per question; 1 = no sampling
    temperature: float = 0.7  # for sampling; a single candidate is always asked at temperature 0
    confidence_threshold: float = 0.6  # below: the candidates are shown, not one answer
    # Who may see what on this source: small-cell size, row-level and sensitive-column rights.
    privacy: privacy.PrivacyPolicy = field(default_factory=privacy.PrivacyPolicy)
    # How counts are released on this source (round, noise, dp) and the differencing limit; the
    # noise key is this user's (the services derive it from the server's secret).
    disclosure: disclosure.DisclosurePolicy = field(default_factory=disclosure.DisclosurePolicy)
    disclosure_key: bytes = field(default=b"", repr=False)
    # A query is announced before it runs (an "estimate" step) when the planner's cost reaches
    # large_query_cost, or, without a planner (SQLite), when the tables it reads hold
    # large_query_rows rows; the planner is asked only once the tables are that large.
    large_query_rows: int = 10_000_000
    large_query_cost: float = 1_000_000.0


@dataclass(frozen=True)
class PipelineRequest:
    question: str
    dialect: str = "postgres"
    as_of: str = ""
    # A follow-up: the earlier question and the SQL that answered it are its context (the LLM's
    # prompt; with no LLM, a condition the follow-up adds is composed on that SQL).
    earlier_question: str = ""
    earlier_sql: str = ""

    @property
    def prompt_question(self) -> str:
        """The question as the LLM reads it: a follow-up with its earlier question and SQL."""
        if not self.earlier_sql:
            return self.question
        return (
            f"Earlier question: {self.earlier_question}\nThe SQL that answered it:\n```sql\n{self.earlier_sql}\n```\n"
            f"Follow-up question, to answer in the context of the earlier one: {self.question}"
        )


@dataclass(frozen=True)
class RetrievalView:
    tables: list[RankedTable]
    values: list[LinkedValue]
    best_doc_score: float
    timings_ms: dict[str, float] = field(default_factory=dict)


class ExecutionFailure(Exception):
    """Raised by Ports.execute: `code` is "timeout", "sql_error", "connection" or "permission"."""

    def __init__(self, message: str, code: str = "sql_error"):
        super().__init__(message)
        self.message = message
        self.code = code


class Ports(Protocol):
    chat: ChatModel | None
    ledger: disclosure.Ledger | None  # the user's released answers and budget; None: not kept

    def embed(self, question: str) -> list[float]: ...
    def examples(self, question: str, vector: list[float]) -> list[ExampleContext]: ...
    def retrieve(
        self, question: str, vector: list[float], k: int, examples: list[ExampleContext]
    ) -> RetrievalView: ...
    def library_match(self, question: str, vector: list[float]) -> tuple[list[MatchResult], float]: ...
    def follow_up_match(
        self, question: str, vector: list[float], earlier_question: str, earlier_sql: str
    ) -> tuple[list[MatchResult], float]: ...
    def answerability(self, question: str, values: list[LinkedValue]) -> AnswerabilityVerdict | None: ...
    def table_context(self, tables: list[str]) -> list[TableContext]: ...
    def catalog(self) -> CatalogSchema: ...
    def explain(self, sql: str) -> None: ...  # raises ExecutionFailure
    def execute(self, sql: str) -> Any: ...  # returns a QueryResult-like object, raises ExecutionFailure
    def execute_many(self, sqls: list[str]) -> list[Any]: ...  # side by side; an ExecutionFailure per failure
    def table_rows(self) -> Mapping[str, int | None]: ...  # qualified table -> its rows (the catalog's)
    def plan(self, sql: str) -> tuple[float, float] | None: ...  # planner (rows, cost); None: no planner


class StageHandle(Protocol):
    def note(self, **detail: Any) -> None: ...
    def finish(self, status: str) -> None: ...  # "ok" (default), "failed", "skipped", "stopped"


class Recorder(Protocol):
    def stage(self, name: str) -> contextlib.AbstractContextManager[StageHandle]: ...
    def attempt(
        self, *, number: int, sql: str, origin: str, valid: bool, error_code: str = "", error: str = ""
    ) -> None: ...
    def llm_call(
        self, *, purpose: str, messages: list[dict], result: ChatResult | None, error: str = ""
    ) -> None: ...
    def retrieval(self, view: RetrievalView, examples: list[ExampleContext]) -> None: ...
    def cancelled(self) -> bool: ...


def match_info(match: MatchResult, threshold: float) -> MatchInfo:
    """What the run keeps of a template match: the example, its confidence, SQL and bindings, and
    why it was refused (the reasons the matcher gave)."""
    return MatchInfo(
        example_id=match.example_id, example_question=match.example_question, confidence=match.confidence,
        sql=match.sql or "", threshold=threshold, reasons=tuple(match.reasons),
        reason_codes=tuple(match.reason_codes),
        bindings=tuple(MatchBinding(b.slot, b.type, b.old, b.new, b.value, b.score, b.fuzzy, b.column)
                       for b in match.bindings),
        composed_from=tuple(match.composed_from), composed_with=match.composed_with,
    )  # fmt: skip


def _about(info: MatchInfo, match: MatchResult) -> MatchInfo:
    """The match info now about `match` (the one answered), the threshold and reasons kept."""
    other = match_info(match, info.threshold)
    return replace(info, example_id=other.example_id, example_question=other.example_question,
                   confidence=other.confidence, sql=other.sql, bindings=other.bindings,
                   composed_from=other.composed_from, composed_with=other.composed_with)  # fmt: skip


@dataclass
class _Seen:
    """What one run learnt before it ended (the library match, the gate's verdict), kept on its
    outcome whichever way it ends, a cancel included. Local to one run, never on the Pipeline."""

    match: MatchInfo | None = None
    answerability: AnswerabilityVerdict | None = None


class Cancelled(Exception):
    pass


def _sql_key(sql: str) -> str:
    """Candidates that differ only in whitespace or a trailing semicolon are the same query."""
    return " ".join(sql.split()).rstrip(";")


class Pipeline:
    def __init__(self, ports: Ports, recorder: Recorder, config: PipelineConfig | None = None):
        self.ports = ports
        self.rec = recorder
        self.config = config or PipelineConfig()

    # -- helpers -------------------------------------------------------------------------
    def _check_cancel(self) -> None:
        if self.rec.cancelled():
            raise Cancelled

    def _chat(self, purpose: str, messages: list[dict], **kwargs) -> ChatResult:
        assert self.ports.chat is not None
        try:
            result = self.ports.chat.complete(messages, **kwargs)
        except LLMError as exc:
            self.rec.llm_call(purpose=purpose, messages=messages, result=None, error=exc.message)
            raise
        self.rec.llm_call(purpose=purpose, messages=messages, result=result)
        return result

    @contextlib.contextmanager
    def _stage(self, name: str) -> Iterator[StageHandle]:
        self._check_cancel()
        with self.rec.stage(name) as handle:
            yield handle

    # -- the run ---------------------------------------------------------------------------
    def run(self, request: PipelineRequest) -> Outcome:
        """The question answered, declined or failed, as one value (nothing is left on the Pipeline)."""
        seen = _Seen()
        outcome = self._run_guarded(request, seen)
        return replace(
            outcome,
            library_match=outcome.library_match or seen.match,  # kept even when it did not answer
            answerability=outcome.answerability or seen.answerability,
            answered_by=outcome.answered_by or ("llm" if outcome.sql else ""),
        )

    def _run_guarded(self, request: PipelineRequest, seen: _Seen) -> Outcome:
        try:
            return self._run(request, seen)
        except Cancelled:
            return Outcome("cancelled", "cancelled", "The question was cancelled.")
        except LLMError as exc:
            return Outcome(
                "failed", "llm_error", f"The LLM could not be used: {exc.message}. Try again later."
            )

    def _execute(self, sql: str, req: PipelineRequest) -> tuple[PreparedSql, privacy.ProtectedResult]:
        """Run SQL the way every answer is run: validated once, the user's rights checked on that
        tree (raises PrivacyRefusal), the SQL generated from it sent, small cells suppressed right
        after, so the summary, the candidate previews, library answers and the stored run all see
        only the protected result. The PreparedSql goes with it: its analysis is what the release
        reads (a second analysis of the same SQL would be the same, and cost a parse)."""
        prepared = self._prepare(sql, req)
        self._announce(prepared)
        return prepared, protect_prepared(prepared, self.ports.execute(prepared.sql), self.config.privacy)

    def _announce(self, prepared: PreparedSql) -> None:
        """A large query is announced before it runs, as its own step (the run page shows it
        while the query runs): the tables' sizes first, which cost nothing, then the planner,
        asked only when the tables are large enough to matter."""
        cfg = self.config
        estimate = QueryEstimate.from_sizes(prepared.validated.tables, self.ports.table_rows())
        if estimate.rows_read < cfg.large_query_rows:
            return
        planned = self.ports.plan(prepared.sql)
        if planned is not None:
            estimate = estimate.planned(*planned)
        if not estimate.is_large(rows=cfg.large_query_rows, cost=cfg.large_query_cost):
            return
        with self._stage("estimate") as st:
            st.note(sentence=estimate.before_sentence(), **estimate.to_json())

    def _estimate(self, sql: str, req: PipelineRequest) -> QueryEstimate | None:
        """How big `sql` is (table sizes and the planner), for a query that ran out of time."""
        try:
            prepared = self._prepare(sql, req)
        except (ExecutionFailure, privacy.PrivacyRefusal):
            return None
        estimate = QueryEstimate.from_sizes(prepared.validated.tables, self.ports.table_rows())
        planned = self.ports.plan(prepared.sql)
        return estimate.planned(*planned) if planned is not None else estimate

    def _prepare(self, sql: str, req: PipelineRequest) -> PreparedSql:
        """The one tree of `sql` and the statement to send (raises PrivacyRefusal; SQL that does
        not validate, such as a library answer bound to odd values, fails like a failed query)."""
        try:
            return prepare_sql(sql, self.ports.catalog(), self.config.privacy, question=req.question)
        except SqlValidationError as exc:
            raise ExecutionFailure(f"the SQL was refused: {exc.message}", "sql_invalid") from exc

    def _refused(self, refusal: privacy.PrivacyRefusal, sql: str, gate: GateVerdict, **extra) -> Outcome:
        """The user may not see what this SQL outputs: declined, with the reason and the alternative."""
        return Outcome("declined", f"privacy_{refusal.code}", refusal.message, gate=gate,
                       privacy=refusal.to_json() | {"sql": sql}, **extra)  # fmt: skip

    def _run(self, req: PipelineRequest, seen: _Seen) -> Outcome:
        cfg = self.config
        with self._stage("embed") as st:
            vector = self.ports.embed(req.question)
            st.note(dims=len(vector))
        with self._stage("retrieve") as st:
            # Verified examples first: the tables their SQL reads are a retrieval signal.
            examples = self.ports.examples(req.question, vector)
            view = self.ports.retrieve(req.question, vector, cfg.k, examples)
            self.rec.retrieval(view, examples)
            st.note(
                tables=[{"table": t.qualified, "score": t.score, "via": t.via} for t in view.tables],
                values=[f"{v.table}.{v.column} = {v.value}" for v in view.values[:8]],
                examples=[{"id": e.example_id, "score": round(e.score, 4)} for e in examples],
                best_doc_score=round(view.best_doc_score, 4),
            )
        table_names = [t.qualified for t in view.tables]

        with self._stage("match") as st:
            library, info = self._library_match(req, vector, st)
            if library is not None and not self._library_answerable(req, view, st, seen):
                library = None
                info = replace(info, answered=False).with_reason(  # type: ignore[union-attr]
                    R.GATE_DECLINED, "The answerability check judged that the database cannot answer this question.")  # fmt: skip
            seen.match = info
        if isinstance(library, privacy.PrivacyRefusal):  # a verified answer this user may not see
            return self._refused(library, info.sql if info else "", NO_GATE, library_match=info)
        if isinstance(library, ExecutionFailure):  # the verified answer's query ran out of time
            return self._execution_failed(library, info.sql if info else "", NO_GATE, req, library_match=info)
        if library is not None:  # a verified example, values rebound: no gate, no generation, no sampling
            sql, result, best, prepared = library
            # A composed answer is no verified one: it says so, and waits for a reviewer.
            by = "composed" if best.composed_from else "library"
            return self._answered(req, sql, result, NO_GATE, analysis=prepared.analysis, answered_by=by,
                                  example_id=best.example_id, library_match=info)  # fmt: skip

        gate = self._gate_stage(req, view, table_names, seen)
        if isinstance(gate, Outcome):
            return gate
        if self.ports.chat is None:
            with self._stage("generate") as st:
                st.note(reason="no LLM configured")
                st.finish("skipped")
            return Outcome("declined", "no_llm", NO_LLM_MESSAGE)

        with self._stage("prompt") as st:
            contexts = self.ports.table_context(table_names)
            messages = prompts.sql_messages(
                question=req.prompt_question, tables=contexts, examples=examples, values=view.values,
                dialect=req.dialect, as_of=req.as_of,
            )  # fmt: skip
            st.note(version=prompts.PROMPT_VERSION, tables=table_names, examples=len(examples),
                    chars=sum(len(m["content"]) for m in messages))  # fmt: skip

        if cfg.candidates > 1:
            return self._answer_sampled(req, messages, gate)

        with self._stage("generate") as st:
            reply = self._chat("generate", messages)
            sql, extract_error = self._extract(reply.text)
            st.note(tokens=reply.prompt_tokens + reply.completion_tokens)

        with self._stage("validate") as st:
            sql, error = self._validate_and_repair(messages, sql, extract_error, st)
            if error:
                st.finish("failed")
                return self._invalid(error, sql, gate)

        with self._stage("execute") as st:
            try:
                prepared, result = self._execute(sql, req)
            except privacy.PrivacyRefusal as exc:
                st.note(privacy=exc.code, reason=exc.message)
                st.finish("stopped")
                return self._refused(exc, sql, gate)
            except ExecutionFailure as exc:
                st.note(error=exc.message, code=exc.code)
                st.finish("failed")
                return self._execution_failed(exc, sql, gate, req)
            st.note(rows=result.row_count, truncated=result.truncated, ms=round(result.elapsed_ms, 1),
                    now_as_of=req.as_of or "the database clock")  # fmt: skip
            if getattr(result, "truncated_reason", ""):
                st.note(truncated_reason=result.truncated_reason)
        return self._answered(req, sql, result, gate, analysis=prepared.analysis)

    def _gate_stage(
        self, req: PipelineRequest, view: RetrievalView, table_names: list[str], seen: _Seen
    ) -> GateVerdict | Outcome:
        """The answerability gate, before any LLM call: its rules and (when trained) its model
        decline a question with a reason in plain words, and an unanswerable question costs no
        tokens. With an LLM, the LLM's category check still follows. A decline is an Outcome."""
        cfg = self.config
        with self._stage("gate") as st:
            verdict = self.ports.answerability(req.question, view.values)
            if verdict is not None:
                seen.answerability = verdict
                st.note(answerability=verdict.noted("probability", "threshold", "answerable", "kind", "version"),
                        reason=verdict.detail.get("reason", ""),
                        top_tables=verdict.detail.get("per_table", [])[:3])  # fmt: skip
                if not verdict.answerable:
                    st.finish("stopped")
                    decline = GateVerdict(
                        verdict.category or "not_in_schema", verdict.reason or GATE_FALLBACK_REASON
                    )
                    return Outcome("declined", decline.category, decline.reason, gate=decline)
            if view.best_doc_score < cfg.similarity_floor:
                st.note(decision="no_data", best_doc_score=view.best_doc_score, floor=cfg.similarity_floor)
                st.finish("stopped")
                reason = "I don't have the data to answer that: no table in this database is about what the question asks."
                return Outcome("declined", "no_data", reason, gate=GateVerdict("no_data", reason))
            if self.ports.chat is None:
                st.note(decision="not checked", reason="no LLM configured")
                st.finish("skipped")
                return NO_GATE
            gate = self._gate(req, table_names)
            st.note(category=gate.category, reason=gate.reason)
            if gate.category != "answerable":
                st.finish("stopped")
                return Outcome("declined", gate.category, gate.reason, gate=gate)
            return gate

    def _library_answerable(
        self, req: PipelineRequest, view: RetrievalView, st: StageHandle, seen: _Seen
    ) -> bool:
        """The rules before a library answer. A template matched above its calibrated threshold
        whose SQL ran is the best evidence askdb has that the database holds what is asked, so
        neither the similarity floor nor the learned model vetoes it (both declined right
        answers). A decisive rule still does: a question about the future, for advice, to
        identify a person or out of scope can read like a verified one, and a close template
        does not change what it asks."""
        verdict = self.ports.answerability(req.question, view.values)
        if verdict is None:
            return True
        seen.answerability = verdict
        rule = verdict.rule_kind
        st.note(gate={k: verdict.detail.get(k) for k in ("probability", "threshold", "answerable")},
                gate_rule=rule, gate_overruled=not rule and not verdict.answerable,
                below_floor=view.best_doc_score < self.config.similarity_floor)  # fmt: skip
        return not rule

    def _library_match(self, req: PipelineRequest, vector: list[float], st: StageHandle):
        """Answer from a verified example when a template matches with enough confidence.

        Precision first: the best match must clear the calibrated threshold, its SQL must run, and
        every other confident template that binds to different SQL must return the same result;
        otherwise the question goes on to the LLM (or, without one, is declined).
        """
        if req.earlier_sql:  # a follow-up: only the earlier SQL with what it adds, never its words alone
            results, threshold = self.ports.follow_up_match(
                req.question, vector, req.earlier_question, req.earlier_sql
            )
        else:
            results, threshold = self.ports.library_match(req.question, vector)
        # A value lookup or check that failed or ran out of time is said here, never read as "no
        # such value" in silence (an optional port: in-memory ports have nothing to report).
        problems = getattr(self.ports, "value_problems", list)()
        if problems:
            st.note(value_problems=problems)
        if not results:
            st.note(matched=False, reason="no verified example with a template is close to this question")
            st.finish("skipped")
            return None, None
        top = results[0]
        info = match_info(top, threshold)
        best, competitors = decide(results, threshold)
        st.note(example=top.example_id, confidence=round(info.confidence, 4), threshold=threshold,
                reasons=list(info.reasons[:3]), reason_codes=list(info.reason_codes[:3]), competitors=len(competitors))  # fmt: skip
        if best is None:
            return None, info
        # The one decision the benchmark and calibration share (decide_answer): the best confident
        # result, if its SQL runs and every other confident reading returns the same rows.
        try:
            answer = decide_answer(results, threshold, lambda sql: self._execute(sql, req),
                                   failure=ExecutionFailure, rows_of=lambda done: done[1].rows)  # fmt: skip
        except privacy.PrivacyRefusal as exc:
            st.note(privacy=exc.code, reason=exc.message)
            st.finish("stopped")
            return exc, _about(info, best)
        if answer.refusal == R.DISAGREE:
            st.note(disagreement=f"example {answer.detail} gives a different result")
            return None, info.with_reason(
                R.DISAGREE, "Two verified questions fit this one and give different results."
            )
        if answer.refusal == R.SQL_FAILED:
            return self._library_failed(answer.error, info, best, st)
        prepared, result = answer.rows
        st.note(answered=True, rows=result.row_count, now_as_of=req.as_of or "the database clock")
        self.rec.attempt(
            number=1, sql=best.sql, origin="composed" if best.composed_from else "example", valid=True
        )
        return (best.sql, result, best, prepared), replace(_about(info, best), answered=True)

    def _library_failed(self, exc: Exception | None, info: MatchInfo, best: MatchResult, st: StageHandle):
        """A confident verified answer whose SQL (or a competitor's) failed: running out of time is
        reported as such (the example matched; that is no "no match"), anything else declines."""
        assert isinstance(exc, ExecutionFailure)
        st.note(error=exc.message, code=exc.code)
        if exc.code == "timeout":
            st.finish("failed")
            reason = f"The verified question's SQL with this question's values ran out of time: {exc.message}"
            return exc, _about(info.with_reason(R.SQL_FAILED, reason), best)
        return None, info.with_reason(
            R.SQL_FAILED, f"The verified question's SQL with this question's values failed: {exc.message}"
        )

    def _release(
        self, sql: str, req: PipelineRequest, result, analysis: privacy.OutputAnalysis | None = None
    ) -> privacy.ProtectedResult:
        """The answer as it leaves askdb, made once for every consumer (disclosure.release).
        `analysis`: the output analysis prepare_sql made of this SQL's validated tree (made here
        when the caller has none)."""
        cfg, ledger = self.config, getattr(self.ports, "ledger", None)
        if cfg.disclosure.mode == disclosure.SUPPRESS and ledger is None:
            return result  # nothing to check, change or record (an evaluation run)
        if analysis is None:
            analysis = privacy.analyse_output(
                sql, req.dialect, policy=cfg.privacy, catalog=self.ports.catalog()
            )
        return disclosure.release(
            result, analysis, cfg.disclosure, sql=sql, dialect=req.dialect, catalog=self.ports.catalog(),
            ledger=ledger, key=cfg.disclosure_key, row_level=cfg.privacy.row_level,
            execute=lambda text: self._dp_execute(text, req),
        )  # fmt: skip

    def _dp_execute(self, sql: str, req: PipelineRequest) -> tuple[list[str], list[list]]:
        """smartnoise-sql's rewritten SQL, held to askdb's checks and run like any query."""
        try:
            checked = validate_sql(sql, self.ports.catalog())
        except SqlValidationError as exc:
            raise disclosure.DisclosureRefusal(
                "dp_unsupported",
                f"askdb did not show this answer: the differentially private form of this query did not pass "
                f"askdb's checks ({exc.message}).",
            ) from exc
        out = self.ports.execute(checked.sql)
        return list(out.columns), [list(r) for r in out.rows]

    def _release_previews(
        self, payload: dict, analyses: dict[str, privacy.OutputAnalysis], dialect: str
    ) -> dict:
        """Candidates shown side by side are released like the answer (no ledger: not answers)."""
        cfg = self.config
        if cfg.disclosure.mode == disclosure.SUPPRESS:
            return payload
        for group in payload.get("groups", []):
            analysis = analyses.get(_sql_key(group["sql"]))
            if analysis is None:
                continue
            seed = disclosure.noise_seed(cfg.disclosure_key, "", group["sql"], dialect)
            group["rows"] = disclosure.disclose_preview(
                group["columns"], group["rows"], analysis, cfg.disclosure, seed=seed,
                row_level=cfg.privacy.row_level, cell_keys=disclosure.output_keys(group["sql"], dialect),
            )  # fmt: skip
        return payload

    def _answered(self, req: PipelineRequest, sql: str, result, gate: GateVerdict, *,
                  analysis: privacy.OutputAnalysis | None = None, **extra) -> Outcome:  # fmt: skip
        cfg = self.config
        try:
            result = self._release(sql, req, result, analysis)
        except disclosure.DisclosureRefusal as exc:
            return self._refused(exc, sql, gate, **extra)
        except ExecutionFailure as exc:  # the differentially private form of the query failed
            return self._execution_failed(exc, sql, gate, req, **extra)
        # A result cut to no row (only the byte cap can: the row cap is at least 1) is not an empty
        # answer, and says it was cut.
        cut = not result.row_count and result.truncated
        code = "answered" if result.row_count else "result_cut" if cut else "no_rows"
        if cut:
            message = (
                "The query ran, but its result was cut before the first row: that row alone is over the "
                "limit on result size. Select fewer or narrower columns, or aggregate."
            )
        elif not result.row_count:
            message = "The query ran and returned no rows: nothing in the data matches."
            if (getattr(result, "privacy", None) or {}).get("disclosure", {}).get("censored"):
                message = disclosure.DP_CENSORED
        else:
            message = ""
        outcome = Outcome("succeeded", code, message, sql=sql,
                          result=result, gate=gate, privacy=getattr(result, "privacy", {}), **extra)  # fmt: skip
        with self._stage("summarize") as st:
            if not cfg.summarize or self.ports.chat is None:
                st.finish("skipped")
                return outcome
            try:
                outcome = replace(outcome, summary=self._summarize(req, sql, result))
            except LLMError as exc:
                st.note(error=exc.message)
                st.finish("failed")  # the answer stands without a summary
        return outcome

    def _invalid(self, error: str, sql: str | None, gate: GateVerdict, **extra) -> Outcome:
        return Outcome(
            "failed", "sql_invalid",
            f"askdb could not write valid SQL for this question after {self.config.max_repairs + 1} attempts. "
            f"Last error: {error}", sql=sql or "", gate=gate, **extra,
        )  # fmt: skip

    def _execution_failed(
        self, exc: ExecutionFailure, sql: str, gate: GateVerdict, req: PipelineRequest, **extra
    ) -> Outcome:
        if exc.code == "timeout":  # said as such, whoever wrote the SQL: never a decline or a vague failure
            message = timed_out_message(self.config.timeout_s, self._estimate(sql, req))
            return Outcome("failed", "timeout", message, sql=sql, gate=gate, **extra)
        return Outcome("failed", "execution_error", f"The query failed: {exc.message}", sql=sql,
                       gate=gate, **extra)  # fmt: skip

    # -- several candidates: confidence from disagreement -----------------------------------
    def _answer_sampled(self, req: PipelineRequest, messages: list[dict], gate: GateVerdict) -> Outcome:
        """Sample K SQL candidates, validate and execute each, and group them by result.

        The share of the largest group is the confidence. Below the threshold (or on a tie) no
        answer is presented as fact: the run carries the distinct candidates for the researcher
        to choose from, and waits for review. Candidates that fail count as disagreement.
        """
        cfg = self.config
        with self._stage("generate") as st:
            texts = self._sample(messages, cfg.candidates)
            st.note(candidates=len(texts), temperature=cfg.temperature)

        with self._stage("validate") as st:
            sqls, errors, unrepaired = self._validate_candidates(texts, messages, st)
            if unrepaired is not None:
                st.finish("failed")
                return self._invalid(unrepaired[1], unrepaired[0], gate)

        with self._stage("execute") as st:
            candidates, results, seen, analyses = self._execute_candidates(sqls, errors, req)
            chosen = self._choose(req, gate, st, candidates, results, seen, analyses)
            if isinstance(chosen, Outcome):
                return chosen
        sql, result, extra = chosen
        return self._answered(req, sql, result, gate, analysis=analyses.get(_sql_key(sql)), **extra)

    def _validate_candidates(self, texts: list[str], messages: list[dict], st: StageHandle):
        """Each sampled text's SQL, checked (validation, EXPLAIN) and recorded: (sqls, errors, None).
        When none is valid the first goes through the repair loop; if that fails too, the third
        item is its (sql, error)."""
        catalog = self.ports.catalog()
        sqls: list[str | None] = []
        errors: list[tuple[str, str]] = []
        # sampled candidates often repeat one another: (sql generated from the tree, error, code)
        checked: dict[str, tuple[str, str, str]] = {}
        for number, text in enumerate(texts, start=1):
            sql, error = self._extract(text)
            code = "no_sql" if sql is None else ""
            if sql is not None:
                key = _sql_key(sql)
                if key not in checked:
                    checked[key] = self._check_sql(sql, catalog)
                sql, error, code = checked[key]  # from here on, the SQL generated from the tree
            self.rec.attempt(number=number, sql=sql or "", origin="candidate", valid=not error,
                             error_code=code, error=error)  # fmt: skip
            sqls.append(sql)
            errors.append((error, code))
        valid = sum(1 for e, _ in errors if not e)
        if not valid:
            # Nothing usable: give the first candidate the repair loop a single answer gets.
            sql, error = self._validate_and_repair(
                messages, sqls[0], errors[0][0], st, first_number=len(texts) + 1
            )
            if error:
                return sqls, errors, (sql, error)
            sqls[0], errors[0] = sql, ("", "")
        st.note(valid=max(valid, 1), invalid=len(texts) - max(valid, 1))
        return sqls, errors, None

    def _check_sql(self, sql: str, catalog: CatalogSchema) -> tuple[str, str, str]:
        """(sql, error, code) of one SQL: validated on the tree, then the SQL generated from that
        tree EXPLAINed; error and code are "" when it passes, and sql is the generated statement
        once it validates (the writer's text otherwise)."""
        try:
            sql = validate_sql(sql, catalog).sql
            self.ports.explain(sql)
        except SqlValidationError as exc:
            return sql, exc.message, exc.code
        except ExecutionFailure as exc:
            return sql, exc.message, f"explain_{exc.code}"
        return sql, "", ""

    def _execute_candidates(
        self, sqls: list[str | None], errors: list[tuple[str, str]], req: PipelineRequest
    ):
        """Run the distinct valid candidates the user may see side by side (each on its own
        connection), protected as _execute protects every answer: (candidates, results, seen, the
        output analysis of each distinct SQL by its key)."""
        candidates: list[Candidate] = []
        results: dict[int, Any] = {}
        seen: dict[str, tuple[Any, ExecutionFailure | privacy.PrivacyRefusal | None]] = {}
        cleared: dict[str, PreparedSql] = {}
        for sql, (error, _) in zip(sqls, errors, strict=True):
            key = _sql_key(sql) if sql and not error else ""
            if key and key not in seen and key not in cleared:
                try:
                    cleared[key] = self._prepare(sql, req)
                except (privacy.PrivacyRefusal, ExecutionFailure) as exc:
                    seen[key] = (None, exc)
        outcomes = self.ports.execute_many([prepared.sql for prepared in cleared.values()])
        for (key, prepared), out in zip(cleared.items(), outcomes, strict=True):
            failed = isinstance(out, ExecutionFailure)
            seen[key] = (
                (None, out) if failed else (protect_prepared(prepared, out, self.config.privacy), None)
            )
        for index, (sql, (error, code)) in enumerate(zip(sqls, errors, strict=True)):
            if sql is None or error:
                candidates.append(Candidate(index=index, sql=sql, error=error, error_code=code))
                continue
            result, failure = seen[_sql_key(sql)]
            if failure is not None:
                refused = isinstance(failure, privacy.PrivacyRefusal)
                code = f"privacy_{failure.code}" if refused else failure.code
                candidates.append(Candidate(index=index, sql=sql, error=failure.message, error_code=code))
                continue
            results[index] = result
            candidates.append(Candidate(
                index=index, sql=sql, columns=tuple(result.columns), rows=result.rows,
                row_count=result.row_count, duration_ms=result.elapsed_ms,
            ))  # fmt: skip
        return candidates, results, seen, {key: prepared.analysis for key, prepared in cleared.items()}

    def _choose(self, req: PipelineRequest, gate: GateVerdict, st: StageHandle, candidates: list[Candidate],
                results: dict[int, Any], seen: dict, analyses: dict) -> Outcome | tuple[str, Any, dict]:  # fmt: skip
        """The answer the candidates agree on as (sql, result, what the outcome keeps of the
        candidates), or the Outcome saying why there is none (refused, failed, ambiguous)."""
        cfg = self.config
        report = group_candidates(candidates, req.dialect, threshold=cfg.confidence_threshold,
                                  catalog=self.ports.catalog())  # fmt: skip
        chosen, ambiguous = choose_candidate(report)
        payload = self._release_previews(report.to_json(), analyses, req.dialect)
        st.note(executed=len(seen), groups=len(report.groups), confidence=round(report.confidence, 4),
                disagreement=payload["disagreement"]["phrase"] if payload["disagreement"] else "")  # fmt: skip
        extra = {"confidence": report.confidence, "candidates": payload}
        refusals = [f for _, f in seen.values() if isinstance(f, privacy.PrivacyRefusal)]
        if not report.groups and refusals:  # every runnable candidate outputs what this user may not see
            st.finish("stopped")
            first = next(c for c in candidates if c.error_code.startswith("privacy_"))
            return self._refused(refusals[0], first.sql or "", gate, **extra)
        if not report.groups:
            st.finish("failed")
            first = next(c for c in candidates if c.sql)
            return self._execution_failed(
                ExecutionFailure(first.error, first.code), first.sql or "", gate, req, **extra
            )
        if ambiguous:
            st.finish("stopped")
            phrase = (
                payload["disagreement"]["phrase"] if payload["disagreement"] else "the candidates disagree"
            )
            message = (
                f"askdb is not sure what this question means: {phrase}. Only {report.groups[0].size} of "
                f"{report.k} candidate queries agree, so no single answer is shown as fact. Pick the "
                "candidate that matches what you meant, or rephrase the question; a reviewer will check it."
            )
            return Outcome("succeeded", "ambiguous", message, gate=gate, **extra)
        group = report.groups[chosen]
        return group.sql, results[group.representative.index], extra

    def _sample(self, messages: list[dict], k: int) -> list[str]:
        """K completions: one request with `n` where the endpoint supports it, else parallel requests."""
        from concurrent.futures import ThreadPoolExecutor

        cfg = self.config
        texts: list[str] = []
        try:
            texts = list(self._chat("generate", messages, n=k, temperature=cfg.temperature).texts)[:k]
        except LLMError as exc:
            if exc.transient:  # the endpoint is down or slow: more requests will not help
                raise
        missing = k - len(texts)
        if missing > 0:  # `n` ignored or refused: ask for the rest one by one, side by side
            chat = self.ports.chat
            assert chat is not None

            def one(_: int) -> ChatResult | LLMError:
                try:
                    return chat.complete(messages, temperature=cfg.temperature)
                except LLMError as exc:
                    return exc

            with ThreadPoolExecutor(max_workers=min(missing, 8)) as pool:
                replies = list(pool.map(one, range(missing)))
            for reply in replies:  # recorded here, in the stage's own thread
                if isinstance(reply, LLMError):
                    self.rec.llm_call(purpose="generate", messages=messages, result=None, error=reply.message)
                else:
                    self.rec.llm_call(purpose="generate", messages=messages, result=reply)
                    texts.append(reply.text)
            if not texts:
                raise next(r for r in replies if isinstance(r, LLMError))
        return texts + [""] * (k - len(texts))  # a missing choice is a failed candidate

    # -- stages with logic ---------------------------------------------------------------
    def _gate(self, req: PipelineRequest, table_names: list[str]) -> GateVerdict:
        contexts = self.ports.table_context(table_names)
        reply = self._chat(
            "gate", prompts.gate_messages(question=req.prompt_question, tables=contexts, as_of=req.as_of)
        )
        try:
            data = extract_json_object(reply.text)
            category = str(data.get("category", "")).strip().lower()
            reason = str(data.get("reason", "")).strip()
        except JsonExtractionError:
            category, reason = "", ""
        if category not in prompts.GATE_CATEGORIES:
            # An unreadable verdict must not block a question: validation and read-only
            # execution still stand between it and the data.
            return GateVerdict("answerable", "the screening reply was unreadable; answering anyway")
        return GateVerdict(category, reason or prompts.GATE_CATEGORIES[0])

    @staticmethod
    def _extract(text: str) -> tuple[str | None, str]:
        try:
            return extract_sql(text), ""
        except SqlExtractionError as exc:
            return None, str(exc)

    def _validate_and_repair(
        self, messages: list[dict], sql: str | None, error: str, st: StageHandle, first_number: int = 1
    ):
        catalog = self.ports.catalog()
        conversation = messages
        for attempt in range(1, self.config.max_repairs + 2):
            code = "no_sql" if sql is None else ""
            if sql is not None:
                try:
                    sql = validate_sql(sql, catalog).sql  # what runs is generated from the checked tree
                    self.ports.explain(sql)
                    error = ""
                except SqlValidationError as exc:
                    error, code = exc.message, exc.code
                except ExecutionFailure as exc:
                    error, code = exc.message, f"explain_{exc.code}"
            self.rec.attempt(
                number=first_number + attempt - 1, sql=sql or "", origin="llm" if attempt == 1 else "repair",
                valid=not error, error_code=code, error=error,
            )  # fmt: skip
            if not error:
                st.note(attempts=attempt)
                return sql, ""
            if attempt > self.config.max_repairs:
                break
            self._check_cancel()
            conversation = prompts.repair_messages(conversation, sql or "(no SQL)", error)
            reply = self._chat("repair", conversation)
            sql, extract_error = self._extract(reply.text)
            if sql is None:
                error = extract_error
        st.note(attempts=self.config.max_repairs + 1, last_error=error)
        return sql, error

    def _summarize(self, req: PipelineRequest, sql: str, result) -> str:
        # Sensitive columns never reach the LLM, even for a user allowed to see them.
        positions = getattr(result, "privacy", {}).get("sensitive_positions") or []
        preview = result_preview(
            list(result.columns), privacy.withhold_sensitive(result.rows, positions),
            aggregate=is_aggregate_query(sql, req.dialect), row_level_allowed=self.config.row_level_to_llm,
        )  # fmt: skip
        messages = prompts.summary_messages(
            question=req.question,
            sql=sql,
            preview=preview,
            row_count=result.row_count,
            truncated=result.truncated,
        )
        return self._chat("summarize", messages).text.strip()
