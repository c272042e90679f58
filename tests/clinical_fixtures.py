"""The clinical side of the test world: synthetic MIMIC-IV-shaped data in the test cluster's
clinical database, and a catalog (source, docs, embeddings, value index) over it.

The data is generated and loaded once and kept in .askdb/test until the generator or the
schema changes (a fingerprint decides), so a test session usually starts with it in place.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

PATIENTS, SEED = 40, 7
ROOT = Path(__file__).resolve().parent.parent


def _fingerprint() -> str:
    h = hashlib.sha256(f"{PATIENTS}/{SEED}".encode())
    clinical = ROOT / "metadata_admin" / "clinical"
    for path in sorted(
        [
            clinical / "synthetic.py",
            clinical / "synthetic_notes.py",
            clinical / "schema.py",
            *(clinical / "vocab").glob("*"),
        ]
    ):
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def ensure_clinical_data() -> str:
    """Load the synthetic data into the test clinical database if it is missing or outdated."""
    from django.conf import settings

    from metadata_admin.clinical import loader, synthetic

    marker = settings.ASKDB_HOME / "clinical-data.fingerprint"
    fingerprint = _fingerprint()
    dsn = settings.CLINICAL_ADMIN_DATABASE_URL
    if not marker.exists() or marker.read_text() != fingerprint:
        out = settings.ASKDB_HOME / "test-data"
        synthetic.generate(out, patients=PATIENTS, seed=SEED)
        report = loader.load_release(out, dsn=dsn, replace=True, progress=False, out=lambda s: None)
        assert not report.failed, report.summary()
        loader.grant_read(dsn, "askdb_reader")
        marker.write_text(fingerprint)
    return dsn


def build_catalog():
    """Source + bundled docs + embeddings + value index in the (test) app database."""
    from metadata_admin.models import ClinicalSource
    from metadata_admin.services import clinical_source_refresh

    clinical_source_refresh(description="synthetic test data")
    return ClinicalSource.objects.get()


@pytest.fixture(scope="session")
def clinical_data():
    return ensure_clinical_data()


@pytest.fixture(scope="session")
def _session_catalog(django_db_setup, django_db_blocker, clinical_data):
    with django_db_blocker.unblock():
        build_catalog()


@pytest.fixture
def source(_session_catalog, db):
    """The test clinical source with its catalog. Rebuilt when a transactional test flushed it."""
    from metadata_admin.models import ClinicalSource

    return ClinicalSource.objects.first() or build_catalog()
