"""Catalog invariants as system checks.

askdb.W002  stored vectors were made by another embedding model or have another dimension
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
