"""`python manage.py load_mimic PATH [--replace] [--tables …]`: a MIMIC-IV release into PostgreSQL."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from metadata_admin.clinical import loader
from metadata_admin.services import clinical_release_load, clinical_source_refresh


class Command(BaseCommand):
    help = "Load a MIMIC-IV release (folder or zip with hosp/ and icu/, .csv.gz or .csv) with streaming COPY."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--replace", action="store_true", help="reload tables that already hold rows")
        parser.add_argument("--tables", nargs="*", help="only these tables (e.g. admissions hosp.patients)")
        parser.add_argument(
            "--dsn", help="clinical database to write to (default CLINICAL_ADMIN_DATABASE_URL)"
        )
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, path: Path, replace, tables, dsn, no_progress, **options):
        dsn = dsn or settings.CLINICAL_ADMIN_DATABASE_URL
        if not dsn:
            raise CommandError(
                "set CLINICAL_ADMIN_DATABASE_URL (a role that may create tables) or pass --dsn"
            )
        try:
            report = clinical_release_load(
                path, dsn=dsn, replace=replace, progress=not no_progress, tables=tables, out=self.stdout.write
            )
        except loader.LoadError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(clinical_source_refresh(force_values=True))
        if report.failed:
            for r in report.failed:
                self.stderr.write(f"failed: {r.name}: {r.message}")
            raise CommandError(f"{len(report.failed)} table(s) failed to load; nothing of them was kept")
