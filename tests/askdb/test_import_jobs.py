"""A large API import runs in a worker, not in the web process: 202 with a job, whose progress and
report the caller polls; the pairs land in the library as a synchronous import would put them."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from askdb.models import Example, ImportJob
from askdb.roles import REVIEWER
from infra.audit.models import AuditEvent
from tests.celery_worker import running_worker, wait_for
from tests.factories import make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAIRS = [
    {"id": "p", "question": "How many patients are there?", "sql": "SELECT count(*) FROM mimiciv_hosp.patients"},
    {"id": "a", "question": "How many admissions are there?", "sql": "SELECT count(*) FROM mimiciv_hosp.admissions"},
    {"id": "x", "question": "What does each patient weigh?", "sql": "SELECT weight_kg FROM mimiciv_hosp.patients"},
    {"id": "r", "question": "Will it rain tomorrow?", "sql": None},
    {"id": "f", "question": "How many female patients are there?",
     "sql": "SELECT count(*) FROM mimiciv_hosp.patients WHERE gender = 'F'"},
]  # fmt: skip


def test_a_large_api_import_is_a_worker_job_with_progress_and_a_report(source, settings):
    settings.ASKDB_IMPORT_SYNC_MAX = 2  # five pairs count as large here
    api = APIClient()
    api.force_authenticate(make_user("rev", REVIEWER))
    with running_worker():
        response = api.post("/api/examples/import/", {"examples": PAIRS}, format="json")
        assert response.status_code == 202, response.json()
        body = response.json()
        assert body["status"] in ("queued", "running", "succeeded") and body["total"] == 5
        assert response["Location"] == body["url"] == f"/api/examples/imports/{body['job']}/"
        seen = []

        def finished():
            job = api.get(body["url"]).json()
            seen.append(job["done"])
            return job if job["status"] in ("succeeded", "failed") else None

        job = wait_for(finished, timeout=120)
    assert job["status"] == "succeeded", job
    assert job["done"] == job["total"] == 5 and seen == sorted(seen)
    assert job["report"]["summary"] == "4 added, 0 merged into existing examples, 1 failed"
    assert [f["id"] for f in job["report"]["failed"]] == ["x"]
    assert set(job["report"]["created"]) == set(Example.objects.values_list("pk", flat=True))
    assert Example.objects.filter(approved_by__username="rev").count() == 4
    assert ImportJob.objects.get(pk=body["job"]).items == []  # the pairs are not kept twice
    assert AuditEvent.objects.filter(action="examples.import_queued").exists()


def test_a_small_api_import_still_answers_in_the_request(source):
    api = APIClient()
    api.force_authenticate(make_user("rev", REVIEWER))
    response = api.post("/api/examples/import/", {"examples": PAIRS[:2]}, format="json")
    assert response.status_code == 200 and response.json()["summary"].startswith("2 added")
    assert not ImportJob.objects.exists()


def test_an_unknown_job_is_404(source):
    api = APIClient()
    api.force_authenticate(make_user("rev", REVIEWER))
    response = api.get("/api/examples/imports/999999/")
    assert response.status_code == 404 and "999999" in response.json()["error"]


def test_a_large_import_from_the_library_page_is_a_worker_job_the_page_follows(client, source, settings):
    """The import page, like the API: a large file is queued (202), and the fragment the page polls
    shows the progress, then the report, and stops polling."""
    import json

    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.ASKDB_IMPORT_SYNC_MAX = 2
    client.force_login(make_user("rev", REVIEWER))
    upload = SimpleUploadedFile("pairs.json", json.dumps(PAIRS).encode(), content_type="application/json")
    with running_worker():
        page = client.post("/library/import/", {"file": upload, "source": source.name})
        assert page.status_code == 202
        job = ImportJob.objects.get()
        text = page.content.decode()
        assert f'hx-get="/library/import/jobs/{job.pk}/"' in text and "Import of 5 pairs" in text
        wait_for(lambda: ImportJob.objects.get(pk=job.pk).status == ImportJob.Status.SUCCEEDED, timeout=120)
    fragment = client.get(f"/library/import/jobs/{job.pk}/").content.decode()
    assert "hx-get" not in fragment  # ended: the page stops polling
    assert "4 added, 0 merged into existing examples, 1 failed" in fragment, fragment
    assert "Failed — not imported" in fragment and "<code>x</code>" in fragment  # the failed pair, listed
    assert Example.objects.filter(source=source).count() == 4
    client.force_login(make_user("rita", "researcher"))
    assert client.get(f"/library/import/jobs/{job.pk}/").status_code == 403
