"""Catalog tasks: embedding happens in the worker, never in a request."""

from __future__ import annotations

from celery import shared_task

from infra.providers.embeddings import EmbeddingError
from metadata_admin.models import TableDoc
from metadata_admin.services import table_docs_reembed


@shared_task(
    name="metadata_admin.embed_table_doc",
    acks_late=True,
    autoretry_for=(EmbeddingError,),
    retry_backoff=5,
    retry_backoff_max=300,
    max_retries=5,
    soft_time_limit=120,
)
def embed_table_doc(table_doc_id: int) -> dict:
    doc = TableDoc.objects.filter(pk=table_doc_id).first()
    if doc is None:
        return {"skipped": "deleted"}
    report = table_docs_reembed(source=doc.source)
    if doc.qualified_name in report.failed:
        raise EmbeddingError(TableDoc.objects.get(pk=table_doc_id).embedding_error)  # retried with backoff
    return {"embedded": report.embedded}
