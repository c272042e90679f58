"""`python manage.py export_docs [--source S] OUT_DIR`: the catalog as YAML, one file per schema."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from metadata_admin.services import docs_export, source_get


class Command(BaseCommand):
    help = "Write the catalog's table documentation as YAML (the format import_docs reads)."

    def add_arguments(self, parser):
        parser.add_argument("out_dir", type=Path)
        parser.add_argument("--source")

    def handle(self, *args, out_dir: Path, source, **options):
        try:
            files = docs_export(source=source_get(source))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        out_dir.mkdir(parents=True, exist_ok=True)
        for schema, text in files.items():
            path = out_dir / f"{schema}.yaml"
            path.write_text(text, encoding="utf-8")
            self.stdout.write(f"wrote {path}")
