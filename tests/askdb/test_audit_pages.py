"""The audit page: filters, paging that keeps them, the CSV export of exactly the filtered events,
who may read it, and the export events every result download leaves."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest
from django.utils import timezone

from askdb.models import Question, Run
from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from infra.audit.models import AuditEvent
from infra.audit.services import audit_record
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def auditor(client):
    admin = make_user("root", ADMIN)
    client.force_login(admin)
    return admin


@pytest.fixture
def events(db):
    ann, rita = make_user("ann", RESEARCHER), make_user("rita", REVIEWER)
    audit_record(action="review.approve", actor=rita, target=ann, message="approved the count")
    audit_record(
        action="review.flag", actor=rita, message="flagged a join", detail={"category": "wrong_table"}
    )
    audit_record(action="sql.executed", actor=ann, message="correction: ok",
                 detail={"sql": "SELECT subject_id FROM mimiciv_hosp.patients"})  # fmt: skip
    audit_record(action="auth.login", actor=ann, message="logged in")
    return ann, rita


def _csv(response) -> list[list[str]]:
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


@pytest.mark.parametrize("role", [RESEARCHER, REVIEWER])
def test_only_auditors_read_or_export_the_log(client, role):
    client.force_login(make_user("someone", role))
    assert client.get("/audit/").status_code == 403
    assert client.get("/audit/", {"format": "csv"}).status_code == 403


def test_filters_by_action_prefix_actor_target_and_text(client, auditor, events):
    ann, _ = events
    page = client.get("/audit/", {"action": "review."}).content.decode()
    assert "approved the count" in page and "flagged a join" in page and "logged in" not in page
    page = client.get("/audit/", {"actor": "ANN"}).content.decode()
    assert "logged in" in page and "correction: ok" in page and "approved the count" not in page
    page = client.get("/audit/", {"target_type": "auth.user", "target_id": str(ann.pk)}).content.decode()
    assert "approved the count" in page and "flagged a join" not in page
    page = client.get("/audit/", {"q": "mimiciv_hosp.patients"}).content.decode()  # inside the detail JSON
    assert "correction: ok" in page and "logged in" not in page
    assert "No audit events match." in client.get("/audit/", {"action": "nothing."}).content.decode()


def test_filters_by_date_range(client, auditor, events):
    today = timezone.localdate()
    page = client.get("/audit/", {"from": today.isoformat(), "to": today.isoformat()}).content.decode()
    assert "approved the count" in page
    yesterday, tomorrow = today - dt.timedelta(days=1), today + dt.timedelta(days=1)
    assert "No audit events match." in client.get("/audit/", {"to": yesterday.isoformat()}).content.decode()
    assert "No audit events match." in client.get("/audit/", {"from": tomorrow.isoformat()}).content.decode()
    # a date that is not one is ignored, not an error
    assert "approved the count" in client.get("/audit/", {"from": "last week"}).content.decode()


def test_detail_is_shown_compactly_and_expandable(client, auditor, events):
    page = client.get("/audit/", {"action": "review.flag"}).content.decode()
    assert '<details class="json"><summary><code>{&quot;category&quot;:&quot;wrong_table&quot;}' in page
    assert "&quot;category&quot;: &quot;wrong_table&quot;" in page  # the indented form inside


def test_paging_keeps_the_filters(client, auditor):
    for i in range(55):
        audit_record(action="bulk.thing", message=f"bulk {i}")
    audit_record(action="other.thing", message="not bulk")
    page = client.get("/audit/", {"action": "bulk."}).content.decode()
    assert "Page 1 of 2" in page and "?action=bulk.&amp;page=2" in page
    page = client.get("/audit/", {"action": "bulk.", "page": "2"}).content.decode()
    assert "bulk 0<" in page and "not bulk" not in page


def test_csv_export_holds_exactly_the_filtered_events(client, auditor, events):
    rows = _csv(client.get("/audit/", {"action": "review.", "format": "csv"}))
    assert rows[0] == ["at", "actor", "action", "target_type", "target_id", "message", "ip", "detail"]
    assert sorted(r[2] for r in rows[1:]) == ["review.approve", "review.flag"]
    flag = next(r for r in rows[1:] if r[2] == "review.flag")
    assert flag[1] == "rita" and json.loads(flag[7]) == {"category": "wrong_table"}
    page = client.get("/audit/", {"action": "review."}).content.decode()
    assert 'href="?action=review.&amp;format=csv"' in page


def test_result_exports_write_run_exported_events(client, source):
    ann = make_user("ann", RESEARCHER)
    question = Question.objects.create(user=ann, source=source, text="How many patients?")
    run = Run.objects.create(question=question, status=Run.Status.SUCCEEDED, sql="SELECT 1",
                             result_columns=["n"], result_rows=[[40]], row_count=1)  # fmt: skip
    client.force_login(ann)
    assert client.get(f"/runs/{run.pk}/result.csv").status_code == 200
    assert client.get(f"/runs/{run.pk}/result.xlsx").status_code == 200
    exported = AuditEvent.objects.filter(action="run.exported").order_by("id")
    assert [e.detail["format"] for e in exported] == ["csv", "xlsx"]
    assert {(e.actor_name, e.target_id, e.ip) for e in exported} == {("ann", str(run.pk), "127.0.0.1")}
    assert exported[0].detail["rows"] == 1
    # a refused export (another user's run) leaves no export event
    client.force_login(make_user("bob", RESEARCHER))
    assert client.get(f"/runs/{run.pk}/result.csv").status_code == 404
    assert exported.count() == 2
