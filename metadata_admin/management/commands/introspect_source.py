"""`python manage.py introspect_source SOURCE`: read the live catalog into docs."""

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from infra.adapters.clinical import ExecutionError
from metadata_admin.services import source_get, source_introspect


class Command(BaseCommand):
    help = "Read tables, columns, types, keys, row counts and sample values; curated text is kept."

    def add_arguments(self, parser):
        parser.add_argument("source", nargs="?")
        parser.add_argument("--no-samples", action="store_true", help="skip sampling distinct values")
        parser.add_argument(
            "--exact-counts", action="store_true", help="count(*) instead of planner estimates"
        )

    def handle(self, *args, source, no_samples, exact_counts, **options):
        try:
            src = source_get(source)
            bar = tqdm(desc="introspecting", unit=" tables", disable=None)
            report = source_introspect(
                source=src,
                sample_values=not no_samples,
                exact_counts=exact_counts,
                progress=lambda name: (bar.set_postfix_str(name), bar.update(1)),
            )
            bar.close()
        except (ValueError, ExecutionError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(report.summary())
