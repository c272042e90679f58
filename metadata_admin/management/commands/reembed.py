"""`python manage.py reembed [--all] [--values]`: embed stale table docs (and the value index)."""

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from infra.providers.embeddings import EmbeddingError
from metadata_admin.models import TableDoc
from metadata_admin.services import source_get, table_docs_reembed, value_index_build


class Command(BaseCommand):
    help = "Re-embed table docs whose text or embedding model changed (--all: every doc)."

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="re-embed everything")
        parser.add_argument("--source")
        parser.add_argument("--values", action="store_true", help="also rebuild the value index")

    def handle(self, *args, all: bool, source, values: bool, **options):
        try:
            src = source_get(source) if source else None
            total = TableDoc.objects.filter(**({"source": src} if src else {})).count()
            with tqdm(total=total, desc="embedding", unit=" docs", disable=None) as bar:
                report = table_docs_reembed(source=src, force=all, progress=bar.update)
            self.stdout.write(
                f"embedded {report.embedded}, unchanged {report.skipped}, failed {len(report.failed)}"
            )
            if values:
                src = src or source_get(None)
                with tqdm(desc="value index", unit=" columns", disable=None) as bar:
                    vr = value_index_build(
                        source=src, progress=lambda c: (bar.set_postfix_str(c), bar.update(1))
                    )
                self.stdout.write(
                    f"value index: {vr.values} values in {len(vr.columns)} columns ({vr.embedded} embedded)"
                )
        except (EmbeddingError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if report.failed:
            raise CommandError(
                f"{len(report.failed)} docs could not be embedded; they stay marked stale and are retried"
            )
