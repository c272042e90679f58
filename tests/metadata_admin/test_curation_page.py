"""Curating a table's documentation in askdb's own pages: text, columns, joins, history."""

from __future__ import annotations

import pytest

from metadata_admin.models import DocRevision, Relationship, TableDoc
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def form_of(doc: TableDoc, **changes) -> dict:
    data = {"description": doc.description, "purpose": doc.purpose, "grain": doc.grain,
            "synonyms": "\n".join(doc.synonyms), "considerations": "\n".join(doc.considerations),
            "example_questions": "\n".join(doc.example_questions), "rel-count": "0"}  # fmt: skip
    for c in doc.columns.all():
        data[f"col-{c.name}-meaning"] = c.meaning
        data[f"col-{c.name}-example_values"] = c.example_values
        if c.sensitive:
            data[f"col-{c.name}-sensitive"] = "1"
    return data | changes


def test_an_admin_edits_text_columns_and_joins_and_the_old_text_is_kept(client, source):
    client.force_login(make_user("ada", "admin"))
    doc = TableDoc.objects.get(source=source, name="admissions")
    patients = TableDoc.objects.get(source=source, name="patients")
    page = client.get(f"/catalog/tables/{doc.pk}/")
    assert page.status_code == 200 and "What it is used for" in page.content.decode()
    old = doc.description
    Relationship.objects.filter(from_table=doc).delete()
    response = client.post(f"/catalog/tables/{doc.pk}/", form_of(
        doc, description="One row per hospital stay.", synonyms="hospital stay\ninpatient episode",
        **{"col-hadm_id-meaning": "The stay's id.", "rel-0-to": str(patients.pk), "rel-0-on": "subject_id = subject_id",
           "rel-0-kind": "foreign_key", "note": "plainer words"}))  # fmt: skip
    assert response.status_code == 302
    doc.refresh_from_db()
    assert doc.description == "One row per hospital stay." and doc.synonyms == [
        "hospital stay",
        "inpatient episode",
    ]
    assert doc.columns.get(name="hadm_id").meaning == "The stay's id."
    join = Relationship.objects.get(from_table=doc)
    assert join.to_table == patients and join.column_pairs == [["subject_id", "subject_id"]]
    revision = DocRevision.objects.filter(table=doc).first()
    assert revision.note == "plainer words" and revision.snapshot["description"] == old
    assert "plainer words" in client.get(f"/catalog/tables/{doc.pk}/").content.decode()


def test_a_join_on_a_column_that_does_not_exist_is_refused_with_the_reason(client, source):
    client.force_login(make_user("ada", "admin"))
    doc = TableDoc.objects.get(source=source, name="admissions")
    patients = TableDoc.objects.get(source=source, name="patients")
    before = doc.description
    response = client.post(f"/catalog/tables/{doc.pk}/", form_of(
        doc, description="changed", **{"rel-0-to": str(patients.pk), "rel-0-on": "subject_id = patient_no"}))  # fmt: skip
    assert response.status_code == 400
    assert "has no column “patient_no”" in response.content.decode()
    doc.refresh_from_db()
    assert doc.description == before


def test_curation_is_for_admins(client, source):
    client.force_login(make_user("rita", "reviewer"))
    doc = TableDoc.objects.get(source=source, name="admissions")
    assert client.get(f"/catalog/tables/{doc.pk}/").status_code == 403


def test_the_columns_the_loader_indexes_are_marked_on_the_curation_page(client, source):
    import re

    client.force_login(make_user("ada", "admin"))
    doc = TableDoc.objects.get(source=source, name="labevents")
    page = client.get(f"/catalog/tables/{doc.pk}/").content.decode()

    def marked(column: str) -> bool:
        row = re.search(rf"<code>{column}</code><br><span[^>]*>(.*?)</span></th>", page, re.S)
        assert row, column
        return "indexed" in row.group(1)

    # A single-patient, single-admission or single-item question uses an index; a value filter does not.
    assert marked("subject_id") and marked("hadm_id") and marked("itemid") and marked("charttime")
    assert not marked("valuenum") and not marked("flag")
