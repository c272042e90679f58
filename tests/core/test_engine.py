"""The engine alone, with in-memory ports and recorder (no database, no Django, no LLM server):
each way a question can end is one value, and what the run learnt on the way is on it."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from core.engine import (
    NO_LLM_MESSAGE,
    ExecutionFailure,
    Pipeline,
    PipelineConfig,
    PipelineRequest,
    RetrievalView,
)
from core.match import reasons as R
from core.match.binding import Binding
from core.match.candidate import MatchResult
from core.outcome import AnswerabilityVerdict, GateVerdict, MatchInfo, Outcome
from core.retrieval import RankedTable
from core.types import CatalogSchema, ChatResult, TableContext, TableSchema
from core.validation import SqlValidationError, validate_sql

CATALOG = CatalogSchema(
    tables=(TableSchema("mimiciv_hosp", "patients", ("subject_id", "gender", "anchor_age")),)
)
COUNT_SQL = "SELECT count(*) AS n FROM mimiciv_hosp.patients"
OLDER_SQL = "SELECT count(*) AS n FROM mimiciv_hosp.patients WHERE anchor_age > 65"


def _generated(sql: str) -> str:
    try:
        return validate_sql(sql, CATALOG).sql
    except SqlValidationError:
        return sql


@dataclass(frozen=True)
class Rows:
    columns: tuple[str, ...]
    rows: list[tuple]
    truncated: bool = False
    elapsed_ms: float = 1.0

    @property
    def row_count(self) -> int:
        return len(self.rows)


class FakeChat:
    model = "fake"

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.asked: list[list[dict]] = []

    def complete(self, messages, *, temperature=0.0, n=1, max_tokens=None) -> ChatResult:
        self.asked.append(messages)
        return ChatResult(texts=(self.replies.pop(0),), model=self.model)


@dataclass
class FakePorts:
    """The world as dictionaries: SQL text → rows, a fixed library match and gate verdict."""

    chat: Any = None
    results: dict[str, Rows] = field(default_factory=dict)
    matches: list[MatchResult] = field(default_factory=list)
    threshold: float = 0.5
    verdict: AnswerabilityVerdict | None = None
    doc_score: float = 0.9
    executed: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # table -> rows (the catalog's)
    planned: tuple[float, float] | None = None  # the planner's (rows, cost); None: no planner
    timing_out: frozenset[str] = frozenset()  # SQL (as generated) that runs out of time

    def embed(self, question: str) -> list[float]:
        return [1.0, 0.0]

    def examples(self, question, vector):
        return []

    def retrieve(self, question, vector, k, examples) -> RetrievalView:
        table = RankedTable(qualified="mimiciv_hosp.patients", score=0.9, doc_score=self.doc_score)
        return RetrievalView(tables=[table], values=[], best_doc_score=self.doc_score)

    def library_match(self, question, vector):
        return list(self.matches), self.threshold

    def answerability(self, question, values):
        return self.verdict

    def table_context(self, tables):
        return [TableContext(qualified=t) for t in tables]

    def catalog(self) -> CatalogSchema:
        return CATALOG

    def _known(self, sql: str) -> Rows | None:
        """The rows of `sql` as written in the test or as generated from its validated tree (what
        the engine sends)."""
        by_tree = {_generated(key): rows for key, rows in self.results.items()}
        return self.results.get(sql) or by_tree.get(_generated(sql))

    def explain(self, sql: str) -> None:
        if self._known(sql) is None:
            raise ExecutionFailure("no such query", "sql_error")

    def table_rows(self):
        return self.sizes

    def plan(self, sql: str):
        return self.planned

    def execute(self, sql: str):
        self.executed.append(sql)
        if _generated(sql) in {_generated(s) for s in self.timing_out}:
            raise ExecutionFailure("the query ran longer than 30 s and was stopped", "timeout")
        rows = self._known(sql)
        if rows is None:
            raise ExecutionFailure("relation does not exist", "sql_error")
        return rows

    def execute_many(self, sqls):
        out = []
        for sql in sqls:
            try:
                out.append(self.execute(sql))
            except ExecutionFailure as exc:
                out.append(exc)
        return out


class Handle:
    def __init__(self, name: str):
        self.name, self.detail, self.status = name, {}, "ok"

    def note(self, **detail):
        self.detail.update(detail)

    def finish(self, status: str):
        self.status = status


@dataclass
class FakeRecorder:
    stages: list[Handle] = field(default_factory=list)
    attempts: list[dict] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    cancel_after: str = ""  # a stage name: the run is cancelled once it started

    @contextlib.contextmanager
    def stage(self, name: str):
        handle = Handle(name)
        self.stages.append(handle)
        yield handle

    def attempt(self, **kwargs):
        self.attempts.append(kwargs)

    def llm_call(self, *, purpose, messages, result, error=""):
        self.calls.append(purpose)

    def retrieval(self, view, examples):
        pass

    def cancelled(self) -> bool:
        return bool(self.cancel_after) and any(s.name == self.cancel_after for s in self.stages)

    def stage_named(self, name: str) -> Handle:
        return next(s for s in self.stages if s.name == name)


def match(sql: str, confidence: float, example_id: int = 7, **kw) -> MatchResult:
    binding = Binding(slot="n1", type="number", old="80", new="65", value="65", column="patients.anchor_age")
    return MatchResult(example_id, "how many patients are older than 80?", sql, (binding,),
                       {"hard_ok": 1.0}, confidence, **kw)  # fmt: skip


def ask(ports: FakePorts, recorder: FakeRecorder | None = None, **config) -> tuple[Outcome, FakeRecorder]:
    recorder = recorder or FakeRecorder()
    config.setdefault("summarize", False)
    outcome = Pipeline(ports, recorder, PipelineConfig(**config)).run(
        PipelineRequest("How many patients are older than 65?")
    )
    return outcome, recorder


def test_a_confident_library_match_answers_without_the_llm():
    chat = FakeChat()
    ports = FakePorts(chat=chat, results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)])
    outcome, rec = ask(ports)
    assert (outcome.status, outcome.outcome, outcome.answered_by) == ("succeeded", "answered", "library")
    assert outcome.sql == OLDER_SQL and outcome.example_id == 7 and outcome.gate == GateVerdict()
    assert isinstance(outcome.library_match, MatchInfo) and outcome.library_match.answered
    assert outcome.library_match.to_json()["bindings"][0]["new"] == "65"
    assert chat.asked == [] and [s.name for s in rec.stages] == ["embed", "retrieve", "match", "summarize"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.sql = "SELECT 1"  # type: ignore[misc]


def test_a_composed_match_answers_as_composed_never_as_verified():
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])},
                      matches=[match(OLDER_SQL, 0.9, composed_from=(7, 9), composed_with="female")])  # fmt: skip
    outcome, rec = ask(ports)
    assert (outcome.status, outcome.answered_by, outcome.example_id) == ("succeeded", "composed", 7)
    info = outcome.library_match.to_json()
    assert info["composed_from"] == [7, 9] and info["composed_with"] == "female" and info["answered"]
    assert rec.attempts[0]["origin"] == "composed"


def test_a_match_under_the_threshold_is_kept_with_its_reasons_and_not_answered():
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])},
                      matches=[match(OLDER_SQL, 0.2, reasons=("too far",), reason_codes=("far",))])  # fmt: skip
    outcome, _ = ask(ports)
    assert (outcome.status, outcome.outcome, outcome.message) == ("declined", "no_llm", NO_LLM_MESSAGE)
    assert outcome.library_match is not None and not outcome.library_match.answered
    assert outcome.library_match.reason_codes == ("far",) and outcome.answered_by == ""


def test_two_confident_matches_that_disagree_answer_nothing():
    ports = FakePorts(
        results={OLDER_SQL: Rows(("n",), [(12,)]), COUNT_SQL: Rows(("n",), [(100,)])},
        matches=[match(OLDER_SQL, 0.9), match(COUNT_SQL, 0.8, example_id=8)],
    )
    outcome, _ = ask(ports)
    assert outcome.outcome == "no_llm" and outcome.library_match.reason_codes[-1] == R.DISAGREE


def _rule(kind: str, evidence: str) -> dict:
    return {"kind": kind, "rule": kind, "evidence": evidence, "reason": "", "decisive": True}


def test_the_answerability_verdict_stops_a_library_answer_and_declines():
    verdict = AnswerabilityVerdict.from_json(
        {
            "answerable": False,
            "category": "out_of_scope",
            "reason": "Not in this database.",
            "probability": 0.1,
            "findings": [_rule("out_of_scope", "weather")],
        }
    )
    ports = FakePorts(
        results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)], verdict=verdict
    )
    outcome, rec = ask(ports)
    assert (outcome.status, outcome.outcome, outcome.message) == (
        "declined",
        "out_of_scope",
        "Not in this database.",
    )
    assert outcome.gate == GateVerdict("out_of_scope", "Not in this database.")
    assert outcome.answerability is verdict and outcome.answerability.to_json()["probability"] == 0.1
    assert outcome.library_match.reason_codes[-1] == R.GATE_DECLINED and not outcome.library_match.answered
    assert rec.stage_named("gate").status == "stopped"


def _model_says_no(**extra) -> AnswerabilityVerdict:
    """The learned model's decline: below its threshold, a kind borrowed from the flagged question
    it resembles, and (in `extra`) only soft rule findings, as the scorer reports them."""
    return AnswerabilityVerdict.from_json({
        "answerable": False, "category": "not_in_schema", "kind": "not_in_schema", "probability": 0.04,
        "threshold": 0.5, "reason": "No table or column in this database seems to hold what this question asks for.",
        "findings": [], **extra,
    })  # fmt: skip


@pytest.mark.parametrize(
    "verdict",
    [
        _model_says_no(),
        _model_says_no(category="future_data", kind="future"),  # borrowed from a flagged neighbour
        _model_says_no(
            findings=[
                {"kind": "private", "rule": "family", "evidence": "family", "reason": "", "decisive": False}
            ]
        ),
    ],
    ids=["not_in_schema", "borrowed_kind", "soft_rule"],
)
@pytest.mark.parametrize("chat", [None, "llm"], ids=["no_llm", "llm"])
def test_a_confident_library_answer_is_not_vetoed_by_the_model_or_the_floor(verdict, chat):
    """Above its calibrated threshold, with its SQL run, the library answer stands though the
    learned model says unanswerable and no table clears the similarity floor; no LLM is asked."""
    llm = FakeChat() if chat else None
    ports = FakePorts(chat=llm, results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)],
                      verdict=verdict, doc_score=0.01)  # fmt: skip
    outcome, rec = ask(ports)
    assert (outcome.status, outcome.outcome, outcome.answered_by) == ("succeeded", "answered", "library")
    assert outcome.result.rows == [[12]] and outcome.library_match.answered
    assert outcome.answerability is verdict  # what the model said is kept, not hidden
    assert (
        rec.stage_named("match").detail["gate_overruled"] and rec.stage_named("match").detail["below_floor"]
    )
    assert "gate" not in [s.name for s in rec.stages] and (llm is None or llm.asked == [])


@pytest.mark.parametrize(
    ("kind", "category", "evidence"),
    [
        ("future", "future_data", "will"),
        ("advice", "advice", "should be prescribed"),
        ("private", "private_data", "phone number"),
        ("out_of_scope", "out_of_scope", "write me a program"),
    ],
)
@pytest.mark.parametrize("chat", [None, "llm"], ids=["no_llm", "llm"])
@pytest.mark.parametrize("composed", [(), (7, 9)], ids=["verified", "composed"])
def test_a_decisive_rule_still_declines_a_confident_library_answer(kind, category, evidence, chat, composed):
    """The rule kinds are about what is asked, not whether the data holds it: a close template
    does not answer a question about the future, for advice, to identify a person, or off topic.
    The model may even think it answerable; the rule alone declines it. A composed answer (two
    verified questions' parts) is held to the same rules: never shown where the plain one is not."""
    verdict = AnswerabilityVerdict.from_json({
        "answerable": False, "category": category, "kind": kind, "probability": 0.0, "model_probability": 0.93,
        "reason": f"Declined: {evidence}.", "findings": [_rule(kind, evidence)],
    })  # fmt: skip
    llm = FakeChat() if chat else None
    ports = FakePorts(chat=llm, results={OLDER_SQL: Rows(("n",), [(12,)])},
                      matches=[match(OLDER_SQL, 0.9, composed_from=composed)], verdict=verdict)  # fmt: skip
    outcome, rec = ask(ports)
    assert (outcome.status, outcome.outcome, outcome.message) == (
        "declined",
        category,
        f"Declined: {evidence}.",
    )
    assert outcome.answered_by == "" and outcome.sql == "" and outcome.result is None
    assert outcome.library_match.reason_codes[-1] == R.GATE_DECLINED and not outcome.library_match.answered
    assert rec.stage_named("match").detail["gate_rule"] == kind and (llm is None or llm.asked == [])


def test_an_unconfident_match_still_meets_the_model_and_the_floor():
    """Only a library answer escapes the model's veto: under the threshold, the gate declines."""
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.2)],
                      verdict=_model_says_no())  # fmt: skip
    outcome, _ = ask(ports)
    assert (outcome.status, outcome.outcome) == ("declined", "not_in_schema")
    ports = FakePorts(
        results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.2)], doc_score=0.01
    )
    assert ask(ports)[0].outcome == "no_data"


def test_no_table_about_the_question_is_no_data():
    outcome, _ = ask(FakePorts(doc_score=0.01))
    assert (outcome.outcome, outcome.gate.category) == (
        "no_data",
        "no_data",
    ) and outcome.library_match is None


def test_the_llm_writes_sql_that_is_checked_and_run():
    chat = FakeChat('{"category": "answerable", "reason": "ok"}', f"```sql\n{COUNT_SQL}\n```")
    outcome, rec = ask(FakePorts(chat=chat, results={COUNT_SQL: Rows(("n",), [(100,)])}))
    assert (outcome.status, outcome.outcome, outcome.answered_by) == ("succeeded", "answered", "llm")
    assert outcome.gate == GateVerdict("answerable", "ok") and outcome.result.rows == [[100]]
    assert rec.calls == ["gate", "generate"] and rec.attempts[0]["valid"]


def test_a_follow_up_gives_the_llm_the_earlier_question_and_sql_and_no_plain_library_match():
    """A follow-up is read with its context: the LLM's gate and prompt see the earlier question and
    SQL; the library answers it only by composing on the earlier SQL (follow_up_match), never by the
    follow-up's words alone (library_match, which would read "how many of them" as all patients)."""
    chat = FakeChat('{"category": "answerable", "reason": "ok"}', f"```sql\n{COUNT_SQL}\n```")
    ports = FakePorts(chat=chat, results={COUNT_SQL: Rows(("n",), [(100,)]), OLDER_SQL: Rows(("n",), [(12,)])},
                      matches=[match(OLDER_SQL, 0.99)])  # fmt: skip
    asked = []
    ports.follow_up_match = lambda question, vector, eq, esql: (asked.append((question, eq, esql)) or [], 0.5)
    request = PipelineRequest("and how many of them were over 80?", earlier_question="how many female patients?",
                              earlier_sql="SELECT COUNT(*) FROM patients WHERE gender = 'F'")  # fmt: skip
    outcome = Pipeline(ports, FakeRecorder(), PipelineConfig(summarize=False)).run(request)
    assert outcome.answered_by == "llm" and outcome.result.rows == [[100]]  # the plain match was not used
    assert asked == [("and how many of them were over 80?", "how many female patients?",
                      "SELECT COUNT(*) FROM patients WHERE gender = 'F'")]  # fmt: skip
    for messages in chat.asked:  # the gate and the generation
        last = messages[-1]["content"]
        assert "how many female patients?" in last and "gender = 'F'" in last and "over 80" in last


def test_the_llm_gate_declines_in_its_own_words():
    chat = FakeChat('{"category": "non_medical", "reason": "About the weather."}')
    outcome, _ = ask(FakePorts(chat=chat))
    assert (outcome.status, outcome.outcome, outcome.gate_reason) == (
        "declined",
        "non_medical",
        "About the weather.",
    )


def test_sql_that_fails_is_an_execution_error_with_its_gate():
    chat = FakeChat('{"category": "answerable", "reason": "ok"}', f"```sql\n{COUNT_SQL}\n```")
    ports = FakePorts(chat=chat, results={COUNT_SQL: Rows(("n",), [(1,)])})
    ports.execute = lambda sql: (_ for _ in ()).throw(ExecutionFailure("canceling statement", "timeout"))
    outcome, _ = ask(ports)
    assert (outcome.status, outcome.outcome, outcome.sql) == (
        "failed",
        "timeout",
        _generated(COUNT_SQL),
    )  # what was sent
    assert outcome.gate_category == "answerable"


def test_a_cancel_keeps_what_the_run_learnt():
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.2)])
    outcome, _ = ask(ports, FakeRecorder(cancel_after="match"))
    assert (outcome.status, outcome.outcome) == ("cancelled", "cancelled")
    assert outcome.library_match is not None and outcome.library_match.example_id == 7


def test_a_pipeline_keeps_nothing_between_runs():
    """run() returns its answer: the Pipeline holds no per-run state, so one serves two questions."""
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)])
    pipeline = Pipeline(ports, FakeRecorder(), PipelineConfig(summarize=False))
    before = dict(vars(pipeline))
    first = pipeline.run(PipelineRequest("How many patients are older than 65?"))
    ports.matches = []
    second = pipeline.run(PipelineRequest("How many patients are older than 65?"))
    assert vars(pipeline) == before
    assert first.answered_by == "library" and second.library_match is None and second.outcome == "no_llm"


def test_a_library_answer_that_runs_out_of_time_says_how_big_it_is_not_no_match():
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)],
                      sizes={"mimiciv_hosp.patients": 118_000_000}, timing_out=frozenset({OLDER_SQL}))  # fmt: skip
    outcome, _ = ask(ports, timeout_s=30)
    assert (outcome.status, outcome.outcome) == ("failed", "timeout")
    assert outcome.message.startswith(
        "This question reads about 118 million rows of patients and needed more than 30 s"
    )
    assert outcome.library_match.example_id == 7 and not outcome.library_match.answered


def test_a_large_query_is_announced_before_it_runs_by_the_planner_or_the_table_sizes():
    big = {"mimiciv_hosp.patients": 50_000_000}
    # no planner (SQLite): the tables' sizes decide
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)], sizes=big)
    outcome, rec = ask(ports, large_query_rows=10_000_000)
    assert outcome.outcome == "answered" and [s.name for s in rec.stages][:4] == [
        "embed",
        "retrieve",
        "match",
        "estimate",
    ]
    assert rec.stage_named("estimate").detail["sentence"] == (
        "This question reads about 50 million rows of patients: it may take a while."
    )
    # a planner that costs it low (an index): not announced, however big the table
    ports.planned = (10.0, 40.0)
    _, rec = ask(ports, large_query_rows=10_000_000, large_query_cost=1e6)
    assert "estimate" not in [s.name for s in rec.stages]
    # small tables are not even planned
    ports.planned, ports.sizes = (1e12, 1e12), {"mimiciv_hosp.patients": 100}
    _, rec = ask(ports, large_query_rows=10_000_000, large_query_cost=1e6)
    assert "estimate" not in [s.name for s in rec.stages]


def test_a_confident_answer_whose_competitor_runs_out_of_time_says_so():
    """The engine decides with decide_answer (the benchmark's and calibration's decision), and a
    timeout of either confident reading is reported as a timeout, not as "no match"."""
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])},
                      matches=[match(OLDER_SQL, 0.9), match(COUNT_SQL, 0.8, example_id=8)])  # fmt: skip
    execute = ports.execute

    def slow_count(sql: str):
        if sql == _generated(COUNT_SQL):
            raise ExecutionFailure("canceling statement due to statement timeout", "timeout")
        return execute(sql)

    ports.execute = slow_count
    outcome, rec = ask(ports)
    assert (outcome.status, outcome.outcome) == ("failed", "timeout")
    assert outcome.library_match.example_id == 7 and outcome.library_match.reason_codes[-1] == R.SQL_FAILED
    assert rec.stage_named("match").status == "failed"


def test_a_competitor_that_fails_declines_the_library_answer():
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])},
                      matches=[match(OLDER_SQL, 0.9), match(COUNT_SQL, 0.8, example_id=8)])  # fmt: skip
    outcome, _ = ask(ports)  # COUNT_SQL is unknown to the fake database: it fails
    assert outcome.outcome == "no_llm" and outcome.library_match.reason_codes[-1] == R.SQL_FAILED
    assert not outcome.library_match.answered


def test_the_release_reads_the_analysis_prepare_sql_made(monkeypatch):
    """One analysis per statement run (prepare_sql's, on the validated tree): the release reuses
    it, and still rounds the count it found (ROUND mode, base 5: 12 is released as 10)."""
    from core import disclosure, privacy

    analysed = []
    original = privacy.analyse_output
    monkeypatch.setattr(privacy, "analyse_output", lambda *a, **k: analysed.append(a[0]) or original(*a, **k))
    ports = FakePorts(results={OLDER_SQL: Rows(("n",), [(12,)])}, matches=[match(OLDER_SQL, 0.9)])
    outcome, _ = ask(ports, disclosure=disclosure.DisclosurePolicy(mode=disclosure.ROUND, round_base=5))
    assert outcome.outcome == "answered" and outcome.result.rows == [[10]]
    assert len(analysed) == 1 and outcome.privacy["disclosure"]["mode"] == disclosure.ROUND
