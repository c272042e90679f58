"""`python manage.py import_examples FILE [--labels FILE] [--source S] [--approved-by USER] [--no-execute]`."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from askdb.library_io import LibraryFormatError, parse_ehrsql, parse_examples
from askdb.services.exports import examples_import
from infra.adapters.clinical import ExecutionError
from infra.progress import Progress
from infra.providers.embeddings import EmbeddingError
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = (
        "Import verified question/SQL pairs into the example library: JSON or YAML (a list, an askdb "
        "export, a benchmark file), or the EHRSQL pair (data.json with --labels label.json). Pairs whose "
        "SQL does not validate or run are reported, not imported; the exit status is non-zero only when "
        "the file itself cannot be used."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="examples file, or EHRSQL data.json with --labels")
        parser.add_argument(
            "--labels", type=Path, help='EHRSQL label.json (id → SQL, "null" if unanswerable)'
        )
        parser.add_argument("--source", help="clinical source name (default: the default source)")
        parser.add_argument("--approved-by", dest="approved_by", help="username recorded as the approver")
        parser.add_argument(
            "--no-execute", dest="no_execute", action="store_true",
            help="only validate each SQL against the catalog; do not run it",
        )  # fmt: skip

    def handle(
        self, *args, file: Path, labels: Path | None, source, approved_by, no_execute: bool, **options
    ):
        file, labels = Path(file), Path(labels) if labels else None  # call_command passes str
        try:
            src = source_get(source)
            approver = self._user(approved_by)
            if labels is not None:
                items = parse_ehrsql(self._read(file), self._read(labels))
            else:
                items = parse_examples(self._read(file), file.name)
        except (LibraryFormatError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        # A bar on a terminal, a line every few seconds otherwise (cron, CI, a log file).
        with Progress(len(items), "importing", unit="pairs", stream=self.stderr) as bar:
            try:
                report = examples_import(
                    source=src, items=items, approved_by=approver, execute=not no_execute, progress=bar.update
                )
            except (ExecutionError, EmbeddingError) as exc:
                raise CommandError(
                    f"the import stopped: {exc}; examples written before it were kept"
                ) from exc
        self.stdout.write(f"{file.name} into {src.name}: {report.summary()}")
        for failure in report.failed:
            self.stdout.write(f"  failed {failure['id']}: {failure['error']}")
            self.stdout.write(f"    question: {failure['question']}")

    def _read(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def _user(self, username: str | None):
        if not username:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r} (for --approved-by)")
        return user
