"""The pipeline's Ports over Django, for one source: retrieval over the catalog, the verified
library (through the library cache), the answerability gate, and the read-only executor, every
statement audited. An adapter: it imports models, the catalog and infra, never a service."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import sqlglot
from django.conf import settings
from django.db import DatabaseError
from rapidfuzz import fuzz
from sqlglot import exp

from askdb.adapters.library_cache import LIBRARY, VECTOR_FIELDS, LibraryVersion, library_version
from askdb.adapters.recorder import relaxed_commit
from askdb.answerability.people import PERSON_COLUMN, PERSON_TABLE, unknown_patient
from askdb.answerability.scorer import gate_verdict
from askdb.models import Example, Run
from core import match
from core.engine import ExecutionFailure, RetrievalView
from core.outcome import AnswerabilityVerdict
from core.types import CatalogSchema, ExampleContext, TableContext
from infra.adapters.clinical import ExecutionError
from infra.audit.sql import audit_sql_executed
from infra.providers.embeddings import LocalEmbedder, get_embedder
from metadata_admin.models import ClinicalSource, ColumnDoc
from metadata_admin.selectors import CatalogSnapshot, catalog_snapshot, linkable_values_like, retrieve
from metadata_admin.services import source_executor

# Questions up to this long fit the gate model's 128 word pieces, [CLS] and [SEP] included.
GATE_UNCUT_CHARS = 120
LIBRARY_CANDIDATES = 8  # closest verified examples whose templates the matcher tries


class DjangoPorts:
    """What the pipeline needs from the world, for one source."""

    def __init__(
        self,
        source: ClinicalSource,
        *,
        chat,
        timeout_s: float,
        row_cap: int,
        run: Run | None = None,
        sensitive: bool = False,
        ledger=None,
        snapshot: CatalogSnapshot | None = None,
        sensitive_columns: frozenset[str] | None = None,
        row_level: bool = True,
    ):
        self.source = source
        # May see one patient's rows: only then does the gate look a named patient up (for an
        # aggregate-only user "no such patient" would tell which ids exist).
        self.row_level = row_level
        self.ledger = ledger  # disclosure.Ledger: the asker's released answers and privacy budget
        self.run = run  # for the audit of the SQL it executes
        self.chat = chat
        self.embedder = get_embedder()
        # The catalog as of this run, loaded once per catalog change (not per question).
        # `snapshot`: the one the run read already (its privacy policy was made from it).
        self.snapshot = snapshot if snapshot is not None else catalog_snapshot(source)
        # "now" is the source's as-of time (shown in provenance). askdb's own reads (the library's
        # values, probes, value lookups, planning) use the source's reader; the SQL written for the
        # question runs as the asker's tier (`sensitive`: they may read sensitive columns), so the
        # database itself refuses a sensitive column to someone without view_sensitive.
        self.executor = source_executor(source, schemas=self.snapshot.schemas)
        self.question_executor = (
            self.executor
            if sensitive
            else source_executor(
                source, schemas=self.snapshot.schemas, sensitive=False, sensitive_columns=sensitive_columns
            )
        )
        self._catalog = self.snapshot.schema
        self.timeout_s = timeout_s
        self.row_cap = row_cap
        self._nearest_for: list[float] | None = None
        self._nearest_list: list[tuple[int, float]] = []
        # "table.column" (lower case) the catalog marks sensitive: the run's privacy policy has them
        self._sensitive_columns: frozenset[str] | None = sensitive_columns
        self._version: LibraryVersion | None = None
        # What askdb's own reads could not do for this question (a value lookup or check that timed
        # out or failed, a column whose values could not be loaded): shown in the match stage.
        self.problems: list[str] = []
        self._embedded: tuple[str, list[float]] | None = None  # the question the embed stage embedded
        self._verdicts: dict[str, AnswerabilityVerdict | None] = {}

    def embed(self, question: str) -> list[float]:
        vector = self.embedder.embed([question])[0]
        self._embedded = (question, vector)
        return vector

    def _library_version(self) -> LibraryVersion:
        """The library's version, read once per run (the few-shot search and the match share it):
        a change made in another process since the last question is seen here."""
        if self._version is None:
            self._version = library_version(self.source)
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
            self._nearest_list = LIBRARY.nearest(
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

        Templates, not single examples: the nearest masked paraphrases vote (core.library),
        the meaning guard checks the question against all paraphrases of a template, and each
        result's confidence is the calibrated P(correct). The threshold is c / (c + 1) for
        ASKDB_WRONG_ANSWER_COST = c.
        """
        risk = library_risk(self.source)
        index, values = LIBRARY.index(
            self.source, self.executor, self.embedder, version=self._library_version()
        )
        self.problems.extend(LIBRARY.value_problems(self.source))
        if not index.entries:
            return [], risk.threshold
        # Typos read as the library spells them ("mnay femal patients"), before anything reads the question.
        question = match.correct_spelling(question, index, values=values, catalog=self._catalog)
        masked = match.mask_question(question, values)
        masked_vector = self.embedder.embed([masked])[0]
        found = match.match_library(
            question, masked_vector, index, lookup=self.lookup_value, values=values, catalog=self._catalog,
            risk=risk, masked_question=masked, probe=self.probe,
        )  # fmt: skip
        return found.results, risk.threshold

    def value_problems(self) -> list[str]:
        """What askdb's own reads for the library match could not do (each once, in order)."""
        return list(dict.fromkeys(self.problems))

    def follow_up_match(
        self, question: str, vector: list[float], earlier_question: str, earlier_sql: str
    ) -> tuple[list, float]:
        """A follow-up on an earlier answer: the earlier SQL with the condition the follow-up adds,
        composed from the library's verified conditions (core.match.match_follow_up), and the
        answering threshold. The follow-up's words alone never pick a template."""
        risk = library_risk(self.source)
        index, values = LIBRARY.index(
            self.source, self.executor, self.embedder, version=self._library_version()
        )
        if not index.entries:
            return [], risk.threshold
        masked_vector = self.embedder.embed([match.mask_question(question, values)])[0]
        results = match.match_follow_up(
            question, earlier_question, earlier_sql, masked_vector, index, lookup=self.lookup_value,
            values=values, catalog=self._catalog, risk=risk, probe=self.probe, dialect=self.source.dialect,
        )  # fmt: skip
        return results, risk.threshold

    def answerability(self, question: str, values: list) -> AnswerabilityVerdict | None:
        """The answerability gate's verdict: the trained model with its rules, or the rules alone
        when no model is trained for the source (they need no training). Decided once per
        question (the match and the gate stage both ask); the embed stage's vector is reused when
        the local MiniLM made it (the model was trained on that encoder's vectors), and the
        catalog's and library's versions this run read already say when the vocabulary is stale."""
        if question not in self._verdicts:
            vector = None
            # A word piece is at least a character: a question this short fits the model's 128
            # pieces, so the uncut vector is the one it was trained on (a longer one is cut there).
            local = isinstance(self.embedder, LocalEmbedder) and len(question) <= GATE_UNCUT_CHARS
            if local and self._embedded and self._embedded[0] == question:
                vector = self._embedded[1]
            version = (self.snapshot.stamp, self._library_version())
            facts = (
                [f for f in (unknown_patient(question, self._patient_exists),) if f] if self.row_level else []
            )
            verdict = gate_verdict(self.source, question, vector=vector, version=version, facts=facts)
            self._verdicts[question] = AnswerabilityVerdict.from_json(verdict)
        return self._verdicts[question]

    def _patient_exists(self, patient: int) -> bool | None:
        """Does the source hold this patient? A primary-key lookup by askdb's own reader; None
        when the catalog has no patients table or the lookup failed (said in the match stage)."""
        tables = [t for t in self._catalog.find(PERSON_TABLE) if PERSON_COLUMN in t.columns]
        if not tables:
            return None
        table = tables[0]
        name = f'"{table.schema}"."{table.name}"' if table.schema else f'"{table.name}"'
        sql = f'SELECT 1 FROM {name} WHERE "{PERSON_COLUMN}" = {int(patient)}'
        try:
            return (
                self.executor.execute(sql, timeout_s=settings.ASKDB_PROBE_TIMEOUT_S, row_cap=1).row_count > 0
            )
        except ExecutionError as exc:
            self.problems.append(f"looking up patient {patient} failed ({exc.code}): {exc.message}")
            return None

    def probe(self, sql: str) -> bool:
        """Does this small check query return a row (a bound value under the template's conditions)?"""
        return source_probe(self.executor, sql, problems=self.problems)

    def lookup_value(self, table_column: str, text: str) -> list[tuple[str, float]]:
        """Real values of one column like `text`, from the clinical database itself (read-only):
        exact (case-insensitive) matches score 1.0, values containing the text by fuzzy ratio.
        A column the catalog marks sensitive is never searched: its values are not linked."""
        table, _, column = table_column.rpartition(".")
        if f"{table.rpartition('.')[2]}.{column}".lower() in self._sensitive():
            return []
        return value_lookup(self.source, self.executor, table_column, text, problems=self.problems)

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
            # Planned as askdb's reader: planning returns nothing (no rows, no plan text), and a
            # sensitive column then meets the privacy rules, which refuse it with a sentence; the
            # asker's tier is what runs it (execute), where the database refuses it if they miss.
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

    def table_rows(self) -> dict[str, int | None]:
        return self.snapshot.row_counts

    def plan(self, sql: str) -> tuple[float, float] | None:
        """The planner's (rows, cost) for `sql`, as askdb's reader, audited like an EXPLAIN; None
        when the source has no planner worth asking or planning failed (table sizes stand in)."""
        actor = self.run.question.user if self.run is not None else None
        start = time.perf_counter()
        try:
            planned = self.executor.plan(sql, timeout_s=min(self.timeout_s, 10))
        except ExecutionError as exc:
            planned, error = None, exc
        else:
            error = None
        if planned is None and error is None:
            return None
        with relaxed_commit():
            audit_sql_executed(actor=actor, source=self.source, sql=sql, purpose="estimate", rows=None,
                               duration_ms=(time.perf_counter() - start) * 1000,
                               outcome=error.code if error else "ok", run=self.run,
                               error=error.message if error else "", action="sql.explained")  # fmt: skip
        return planned

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
            return self.question_executor.execute(
                sql, timeout_s=self.timeout_s, row_cap=self.row_cap, max_bytes=settings.ASKDB_RESULT_MAX_BYTES
            )
        except ExecutionError as exc:
            if exc.code == "permission" and self.question_executor is not self.executor:
                # The restricted reader is refused only what the catalog marks sensitive (and
                # system columns), which PostgreSQL words as "permission denied for table …".
                return ExecutionError(
                    f"{exc.message}; columns marked sensitive in the catalog need "
                    "the view_sensitive permission, also to count or filter on them",
                    code="permission",
                )
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


def library_risk(source):
    """The source's calibrated P(correct) model with the threshold of the configured wrong-answer cost."""
    threshold = match.answer_threshold(settings.ASKDB_WRONG_ANSWER_COST)
    data = (source.library_calibration or {}).get("risk")
    if not data:
        base = match.DEFAULT_RISK
        return match.Calibration(dict(base.weights), base.intercept, threshold)
    risk = match.Calibration.from_dict(data)
    return match.Calibration(risk.weights, risk.intercept, threshold, risk.samples)


def score_values(text: str, values, *, limit: int = 5) -> list[tuple[str, float]]:
    """(value, score) best first: an exact (case-insensitive) value 1.0, one containing the text by
    its fuzzy ratio (at most 0.95)."""
    wanted = text.strip().lower()
    scored = []
    for value in values:
        if value is None:
            continue
        value = str(value)
        score = 1.0 if value.lower() == wanted else round(fuzz.ratio(wanted, value.lower()) / 100 * 0.95, 4)
        scored.append((value, score))
    scored.sort(key=lambda p: -p[1])
    return scored[:limit]


def column_values_scan(executor, table_column: str, text: str, *, dialect: str, timeout_s: float) -> list:
    """One column's values equal to or containing `text`, most frequent first, read from the
    clinical table itself (an ILIKE … GROUP BY over all its rows): for a column the loader keeps no
    values of. Raises ExecutionError (a timeout, a missing column)."""
    table, _, column = table_column.rpartition(".")
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
    return [v for v, _ in executor.execute(query.sql(dialect=dialect), timeout_s=timeout_s, row_cap=200).rows]


def column_values_like(
    executor, table_column: str, text: str, *, dialect: str, limit: int = 5, timeout_s: float | None = None
):
    """(value, score) of one column's values equal to or containing `text`, scanned in the clinical
    table; [] when the scan fails (for callers with no run to report to: benchmarks)."""
    table, _, column = table_column.rpartition(".")
    text = text.strip()
    if not table or not column or not text:
        return []
    try:
        values = column_values_scan(executor, table_column, text, dialect=dialect,
                                    timeout_s=timeout_s or settings.ASKDB_VALUE_LOOKUP_TIMEOUT_S)  # fmt: skip
    except ExecutionError:
        return []
    return score_values(text, values, limit=limit)


def value_lookup(source, executor, table_column: str, text: str, *, problems: list[str] | None = None):
    """(value, score) of one linkable column's values like `text`, from the distinct-value table the
    loader keeps (metadata_admin LinkableValue), not from the clinical table. A column it keeps no
    values of is scanned in the clinical table; a lookup or scan that fails or runs out of time
    returns [] and, with `problems`, says so there (the run's match stage shows it)."""
    table, _, column = table_column.rpartition(".")
    text = text.strip()
    if not table or not column or not text:
        return []
    note = problems.append if problems is not None else (lambda _: None)
    limit_s = settings.ASKDB_VALUE_LOOKUP_TIMEOUT_S
    try:
        kept = linkable_values_like(source=source, table_column=table_column, text=text, timeout_s=limit_s)
    except DatabaseError as exc:
        cause = "ran out of time" if "statement timeout" in str(exc) else f"failed ({str(exc).strip()[:200]})"
        note(f"looking up {text!r} in {table_column} {cause} (ASKDB_VALUE_LOOKUP_TIMEOUT_S = {limit_s:g} s)")
        return []
    if kept is not None:
        return score_values(text, (v for v, _ in kept))
    note(f"{table_column}: no values kept by the loader (run load_mimic or reembed); scanned the column")
    try:
        values = column_values_scan(executor, table_column, text, dialect=source.dialect, timeout_s=limit_s)
    except ExecutionError as exc:
        note(f"scanning {table_column} for {text!r} failed: {exc.message}")
        return []
    return score_values(text, values)


def source_probe(executor, sql: str, *, problems: list[str] | None = None) -> bool:
    """True when `sql` returns a row; a failing probe counts as no row (the value is not confirmed),
    and with `problems` says why there."""
    try:
        return executor.execute(sql, timeout_s=settings.ASKDB_PROBE_TIMEOUT_S, row_cap=1).row_count > 0
    except ExecutionError as exc:
        if problems is not None:
            problems.append(f"a value check failed ({exc.code}): {exc.message} (ASKDB_PROBE_TIMEOUT_S = "
                            f"{settings.ASKDB_PROBE_TIMEOUT_S:g} s)")  # fmt: skip
        return False
