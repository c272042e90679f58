"""What a run stores stays bounded, and every EXPLAIN it runs on clinical data is audited."""

from __future__ import annotations

import pytest

from askdb.adapters.ports import DjangoPorts
from askdb.adapters.recorder import MAX_STORED_SQL, DjangoRecorder, capped_text
from askdb.models import Question, Run
from infra.audit.models import AuditEvent
from tests.factories import make_user


@pytest.fixture
def run(source):
    user = make_user("records")
    return Run.objects.create(question=Question.objects.create(user=user, source=source, text="how many?"))


def test_a_huge_llm_reply_is_stored_cut_with_a_marker(run):
    reply = "SELECT " + "x, " * 350_000  # about 1 MB
    recorder = DjangoRecorder(run)
    for number in range(1, 10):
        recorder.attempt(
            number=number, sql=reply, origin="llm", valid=False, error_code="too_long", error=reply
        )
    recorder.flush()  # the recorder writes at stage boundaries and at the end of the run
    stored = sum(len(a.sql) + len(a.error) for a in run.attempts.all())
    assert stored < 9 * (MAX_STORED_SQL + 3_000)
    attempt = run.attempts.first()
    assert attempt.sql.startswith("SELECT x, ") and "[cut: " in attempt.sql
    assert capped_text("short", 10) == "short"


def test_explains_are_audited(run, source):
    ports = DjangoPorts(source, chat=None, timeout_s=5, row_cap=10, run=run)
    ports.explain("SELECT count(*) FROM mimiciv_hosp.patients")
    events = AuditEvent.objects.filter(action="sql.explained", target_id=str(run.pk))
    assert events.count() == 1
    event = events.get()
    assert event.detail["outcome"] == "ok"
    assert event.detail["sql"] == "SELECT count(*) FROM mimiciv_hosp.patients"
