"""Test-wide fixtures: the embedded PostgreSQL and Redis of the test state folder (.askdb/test).

The suite runs against real services: pytest-django's test database lives on the embedded
PostgreSQL, scratch clinical databases are created on the same server, and Celery tests use
the embedded Redis with a real worker.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("tests.support.ci_skips"):
        config.pluginmanager.import_plugin("tests.support.ci_skips")
    from django.conf import settings

    settings.DATABASES  # noqa: B018 - loads config.settings.test, which fixes ASKDB_HOME
    from infra import embedded

    try:
        config._askdb_started = embedded.ensure_started()
    except embedded.EmbeddedError as exc:  # one line saying why and what to do, not a traceback
        pytest.exit(f"askdb: {exc}", returncode=1)


def pytest_unconfigure(config):
    started = getattr(config, "_askdb_started", None)
    if started is not None:  # released even when this run started nothing: it may be the last user
        from infra import embedded

        embedded.release(started)


@pytest.fixture
def scratch_database():
    """A new, empty database on the embedded server: yields its superuser DSN, then drops it."""
    from infra import embedded

    name = f"scratch_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield embedded.pg_dsn(name)
    finally:
        with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def clinical_admin_dsn(scratch_database):
    """Alias used by loader tests: a writable, empty clinical database."""
    return scratch_database


from tests.clinical_fixtures import _session_catalog, clinical_data, source  # noqa: E402,F401


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so fixtures can act on failure (screenshots)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def scripted_llm(settings):
    """askdb's LLM settings pointed at a scripted OpenAI-compatible server on loopback, so the
    real openai client path runs. No retries and a short timeout unless a test says otherwise."""
    from tests.support.scripted_llm import ScriptedLLM

    with ScriptedLLM() as server:
        settings.LLM_BASE_URL = server.base_url
        settings.LLM_MODEL = "scripted"
        settings.LLM_API_KEY = "test"
        settings.LLM_MAX_RETRIES = 0
        settings.LLM_TIMEOUT_S = 5
        yield server
