"""`python manage.py grant_readers [--source NAME]`: grant each access tier's clinical reader exactly
its columns now (loads and catalog changes do it by themselves; this is for an upgrade or a DBA)."""

import psycopg
from django.core.management.base import BaseCommand, CommandError

from metadata_admin.services import source_get, source_reader_grants


class Command(BaseCommand):
    help = "Grant the clinical readers their columns: every column to the full reader, all but the sensitive ones to the restricted reader."

    def add_arguments(self, parser):
        parser.add_argument("--source", help="a registered source (default: the default source)")

    def handle(self, *args, source, **options):
        try:
            granted = source_reader_grants(source_get(source))
        except (ValueError, psycopg.Error) as exc:
            raise CommandError(str(exc).strip().splitlines()[0]) from exc
        if not granted:
            raise CommandError(
                "nothing granted: askdb grants only the default PostgreSQL source's readers, with "
                "CLINICAL_ADMIN_DATABASE_URL set; otherwise run the grants in the README (Database roles)"
            )
        for role, hidden in granted.items():
            self.stdout.write(f"{role}: every column" + (f" but {hidden} sensitive" if hidden else ""))
