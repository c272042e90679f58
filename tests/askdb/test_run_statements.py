"""What a run's set-up and bookkeeping cost the app database: the privacy policy's catalog part is
read once per catalog state (and a change to a sensitive flag or a reference table is seen by the
next run at once), and with no LLM the stages that wait only on the LLM write no "running" row."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from askdb.adapters.recorder import HEARTBEAT_S, DjangoRecorder
from askdb.models import Question, Run, StageEvent
from askdb.services.privacy import privacy_policy
from askdb.services.runs import run_execute
from metadata_admin.models import ColumnDoc, TableDoc
from metadata_admin.selectors import COMMON_IN_DOCS, catalog_snapshot, catalog_vocabulary
from tests.factories import make_user


def _run(source) -> Run:
    user = make_user("statements")
    return Run.objects.create(question=Question.objects.create(user=user, source=source, text="how many?"))


def test_the_policy_reads_the_catalog_once_per_catalog_state(source):
    snapshot = catalog_snapshot(source)
    first = privacy_policy(source=source, user=None, snapshot=snapshot)
    with CaptureQueriesContext(connection) as queries:
        again = privacy_policy(source=source, user=None, snapshot=snapshot)
    assert len(queries) == 0 and again == first
    assert first == privacy_policy(source=source, user=None)  # the same as read without a snapshot


def test_a_sensitive_flag_set_by_a_bulk_update_reaches_the_next_run(source):
    """The attack on the cache: a flag changed without save() or a signal (a queryset update, as
    the admin's bulk actions do) must not leave a column readable by the old policy."""
    column = ColumnDoc.objects.filter(table__source=source, table__name="admissions", sensitive=False).first()
    name = f"{column.table.name}.{column.name}".lower()
    before = privacy_policy(source=source, user=None, snapshot=catalog_snapshot(source))
    assert name not in before.sensitive_columns
    ColumnDoc.objects.filter(pk=column.pk).update(sensitive=True)
    after = privacy_policy(source=source, user=None, snapshot=catalog_snapshot(source))
    assert name in after.sensitive_columns


def test_a_table_marked_reference_reaches_the_next_run(source):
    doc = TableDoc.objects.get(source=source, name="admissions")
    assert (
        "admissions"
        not in privacy_policy(source=source, user=None, snapshot=catalog_snapshot(source)).reference_tables
    )
    TableDoc.objects.filter(pk=doc.pk).update(reference=True)
    assert (
        "admissions"
        in privacy_policy(source=source, user=None, snapshot=catalog_snapshot(source)).reference_tables
    )


def test_with_no_llm_the_llm_stages_are_written_complete_and_execute_still_live(source):
    run = _run(source)
    recorder = DjangoRecorder(run, llm=False)
    for name in ("gate", "generate", "summarize"):
        with recorder.stage(name) as st:
            assert not StageEvent.objects.filter(run=run, name=name).exists()  # no transaction for it
            st.finish("skipped")
    with recorder.stage("execute"):  # waits on the clinical database: the page shows it running
        assert StageEvent.objects.get(run=run, name="execute").status == StageEvent.Status.RUNNING
    recorder.flush()
    stored = dict(StageEvent.objects.filter(run=run).values_list("name", "status"))
    assert stored == {"gate": "skipped", "generate": "skipped", "summarize": "skipped", "execute": "ok"}


def test_with_an_llm_the_gate_is_shown_running_while_it_waits(source):
    run = _run(source)
    recorder = DjangoRecorder(run)
    with recorder.stage("gate"):
        assert StageEvent.objects.get(run=run, name="gate").status == StageEvent.Status.RUNNING
    recorder.flush()
    assert StageEvent.objects.get(run=run, name="gate").status == StageEvent.Status.OK


def test_the_vocabulary_follows_a_column_doc_changed_by_a_bulk_update(source):
    """Value linking's everyday words are kept per catalog stamp: a word put into column meanings
    by a queryset update (no table doc saved) is everyday for the next question."""
    word = "zyxwordplain"
    assert word not in catalog_vocabulary(source=source, stamp=catalog_snapshot(source).stamp)
    columns = ColumnDoc.objects.filter(table__source=source).order_by("pk")[:COMMON_IN_DOCS]
    ColumnDoc.objects.filter(pk__in=[c.pk for c in columns]).update(meaning=f"the {word} of it")
    assert word in catalog_vocabulary(source=source, stamp=catalog_snapshot(source).stamp)
    assert word in catalog_vocabulary(source=source)  # without a stamp: read with one query


def test_finishing_a_run_reads_no_question_it_has_loaded(source, settings):
    """run_execute keeps the run's question, source and user loaded across its refresh: finishing
    (review_required, the audit) reads none of them again, and the refreshed run is the stored one."""
    settings.LLM_MODEL = ""
    run = _run(source)
    with CaptureQueriesContext(connection) as queries:
        run = run_execute(run_id=run.pk)
    question_reads = [q for q in queries.captured_queries if 'FROM "askdb_question"' in q["sql"]]
    assert question_reads == []  # loaded once, by the claim's select_related (a join)
    stored = Run.objects.get(pk=run.pk)
    assert (run.status, run.outcome, run.heartbeat_at) == (stored.status, stored.outcome, stored.heartbeat_at)


def test_a_stage_boundary_refreshes_the_heartbeat_only_when_it_is_due(source):
    """The reaper fails a run whose heartbeat is minutes old: a flush with nothing else for the
    run's row skips it while the last heartbeat is recent, and writes it once it is due."""
    run = _run(source)
    recorder = DjangoRecorder(run)
    with recorder.stage("execute"):
        pass
    with CaptureQueriesContext(connection) as queries:
        recorder.flush()
    assert not [q for q in queries.captured_queries if 'UPDATE "askdb_run"' in q["sql"]]
    recorder._beat -= HEARTBEAT_S  # the last heartbeat is due now
    with recorder.stage("execute"):
        pass
    recorder.flush()
    run.refresh_from_db()
    assert run.heartbeat_at is not None
    assert StageEvent.objects.filter(run=run, name="execute").count() == 2
