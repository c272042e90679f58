"""The question pipeline as a chain of small named stages, free of Django and openai.

embed → retrieve → gate → prompt → generate → validate (repair loop) → execute → summarize

Everything outside the pure stages comes in through `Ports` (retrieval, catalog, executor,
LLM) and everything worth keeping goes out through a `Recorder` (stage events, SQL attempts,
LLM calls), so the same engine serves the Celery task, the `ask` command and the benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from askdb.pipeline import disclosure, offline, privacy, prompts
from askdb.pipeline import match_reasons as R
from askdb.pipeline.candidates import Candidate, choose_candidate, group_candidates
from askdb.pipeline.compare import results_match
from askdb.pipeline.extraction import (
    JsonExtractionError,
    SqlExtractionError,
    extract_json_object,
    extract_sql,
)
from askdb.pipeline.offline import MatchResult
from askdb.pipeline.results import is_aggregate_query, result_preview
from askdb.pipeline.retrieval import LinkedValue, RankedTable
from askdb.pipeline.types import CatalogSchema, ChatModel, ChatResult, ExampleContext, LLMError, TableContext
from askdb.pipeline.validation import SqlValidationError, validate_sql

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


@dataclass(frozen=True)
class PipelineRequest:
    question: str
    dialect: str = "postgres"
    as_of: str = ""


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
    def answerability(self, question: str, values: list[LinkedValue]) -> dict | None: ...  # None: untrained
    def table_context(self, tables: list[str]) -> list[TableContext]: ...
    def catalog(self) -> CatalogSchema: ...
    def explain(self, sql: str) -> None: ...  # raises ExecutionFailure
    def execute(self, sql: str) -> Any: ...  # returns a QueryResult-like object, raises ExecutionFailure
    def execute_many(self, sqls: list[str]) -> list[Any]: ...  # side by side; an ExecutionFailure per failure


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


@dataclass
class Outcome:
    status: str  # "succeeded" | "declined" | "failed" | "cancelled"
    outcome: str  # answered, no_rows, no_data, <gate category>, no_llm, sql_invalid, execution_error, timeout, llm_error
    message: str = ""
    sql: str = ""
    result: Any = None
    summary: str = ""
    gate_category: str = ""
    gate_reason: str = ""
    confidence: float | None = None  # share of sampled candidates agreeing with the answer
    candidates: dict = field(default_factory=dict)  # the grouped candidates (candidates.to_json())
    answered_by: str = ""  # "llm" | "library" (a verified example's template, values rebound)
    example_id: int | None = None  # the verified example a library answer came from
    library_match: dict = field(default_factory=dict)  # the best template match, answered or not
    answerability: dict = field(
        default_factory=dict
    )  # the answerability model's verdict and per-table relevance
    privacy: dict = field(default_factory=dict)  # suppression report, or the refusal and its alternative


def _with_reason(info: dict, code: str, text: str) -> dict:
    """The match info's reasons (plain sentences) and their codes, with one more appended."""
    return {
        "reasons": [*info.get("reasons", []), text],
        "reason_codes": [*info.get("reason_codes", []), code],
    }


def _match_json(match: MatchResult) -> dict:
    """What the run keeps of a template match: the example, its confidence, SQL and bindings."""
    return {
        "example_id": match.example_id, "example_question": match.example_question,
        "confidence": round(match.confidence, 4), "sql": match.sql or "",
        "bindings": [
            {"slot": b.slot, "type": b.type, "old": b.old, "new": b.new, "value": b.value,
             "score": round(b.score, 4), "fuzzy": b.fuzzy, "column": b.column}
            for b in match.bindings
        ],
    }  # fmt: skip


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
        self._match_info: dict = {}
        self._answerability: dict = {}
        outcome = self._run_guarded(request)
        outcome.library_match = outcome.library_match or self._match_info  # kept even when it did not answer
        outcome.answerability = outcome.answerability or self._answerability
        if outcome.sql and not outcome.answered_by:
            outcome.answered_by = "llm"
        return outcome

    def _run_guarded(self, request: PipelineRequest) -> Outcome:
        try:
            return self._run(request)
        except Cancelled:
            return Outcome("cancelled", "cancelled", "The question was cancelled.")
        except LLMError as exc:
            return Outcome(
                "failed", "llm_error", f"The LLM could not be used: {exc.message}. Try again later."
            )

    def _execute(self, sql: str, req: PipelineRequest) -> privacy.ProtectedResult:
        """Run SQL the way every answer is run: the user's rights checked on the tree first
        (raises PrivacyRefusal), small cells suppressed right after, so the summary, the candidate
        previews, library answers and the stored run all see only the protected result."""
        analysis = self._access(sql, req)
        return privacy.protect(self.ports.execute(sql), analysis, self.config.privacy)

    def _access(self, sql: str, req: PipelineRequest) -> privacy.OutputAnalysis:
        """The user's rights checked on the tree (raises PrivacyRefusal); the analysis protect() needs."""
        policy = self.config.privacy
        analysis = privacy.analyse_output(sql, req.dialect, policy=policy, catalog=self.ports.catalog())
        privacy.check_access(analysis, policy, sql=sql, question=req.question, dialect=req.dialect)
        return analysis

    def _refused(self, refusal: privacy.PrivacyRefusal, sql: str, gate: tuple[str, str], **extra) -> Outcome:
        """The user may not see what this SQL outputs: declined, with the reason and the alternative."""
        return Outcome("declined", f"privacy_{refusal.code}", refusal.message, gate_category=gate[0],
                       gate_reason=gate[1], privacy=refusal.to_json() | {"sql": sql}, **extra)  # fmt: skip

    def _run(self, req: PipelineRequest) -> Outcome:
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
            library, match_info = self._library_match(req, vector, st)
            if library is not None and not self._library_answerable(req, view, st):
                library = None
                match_info = {**match_info, "answered": False, **_with_reason(
                    match_info, R.GATE_DECLINED, "The answerability check judged that the database cannot answer this question.")}  # fmt: skip
            self._match_info = match_info
        if isinstance(library, privacy.PrivacyRefusal):  # a verified answer this user may not see
            return self._refused(library, match_info.get("sql", ""), ("", ""), library_match=match_info)
        if library is not None:  # a verified example, values rebound: no gate, no generation, no sampling
            sql, result, best = library
            return self._answered(req, sql, result, ("", ""), answered_by="library", example_id=best.example_id,
                                  library_match=match_info)  # fmt: skip

        with self._stage("gate") as st:
            # The answerability gate, before any LLM call: its rules and (when trained) its model
            # decline a question with a reason in plain words, and an unanswerable question costs
            # no tokens. With an LLM, the LLM's category check still follows.
            verdict = self.ports.answerability(req.question, view.values)
            if verdict is not None:
                self._answerability = verdict
                st.note(answerability={k: verdict.get(k) for k in ("probability", "threshold", "answerable",
                        "kind", "version") if k in verdict}, reason=verdict.get("reason", ""),
                        top_tables=verdict.get("per_table", [])[:3])  # fmt: skip
                if not verdict.get("answerable", True):
                    st.finish("stopped")
                    category = verdict.get("category") or "not_in_schema"
                    reason = verdict.get("reason") or GATE_FALLBACK_REASON
                    return Outcome("declined", category, reason, gate_category=category, gate_reason=reason)
            if view.best_doc_score < cfg.similarity_floor:
                st.note(decision="no_data", best_doc_score=view.best_doc_score, floor=cfg.similarity_floor)
                st.finish("stopped")
                reason = "I don't have the data to answer that: no table in this database is about what the question asks."
                return Outcome("declined", "no_data", reason, gate_category="no_data", gate_reason=reason)
            if self.ports.chat is None:
                st.note(decision="not checked", reason="no LLM configured")
                st.finish("skipped")
            else:
                category, reason = self._gate(req, table_names)
                st.note(category=category, reason=reason)
                if category != "answerable":
                    st.finish("stopped")
                    return Outcome("declined", category, reason, gate_category=category, gate_reason=reason)
                gate = (category, reason)
        if self.ports.chat is None:
            with self._stage("generate") as st:
                st.note(reason="no LLM configured")
                st.finish("skipped")
            return Outcome("declined", "no_llm", NO_LLM_MESSAGE)

        with self._stage("prompt") as st:
            contexts = self.ports.table_context(table_names)
            messages = prompts.sql_messages(
                question=req.question, tables=contexts, examples=examples, values=view.values,
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
                result = self._execute(sql, req)
            except privacy.PrivacyRefusal as exc:
                st.note(privacy=exc.code, reason=exc.message)
                st.finish("stopped")
                return self._refused(exc, sql, gate)
            except ExecutionFailure as exc:
                st.note(error=exc.message, code=exc.code)
                st.finish("failed")
                return self._execution_failed(exc, sql, gate)
            st.note(rows=result.row_count, truncated=result.truncated, ms=round(result.elapsed_ms, 1),
                    now_as_of=req.as_of or "the database clock")  # fmt: skip
            if getattr(result, "truncated_reason", ""):
                st.note(truncated_reason=result.truncated_reason)
        return self._answered(req, sql, result, gate)

    def _library_answerable(self, req: PipelineRequest, view: RetrievalView, st: StageHandle) -> bool:
        """The answerability gate before a library answer: a close template is no proof that the
        database holds what the question asks (an unanswerable question can read like one)."""
        if view.best_doc_score < self.config.similarity_floor:
            st.note(gate="no table is about this question")
            return False
        verdict = self.ports.answerability(req.question, view.values)
        if verdict is None:
            return True
        self._answerability = verdict
        st.note(gate={k: verdict.get(k) for k in ("probability", "threshold", "answerable")})
        return bool(verdict.get("answerable", True))

    def _library_match(self, req: PipelineRequest, vector: list[float], st: StageHandle):
        """Answer from a verified example when a template matches with enough confidence.

        Precision first: the best match must clear the calibrated threshold, its SQL must run, and
        every other confident template that binds to different SQL must return the same result;
        otherwise the question goes on to the LLM (or, without one, is declined).
        """
        results, threshold = self.ports.library_match(req.question, vector)
        if not results:
            st.note(matched=False, reason="no verified example with a template is close to this question")
            st.finish("skipped")
            return None, {}
        top = results[0]
        info = {**_match_json(top), "threshold": threshold, "reasons": list(top.reasons),
                "reason_codes": list(top.reason_codes), "answered": False}  # fmt: skip
        best, competitors = offline.decide(results, threshold)
        st.note(example=top.example_id, confidence=info["confidence"], threshold=threshold,
                reasons=info["reasons"][:3], reason_codes=info["reason_codes"][:3], competitors=len(competitors))  # fmt: skip
        if best is None:
            return None, info
        try:
            result = self._execute(best.sql, req)
            for other in competitors:  # two confident readings must agree, or neither is trusted
                if not results_match(result.rows, self._execute(other.sql, req).rows):
                    st.note(disagreement=f"example {other.example_id} gives a different result")
                    return None, info | _with_reason(
                        info, R.DISAGREE, "Two verified questions fit this one and give different results."
                    )
        except privacy.PrivacyRefusal as exc:
            st.note(privacy=exc.code, reason=exc.message)
            st.finish("stopped")
            return exc, info | _match_json(best)
        except ExecutionFailure as exc:
            st.note(error=exc.message)
            return None, info | _with_reason(
                info,
                R.SQL_FAILED,
                f"The verified question's SQL with this question's values failed: {exc.message}",
            )
        st.note(answered=True, rows=result.row_count, now_as_of=req.as_of or "the database clock")
        self.rec.attempt(number=1, sql=best.sql, origin="example", valid=True)
        info.update(_match_json(best), answered=True)
        return (best.sql, result, best), info

    def _release(self, sql: str, req: PipelineRequest, result) -> privacy.ProtectedResult:
        """The answer as it leaves askdb, made once for every consumer (disclosure.release)."""
        cfg, ledger = self.config, getattr(self.ports, "ledger", None)
        if cfg.disclosure.mode == disclosure.SUPPRESS and ledger is None:
            return result  # nothing to check, change or record (an evaluation run)
        analysis = privacy.analyse_output(sql, req.dialect, policy=cfg.privacy, catalog=self.ports.catalog())
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

    def _answered(self, req: PipelineRequest, sql: str, result, gate: tuple[str, str], **extra) -> Outcome:
        cfg = self.config
        try:
            result = self._release(sql, req, result)
        except disclosure.DisclosureRefusal as exc:
            return self._refused(exc, sql, gate, **extra)
        except ExecutionFailure as exc:  # the differentially private form of the query failed
            return self._execution_failed(exc, sql, gate, **extra)
        outcome = Outcome("succeeded", "answered" if result.row_count else "no_rows", sql=sql, result=result,
                          gate_category=gate[0], gate_reason=gate[1], privacy=getattr(result, "privacy", {}),
                          **extra)  # fmt: skip
        if not result.row_count:
            outcome.message = "The query ran and returned no rows: nothing in the data matches."
            if (getattr(result, "privacy", None) or {}).get("disclosure", {}).get("censored"):
                outcome.message = disclosure.DP_CENSORED
        with self._stage("summarize") as st:
            if not cfg.summarize or self.ports.chat is None:
                st.finish("skipped")
                return outcome
            try:
                outcome.summary = self._summarize(req, sql, result)
            except LLMError as exc:
                st.note(error=exc.message)
                st.finish("failed")  # the answer stands without a summary
        return outcome

    def _invalid(self, error: str, sql: str | None, gate: tuple[str, str], **extra) -> Outcome:
        return Outcome(
            "failed", "sql_invalid",
            f"askdb could not write valid SQL for this question after {self.config.max_repairs + 1} attempts. "
            f"Last error: {error}", sql=sql or "", gate_category=gate[0], gate_reason=gate[1], **extra,
        )  # fmt: skip

    @staticmethod
    def _execution_failed(exc: ExecutionFailure, sql: str, gate: tuple[str, str], **extra) -> Outcome:
        outcome = "timeout" if exc.code == "timeout" else "execution_error"
        return Outcome("failed", outcome, f"The query failed: {exc.message}", sql=sql,
                       gate_category=gate[0], gate_reason=gate[1], **extra)  # fmt: skip

    # -- several candidates: confidence from disagreement -----------------------------------
    def _answer_sampled(self, req: PipelineRequest, messages: list[dict], gate: tuple[str, str]) -> Outcome:
        """Sample K SQL candidates, validate and execute each, and group them by result.

        The share of the largest group is the confidence. Below the threshold (or on a tie) no
        answer is presented as fact: the run carries the distinct candidates for the researcher
        to choose from, and waits for review. Candidates that fail count as disagreement.
        """
        cfg = self.config
        with self._stage("generate") as st:
            texts = self._sample(messages, cfg.candidates)
            st.note(candidates=len(texts), temperature=cfg.temperature)

        catalog = self.ports.catalog()
        with self._stage("validate") as st:
            sqls: list[str | None] = []
            errors: list[tuple[str, str]] = []
            checked: dict[str, tuple[str, str]] = {}  # sampled candidates often repeat one another
            for number, text in enumerate(texts, start=1):
                sql, error = self._extract(text)
                code = "no_sql" if sql is None else ""
                if sql is not None and _sql_key(sql) in checked:
                    error, code = checked[_sql_key(sql)]
                elif sql is not None:
                    try:
                        validate_sql(sql, catalog)
                        self.ports.explain(sql)
                    except SqlValidationError as exc:
                        error, code = exc.message, exc.code
                    except ExecutionFailure as exc:
                        error, code = exc.message, f"explain_{exc.code}"
                    checked[_sql_key(sql)] = (error, code)
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
                    st.finish("failed")
                    return self._invalid(error, sql, gate)
                sqls[0], errors[0] = sql, ("", "")
            st.note(valid=max(valid, 1), invalid=len(texts) - max(valid, 1))

        with self._stage("execute") as st:
            candidates: list[Candidate] = []
            results: dict[int, Any] = {}
            # The same SQL twice is run once; the distinct ones the user may see side by side, each on
            # its own connection, then protected as _execute protects every answer.
            seen: dict[str, tuple[Any, ExecutionFailure | privacy.PrivacyRefusal | None]] = {}
            cleared: dict[str, tuple[str, privacy.OutputAnalysis]] = {}
            for sql, (error, _) in zip(sqls, errors, strict=True):
                key = _sql_key(sql) if sql and not error else ""
                if key and key not in seen and key not in cleared:
                    try:
                        cleared[key] = (sql, self._access(sql, req))
                    except privacy.PrivacyRefusal as exc:
                        seen[key] = (None, exc)
            outcomes = self.ports.execute_many([sql for sql, _ in cleared.values()])
            for (key, (_, analysis)), out in zip(cleared.items(), outcomes, strict=True):
                failed = isinstance(out, ExecutionFailure)
                seen[key] = (
                    (None, out) if failed else (privacy.protect(out, analysis, self.config.privacy), None)
                )
            for index, (sql, (error, code)) in enumerate(zip(sqls, errors, strict=True)):
                if sql is None or error:
                    candidates.append(Candidate(index=index, sql=sql, error=error, error_code=code))
                    continue
                result, failure = seen[_sql_key(sql)]
                if failure is not None:
                    code = (
                        f"privacy_{failure.code}"
                        if isinstance(failure, privacy.PrivacyRefusal)
                        else failure.code
                    )
                    candidates.append(Candidate(index=index, sql=sql, error=failure.message, error_code=code))
                    continue
                results[index] = result
                candidates.append(Candidate(
                    index=index, sql=sql, columns=tuple(result.columns), rows=result.rows,
                    row_count=result.row_count, duration_ms=result.elapsed_ms,
                ))  # fmt: skip
            report = group_candidates(
                candidates, req.dialect, threshold=cfg.confidence_threshold, catalog=catalog
            )
            chosen, ambiguous = choose_candidate(report)
            payload = self._release_previews(
                report.to_json(), {k: a for k, (_, a) in cleared.items()}, req.dialect
            )
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
                    ExecutionFailure(first.error, first.code), first.sql or "", gate, **extra
                )
            if ambiguous:
                st.finish("stopped")
                phrase = (
                    payload["disagreement"]["phrase"]
                    if payload["disagreement"]
                    else "the candidates disagree"
                )
                message = (
                    f"askdb is not sure what this question means: {phrase}. Only {report.groups[0].size} of "
                    f"{report.k} candidate queries agree, so no single answer is shown as fact. Pick the "
                    "candidate that matches what you meant, or rephrase the question; a reviewer will check it."
                )
                return Outcome("succeeded", "ambiguous", message, gate_category=gate[0], gate_reason=gate[1],
                               **extra)  # fmt: skip
            group = report.groups[chosen]
            sql, result = group.sql, results[group.representative.index]
        return self._answered(req, sql, result, gate, **extra)

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
    def _gate(self, req: PipelineRequest, table_names: list[str]) -> tuple[str, str]:
        contexts = self.ports.table_context(table_names)
        reply = self._chat(
            "gate", prompts.gate_messages(question=req.question, tables=contexts, as_of=req.as_of)
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
            return "answerable", "the screening reply was unreadable; answering anyway"
        return category, reason or prompts.GATE_CATEGORIES[0]

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
                    validate_sql(sql, catalog)
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
