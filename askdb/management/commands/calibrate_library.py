"""Calibrate the library's P(correct) by grouped cross-validation over itself (see library_calibrate)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from askdb.services.calibration import calibration_summary, library_calibrate
from infra.formats import FormatError, load_items
from infra.progress import Progress
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = "Fit the verified-example matcher's confidence and answering threshold for a source."

    def add_arguments(self, parser):
        parser.add_argument(
            "--source", default=None, help="clinical source name (default: the default source)"
        )
        parser.add_argument(
            "--questions", default=None,
            help="extra held-out labelled questions (a file `evaluate` reads); not needed: the library cross-validates itself",
        )  # fmt: skip
        parser.add_argument("--labels", default=None, help="the EHRSQL label.json that goes with --questions")
        parser.add_argument("--no-progress", action="store_true")
        parser.add_argument(
            "--fresh", action="store_true",
            help="ask the library's own questions again even if the last calibration kept them for this library",
        )  # fmt: skip

    def handle(self, *args, source, questions, labels, no_progress, fresh=False, **options):
        try:
            src = source_get(source)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if labels and not questions:
            raise CommandError("--labels goes with --questions (the EHRSQL data.json it labels)")
        items = None
        if questions:  # any format `evaluate` reads: our benchmark's JSON list, EHRSQL, CSV
            try:
                items = [{"question": i.question, "sql": i.gold_sql} for i in load_items(questions, labels)]
            except FormatError as exc:
                raise CommandError(str(exc)) from exc
        total = src.examples.filter(status="active").count() + len(items or [])
        # A bar on a terminal, a line every few seconds otherwise (cron, CI, a log file).
        with Progress(
            total, "calibrating", unit="questions", stream=self.stderr, enabled=not no_progress
        ) as bar:
            report = library_calibrate(source=src, items=items, progress=bar.update, reuse=not fresh)
        self.stdout.write(calibration_summary(report))
