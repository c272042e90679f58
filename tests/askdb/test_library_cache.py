"""The library cache (askdb.adapters.library_cache): what one question loads is reused by the next,
and a change anywhere — a flagged example, a reloaded source, a change made by another worker
process — reaches the next question without a restart. Reading the library writes nothing."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connection

from askdb.adapters.library_cache import LIBRARY, library_version
from askdb.models import Example, LibraryGeneration, Run
from askdb.services.examples import example_upsert, library_generation_bump
from askdb.services.reviews import review_flag
from askdb.services.runs import question_submit_sync
from infra.providers.embeddings import get_embedder
from metadata_admin.services import clinical_source_refresh, source_executor
from tests.factories import make_user

pytestmark = pytest.mark.django_db

COUNT_SQL = "SELECT count(*) AS n FROM mimiciv_hosp.prescriptions WHERE drug = '{drug}'"
NEW_DRUG = "Zorblatin"  # in no synthetic data: it arrives with a reload


def _user(name: str, role: str):
    return get_user_model().objects.filter(username=name).first() or make_user(name, role)


def ask(source, text: str) -> Run:
    user = _user("cache-asker", "researcher")
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


@pytest.fixture
def no_llm(settings):
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0


@pytest.fixture
def drug_library(source):
    reviewer = _user("cache-rev", "reviewer")
    return example_upsert(source=source, question="how many prescriptions of Acetaminophen are there?",
                          sql=COUNT_SQL.format(drug="Acetaminophen"), approved_by=reviewer)  # fmt: skip


def test_a_flagged_example_stops_library_answers_at_once(source, no_llm, drug_library):
    first = ask(source, "how many prescriptions of Docusate Sodium are there?")
    assert first.answered_by == "library" and first.example_id == drug_library.pk, first.message
    review_flag(
        run=first,
        reviewer=_user("cache-rev", "reviewer"),
        category="wrong_values",
        comment="wrong drug column",
    )
    assert Example.objects.get(pk=drug_library.pk).status == Example.Status.NEEDS_REVIEW
    again = ask(source, "how many prescriptions of Docusate Sodium are there?")
    assert again.answered_by != "library" and again.example_id is None


def test_a_reloaded_sources_values_reach_the_next_question(source, no_llm, drug_library):
    question = f"how many prescriptions of {NEW_DRUG} are there?"
    before = ask(source, question)
    assert before.answered_by != "library"  # the value is in no column the library knows
    dsn = django_settings.CLINICAL_ADMIN_DATABASE_URL
    insert = (
        "INSERT INTO mimiciv_hosp.prescriptions (subject_id, hadm_id, pharmacy_id, drug_type, drug) "
        f"SELECT subject_id, hadm_id, pharmacy_id, drug_type, '{NEW_DRUG}' FROM mimiciv_hosp.prescriptions LIMIT 1"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(insert)
    try:
        clinical_source_refresh()  # what load_mimic / the demo run after loading data
        after = ask(source, question)
        assert after.answered_by == "library", after.message
        assert f"drug = '{NEW_DRUG}'" in after.sql  # (its count of 1 is a small cell, suppressed)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM mimiciv_hosp.prescriptions WHERE drug = %s", [NEW_DRUG])
        clinical_source_refresh()


def test_a_change_numbered_by_another_process_rebuilds_this_ones_cache(source, drug_library):
    """Another worker's change is seen through the database row, not this process's memory."""
    executor, embedder = source_executor(source), get_embedder()
    index, values = LIBRARY.index(source, executor, embedder)
    assert LIBRARY.index(source, executor, embedder) == (index, values)  # current: reused
    # What another process's signal handler does (nothing about the examples changed here).
    LibraryGeneration.objects.filter(source_id=source.pk).update(examples=10**6)
    rebuilt, same_values = LIBRARY.index(source, executor, embedder)
    assert rebuilt is not index and same_values is values  # the values wait for a data change
    library_generation_bump(source_id=source.pk, data=True)
    assert LIBRARY.index(source, executor, embedder)[1] is not values


def test_reading_the_library_writes_nothing(source, drug_library):
    Example.objects.filter(pk=drug_library.pk).update(template={}, template_key="", masked_embedding=None)
    version = library_version(source)
    index, _ = LIBRARY.index(source, source_executor(source), get_embedder())
    assert [e.example_id for e in index.entries if e.template is not None] == [drug_library.pk]
    stored = Example.objects.get(pk=drug_library.pk)
    assert (stored.template, stored.template_key, stored.masked_embedding) == ({}, "", None)
    assert library_version(source) == version


def test_threads_asking_at_once_build_the_index_once(source, drug_library, monkeypatch):
    from askdb.adapters import library_cache

    builds = []
    real = library_cache.library_build

    def counted(*args, **kwargs):
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(library_cache, "library_build", counted)
    LIBRARY.clear()
    executor, embedder = source_executor(source), get_embedder()
    version = library_version(source)
    LIBRARY.values(source, executor, version)  # loaded once, before the threads
    found: list = []

    def one_question() -> None:
        try:
            found.append(LIBRARY.index(source, executor, embedder, version)[0])
        finally:
            connection.close()  # each thread's own connection

    threads = [threading.Thread(target=one_question) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len({id(i) for i in found}) == 1


def test_the_embed_task_stores_what_the_library_index_needs(source, drug_library):
    """A reviewer's example is embedded in the worker, which then stores its template key and
    masked vector (library_refresh): no question has to compute them."""
    from askdb.tasks import embed_example

    reviewer = _user("cache-rev", "reviewer")
    example = example_upsert(source=source, question="how many prescriptions of Docusate Sodium were written?",
                             sql=COUNT_SQL.format(drug="Docusate Sodium"), approved_by=reviewer,
                             defer_embedding=True)  # fmt: skip
    Example.objects.filter(pk=example.pk).update(template_key="", masked_embedding=None)
    embed_example(example.pk)  # what the worker runs
    example.refresh_from_db()
    assert example.embedding_model and example.template_key and example.masked_embedding is not None
