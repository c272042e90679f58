"""Execute exactly what was validated (issue 24): a carriage return ends a `--` comment for
PostgreSQL but not for SQLite, so SQL after one was never validated; and the privacy analysis read
the raw text while validation read the canonical one. Through the pipeline (the scripted LLM
writing the attacker's SQL), a reviewer's correction and an example import, on the demo source."""

from __future__ import annotations

import pytest

from askdb.models import Example, Run
from askdb.roles import RESEARCHER, REVIEWER
from askdb.services.exports import examples_import
from askdb.services.reviews import review_correct
from askdb.services.runs import question_submit_sync
from askdb.services.sql import ReviewError
from infra.audit.models import AuditEvent
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

GATE = "You screen questions"
WRITE = "You write one"
SUMMARY = "You explain the result"

COUNT = "SELECT gender, count(*) AS n FROM mimiciv_hosp.patients GROUP BY gender"
# After the CR, PostgreSQL reads a second query; an old lexer read a comment to the end.
HIDDEN = [
    f"{COUNT} -- by gender\rUNION ALL SELECT rolname, 1 FROM pg_roles",
    f"{COUNT} --\rUNION ALL SELECT datname, 1 FROM pg_database",
    f"{COUNT} -- x\rUNION ALL SELECT name, 1 FROM pg_settings",
    "SELECT gender -- x\r, pg_sleep(1)::text\nFROM mimiciv_hosp.patients",
]


def ask(llm, user, sql: str, source, text: str = "How many patients of each gender?") -> Run:
    llm.when(GATE, Reply('{"category": "answerable", "reason": "in the data"}'))
    llm.when(WRITE, Reply(f"```sql\n{sql}\n```"))
    llm.when(SUMMARY, Reply("Summary."))
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def summaries(llm) -> list[str]:
    return ["\n".join(m["content"] for m in r) for r in llm.chat_requests() if SUMMARY in r[0]["content"]]


def executed_sql() -> list[str]:
    return [e.detail["sql"] for e in AuditEvent.objects.filter(action="sql.executed")]


@pytest.mark.parametrize("sql", HIDDEN)
def test_sql_after_a_carriage_return_in_a_comment_never_runs_from_the_pipeline(source, scripted_llm, sql):
    run = ask(scripted_llm, make_user("ann", RESEARCHER), sql, source)
    assert run.status == Run.Status.FAILED and run.outcome == "sql_invalid", run.message
    assert "line-break character" in run.message
    assert run.result_rows == [] and not summaries(scripted_llm)
    assert not [s for s in executed_sql() if "pg_" in s]


def test_what_runs_is_generated_from_the_validated_tree(source, scripted_llm):
    run = ask(scripted_llm, make_user("ann", RESEARCHER), f"{COUNT} -- by gender\r\n", source)
    assert run.status == Run.Status.SUCCEEDED, run.message
    assert "--" not in run.sql and "\r" not in run.sql
    assert run.sql == "SELECT gender, COUNT(*) AS n FROM mimiciv_hosp.patients GROUP BY gender"
    # The statement the database received is the generated one, comment-free.
    ran = executed_sql()
    assert ran and all("--" not in s and "\r" not in s for s in ran)


@pytest.mark.parametrize("sql", HIDDEN)
def test_a_reviewer_correction_with_sql_after_a_carriage_return_is_refused(source, scripted_llm, sql):
    run = ask(scripted_llm, make_user("ann", RESEARCHER), COUNT, source)
    with pytest.raises(ReviewError, match="not valid"):
        review_correct(run=run, reviewer=make_user("rev", REVIEWER), sql=sql)
    run.refresh_from_db()
    assert run.review_status != Run.Review.CORRECTED
    assert not [s for s in executed_sql() if "pg_" in s]


def test_import_examples_refuses_sql_after_a_carriage_return_and_stores_only_generated_sql(source):
    items = [
        {"id": f"h{i}", "question": f"How many patients by gender {i}?", "sql": sql}
        for i, sql in enumerate(HIDDEN)
    ]
    items.append(
        {"id": "ok", "question": "How many patients of each gender are there?", "sql": f"{COUNT} -- c\r\n"}
    )
    report = examples_import(source=source, items=items)
    assert sorted(f["id"] for f in report.failed) == [f"h{i}" for i in range(len(HIDDEN))]
    assert all("line-break character" in f["error"] for f in report.failed)
    assert len(report.created) == 1
    stored = Example.objects.get(pk=report.created[0]).sql
    assert "--" not in stored and "\r" not in stored and "pg_" not in stored
    assert not [s for s in executed_sql() if "pg_" in s]


# The sensitive-column leaks of the issue, for a researcher without view_sensitive (dod is
# curated as sensitive in the demo catalog).
LEAKS = [
    ("U& escape", 'SELECT subject_id, U&"\\0064od" FROM mimiciv_hosp.patients'),
    ("row_to_json", "SELECT row_to_json(p) FROM mimiciv_hosp.patients p"),
    ("cast of a row", "SELECT p::text FROM mimiciv_hosp.patients p"),
    ("field of a row", "SELECT (p).dod FROM mimiciv_hosp.patients p"),
    ("cte column list", "WITH t(x) AS (SELECT dod FROM mimiciv_hosp.patients) SELECT x FROM t"),
    (
        "scalar subquery search",
        "SELECT p.subject_id, (SELECT count(*) FROM mimiciv_hosp.patients q WHERE q.subject_id = p.subject_id "
        "AND q.dod < DATE '2180-01-01') AS died_before FROM mimiciv_hosp.patients p",
    ),
    (
        "filter search",
        "SELECT subject_id FROM mimiciv_hosp.patients WHERE dod BETWEEN '2150-01-01' AND '2150-06-30'",
    ),
    ("aggregate of an escape", 'SELECT max(U&"\\0064od") AS last FROM mimiciv_hosp.patients'),
    ("table alias column list", "SELECT p.gender FROM mimiciv_hosp.patients AS p(a, b, c, d, e, gender)"),
]


@pytest.mark.parametrize(("label", "sql"), LEAKS, ids=[label for label, _ in LEAKS])
def test_sensitive_columns_do_not_leak_to_a_researcher_without_the_permission(
    source, scripted_llm, label, sql
):
    run = ask(scripted_llm, make_user("ann", RESEARCHER), sql, source, text="When did the patients die?")
    assert run.status in (Run.Status.DECLINED, Run.Status.FAILED), (label, run.status, run.result_rows[:3])
    assert run.result_rows == []
    assert run.outcome in ("privacy_sensitive_column", "sql_invalid"), (label, run.outcome, run.message)
    assert not summaries(scripted_llm), "the LLM was asked to summarise"
    assert not [s for s in executed_sql() if "dod" in s.lower() or "row_to_json" in s.lower()]
