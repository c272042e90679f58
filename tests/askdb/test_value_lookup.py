"""Value lookups that scale: a question's values are looked up in the distinct-value table the
loader keeps (metadata_admin LinkableValue), not by scanning the clinical event tables; a reload
refreshes the table; a lookup or check that runs out of time says so in the run's match stage."""

from __future__ import annotations

import contextlib
import sqlite3

import psycopg
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from askdb.adapters.library_cache import LIBRARY, values_load
from askdb.adapters.ports import DjangoPorts, source_probe, value_lookup
from askdb.models import Run, StageEvent
from askdb.services.examples import example_upsert
from askdb.services.runs import question_submit_sync
from metadata_admin.models import LinkableValue
from metadata_admin.services import (
    clinical_source_refresh,
    linkable_values_build,
    source_executor,
    source_introspect,
    source_register,
)
from tests.factories import make_user

pytestmark = pytest.mark.django_db

NEW_DRUG = "Zorblatin"  # in no synthetic data: it arrives with a reload


class CountingExecutor:
    """The source's executor, counting the statements sent to the clinical database."""

    def __init__(self, inner):
        self.inner, self.statements = inner, []

    def execute(self, sql, **kwargs):
        self.statements.append(sql)
        return self.inner.execute(sql, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _a_drug(source) -> str:
    return (
        LinkableValue.objects.filter(source=source, key="prescriptions.drug")
        .order_by("-frequency")
        .first()
        .value
    )


@contextlib.contextmanager
def locked(table: str, *, dsn: str | None = None):
    """Another session holds `table` exclusively: a read of it waits (until its statement timeout)."""
    if dsn is None:
        params = connection.get_connection_params()
        keys = ("dbname", "user", "password", "host", "port")
        conn = psycopg.connect(**{k: params[k] for k in keys if params.get(k)})
    else:
        conn = psycopg.connect(dsn)
    with conn:
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE NOWAIT")
        try:
            yield
        finally:
            conn.rollback()


def test_a_lookup_reads_the_value_table_not_the_clinical_table(source):
    drug = _a_drug(source)
    executor = CountingExecutor(source_executor(source))
    with CaptureQueriesContext(connection) as app_queries:
        found = value_lookup(source, executor, "mimiciv_hosp.prescriptions.drug", drug.lower())
    assert found[0] == (drug, 1.0)
    assert executor.statements == []  # no ILIKE … GROUP BY over prescriptions
    assert any("metadata_admin_linkablevalue" in q["sql"] for q in app_queries.captured_queries)
    # and the matcher's value index is one read of the same table
    with CaptureQueriesContext(connection):
        index, problems = values_load(source, executor)
    assert executor.statements == [] and problems == ()
    assert index.covers("mimiciv_hosp.prescriptions.drug")


def test_the_lookup_is_served_by_the_trigram_index(source):
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # the demo's table is small: ask what it could use
        cur.execute(
            "EXPLAIN SELECT value FROM metadata_admin_linkablevalue WHERE value ILIKE %s", ["%aceta%"]
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "metadata_admin_linkablevalue_trgm" in plan, plan


def test_a_reload_refreshes_the_value_table(source):
    column = "mimiciv_hosp.prescriptions.drug"
    assert value_lookup(source, source_executor(source), column, NEW_DRUG) == []
    dsn = django_settings.CLINICAL_ADMIN_DATABASE_URL
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mimiciv_hosp.prescriptions (subject_id, hadm_id, pharmacy_id, drug_type, drug) "
            "SELECT subject_id, hadm_id, pharmacy_id, drug_type, %s FROM mimiciv_hosp.prescriptions LIMIT 2",
            [NEW_DRUG],
        )
    try:
        clinical_source_refresh()  # what load_mimic runs after loading
        assert value_lookup(source, source_executor(source), column, NEW_DRUG.lower()) == [(NEW_DRUG, 1.0)]
        kept = LinkableValue.objects.get(source=source, key="prescriptions.drug", value=NEW_DRUG)
        assert kept.frequency == 2
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM mimiciv_hosp.prescriptions WHERE drug = %s", [NEW_DRUG])
        clinical_source_refresh()
    assert not LinkableValue.objects.filter(source=source, value=NEW_DRUG).exists()


def test_a_lookup_that_runs_out_of_time_says_so(source, settings):
    settings.ASKDB_VALUE_LOOKUP_TIMEOUT_S = 0.3
    problems: list[str] = []
    with locked("metadata_admin_linkablevalue"):
        found = value_lookup(source, source_executor(source), "mimiciv_hosp.prescriptions.drug", "acet",
                             problems=problems)  # fmt: skip
    assert found == []
    assert problems == [
        "looking up 'acet' in mimiciv_hosp.prescriptions.drug ran out of time (ASKDB_VALUE_LOOKUP_TIMEOUT_S = 0.3 s)"
    ]


def test_the_ports_report_a_lookup_timeout_to_the_run(source, settings):
    settings.ASKDB_VALUE_LOOKUP_TIMEOUT_S = 0.25
    ports = DjangoPorts(source, chat=None, timeout_s=5, row_cap=10)
    with locked("metadata_admin_linkablevalue"):
        assert ports.lookup_value("mimiciv_hosp.prescriptions.drug", "acet") == []
    assert ports.value_problems() and "ran out of time" in ports.value_problems()[0]


def test_a_probe_that_runs_out_of_time_says_so(source, settings):
    settings.ASKDB_PROBE_TIMEOUT_S = 0.3
    problems: list[str] = []
    sql = "SELECT 1 FROM mimiciv_hosp.prescriptions WHERE drug = 'x' LIMIT 1"
    with locked("mimiciv_hosp.prescriptions", dsn=django_settings.CLINICAL_ADMIN_DATABASE_URL):
        assert source_probe(source_executor(source), sql, problems=problems) is False
    assert (
        len(problems) == 1 and "(timeout)" in problems[0] and "ASKDB_PROBE_TIMEOUT_S = 0.3 s" in problems[0]
    )


def test_a_column_the_loader_keeps_nothing_of_is_scanned_and_named(source):
    LinkableValue.objects.filter(source=source, key="prescriptions.drug").delete()  # an older load
    executor = CountingExecutor(source_executor(source))
    problems: list[str] = []
    drug_rows = executor.inner.execute(
        "SELECT drug FROM mimiciv_hosp.prescriptions WHERE drug IS NOT NULL LIMIT 1", timeout_s=5, row_cap=1
    )
    drug = drug_rows.rows[0][0]
    found = value_lookup(source, executor, "mimiciv_hosp.prescriptions.drug", drug, problems=problems)
    assert found[0] == (drug, 1.0) and len(executor.statements) == 1
    assert problems == [
        "mimiciv_hosp.prescriptions.drug: no values kept by the loader (run load_mimic or reembed); scanned the column"
    ]
    _, load_problems = values_load(source, executor)
    assert any(p.startswith("mimiciv_hosp.prescriptions.drug: no values kept") for p in load_problems)


def test_a_sqlite_source_gets_the_same_value_table(tmp_path):
    path = tmp_path / "clinic.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE prescriptions (subject_id INTEGER, drug TEXT)")
        conn.executemany(
            "INSERT INTO prescriptions VALUES (?, ?)", [(1, "Heparin"), (2, "Heparin"), (3, "Insulin")]
        )
    source = source_register(name="clinic", url=f"sqlite:///{path}")
    source_introspect(source=source)
    report = linkable_values_build(source=source)
    assert report.columns == ["prescriptions.drug"] and not report.failed
    executor = CountingExecutor(source_executor(source))
    [(value, score)] = value_lookup(source, executor, "prescriptions.drug", "hepa")
    assert value == "Heparin" and score < 1.0  # contains the text: a fuzzy score, not an exact one
    assert value_lookup(source, executor, "prescriptions.drug", "insulin") == [("Insulin", 1.0)]
    assert executor.statements == []
    assert LinkableValue.objects.get(source=source, value="Heparin").frequency == 2


def test_a_run_whose_value_lookup_ran_out_of_time_says_so_in_its_match_stage(source, settings):
    """End to end: the library has a template for the question, the column's values are not kept
    (an older load), and the clinical table is busy: the run's match stage names the lookup that
    ran out of time instead of reading it as "no such drug"."""
    settings.LLM_MODEL = ""
    settings.ASKDB_VALUE_LOOKUP_TIMEOUT_S = settings.ASKDB_PROBE_TIMEOUT_S = 0.3
    settings.ASKDB_VALUE_SCAN_TIMEOUT_S = settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.3
    reviewer = get_user_model().objects.filter(username="vl-rev").first() or make_user("vl-rev", "reviewer")
    example_upsert(source=source, question="how many prescriptions of Acetaminophen are there?",
                   sql="SELECT count(*) AS n FROM mimiciv_hosp.prescriptions WHERE drug = 'Acetaminophen'",
                   approved_by=reviewer)  # fmt: skip
    LinkableValue.objects.filter(source=source, key="prescriptions.drug").delete()
    # An older load that no process has read yet: an earlier test's warm value index (its generation
    # rolled back with it) must not bind the drug without a lookup.
    LIBRARY.clear()
    with locked("mimiciv_hosp.prescriptions", dsn=django_settings.CLINICAL_ADMIN_DATABASE_URL):
        run = question_submit_sync(user=make_user("vl-ask", "researcher"), source=source,
                                   text="how many prescriptions of Docusate Sodium are there?")  # fmt: skip
    run = Run.objects.get(pk=run.pk)
    assert run.answered_by != "library"
    problems = StageEvent.objects.get(run=run, name="match").detail["value_problems"]
    assert any(
        "scanning mimiciv_hosp.prescriptions.drug for 'Docusate Sodium' failed" in p for p in problems
    ), problems
