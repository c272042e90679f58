"""Phenotypes through HTTP (page and REST API), adjudication, and a cohort a question can join."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from askdb.models import Run
from askdb.roles import AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER
from askdb.services.runs import question_submit_sync
from metadata_admin.models import TableDoc
from phenotypes.models import PatientDecision
from phenotypes.selectors import adjudication_sample, estimated_precision
from phenotypes.services import (
    COHORT_SCHEMA,
    adjudication_record,
    cohort_save,
    phenotype_define_bundled,
    phenotype_run_create,
    phenotype_run_execute,
)
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def cohort_schema_dropped():
    yield
    with psycopg.connect(settings.CLINICAL_ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {COHORT_SCHEMA} CASCADE")


def _run(source, name="heart failure", rerank=False):
    (p,) = [x for x in phenotype_define_bundled() if x.name == name]
    return phenotype_run_execute(run_id=phenotype_run_create(phenotype=p, source=source).pk, rerank=rerank)


def test_api_roles_define_run_and_read(source):
    reviewer, researcher, aggregate = (
        make_user("rev", REVIEWER),
        make_user("res", RESEARCHER),
        make_user("agg", AGGREGATE_RESEARCHER),
    )
    api = APIClient()
    api.force_authenticate(researcher)
    body = {"name": "gout", "description": "gout flares", "terms": ["gout"], "icd": ["M10%"]}
    assert api.post("/api/phenotypes/", body, format="json").status_code == 403
    api.force_authenticate(reviewer)
    assert api.post("/api/phenotypes/", body, format="json").status_code == 201
    assert api.post("/api/phenotypes/", {"name": "x"}, format="json").status_code == 400
    run = _run(source)
    detail = api.get(f"/api/phenotypes/runs/{run.pk}/").json()
    assert detail["counts"]["present"] > 0 and any(
        "text" in e for p in detail["patients"] for e in p["evidence"]
    )
    api.force_authenticate(researcher)
    detail = api.get(f"/api/phenotypes/runs/{run.pk}/").json()
    assert detail["patients"] and not any("text" in e for p in detail["patients"] for e in p["evidence"])
    api.force_authenticate(aggregate)
    detail = api.get(f"/api/phenotypes/runs/{run.pk}/").json()
    assert "patients" not in detail and detail["counts"]["patients"] > 0
    assert api.post(f"/api/phenotypes/runs/{run.pk}/cohort/").status_code == 403


def test_page_shows_highlighted_evidence_only_to_who_may_see_text(source):
    run = _run(source, "atrial fibrillation")
    client = Client()
    client.force_login(make_user("rev", REVIEWER))
    page = client.get(f"/phenotypes/runs/{run.pk}/").content.decode()
    assert '<mark class="assertion-affirmed">' in page and "Save as cohort" in page and "Agree" in page
    client.force_login(make_user("res", RESEARCHER))
    page = client.get(f"/phenotypes/runs/{run.pk}/").content.decode()
    assert "<mark" not in page and "(note text withheld)" in page and "Save as cohort" not in page
    client.force_login(make_user("agg", AGGREGATE_RESEARCHER))
    page = client.get(f"/phenotypes/runs/{run.pk}/").content.decode()
    assert "subject " not in page and "present" in page
    assert client.get("/phenotypes/").status_code == 200


def test_progress_fragment_stops_polling_when_the_run_ends(source):
    run = _run(source, "sepsis")
    client = Client()
    client.force_login(make_user("rev", REVIEWER))
    response = client.get(f"/phenotypes/runs/{run.pk}/?fragment=progress", HTTP_HX_REQUEST="true")
    assert response.status_code == 286 and response["HX-Refresh"] == "true"


def test_adjudicated_sample_gives_a_precision_with_a_wilson_interval(source):
    run = _run(source)
    reviewer = make_user("rev", REVIEWER)
    sample = adjudication_sample(run, size=5)
    assert sample and all(d.decision == "present" for d in sample)
    assert [d.pk for d in sample] == [d.pk for d in adjudication_sample(run, size=5)]  # same for everyone
    for i, decision in enumerate(sample):
        adjudication_record(decision=decision, reviewer=reviewer, agree=i > 0)
    p = estimated_precision(run)
    assert p["adjudicated"] == len(sample) and p["agree"] == len(sample) - 1
    assert p["low"] < p["precision"] < p["high"] <= 1.0


def test_a_cohort_is_a_table_the_reader_may_read_and_a_question_can_join(
    source, scripted_llm, cohort_schema_dropped
):
    run = _run(source)
    table = cohort_save(run=run, actor=make_user("rev", REVIEWER))
    present = PatientDecision.objects.filter(run=run, decision="present").count()
    assert table == f"{COHORT_SCHEMA}.heart_failure"
    with psycopg.connect(settings.CLINICAL_DATABASE_URL) as conn:  # as the read-only reader
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == present
    doc = TableDoc.objects.get(source=source, schema_name=COHORT_SCHEMA, name="heart_failure")
    assert doc.exists_in_source and "heart failure cohort" in doc.synonyms
    sql = (
        f"SELECT COUNT(DISTINCT c.subject_id) AS patients FROM {table} c "
        "JOIN mimiciv_icu.icustays i ON i.subject_id = c.subject_id"
    )
    scripted_llm.when("You screen questions", Reply('{"category": "answerable", "reason": "in the data"}'))
    scripted_llm.when("You write one", Reply(f"```sql\n{sql}\n```"), times=1)
    scripted_llm.when("You explain the result", Reply("That many."))
    question = "How many patients in the heart failure cohort were admitted to the ICU?"
    answered = Run.objects.get(
        pk=question_submit_sync(user=make_user("res", RESEARCHER), text=question, source=source).pk
    )
    assert answered.status == "succeeded", (answered.status, answered.outcome)
    assert "askdb_cohorts.heart_failure" in answered.sql
