"""Honest time (issue 31 item 2): a query that runs out of time says so, with how big it is, on
PostgreSQL and SQLite sources, from the library and from the LLM alike; a large query is announced
before it runs (the run's "estimate" step, shown on the run page)."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from rest_framework.test import APIClient

from askdb import selectors
from askdb.models import Question, Run
from askdb.outcomes import run_outcome
from askdb.services.examples import example_upsert
from askdb.services.long_queries import LongQueryError, long_query_start
from infra import embedded
from infra.adapters.clinical import PostgresExecutor, _parametrized
from infra.audit.models import AuditEvent
from tests.askdb.test_offline_answering import ask as ask_library
from tests.askdb.test_offline_answering import clinical_rows
from tests.askdb.test_pipeline import answerable, ask, script_sql
from tests.celery_worker import running_worker, wait_for
from tests.factories import make_user

pytestmark = pytest.mark.django_db

PAIRS = "SELECT count(*) FROM mimiciv_hosp.labevents a, mimiciv_hosp.labevents b WHERE a.subject_id = {id}"


@pytest.fixture
def llm(scripted_llm):
    return scripted_llm


@pytest.fixture
def lab_rows(source):
    return clinical_rows("SELECT count(*) FROM mimiciv_hosp.labevents")[0][0]


def _reads(n: int) -> str:
    from core.estimate import about

    return f"reads about {about(n)} rows of labevents"


def test_a_library_answer_that_runs_out_of_time_on_postgresql_says_how_big_it_is(source, lab_rows, settings):
    ids = [r[0] for r in clinical_rows("SELECT subject_id FROM mimiciv_hosp.patients ORDER BY 1 LIMIT 2")]
    example_upsert(source=source, question=f"how many lab result pairs does patient {ids[0]} have?",
                   sql=PAIRS.format(id=ids[0]), approved_by=make_user("rev", "reviewer"))  # fmt: skip
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.05
    run = ask_library(source, f"How many lab result pairs does patient {ids[1]} have?")

    assert (run.status, run.outcome) == ("failed", "timeout"), run.message
    assert run.message.startswith(
        f"This question {_reads(lab_rows)}, which the planner expects to become about"
    )
    assert "and needed more than 0.05 s (the statement timeout), so it was stopped" in run.message
    assert "No reviewer-verified example" not in run.message and run_outcome(run).sentence == run.message


def test_an_llm_answer_that_runs_out_of_time_on_postgresql_says_how_big_it_is(
    source, llm, lab_rows, settings
):
    settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.05
    answerable(llm)
    script_sql(llm, "SELECT count(*) FROM mimiciv_hosp.labevents a, mimiciv_hosp.labevents b")
    run = ask("How many lab pairs are there?", source)
    assert (run.status, run.outcome) == ("failed", "timeout"), run.message
    assert run.message.startswith(
        f"This question {_reads(lab_rows)}, which the planner expects to become about"
    )


@pytest.fixture
def sqlite_source(tmp_path, settings):
    from metadata_admin.services import source_introspect, source_register, table_docs_reembed

    path = tmp_path / "labs.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE labevents (labevent_id INTEGER PRIMARY KEY, subject_id INTEGER, valuenum REAL)"
        )
        conn.executemany(
            "INSERT INTO labevents VALUES (?, ?, ?)", [(i, i % 10, i * 0.5) for i in range(6000)]
        )
    source = source_register(name="labs", url=f"sqlite:///{path}")
    source_introspect(source=source)
    table_docs_reembed(source=source)
    settings.ASKDB_SIMILARITY_FLOOR = 0.0
    return source


def test_an_llm_answer_that_runs_out_of_time_on_sqlite_says_how_big_it_is(sqlite_source, llm, settings):
    settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.05
    answerable(llm)
    script_sql(llm, "SELECT count(*) FROM labevents a, labevents b, labevents c")
    run = ask("How many lab triples are there?", sqlite_source)
    assert (run.status, run.outcome) == ("failed", "timeout"), run.message
    assert run.message.startswith(
        "This question reads about 6,000 rows of labevents and needed more than 0.05 s (the statement timeout)"
    )


def test_a_library_answer_that_runs_out_of_time_on_sqlite_says_so_not_no_match(sqlite_source, settings):
    sql = "SELECT count(*) FROM labevents a, labevents b WHERE a.subject_id = {id}"
    example_upsert(source=sqlite_source, question="how many lab result pairs does patient 3 have?",
                   sql=sql.format(id=3), approved_by=make_user("rev", "reviewer"))  # fmt: skip
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.01
    run = ask_library(sqlite_source, "How many lab result pairs does patient 7 have?")
    assert (run.status, run.outcome) == ("failed", "timeout"), run.message
    assert run.message.startswith(
        "This question reads about 6,000 rows of labevents and needed more than 0.01 s"
    )
    assert run.library_match["answered"] is False and "7" in run.sql


def test_a_large_query_is_announced_on_the_run_page_before_it_runs(source, llm, client, lab_rows, settings):
    settings.ASKDB_LARGE_QUERY_ROWS = 1  # every table counts as large: the planner decides
    settings.ASKDB_LARGE_QUERY_COST = 1.0
    answerable(llm)
    script_sql(llm, "SELECT count(*) AS n FROM mimiciv_hosp.labevents")
    run = ask("How many lab results are there?", source)
    assert run.outcome == "answered", run.message
    names = list(run.stages.values_list("name", flat=True))
    assert (
        names.index("estimate") == names.index("execute") + 1
    )  # said within the execute step, before the query
    estimate = run.stages.get(name="estimate").detail
    assert estimate["basis"] == "planner" and estimate["planner_cost"] >= 1.0
    assert estimate["sentence"] == f"This question {_reads(lab_rows)}: it may take a while."
    client.force_login(run.question.user)
    assert estimate["sentence"] in client.get(f"/runs/{run.pk}/").content.decode()


def test_a_large_query_on_sqlite_is_announced_from_the_table_sizes(sqlite_source, llm, settings):
    settings.ASKDB_LARGE_QUERY_ROWS = 5000  # labevents' 6,000 rows count as large here
    answerable(llm)
    script_sql(llm, "SELECT count(*) AS n FROM labevents")
    run = ask("How many lab results are there?", sqlite_source)
    assert run.outcome == "answered", run.message
    estimate = run.stages.get(name="estimate").detail
    assert estimate["basis"] == "table sizes" and estimate["planner_cost"] is None
    assert estimate["sentence"] == "This question reads about 6,000 rows of labevents: it may take a while."


def test_a_small_query_over_a_small_table_is_not_planned_nor_announced(source, llm, settings):
    answerable(llm)
    script_sql(llm, "SELECT count(*) AS n FROM mimiciv_hosp.patients")
    run = ask("How many patients are there?", source)
    assert run.outcome == "answered" and not run.stages.filter(name="estimate").exists()
    assert not AuditEvent.objects.filter(action="sql.explained", detail__purpose="estimate").exists()


def test_the_planner_never_sees_a_constant_so_nothing_folds_into_a_huge_plan(source):
    """The attack on the estimate: a constant the planner would fold into 500 MB of plan text."""
    sql = "SELECT count(*) FROM mimiciv_hosp.patients WHERE gender = repeat('x', 500000000) AND anchor_age > 60 - 5"
    text = _parametrized(sql)
    assert "'" not in text and "500000000" not in text and "$1" in text and "$3" in text
    rows, cost = PostgresExecutor(embedded.pg_dsn(embedded.CLINICAL_DB)).plan(sql, timeout_s=5)
    assert rows >= 0 and cost > 0
    # an interval stays a literal (INTERVAL $1 is no syntax) and still plans
    rows, cost = PostgresExecutor(embedded.pg_dsn(embedded.CLINICAL_DB)).plan(
        "SELECT count(*) FROM mimiciv_hosp.admissions WHERE admittime > dischtime - INTERVAL '1 day'",
        timeout_s=5,
    )
    assert cost > 0


# -- run as a long query ---------------------------------------------------------------------

TRIPLES = (
    "SELECT count(*) AS n FROM mimiciv_hosp.labevents a, mimiciv_hosp.labevents b, mimiciv_hosp.labevents c"
)


def timed_out_run(source, user, sql: str) -> Run:
    question = Question.objects.create(user=user, source=source, text="How many lab result pairs are there?")
    return Run.objects.create(question=question, status="failed", outcome="timeout", sql=sql,
                              message="This question's query needed more than 30 s")  # fmt: skip


def test_only_the_asker_with_the_right_may_start_a_long_query_of_a_timed_out_run(source, client):
    researcher = make_user("rita", "researcher")
    run = timed_out_run(source, researcher, PAIRS.format(id=1))
    answered = Run.objects.create(question=run.question, status="succeeded", outcome="answered", sql=run.sql)
    aggregate = make_user("agnes", "aggregate_researcher")
    mine_but_aggregate = timed_out_run(source, aggregate, PAIRS.format(id=1))
    for user, target, why in (
        (aggregate, mine_but_aggregate, "Your role may not run long queries"),
        (researcher, answered, "Only a question whose query ran out of time"),
        (make_user("rex", "reviewer"), run, "Only the person who asked"),
    ):
        with pytest.raises(LongQueryError, match=why):
            long_query_start(run=target, user=user)
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="long-query-start"' in page
    assert 'id="long-query-start"' not in client.get(f"/runs/{answered.pk}/").content.decode()
    client.force_login(aggregate)
    assert 'id="long-query-start"' not in client.get(f"/runs/{mine_but_aggregate.pk}/").content.decode()
    response = client.post(f"/runs/{mine_but_aggregate.pk}/long/", follow=True)
    assert "Your role may not run long queries" in response.content.decode()
    assert not Run.objects.filter(long_query_of__isnull=False).exists()
    # the API: the same rules, as status codes
    api = APIClient()
    api.force_authenticate(aggregate)
    assert api.post(f"/api/runs/{mine_but_aggregate.pk}/long-query/").status_code == 403
    api.force_authenticate(researcher)
    refused = api.post(f"/api/runs/{answered.pk}/long-query/")
    assert refused.status_code == 409 and "ran out of time" in refused.json()["error"]
    queued = api.post(f"/api/runs/{run.pk}/long-query/")
    assert queued.status_code == 202, queued.json()
    detail = api.get(queued.json()["url"]).json()
    assert (
        detail["long_query_of"] == run.pk and detail["time_limit_s"] == 600 and detail["status"] == "queued"
    )
    again = api.post(f"/api/runs/{run.pk}/long-query/")
    assert again.status_code == 409 and "already have a long query going" in again.json()["error"]


def _clinical_statement_running() -> bool:
    """A statement is running on the clinical database (the long query's FETCH), other than this one."""
    rows = clinical_rows(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    return rows[0][0] > 0


def _ended(run: Run) -> Run | None:
    return Run.objects.filter(pk=run.pk, status__in=Run.TERMINAL).first()


@pytest.mark.django_db(transaction=True)
def test_a_long_query_runs_in_a_worker_answers_is_followed_cancelled_and_times_out(source, client, settings):
    """One worker for the three ways a long query ends (starting one costs seconds)."""
    settings.ASKDB_LONG_QUERY_TIMEOUT_S = 600  # the cross join would run for minutes
    user = make_user("rita", "researcher")
    subject = clinical_rows("SELECT subject_id FROM mimiciv_hosp.patients ORDER BY 1 LIMIT 1")[0][0]
    pairs, triples = (
        timed_out_run(source, user, PAIRS.format(id=subject)),
        timed_out_run(source, user, TRIPLES),
    )
    client.force_login(user)
    with running_worker():
        # started from the page of the timed-out run, it answers with the higher limit
        response = client.post(f"/runs/{pairs.pk}/long/")
        answered = Run.objects.get(long_query_of=pairs)
        assert response.status_code == 302 and response["Location"] == f"/runs/{answered.pk}/"
        assert answered.time_limit_s == 600 and answered.sql == pairs.sql
        answered = wait_for(lambda: _ended(answered), timeout=60)

        # followed while it runs (elapsed time, polled), then cancelled on the database
        client.post(f"/runs/{triples.pk}/long/")
        cancelled = Run.objects.get(long_query_of=triples)
        wait_for(_clinical_statement_running, timeout=30, message="the statement never started")
        live = client.get(f"/runs/{cancelled.pk}/", headers={"HX-Request": "true", "HX-Target": "run-live"})
        text = live.content.decode()
        assert 'hx-trigger="every 1s"' in text and "s so far of at most 600 s" in text and "Cancel" in text
        client.post(f"/runs/{cancelled.pk}/cancel/")
        wait_for(lambda: AuditEvent.objects.filter(action="run.long_query_cancelled").exists(), timeout=30,
                 message="the worker never stopped the statement")  # fmt: skip
        assert not _clinical_statement_running()  # stopped on the database, not only on the page

        # out of even the longer limit: said as such, with the limit and the size
        settings.ASKDB_LONG_QUERY_TIMEOUT_S = 0.5
        timed_out = long_query_start(run=triples, user=user)
        timed_out = wait_for(lambda: _ended(timed_out), timeout=60)

    assert (answered.status, answered.outcome) == ("succeeded", "answered"), answered.message
    assert answered.result_rows == [[clinical_rows(PAIRS.format(id=subject))[0][0]]]
    assert answered.message.startswith("Answered by a long query in ")
    page = client.get(f"/runs/{answered.pk}/").content.decode()
    assert 'id="long-query"' in page and f"run {pairs.pk}</a>, which ran out of time" in page
    page = client.get(f"/runs/{pairs.pk}/").content.decode()  # the timed-out run links to it
    assert 'id="long-query-latest"' in page and f"run {answered.pk}</a> (answered)" in page
    actions = set(AuditEvent.objects.filter(target_id=str(answered.pk)).values_list("action", flat=True))
    assert {"run.long_query_started", "run.succeeded"} <= actions, actions
    assert AuditEvent.objects.filter(action="sql.executed", detail__purpose="long_query").exists()

    assert Run.objects.get(pk=cancelled.pk).status == "cancelled"
    assert AuditEvent.objects.filter(action="run.cancelled", target_id=str(cancelled.pk)).exists()

    assert (timed_out.status, timed_out.outcome) == ("failed", "timeout")
    assert "rows of labevents and needed more than 0.5 s (the long-query limit)" in timed_out.message
    said = run_outcome(timed_out)
    assert (
        said.label == "Failed: the long query took too long"
        and "ASKDB_LONG_QUERY_TIMEOUT_S" in said.next_step
    )
    assert selectors.long_query_allowed(run=timed_out, user=user) != ""  # not again, at the same limit


def test_a_sqlite_statement_is_interrupted_by_a_cancel(sqlite_source):
    from infra.adapters.clinical import ExecutionError, SqliteExecutor

    executor = SqliteExecutor(sqlite_source.url.split("sqlite:///", 1)[1])
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(ExecutionError) as caught:
        executor.execute("SELECT count(*) FROM labevents a, labevents b, labevents c", timeout_s=600, row_cap=1,
                         cancel=cancel)  # fmt: skip
    assert caught.value.code == "cancelled"
