"""`python manage.py add_source NAME --url URL [--as-of TIMESTAMP] [--replace]`."""

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from infra.adapters.clinical import ExecutionError
from metadata_admin.services import source_register


class Command(BaseCommand):
    help = "Register a clinical source (postgresql://… or sqlite:///path, opened read-only)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--url", required=True, help="connection URL, or env:VARIABLE to read it from the environment"
        )
        parser.add_argument(
            "--as-of", help="'now' for this data, e.g. 2210-12-31T00:00:00Z (MIMIC dates are shifted)"
        )
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="update the source of that name if it exists (else refused)",
        )

    def handle(self, *args, name, url, as_of, description, replace=False, **options):
        when = None
        if as_of:
            when = parse_datetime(as_of) or parse_datetime(f"{as_of}T00:00:00+00:00")
            if when is None:
                raise CommandError(f"--as-of {as_of!r} is not a timestamp like 2210-12-31T00:00:00Z")
        try:
            source = source_register(name=name, url=url, as_of=when, description=description, replace=replace)
        except ExecutionError as exc:
            raise CommandError(f"cannot use {url}: {exc.message}") from exc
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"registered {source.name} ({source.engine}, dialect {source.dialect})")
