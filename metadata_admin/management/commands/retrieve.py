"""`python manage.py retrieve "QUESTION" [--source S] [--k 5] [--json]`."""

import json as jsonlib
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError

from metadata_admin.selectors import retrieve
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = "Show the tables and linked values retrieval finds for a question."

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--source")
        parser.add_argument("--k", type=int, default=5)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, question, source, k, json: bool, **options):
        try:
            result = retrieve(source=source_get(source), question=question, k=k)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if json:
            payload = {
                "tables": [asdict(t) for t in result.tables],
                "values": [asdict(v) for v in result.values],
                "timings_ms": result.timings_ms,
            }
            self.stdout.write(jsonlib.dumps(payload, indent=2))
            return
        self.stdout.write("tables:")
        for t in result.tables:
            tag = f" (+{t.via})" if t.via else ""
            self.stdout.write(f"  {t.score:6.3f}  {t.qualified}{tag}  — {'; '.join(t.reasons)}")
        self.stdout.write("linked values:")
        for v in result.values[:10]:
            self.stdout.write(
                f"  {v.score:5.2f}  {v.table}.{v.column} = {v.value!r} {v.code and f'[{v.code}]'} ({v.method}: {v.term!r})"
            )
        if not result.values:
            self.stdout.write("  (none)")
        self.stdout.write("timings: " + ", ".join(f"{k} {v:.1f} ms" for k, v in result.timings_ms.items()))
