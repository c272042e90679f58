"""Starting an evaluation from /evaluations/: upload, a worker runs it, the page shows it."""

from __future__ import annotations

import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from evaluation.models import Evaluation
from tests.celery_worker import running_worker
from tests.factories import make_user

QUESTIONS = [
    {
        "id": "q1",
        "question": "How many patients are there?",
        "sql": "SELECT count(*) FROM mimiciv_hosp.patients",
    },
    {"id": "q2", "question": "What is the weather tomorrow?", "sql": ""},
]


@pytest.mark.django_db(transaction=True)
def test_an_admin_starts_an_evaluation_and_a_worker_runs_it(client, source, settings):
    settings.LLM_MODEL = ""
    client.force_login(make_user("ada", "admin"))
    upload = SimpleUploadedFile("mini.json", json.dumps(QUESTIONS).encode(), content_type="application/json")
    with running_worker():
        response = client.post("/evaluations/", {"source": source.name, "questions": upload, "offline": "1"})
        assert response.status_code == 302
        evaluation = Evaluation.objects.get()
        for _ in range(300):
            evaluation.refresh_from_db()
            if evaluation.finished_at and evaluation.status != Evaluation.Status.RUNNING:
                break
            time.sleep(0.2)
    assert evaluation.status == Evaluation.Status.FINISHED and evaluation.items.count() == 2
    assert "mini" in client.get("/evaluations/").content.decode()


@pytest.mark.django_db
def test_a_bad_file_says_why_and_only_admins_start(client, source):
    client.force_login(make_user("ada", "admin"))
    bad = SimpleUploadedFile("bad.json", b"{not json", content_type="application/json")
    response = client.post("/evaluations/", {"source": source.name, "questions": bad})
    assert response.status_code == 400 and "could not be read" in response.content.decode()
    client.force_login(make_user("audrey", "reviewer"))
    assert client.post("/evaluations/", {"source": source.name}).status_code == 403
