"""Aggregate-only access against a user who tries (issue 24): the attacker's SQL comes from the
scripted LLM (what any user can prompt a real LLM to write), on the PostgreSQL demo source and on
a SQLite copy of it, and every channel is checked: the run page, both CSV routes, XLSX, the API
and the summary request sent to the LLM. Each attempt is refused with a sentence, or answered
with every row behind fewer than k patients hidden whole."""

from __future__ import annotations

import csv
import io
import sqlite3

import pytest
from openpyxl import load_workbook
from rest_framework.test import APIClient

from askdb.models import Run
from askdb.roles import AGGREGATE_RESEARCHER, REVIEWER
from askdb.services.reviews import review_correct
from askdb.services.runs import question_submit_sync
from askdb.services.sql import ReviewError
from metadata_admin.models import ColumnDoc
from metadata_admin.services import source_executor
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

GATE = "You screen questions"
WRITE = "You write one"
SUMMARY = "You explain the result"

# The attempts of the issue, written once with {p} (patients) and {a} (admissions); "pg" marks
# PostgreSQL-only syntax. All must be refused.
REFUSED = [
    ("group by id", "SELECT max(subject_id), max(anchor_age), max(gender) FROM {p} GROUP BY subject_id", ""),
    ("json_agg", "SELECT json_agg(subject_id) FROM {p}", "pg"),
    ("json_group_array", "SELECT json_group_array(subject_id) FROM {p}", "sqlite"),
    ("json_object_agg", "SELECT json_object_agg(subject_id, anchor_age) FROM {p}", "pg"),
    ("array_agg", "SELECT gender, array_agg(subject_id) FROM {p} GROUP BY gender", "pg"),
    ("string_agg", "SELECT gender, string_agg(CAST(anchor_age AS TEXT), ',') FROM {p} GROUP BY gender", "pg"),
    ("group_concat", "SELECT gender, group_concat(subject_id) FROM {p} GROUP BY gender", "sqlite"),
    ("percentile_disc", "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY subject_id) FROM {p}", "pg"),
    ("mode", "SELECT mode() WITHIN GROUP (ORDER BY subject_id) FROM {p}", "pg"),
    (
        "window",
        "SELECT sum(subject_id) OVER (ROWS BETWEEN CURRENT ROW AND CURRENT ROW) AS s, count(*) OVER () AS n FROM {p}",
        "",
    ),
    ("case on id", "SELECT sum(CASE WHEN subject_id = 10000032 THEN anchor_age END) AS age FROM {p}", ""),
    ("union ids", "SELECT count(*) AS n FROM {p} UNION ALL SELECT subject_id FROM {p}", ""),
    ("cte column list", "WITH t(k) AS (SELECT subject_id FROM {p}) SELECT max(k) AS m FROM t GROUP BY k", ""),
    ("subquery rename", "SELECT max(x) AS m FROM (SELECT subject_id AS x FROM {p}) s GROUP BY x", ""),
    ("subquery column list", "SELECT max(k) AS m FROM (SELECT subject_id FROM {p}) AS s(k) GROUP BY k", "pg"),
    ("u& escape", 'SELECT max(U&"\\0073ubject_id") AS m FROM {p} GROUP BY U&"\\0073ubject_id"', "pg"),
    ("count plus 0", "SELECT anchor_year_group, count(*)+0 AS n FROM {p} GROUP BY anchor_year_group", ""),
    ("negated count", "SELECT anchor_year_group, -count(*) AS n FROM {p} GROUP BY anchor_year_group", ""),
    (
        "count as text",
        "SELECT anchor_year_group, CAST(count(*) AS TEXT) AS n FROM {p} GROUP BY anchor_year_group",
        "",
    ),
    ("count filter", "SELECT count(*) FILTER (WHERE anchor_year_group = '2008 - 2010') AS n FROM {p}", ""),
    ("hidden group by id", "SELECT count(*) AS n FROM {a} GROUP BY subject_id", ""),
    ("filter to an id", "SELECT max(anchor_age) AS age FROM {p} WHERE subject_id = 10000032", ""),
    ("filter to ids", "SELECT avg(anchor_age) AS age FROM {p} WHERE subject_id IN (10000032, 10001217)", ""),
    ("range of ids", "SELECT avg(anchor_age) AS age FROM {p} WHERE subject_id < 10002000", ""),
    ("scalar subquery", "SELECT (SELECT max(subject_id) FROM {p}) AS m, count(*) AS n FROM {p}", ""),
    ("whole row", "SELECT count(p) AS n FROM {p} p", "pg"),
    ("max of id", "SELECT gender, max(subject_id) AS m FROM {p} GROUP BY gender", ""),
    ("sqlite max of two", "SELECT max(anchor_age, 0) AS m FROM {p}", "sqlite"),
    ("listing", "SELECT subject_id, anchor_age FROM {p}", ""),
]


def ask(llm, user, sql: str, source, text: str = "How many patients?") -> Run:
    llm.when(GATE, Reply('{"category": "answerable", "reason": "in the data"}'))
    llm.when(WRITE, Reply(f"```sql\n{sql}\n```"), times=1)
    llm.when(SUMMARY, Reply("Summary."))
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def content(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def summaries(llm) -> list[str]:
    return ["\n".join(m["content"] for m in r) for r in llm.chat_requests() if SUMMARY in r[0]["content"]]


@pytest.fixture
def sqlite_source(source, tmp_path, settings):
    """The demo's patients and admissions copied into a SQLite file, registered as an
    aggregate-only source with dod marked sensitive, as the PostgreSQL one is."""
    from metadata_admin.services import source_introspect, source_register, table_docs_reembed

    executor = source_executor(source)
    path = tmp_path / "demo.sqlite"
    with sqlite3.connect(path) as conn:
        for table, columns in (
            ("patients", "subject_id, gender, anchor_age, anchor_year_group, dod"),
            ("admissions", "subject_id, hadm_id, admission_type, hospital_expire_flag"),
        ):
            rows = executor.execute(
                f"SELECT {columns} FROM mimiciv_hosp.{table}", timeout_s=30, row_cap=100_000
            ).rows
            conn.execute(f"CREATE TABLE {table} ({columns})")
            marks = ", ".join("?" for _ in columns.split(","))
            conn.executemany(
                f"INSERT INTO {table} VALUES ({marks})",
                [[str(v) if hasattr(v, "isoformat") else v for v in r] for r in rows],
            )
    lite = source_register(name="demo-lite", url=f"sqlite:///{path}")
    source_introspect(source=lite)
    table_docs_reembed(source=lite)
    ColumnDoc.objects.filter(table__source=lite, table__name="patients", name="dod").update(sensitive=True)
    lite.aggregate_only = True
    lite.save(update_fields=["aggregate_only"])
    settings.ASKDB_SIMILARITY_FLOOR = 0.0
    return lite


def _sources(source, sqlite_source):
    return {
        "pg": (source, {"p": "mimiciv_hosp.patients", "a": "mimiciv_hosp.admissions"}),
        "sqlite": (sqlite_source, {"p": "patients", "a": "admissions"}),
    }


def test_every_attempt_is_refused_on_postgresql_and_sqlite(client, source, sqlite_source, scripted_llm):
    agatha = make_user("agatha", AGGREGATE_RESEARCHER)
    api = APIClient()
    api.force_login(agatha)
    client.force_login(agatha)
    tried = 0
    for name, (src, names) in _sources(source, sqlite_source).items():
        for label, template, only in REFUSED:
            if only and only != name:
                continue
            tried += 1
            before = len(summaries(scripted_llm))
            run = ask(scripted_llm, agatha, template.format(**names), src)
            assert run.status == Run.Status.DECLINED, (name, label, run.status, run.message, run.result_rows)
            assert run.outcome.startswith("privacy_"), (name, label, run.outcome, run.message)
            assert run.message.startswith(("Your role may see only aggregated results", "This query reads sensitive")), (
                name, label, run.message,
            )  # fmt: skip
            assert run.result_rows == [] and run.row_count in (None, 0)
            assert len(summaries(scripted_llm)) == before, (name, label, "the LLM was asked to summarise")
            body = content(client.get(f"/runs/{run.pk}/result.csv"))
            assert "10000032" not in body and len(body.strip().splitlines()) <= 1, (name, label, body)
            data = api.get(f"/api/runs/{run.pk}/").json()
            assert not (data.get("result") or {}).get("rows"), (name, label, data)
    assert tried >= 44  # 22+ attempts on each source


def _people_per_group(executor_sql_rows) -> dict:
    return {row[0]: row[1] for row in executor_sql_rows}


def test_small_groups_are_hidden_whole_on_every_channel(client, source, sqlite_source, scripted_llm):
    agatha = make_user("agatha", AGGREGATE_RESEARCHER)
    api = APIClient()
    api.force_login(agatha)
    client.force_login(agatha)
    truth = (
        source_executor(source)
        .execute(
            "SELECT anchor_year_group, count(DISTINCT subject_id), avg(anchor_age) FROM mimiciv_hosp.patients "
            "GROUP BY anchor_year_group",
            timeout_s=30,
            row_cap=100,
        )
        .rows
    )
    small = {g for g, n, _ in truth if n < 11}
    large = {g for g, n, _ in truth if n >= 11}
    assert small and large  # the demo data has both
    for name, (src, names) in _sources(source, sqlite_source).items():
        sql = (
            "SELECT anchor_year_group, avg(anchor_age) AS mean_age FROM {p} GROUP BY anchor_year_group "
            "ORDER BY max(subject_id)"  # ordering by a hidden value is dropped, not kept
        ).format(**names)
        run = ask(scripted_llm, agatha, sql, src, text="Mean age per year group?")
        assert run.status == Run.Status.SUCCEEDED, (name, run.message)
        assert run.result_columns == ["anchor_year_group", "mean_age"]  # the people count is not shown
        shown = {row[0] for row in run.result_rows if row[0] != "<11"}
        hidden = [row for row in run.result_rows if row[0] == "<11"]
        assert shown <= large and all(row == ["<11", "<11"] for row in hidden)
        assert len(hidden) >= len(small) and run.privacy["rows_hidden"] == len(hidden)
        small_means = {round(float(m), 6) for g, _, m in truth if g in small}

        def leaks(text: str, small_means=small_means) -> list:
            return [m for m in small_means if str(m)[:6] in text] + [g for g in small if g in text]

        prompt = summaries(scripted_llm)[-1]
        assert not leaks(prompt) and "askdb_people" not in prompt, (name, prompt)
        page = client.get(f"/runs/{run.pk}/").content.decode()
        assert "&lt;11" in page and "askdb_people" not in page and not [g for g in small if g in page]
        body = content(client.get(f"/runs/{run.pk}/result.csv"))
        assert not leaks(body) and "askdb_people" not in body
        rows = list(csv.reader(io.StringIO(body)))
        assert rows[0] == ["Anchor year group", "Average age"]  # labels; the people count is not shown
        sheet = load_workbook(
            io.BytesIO(b"".join(client.get(f"/runs/{run.pk}/result.xlsx").streaming_content))
        )["result"]
        xlsx = [list(r) for r in sheet.iter_rows(values_only=True)]
        assert ["<11", "<11"] in xlsx and not [g for g in small if any(g == c for r in xlsx for c in r)]
        data = api.get(f"/api/runs/{run.pk}/").json()
        assert data["result"]["columns"] == ["anchor_year_group", "mean_age"]
        assert not [g for g in small if any(g == c for r in data["result"]["rows"] for c in r)]
        api_csv = content(api.get(f"/api/runs/{run.pk}/result.csv"))
        assert not leaks(api_csv) and "askdb_people" not in api_csv


def test_a_hidden_group_by_subject_id_row_count_is_a_count_of_people(source, sqlite_source, scripted_llm):
    agatha = make_user("agatha", AGGREGATE_RESEARCHER)
    executor = source_executor(source)
    cohort = "SELECT subject_id FROM {a} GROUP BY subject_id HAVING count(*) > %d"

    def truth(n: int) -> int:
        sql = f"SELECT count(*) FROM ({cohort % n}) s".format(a="mimiciv_hosp.admissions")
        return executor.execute(sql, timeout_s=30, row_cap=1).rows[0][0]

    # Patients with more than n admissions, for the smallest n that leaves fewer than 11 of them.
    n = next(n for n in range(1, 30) if 0 < truth(n) < 11)
    for _name, (src, names) in _sources(source, sqlite_source).items():
        run = ask(scripted_llm, agatha, f"SELECT count(*) AS n FROM ({cohort % n}) s".format(**names), src)
        assert run.status == Run.Status.SUCCEEDED, run.message
        assert run.result_rows == [["<11"]]


def test_accepted_aggregates_are_answered(source, sqlite_source, scripted_llm):
    agatha = make_user("agatha", AGGREGATE_RESEARCHER)
    for name, (src, names) in _sources(source, sqlite_source).items():
        run = ask(
            scripted_llm, agatha,
            "SELECT gender, count(DISTINCT subject_id) AS patients, round(avg(anchor_age), 1) AS age "
            "FROM {p} WHERE anchor_age > 18 GROUP BY gender ORDER BY patients DESC".format(**names), src,
        )  # fmt: skip
        assert run.status == Run.Status.SUCCEEDED, (name, run.message[150:300])
        assert len(run.result_rows) == 2 and all(
            isinstance(r[1], int) and r[1] >= 11 for r in run.result_rows
        )


def test_a_sensitive_column_is_refused_to_an_aggregate_researcher_even_in_an_aggregate(
    source, sqlite_source, scripted_llm
):
    agatha = make_user("agatha", AGGREGATE_RESEARCHER)
    for name, (src, names) in _sources(source, sqlite_source).items():
        run = ask(scripted_llm, agatha, "SELECT max(dod) AS last_death FROM {p}".format(**names), src)
        assert run.status == Run.Status.DECLINED and run.outcome == "privacy_sensitive_column", (
            name,
            run.message,
        )
        assert not summaries(scripted_llm) or "last_death" not in summaries(scripted_llm)[-1]


def test_a_reviewer_correction_follows_the_fragment_for_the_person_who_asked(source, scripted_llm):
    agatha = make_user("agatha", AGGREGATE_RESEARCHER)
    run = ask(
        scripted_llm,
        agatha,
        "SELECT gender, count(*) AS n FROM mimiciv_hosp.patients GROUP BY gender",
        source,
    )
    assert run.status == Run.Status.SUCCEEDED, run.message
    reviewer = make_user("rev", REVIEWER)
    with pytest.raises(ReviewError, match="may see only aggregated results"):
        review_correct(
            run=run, reviewer=reviewer,
            sql="SELECT json_agg(subject_id) AS ids FROM mimiciv_hosp.patients",
        )  # fmt: skip
    review_correct(
        run=run, reviewer=reviewer,
        sql="SELECT anchor_year_group, count(*) AS n FROM mimiciv_hosp.patients GROUP BY anchor_year_group",
    )  # fmt: skip
    run.refresh_from_db()
    assert run.result_columns == ["anchor_year_group", "n"]
    assert all((isinstance(n, int) and n >= 11) or n == "<11" for _, n in run.result_rows)
    assert any(row == ["<11", "<11"] for row in run.result_rows)
