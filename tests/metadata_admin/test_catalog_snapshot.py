"""The catalog a run reads is loaded once per catalog state and reused, and any change to a doc,
a column or a relationship (ORM, bulk update, delete) is seen by the next question."""

from __future__ import annotations

import pytest

from metadata_admin.models import ColumnDoc, Relationship, TableDoc
from metadata_admin.selectors import catalog_snapshot

pytestmark = pytest.mark.django_db


def _column(snapshot, table: str, column: str):
    return next(c for c in snapshot.contexts[table].columns if c.name == column)


def test_an_unchanged_catalog_is_loaded_once(source):
    first = catalog_snapshot(source)
    assert catalog_snapshot(source) is first
    assert "mimiciv_hosp.patients" in first.contexts and first.schema.find("patients")
    assert first.schemas == ("mimiciv_hosp", "mimiciv_icu") and first.version


def test_every_kind_of_catalog_change_is_seen_by_the_next_question(source):
    first = catalog_snapshot(source)
    ColumnDoc.objects.filter(table__source=source, table__name="patients", name="gender").update(
        meaning="Administrative sex, as recorded"
    )
    second = catalog_snapshot(source)
    assert second is not first
    assert _column(second, "mimiciv_hosp.patients", "gender").meaning == "Administrative sex, as recorded"

    ColumnDoc.objects.filter(table__source=source, table__name="patients", name="gender").update(
        meaning="changed twice in one transaction"
    )
    assert _column(catalog_snapshot(source), "mimiciv_hosp.patients", "gender").meaning.startswith(
        "changed twice"
    )

    Relationship.objects.filter(from_table__source=source).delete()
    assert not catalog_snapshot(source).edges

    TableDoc.objects.filter(source=source, name="icustays").update(exists_in_source=False)
    gone = catalog_snapshot(source)
    assert not gone.schema.find("icustays") and "mimiciv_icu.icustays" not in gone.contexts
