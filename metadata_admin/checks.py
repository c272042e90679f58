"""Catalog invariants as system checks.

askdb.W002  stored vectors were made by another embedding model or have another dimension
askdb.W011  a PostgreSQL source has no reader for the tier without view_sensitive
"""

from __future__ import annotations

from django.core import checks
from django.db import DatabaseError


@checks.register("askdb")
def check_embeddings_match_provider(app_configs=None, **kwargs):
    from metadata_admin.services import embeddings_mismatched

    try:
        mismatched = embeddings_mismatched()
    except DatabaseError:
        return []  # not migrated yet, or unreachable: askdb.E005 says so
    stale = {what: n for what, n in mismatched.items() if n}
    if not stale:
        return []
    counts = ", ".join(f"{n} {what}" for what, n in stale.items())
    return [
        checks.Warning(
            f"{counts} have embeddings from another model or of another dimension than EMBEDDING_PROVIDER gives.",
            hint="Run `python manage.py reembed --all --values` after changing the embedding provider or model.",
            id="askdb.W002",
        )
    ]


@checks.register("askdb")
def check_restricted_readers(app_configs=None, **kwargs):
    """Without a restricted reader, users without view_sensitive run as the full reader: sensitive
    columns are then kept from them by validation alone, not by the database."""
    from metadata_admin.models import ClinicalSource

    try:
        sources = list(ClinicalSource.objects.filter(engine=ClinicalSource.Engine.POSTGRESQL))
    except DatabaseError:
        return []
    missing = [s.name for s in sources if not s.restricted_url()]
    if not missing:
        return []
    return [
        checks.Warning(
            f"PostgreSQL source(s) {', '.join(missing)} have no reader for users without view_sensitive; "
            "the database does not keep sensitive columns from them.",
            hint="Create the restricted reader (README, 'Database roles') and set CLINICAL_RESTRICTED_DATABASE_URL "
            "(for a source url env:NAME, NAME_RESTRICTED).",
            id="askdb.W011",
        )
    ]
