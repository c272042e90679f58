"""The pipeline over a clinical source that is a SQLite file, in SQLite's dialect.

(The app database is always PostgreSQL; SQLite here is only ever a *clinical* source.)"""

from __future__ import annotations

import pytest

from tests.askdb.test_pipeline import SUMMARY, answerable, ask, script_sql
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm(scripted_llm):
    return scripted_llm


def test_a_sqlite_source_answers_through_the_same_pipeline_in_its_dialect(llm, tmp_path, settings):
    import sqlite3

    from metadata_admin.services import source_introspect, source_register, table_docs_reembed

    path = tmp_path / "ward.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE stays (stay_id INTEGER PRIMARY KEY, ward TEXT, los_days REAL)")
        conn.executemany(
            "INSERT INTO stays VALUES (?, ?, ?)", [(1, "MICU", 2.0), (2, "MICU", 4.0), (3, "CCU", 1.0)]
        )
    sqlite_source = source_register(name="ward", url=f"sqlite:///{path}")
    source_introspect(source=sqlite_source)
    table_docs_reembed(source=sqlite_source)
    settings.ASKDB_SIMILARITY_FLOOR = 0.0
    answerable(llm)
    script_sql(llm, "SELECT ward, avg(los_days) AS mean_los FROM stays GROUP BY ward ORDER BY ward")
    llm.when(SUMMARY, Reply("MICU stays are longer."))
    run = ask("What is the mean length of stay per ward?", sqlite_source)

    assert run.status == "succeeded", run.message
    assert run.result_rows == [["CCU", 1.0], ["MICU", 3.0]]
    assert "SQLite" in llm.chat_requests()[1][0]["content"]
