"""`python manage.py load_mimic PATH [--replace] [--tables …]`: a MIMIC-IV release into PostgreSQL.

`load_mimic --indexes-only [--tables …]` adds the indexes of the layout (the community ones and
the ones researchers' queries need) and the summaries the loader keeps (schema.SUMMARIES) to a
database loaded by other means; safe to re-run."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from metadata_admin.clinical import loader
from metadata_admin.services import clinical_indexes_build, clinical_release_load, clinical_source_refresh


class Command(BaseCommand):
    help = "Load a MIMIC-IV release (folder or zip with hosp/ and icu/, .csv.gz or .csv) with streaming COPY."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path, nargs="?")
        parser.add_argument("--replace", action="store_true", help="reload tables that already hold rows")
        parser.add_argument("--tables", nargs="*", help="only these tables (e.g. admissions hosp.patients)")
        parser.add_argument(
            "--dsn", help="clinical database to write to (default CLINICAL_ADMIN_DATABASE_URL)"
        )
        parser.add_argument("--no-progress", action="store_true")
        parser.add_argument(
            "--indexes-only",
            action="store_true",
            help="load nothing: create the indexes that the loaded tables lack (for a database loaded by other means)",
        )

    def handle(self, *args, path: Path | None, replace, tables, dsn, no_progress, indexes_only, **options):
        dsn = dsn or settings.CLINICAL_ADMIN_DATABASE_URL
        if not dsn:
            raise CommandError(
                "set CLINICAL_ADMIN_DATABASE_URL (a role that may create tables) or pass --dsn"
            )
        if indexes_only:
            self._indexes_only(dsn, tables)
            return
        if path is None:
            raise CommandError("give the release folder or zip (or --indexes-only)")
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

    def _indexes_only(self, dsn: str, tables: list[str] | None) -> None:
        try:
            results = clinical_indexes_build(dsn=dsn, tables=tables, out=self.stdout.write)
        except loader.LoadError as exc:
            raise CommandError(str(exc)) from exc
        created = sum(r.status == "created" for r in results)
        present = sum(r.status == "exists" for r in results)
        failed = [r for r in results if r.status == "failed"]
        self.stdout.write(f"indexes: {created} created, {present} already there, {len(failed)} failed")
        if failed:
            raise CommandError(
                f"{len(failed)} index(es) failed: " + "; ".join(f"{r.name}: {r.message}" for r in failed)
            )
