"""What one question costs the app database, pinned per kind of question (a regression guard, not
a timing): a run reads the user's rights, the catalog's stamp and the library's version once, and
ends in one transaction with the recorder's last rows. And the reads it no longer repeats are
still current: a role or a sensitive flag changed between two questions applies to the second."""

from __future__ import annotations

import sqlite3

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

from askdb.adapters import recorder as recorder_module
from askdb.adapters.ports import DjangoPorts
from askdb.answerability import scorer as answerability_scorer
from askdb.models import Question, Run
from askdb.roles import AGGREGATE_RESEARCHER, RESEARCHER
from askdb.services.examples import example_upsert
from askdb.services.privacy import privacy_policy
from askdb.services.runs import question_submit, run_execute
from core.engine import ExecutionFailure
from metadata_admin.models import ColumnDoc
from metadata_admin.selectors import catalog_snapshot
from tests.askdb.test_offline_answering import GENDER_SQL, clinical_rows
from tests.askdb.test_privacy import SEPSIS_LIST, ask
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

GATE, WRITE, SUMMARY = "You screen questions", "You write one", "You explain the result"


def _statements(source, user, text: str) -> tuple[Run, list[str]]:
    """The run of `text` and the app-database statements run_execute made for it, without the
    test transaction's savepoints (in production each of those is a BEGIN … COMMIT)."""
    run = Run.objects.create(question=Question.objects.create(user=user, source=source, text=text))
    with CaptureQueriesContext(connection) as queries:
        run = run_execute(run_id=run.pk)
    return run, [q["sql"] for q in queries.captured_queries]


def _count(sqls: list[str]) -> tuple[int, int]:
    """(statements, transactions) of a run: a SAVEPOINT opens each of its transactions here."""
    control = [s for s in sqls if s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO"))]
    return len(sqls) - len(control), sum(1 for s in control if s.startswith("SAVEPOINT"))


@pytest.fixture
def quiet_boundaries(monkeypatch):
    """No time-based statements: a cancel look or a heartbeat falls due by the clock (every 0.2 s,
    every 10 s), and so does the gate's look for library and catalog changes (every 60 s from the
    scorer's load, which an earlier test of the same process may have made: a full suite once
    counted its one statement here), which a slow machine would turn into a different count."""
    monkeypatch.setattr(recorder_module, "CANCEL_CHECK_S", 1e9)
    monkeypatch.setattr(recorder_module, "HEARTBEAT_S", 1e9)
    monkeypatch.setattr(answerability_scorer, "RECHECK_S", 1e9)


def _library(source):
    ids = [
        r[0]
        for r in clinical_rows("SELECT subject_id FROM mimiciv_hosp.patients ORDER BY subject_id LIMIT 3")
    ]
    example_upsert(source=source, question=f"what is the gender of patient {ids[0]}?",
                   sql=GENDER_SQL.format(id=ids[0]), approved_by=make_user("rev", "reviewer"))  # fmt: skip
    return ids


# (statements, transactions) per question, the second of its kind (caches warm). Before session 14
# cut them: no LLM, library 21 / 5 and declined 16 / 3; with an LLM, its answer 43 / 11 and a library
# answer 26 / 6. Each question also makes a claim (SELECT … FOR UPDATE, UPDATE) and two reads of
# the user's rights, which must stay per run (see the role test below).
NO_LLM = {"library": (18, 4), "declined": (13, 2)}
WITH_LLM = {"llm": (40, 10), "library": (23, 5)}


def test_statements_per_question_without_an_llm(source, settings, quiet_boundaries):
    settings.LLM_MODEL, settings.ASKDB_LIBRARY_REVIEW_SHARE = "", 0.0
    ids = _library(source)
    user = make_user("asker", RESEARCHER)
    asked = {"library": f"What is the gender of patient {ids[1]}?",
             "declined": "What will the creatinine of patient 5 be next year?"}  # fmt: skip
    for text in asked.values():
        _statements(source, user, text)  # the first of its kind fills the process's caches
    found = {}
    for kind, text in asked.items():
        run, sqls = _statements(source, user, text)
        assert run.status == ("succeeded" if kind == "library" else "declined"), run.message
        found[kind] = _count(sqls)
    assert found == NO_LLM


def test_statements_per_question_with_an_llm(source, scripted_llm, settings, quiet_boundaries):
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    ids = _library(source)
    user = make_user("asker", RESEARCHER)
    scripted_llm.when(GATE, Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when(WRITE, Reply("```sql\nSELECT count(*) AS patients FROM mimiciv_hosp.patients\n```"))
    scripted_llm.when(SUMMARY, Reply("There are 40 patients."))
    asked = {"llm": "How many patients are there?", "library": f"What is the gender of patient {ids[2]}?"}
    for text in asked.values():
        _statements(source, user, text)
    found = {}
    for kind, text in asked.items():
        run, sqls = _statements(source, user, text)
        assert (run.status, run.answered_by) == ("succeeded", kind), run.message
        found[kind] = _count(sqls)
    assert found == WITH_LLM


def test_a_finished_run_in_memory_is_the_stored_run(source, scripted_llm, settings):
    """The run is ended without reading it back: what the caller holds (tokens, retrieval, the
    heartbeat, the result) must be what is stored."""
    scripted_llm.when(GATE, Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when(WRITE, Reply("```sql\nSELECT count(*) AS patients FROM mimiciv_hosp.patients\n```"))
    scripted_llm.when(SUMMARY, Reply("There are 40 patients."))
    run, _ = _statements(source, make_user("asker", RESEARCHER), "How many patients are there?")
    stored = Run.objects.get(pk=run.pk)
    fields = [f.attname for f in Run._meta.concrete_fields]
    assert {f: getattr(run, f) for f in fields} == {f: getattr(stored, f) for f in fields}
    assert stored.tokens_prompt > 0 and stored.retrieval["tables"] and stored.llm_calls.count() == 3


def test_a_run_cancelled_while_it_ran_keeps_its_cancel(source, scripted_llm, monkeypatch):
    """The last transaction ends only a run still running: a cancel that lands during the last
    stage is kept (the recorder's rows are still written), and the caller sees the stored run."""
    scripted_llm.when(GATE, Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when(WRITE, Reply("```sql\nSELECT count(*) AS patients FROM mimiciv_hosp.patients\n```"))
    scripted_llm.when(SUMMARY, Reply("There are 40 patients."))
    record_call = recorder_module.DjangoRecorder.llm_call

    def cancelled_during_the_summary(self, **kwargs):
        if kwargs["purpose"] == "summarize":  # the user presses cancel while the summary is written
            Run.objects.filter(pk=self.run.pk).update(status=Run.Status.CANCELLED, outcome="cancelled")
        return record_call(self, **kwargs)

    monkeypatch.setattr(recorder_module.DjangoRecorder, "llm_call", cancelled_during_the_summary)
    run, _ = _statements(source, make_user("asker", RESEARCHER), "How many patients are there?")
    assert run.status == Run.Status.CANCELLED and Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
    assert run.sql == "" and run.stages.filter(name="summarize").exists()  # what happened is recorded
    assert run.llm_calls.filter(purpose="summarize").exists()


def test_a_role_changed_between_two_questions_applies_to_the_second(source, scripted_llm):
    """The rights are read for every run, not kept: a researcher moved to aggregate-only between
    two questions gets the second one refused."""
    ann = make_user("ann", RESEARCHER)
    first = ask(scripted_llm, ann, "list the patients with sepsis", SEPSIS_LIST, source)
    assert first.status == Run.Status.SUCCEEDED and len(first.result_rows) == 8
    ann.groups.set([Group.objects.get(name=AGGREGATE_RESEARCHER)])
    second = ask(scripted_llm, ann, "list the patients with sepsis", SEPSIS_LIST, source)
    assert second.status == Run.Status.DECLINED and second.outcome == "privacy_row_level"


@pytest.fixture
def ward(tmp_path):
    """A SQLite clinical source whose restricted tier is SQLite's authorizer, given the run's
    sensitive columns (no second read of the catalog)."""
    from metadata_admin.services import source_introspect, source_register

    path = tmp_path / "ward.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE stays (stay_id INTEGER PRIMARY KEY, ward TEXT, diagnosis TEXT)")
        conn.executemany("INSERT INTO stays VALUES (?, ?, ?)", [(1, "MICU", "flu"), (2, "CCU", "MI")])
    source = source_register(name="ward", url=f"sqlite:///{path}")
    source_introspect(source=source)
    return source


def _restricted_ports(source) -> DjangoPorts:
    """The ports as run_execute builds them for a user without view_sensitive."""
    snapshot = catalog_snapshot(source)
    policy = privacy_policy(source=source, user=None, snapshot=snapshot)
    return DjangoPorts(source, chat=None, timeout_s=5, row_cap=10, sensitive=False, snapshot=snapshot,
                       sensitive_columns=policy.sensitive_columns)  # fmt: skip


def test_a_sensitive_flag_set_between_two_questions_is_refused_by_the_database(ward):
    """The attack on passing the run's sensitive columns to the SQLite tier: a column flagged by a
    queryset update (no signal, no save) between two questions must be refused to the second."""
    ColumnDoc.objects.filter(table__source=ward, name="ward").update(sensitive=True)
    ports = _restricted_ports(ward)
    assert ports.execute("SELECT diagnosis FROM stays").row_count == 2
    with pytest.raises(ExecutionFailure):
        ports.execute("SELECT ward FROM stays")
    ColumnDoc.objects.filter(table__source=ward, name="diagnosis").update(sensitive=True)
    with pytest.raises(ExecutionFailure) as refused:
        _restricted_ports(ward).execute("SELECT diagnosis FROM stays")
    assert refused.value.code == "permission"


def test_a_catalog_with_no_sensitive_flag_still_reads_the_sources_own(ward):
    """An empty set from the run is no licence: the tier then reads the catalog itself (and, for a
    catalog without docs, the bundled docs' flags), as before."""
    assert not ColumnDoc.objects.filter(table__source=ward, sensitive=True).exists()
    ports = _restricted_ports(ward)
    assert ports.execute("SELECT diagnosis, ward FROM stays").row_count == 2


def test_a_submitted_question_is_sent_once_with_the_task_id_it_was_stored_with(source, settings):
    """The task id is written with the run's INSERT (one commit fewer per question): the job sent
    carries that id, and the queued-run reaper, which sends only runs without one, never sends it again."""
    from askdb.services.runs import runs_requeue

    run = question_submit(user=make_user("asker", RESEARCHER), text="How many patients are there?")
    stored = Run.objects.get(pk=run.pk)
    assert stored.task_id and stored.status == Run.Status.QUEUED
    assert runs_requeue(unsent_after_s=0, give_up_after_s=3600)["requeued"] == 0
