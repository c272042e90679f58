"""`add_source NAME` refuses a name already registered unless --replace: a typo must not silently
repoint a live source (before, it replaced that source's URL without a word)."""

from __future__ import annotations

import sqlite3

import pytest
from django.core.management import CommandError, call_command

from metadata_admin.models import ClinicalSource

pytestmark = pytest.mark.django_db


def _sqlite(path):
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE patients (subject_id integer)")
    return f"sqlite:///{path}"


def test_add_source_refuses_an_existing_name_without_replace(tmp_path):
    first, second = _sqlite(tmp_path / "a.db"), _sqlite(tmp_path / "b.db")
    call_command("add_source", "ward", "--url", first)
    with pytest.raises(CommandError, match=r"already exists; pass --replace"):
        call_command("add_source", "ward", "--url", second)
    assert ClinicalSource.objects.get(name="ward").url == first
    call_command("add_source", "ward", "--url", second, "--replace")
    assert ClinicalSource.objects.get(name="ward").url == second
