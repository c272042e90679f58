"""`python manage.py import_docs [SOURCE] [PATH …]`: curated YAML docs into the catalog."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from metadata_admin.docs import BUNDLED_DOCS, DocsError
from metadata_admin.services import docs_import, source_get, table_docs_reembed


class Command(BaseCommand):
    help = "Import table documentation YAML (default: the bundled MIMIC-IV docs), then re-embed what changed."

    def add_arguments(self, parser):
        parser.add_argument("--source")
        parser.add_argument("paths", nargs="*", type=Path)
        parser.add_argument("--no-embed", action="store_true")

    def handle(self, *args, source, paths, no_embed, **options):
        try:
            src = source_get(source)
            report = docs_import(source=src, paths=paths or [BUNDLED_DOCS])
        except (DocsError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        for warning in report.warnings:
            self.stderr.write(f"warning: {warning}")
        self.stdout.write(report.summary())
        if not no_embed:
            emb = table_docs_reembed(source=src)
            self.stdout.write(f"embedded {emb.embedded}, unchanged {emb.skipped}, failed {len(emb.failed)}")
