"""`python manage.py export_examples [--source S] [--format json|yaml] [--out FILE] [--retired]`."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from askdb.library_io import FORMATS, dump_examples
from askdb.services.exports import examples_export
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = (
        "Write the example library as JSON or YAML, in the shape import_examples reads (stdout by default)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", help="clinical source name (default: the default source)")
        parser.add_argument("--format", choices=FORMATS, help="default: from --out's extension, else json")
        parser.add_argument("--out", type=Path, help="file to write (default: standard output)")
        parser.add_argument("--retired", action="store_true", help="include retired examples")

    def handle(self, *args, source, format: str | None, out: Path | None, retired: bool, **options):
        out = Path(out) if out else None  # call_command passes str
        fmt = format or ("yaml" if out is not None and out.suffix.lower() in (".yaml", ".yml") else "json")
        try:
            src = source_get(source)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        examples = examples_export(source=src, include_retired=retired)
        body = dump_examples(examples, fmt=fmt, source=src.name)
        if out is None:
            self.stdout.write(body.decode(), ending="")
            return
        try:
            out.write_bytes(body)
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from exc
        self.stderr.write(f"wrote {len(examples)} examples of {src.name} to {out}")
