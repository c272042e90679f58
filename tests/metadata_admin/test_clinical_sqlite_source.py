"""A clinical source that is a SQLite file: registered, introspected, opened read-only.

(The app database is always PostgreSQL; SQLite here is only ever a *clinical* source.)"""

from __future__ import annotations

import sqlite3

import pytest

from infra.adapters.clinical import ExecutionError, executor_for
from metadata_admin.models import ColumnDoc, TableDoc
from metadata_admin.services import source_introspect, source_register


@pytest.fixture
def sqlite_db(tmp_path):
    path = tmp_path / "clinic.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE visits (visit_id INTEGER PRIMARY KEY, ward TEXT, los REAL)")
        conn.executemany(
            "INSERT INTO visits VALUES (?, ?, ?)", [(1, "MICU", 2.5), (2, "SICU", 1.0), (3, "MICU", 4.0)]
        )
    return path


@pytest.mark.django_db
def test_a_sqlite_source_is_registered_introspected_and_opened_read_only(sqlite_db):
    source = source_register(name="clinic", url=f"sqlite:///{sqlite_db}")
    assert source.engine == "sqlite" and source.dialect == "sqlite"
    source_introspect(source=source)
    doc = TableDoc.objects.get(source=source, name="visits")
    assert [c.name for c in doc.columns.all()] == ["visit_id", "ward", "los"] and doc.row_count == 3
    assert "MICU" in ColumnDoc.objects.get(table=doc, name="ward").example_values
    executor = executor_for(source.resolved_url(), engine="sqlite")
    result = executor.execute(
        "SELECT ward, count(*) FROM visits GROUP BY ward ORDER BY ward", timeout_s=5, row_cap=10
    )
    assert result.rows == [("MICU", 2), ("SICU", 1)]
    with pytest.raises(ExecutionError, match="not permitted: delete visits") as info:
        executor.execute("DELETE FROM visits", timeout_s=5, row_cap=10)
    assert info.value.code == "permission"  # the authorizer; the file is opened read-only too
