"""The request desk through the REST API, with the real broker and worker and no LLM: two
researchers' declined questions become one grouped request; a reviewer previews (code check) and
answers; both are told, both runs show the answer, and a paraphrase is answered from the library."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from askdb.models import AnswerRequest
from askdb.roles import RESEARCHER, REVIEWER
from askdb.services.examples import example_upsert
from tests.celery_worker import running_worker, wait_for
from tests.factories import make_user

AF_NARROW = "SELECT COUNT(DISTINCT subject_id) AS n FROM mimiciv_hosp.diagnoses_icd WHERE icd_code = '42731'"
AF_WIDE = (
    "SELECT COUNT(DISTINCT di.subject_id) AS n FROM mimiciv_hosp.diagnoses_icd AS di "
    "JOIN mimiciv_hosp.d_icd_diagnoses AS d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version "
    "WHERE LOWER(d.long_title) LIKE '%atrial fibrillation%'"
)


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def asked(client, text: str) -> dict:
    response = client.post("/api/runs/", {"question": text}, format="json")
    assert response.status_code == 202, response.json()
    url, deadline = response.json()["url"], time.monotonic() + 60
    while (detail := client.get(url).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, f"run still {detail['status']}"
        time.sleep(0.2)
    return detail


@pytest.mark.django_db(transaction=True)
def test_the_request_desk_over_http(source, settings):
    cache.clear()
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    rita = make_user("rita", REVIEWER)
    example_upsert(source=source, question="how many patients are there?",
                   sql="SELECT COUNT(*) FROM mimiciv_hosp.patients", approved_by=rita)  # fmt: skip
    ann, bob, reviewer = (
        client_for(make_user("ann", RESEARCHER)),
        client_for(make_user("bob", RESEARCHER)),
        client_for(rita),
    )
    with running_worker():
        first = asked(ann, "how many patients were diagnosed with atrial fibrillation?")
        second = asked(bob, "count the patients who were diagnosed with atrial fibrillation")
        assert first["status"] == second["status"] == "declined"
        assert (
            ann.post(f"/api/runs/{second['run']}/request/", {}, format="json").status_code == 404
        )  # not hers
        made = ann.post(f"/api/runs/{first['run']}/request/", {"note": "AF audit"}, format="json")
        assert made.status_code == 201 and made.json()["status"] == "pending"
        assert bob.post(f"/api/runs/{second['run']}/request/", {}, format="json").status_code == 201
        assert ann.get("/api/requests/").status_code == 403
        # the worker reads both (masked, embedded) and the queue shows them as one group of two
        wait_for(
            lambda: not AnswerRequest.objects.filter(embedding_model="").exists(), 60, "requests not embedded"
        )
        groups = reviewer.get("/api/requests/").json()["groups"]
        assert [g["count"] for g in groups] == [2]
        lead = groups[0]["lead"]
        assert lead == made.json()["id"]

        preview = reviewer.post(f"/api/requests/{lead}/preview/", {"sql": AF_NARROW}, format="json").json()
        assert preview["columns"] == ["n"]
        missing = [m for c in preview["code_check"] for m in c["missing"]]
        assert any(m["version"] == 10 and "atrial fibrillation" in m["title"].lower() for m in missing), (
            preview
        )
        write = reviewer.post(f"/api/requests/{lead}/answer/", {"sql": "DELETE FROM mimiciv_hosp.patients"},
                              format="json")  # fmt: skip
        assert write.status_code == 400 and "not valid" in write.json()["error"]

        done = reviewer.post(f"/api/requests/{lead}/answer/", {"sql": AF_WIDE}, format="json")
        assert done.status_code == 200 and done.json()["status"] == "answered"
        # the grouped request is asked again by the worker and answered from the library
        wait_for(
            lambda: AnswerRequest.objects.filter(status="answered").count() == 2,
            90,
            "grouped request not answered",
        )

    answer = ann.get(f"/api/runs/{first['run']}/").json()
    assert answer["status"] == "succeeded" and answer["answered_by"] == "reviewer" and "LIKE" in answer["sql"]
    bobs = AnswerRequest.objects.get(run_id=second["run"])
    again = bob.get(f"/api/runs/{bobs.answer_run_id}/").json()
    assert again["answered_by"] == "library" and again["result"]["rows"] == answer["result"]["rows"]
    for client in (ann, bob):
        inbox = client.get("/api/inbox/").json()
        assert inbox["unread"] == 1 and inbox["notifications"][0]["message"].startswith("Your question")

    with running_worker():
        later = asked(bob, "number of patients diagnosed with atrial fibrillation")
    assert later["status"] == "succeeded" and later["answered_by"] == "library"
