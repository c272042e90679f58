"""The question pipeline end to end in one process: real PostgreSQL (app and clinical), the
real openai client talking to a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import psycopg
import pytest

from askdb.models import LlmCall, Run
from askdb.services.runs import QuestionError, question_submit_sync
from infra import embedded
from tests.factories import make_user
from tests.support.scripted_llm import Delay, Malformed, Reply

pytestmark = pytest.mark.django_db

GATE = "You screen questions"
WRITE = "You write one"
SUMMARY = "You explain the result"
COUNT_SQL = "SELECT count(*) AS patients FROM mimiciv_hosp.patients"


@pytest.fixture
def llm(scripted_llm):
    return scripted_llm


def answerable(llm, reason: str = "the patients table holds this") -> None:
    llm.when(GATE, Reply(f'{{"category": "answerable", "reason": "{reason}"}}'))


def script_sql(llm, *replies: str) -> None:
    """Generation and repair requests answered in order (repairs carry the same system prompt)."""
    for reply in replies:
        llm.when(WRITE, Reply(reply), times=1)


def ask(text: str, source):
    return Run.objects.get(
        pk=question_submit_sync(user=make_user("asker", "researcher"), text=text, source=source).pk
    )


def clinical_scalar(sql: str):
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        return conn.execute(sql).fetchone()[0]


def test_happy_path_records_every_stage(source, llm):
    answerable(llm)
    script_sql(llm, f"Here you go:\n```sql\n{COUNT_SQL};\n```")
    llm.when(SUMMARY, Reply("There are 40 patients."))
    run = ask("How many patients are there?", source)

    assert run.status == Run.Status.SUCCEEDED and run.outcome == "answered"
    assert run.result_columns == ["patients"]
    assert run.result_rows == [[clinical_scalar("SELECT count(*) FROM mimiciv_hosp.patients")]]
    assert run.summary == "There are 40 patients."
    assert [s.name for s in run.stages.all()] == [
        "embed", "retrieve", "match", "gate", "prompt", "generate", "validate", "execute", "summarize",
    ]  # fmt: skip
    # no verified example yet, so the library match is skipped; every other stage did its work
    assert [s.name for s in run.stages.all() if s.status != "ok"] == ["match"]
    assert all(s.duration_ms is not None for s in run.stages.all())
    assert [c.purpose for c in LlmCall.objects.filter(run=run)] == ["gate", "generate", "summarize"]
    assert run.tokens_prompt > 0 and run.prompt_version
    assert "mimiciv_hosp.patients" in {t["table"] for t in run.retrieval["tables"]}
    # The prompt carries the docs, the dialect, the as-of date and the no-wall-clock rule.
    system = llm.chat_requests()[1][0]["content"]
    assert "### mimiciv_hosp.patients" in system and "anchor_age" in system and "PostgreSQL" in system
    assert "Never use NOW()" in system and source.as_of.strftime("%Y-%m-%d") in system


def test_repair_loop_feeds_the_real_error_back(source, llm):
    answerable(llm)
    script_sql(
        llm,
        "SELECT avg(value_num) FROM mimiciv_hosp.labevents",
        "SELECT avg(valuenum) AS mean_value FROM mimiciv_hosp.labevents",
    )
    llm.when(SUMMARY, Reply("ok"))
    run = ask("What is the average lab value?", source)

    assert run.status == Run.Status.SUCCEEDED
    attempts = list(run.attempts.all())
    assert [(a.number, a.valid, a.origin) for a in attempts] == [(1, False, "llm"), (2, True, "repair")]
    assert "valuenum" in attempts[0].error  # did-you-mean
    repair_request = llm.chat_requests()[2]
    assert attempts[0].error in repair_request[-1]["content"]
    assert run.sql.endswith("FROM mimiciv_hosp.labevents")


def test_repair_loop_gives_up_after_n_rounds(source, llm, settings):
    settings.ASKDB_MAX_REPAIRS = 2
    answerable(llm)
    llm.when(WRITE, Reply("SELECT nonsense FROM mimiciv_hosp.patients"))
    run = ask("How many patients are there?", source)

    assert run.status == Run.Status.FAILED and run.outcome == "sql_invalid"
    assert run.attempts.count() == 3
    assert "after 3 attempts" in run.message and "nonsense" in run.message
    assert not LlmCall.objects.filter(run=run, purpose="summarize").exists()


@pytest.mark.parametrize("category", ["out_of_scope", "non_medical", "future_data", "private_data"])
def test_each_gate_category_stops_politely_with_its_reason(source, llm, category):
    llm.when(GATE, Reply(f'{{"category": "{category}", "reason": "because {category}"}}'))
    # A question the gate's rules let through: the LLM's category check decides.
    run = ask("How many patients had a knee MRI?", source)

    assert run.status == Run.Status.DECLINED and run.outcome == category
    assert run.gate_category == category and run.message == f"because {category}"
    assert [c.purpose for c in LlmCall.objects.filter(run=run)] == ["gate"]  # no SQL was written
    assert run.stages.get(name="gate").status == "stopped"


def test_similarity_floor_answers_no_data_without_any_llm_call(source, llm, settings):
    settings.ASKDB_SIMILARITY_FLOOR = 0.99
    run = ask("Tell me about the Eiffel tower.", source)
    assert run.status == Run.Status.DECLINED and run.outcome == "no_data"
    assert "don't have the data" in run.message
    assert llm.chat_requests() == []


def test_without_an_llm_the_pipeline_says_which_settings_to_set(source, settings):
    settings.LLM_MODEL = ""
    run = ask("How many patients are there?", source)
    assert run.status == Run.Status.DECLINED and run.outcome == "no_llm"
    assert "LLM_BASE_URL" in run.message and "LLM_MODEL" in run.message
    assert run.retrieval["tables"]  # what needs no LLM still ran
    assert {s.name: s.status for s in run.stages.all()}["generate"] == "skipped"


def test_llm_timeout_is_retried_then_fails_cleanly(source, llm, settings):
    settings.LLM_TIMEOUT_S = 0.5
    settings.LLM_MAX_RETRIES = 1
    llm.when(GATE, Delay(3, Reply('{"category": "answerable", "reason": "x"}')))
    run = ask("How many patients are there?", source)

    assert run.status == Run.Status.FAILED and run.outcome == "llm_error"
    assert "did not answer within 0.5 s" in run.message
    assert len(llm.chat_requests()) == 2  # the first try and one retry
    assert LlmCall.objects.get(run=run).error


@pytest.mark.parametrize(
    "garbage",
    [Malformed("this is not json"), Malformed('{"id": "x", "object": "chat.completion"}')],
    ids=["not-json", "no-choices"],
)
def test_llm_answering_garbage_fails_cleanly(source, llm, garbage):
    llm.when(GATE, garbage)
    run = ask("How many patients are there?", source)
    assert run.status == Run.Status.FAILED and run.outcome == "llm_error"
    assert run.message.startswith("The LLM could not be used")


def test_an_unreadable_gate_verdict_does_not_block_the_question(source, llm):
    llm.when(GATE, Reply("Sure! I think it's fine."))
    script_sql(llm, COUNT_SQL)
    llm.when(SUMMARY, Reply("ok"))
    run = ask("How many patients are there?", source)
    assert run.status == Run.Status.SUCCEEDED and run.gate_category == "answerable"


def test_empty_result_is_reported_as_no_rows_not_zero(source, llm):
    answerable(llm)
    script_sql(llm, "SELECT subject_id FROM mimiciv_hosp.patients WHERE subject_id < 0")
    llm.when(SUMMARY, Reply("Nothing matched."))
    run = ask("Which patients have a negative id?", source)
    assert run.status == Run.Status.SUCCEEDED and run.outcome == "no_rows"
    assert run.row_count == 0 and "no rows" in run.message


HOSTILE = {
    "drop": "DROP TABLE mimiciv_hosp.patients",
    "update": "UPDATE mimiciv_hosp.patients SET gender = 'X'",
    "two-statements": "SELECT 1; DELETE FROM mimiciv_hosp.patients",
    "pg_read_file": "SELECT pg_read_file('/etc/passwd')",
    "pg_sleep": "SELECT pg_sleep(30)",
    "copy": "COPY mimiciv_hosp.patients TO PROGRAM 'rm -rf /'",
    "set-role": "SET ROLE postgres",
    "cte-write": "WITH d AS (DELETE FROM mimiciv_hosp.patients RETURNING *) SELECT count(*) FROM d",
    "select-into": "SELECT * INTO mimiciv_hosp.stolen FROM mimiciv_hosp.patients",
}


@pytest.mark.parametrize("sql", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_sql_from_the_llm_is_rejected_and_changes_nothing(source, llm, settings, sql):
    settings.ASKDB_MAX_REPAIRS = 0
    before = clinical_scalar("SELECT count(*) FROM mimiciv_hosp.patients")
    answerable(llm)
    script_sql(llm, f"```sql\n{sql}\n```")  # fenced, so extraction hands validation all of it
    run = ask("How many patients are there?", source)

    assert run.status == Run.Status.FAILED and run.outcome == "sql_invalid"
    assert not run.attempts.get().valid
    assert clinical_scalar("SELECT count(*) FROM mimiciv_hosp.patients") == before
    assert clinical_scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'stolen'") == 0
    assert clinical_scalar("SELECT count(DISTINCT gender) FROM mimiciv_hosp.patients") <= 2


def test_statement_timeout_is_enforced(source, llm, settings):
    settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.3
    answerable(llm)
    script_sql(
        llm,
        "SELECT count(*) FROM mimiciv_hosp.labevents a, mimiciv_hosp.labevents b, mimiciv_hosp.labevents c",
    )
    run = ask("How many lab pairs are there?", source)
    assert run.status == Run.Status.FAILED and run.outcome == "timeout"
    assert run.message.startswith("This question reads about ")  # its size (tests/askdb/test_long_queries.py)
    assert "needed more than 0.3 s (the statement timeout), so it was stopped:" in run.message


@pytest.mark.parametrize("text", ["", "  ", "a", "x" * 5000, 42])
def test_malformed_questions_get_a_clear_error(source, text):
    with pytest.raises(QuestionError):
        question_submit_sync(user=make_user("q", "researcher"), text=text, source=source)
    assert not Run.objects.exists()


def test_a_run_past_its_time_limit_stops_at_the_next_stage(source, llm, settings):
    # The threads pool cannot interrupt a task, so the run checks its own soft limit at each stage.
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 1e-6
    run = ask("How many patients are there?", source)
    assert run.status == Run.Status.FAILED and run.outcome == "time_limit"
    assert "longer than askdb allows" in run.message
    assert not LlmCall.objects.filter(run=run).exists()
