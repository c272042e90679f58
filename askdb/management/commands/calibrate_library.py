"""Calibrate the library's P(correct) by grouped cross-validation over itself (see library_calibrate)."""

from __future__ import annotations

import threading

from django.core.management.base import BaseCommand, CommandError

from askdb.services.calibration import calibration_summary, library_calibrate
from askdb.services.calibration_worker import leave
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

    def run_from_argv(self, argv):
        """From `manage.py` only (call_command, a task or a test never come here): once the command is
        done, the process ends without the interpreter's teardown (calibration_worker.leave: its
        connections closed, logs and output flushed). Why: the calibration's library and caches are
        about a gigabyte of small objects, and freeing them one by one took 11.5 s of the 89 s a first
        calibration of the EHRSQL train library takes; the operating system takes the memory back at
        once. A failed command exits as Django makes it (its SystemExit never reaches `leave`); a
        non-daemon thread of this process still running is waited for, as at any exit."""
        super().run_from_argv(argv)
        if not any(
            t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()
        ):
            leave()

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
