"""Choose the offline matcher's answering threshold on held-out questions (see library_calibrate)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from askdb.services.calibration import library_calibrate
from infra.formats import FormatError, load_items
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = "Fit the verified-example matcher's confidence and answering threshold for a source."

    def add_arguments(self, parser):
        parser.add_argument(
            "--source", default=None, help="clinical source name (default: the default source)"
        )
        parser.add_argument(
            "--questions", default=None,
            help="held-out labelled questions (a file `evaluate` reads); default: leave-one-out over the library",
        )  # fmt: skip
        parser.add_argument("--min-precision", type=float, default=0.95)
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, source, questions, min_precision, no_progress, **options):
        try:
            src = source_get(source)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        items = None
        if questions:  # any format `evaluate` reads: our benchmark's JSON list, EHRSQL, CSV
            try:
                items = [{"question": i.question, "sql": i.gold_sql} for i in load_items(questions)]
            except FormatError as exc:
                raise CommandError(str(exc)) from exc
        total = len(items) if items else src.examples.filter(kind="answerable", status="active").count()
        bar = tqdm(total=total, disable=no_progress, unit="q", desc="calibrating")
        report = library_calibrate(source=src, items=items, min_precision=min_precision,
                                   progress=lambda n: bar.update(n - bar.n))  # fmt: skip
        bar.close()
        precision = "n/a" if report["precision"] is None else f"{report['precision']:.3f}"
        self.stdout.write(
            f"{report['mode']}: {report['held_out']} questions, {report['matched']} matched a template "
            f"({report['correct_matches']} correctly); threshold {report['threshold']:.3f}, "
            f"answering {report['answered']} with precision {precision}"
        )
