"""The asker's access tier reaches the database (issue 24, items 2 and 5), through askdb's own
paths: a run's SQL is planned and executed by the reader of the asker's tier, the readers are
re-granted when the catalog's sensitive flags change, and a result the byte cap cuts to no row
says so. Real PostgreSQL, the real openai client against the scripted server."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from askdb.adapters.ports import DjangoPorts
from askdb.models import Run
from askdb.roles import RESEARCHER
from askdb.services.runs import question_submit_sync
from core.engine import ExecutionFailure
from metadata_admin.models import ColumnDoc
from metadata_admin.services import source_executor, source_reader_grants
from metadata_admin.signals import catalog_changed
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

LEAKS = [
    "SELECT dod FROM mimiciv_hosp.patients",
    "SELECT p::text FROM mimiciv_hosp.patients p",
    "SELECT row_to_json(p) FROM mimiciv_hosp.patients p",
    "SELECT (p).dod FROM mimiciv_hosp.patients p",
]


def _ports(source, *, sensitive: bool) -> DjangoPorts:
    return DjangoPorts(source, chat=None, timeout_s=10, row_cap=10, sensitive=sensitive)


@pytest.mark.parametrize("sql", LEAKS)
def test_a_run_without_view_sensitive_is_refused_by_the_database(source, sql):
    assert ColumnDoc.objects.get(table__source=source, table__name="patients", name="dod").sensitive
    with pytest.raises(ExecutionFailure) as info:
        _ports(source, sensitive=False).execute(sql)
    assert info.value.code == "permission"
    assert "permission denied" in info.value.message and "view_sensitive" in info.value.message
    assert _ports(source, sensitive=True).execute(sql).columns


def test_askdbs_own_reads_keep_the_full_reader(source):
    ports = _ports(source, sensitive=False)
    assert ports.executor is not ports.question_executor
    assert "dod" in {
        c.name for t in ports.executor.tables() if t.qualified == "mimiciv_hosp.patients" for c in t.columns
    }


def test_a_flag_changed_in_the_catalog_is_granted_again(source):
    restricted = source_executor(source, sensitive=False)
    gender = ColumnDoc.objects.get(table__source=source, table__name="patients", name="gender")
    try:
        ColumnDoc.objects.filter(pk=gender.pk).update(sensitive=True)
        catalog_changed.send(sender=type(source), source=source)
        with pytest.raises(Exception) as info:
            restricted.execute("SELECT gender FROM mimiciv_hosp.patients", timeout_s=10, row_cap=1)
        assert getattr(info.value, "code", "") == "permission"
    finally:
        ColumnDoc.objects.filter(pk=gender.pk).update(sensitive=False)
        source_reader_grants(source)
    assert restricted.execute("SELECT gender FROM mimiciv_hosp.patients", timeout_s=10, row_cap=1).rows


def test_the_grants_hide_what_the_catalog_flags(source):
    hidden = source_reader_grants(source)
    flagged = ColumnDoc.objects.filter(table__source=source, sensitive=True).count()
    assert list(hidden.values()) == [0, flagged] and flagged >= 2


def test_a_result_cut_before_its_first_row_says_so(source, scripted_llm, settings):
    settings.ASKDB_RESULT_MAX_BYTES = 1024 * 1024
    ann = make_user("ann", RESEARCHER)
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "in the data"}'))
    scripted_llm.when(
        "You write one",
        Reply(
            "```sql\nSELECT subject_id, repeat(gender, 3000000) AS padded FROM mimiciv_hosp.patients LIMIT 5\n```"
        ),
    )
    scripted_llm.when("You explain the result", Reply("Summary."))
    run = Run.objects.get(pk=question_submit_sync(user=ann, text="Show patients padded", source=source).pk)
    assert run.status == Run.Status.SUCCEEDED, run.message
    assert (run.outcome, run.row_count, run.result_truncated) == ("result_cut", 0, True)
    assert "cut before the first row" in run.message and "nothing in the data matches" not in run.message


def test_grant_readers_command_grants_both_tiers(source):
    out = StringIO()
    call_command("grant_readers", stdout=out)
    flagged = ColumnDoc.objects.filter(table__source=source, sensitive=True).count()
    assert out.getvalue().splitlines() == [
        "askdb_reader: every column",
        f"askdb_reader_restricted: every column but {flagged} sensitive",
    ]
