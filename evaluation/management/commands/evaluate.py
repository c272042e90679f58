"""`python manage.py evaluate --source S --questions FILE [--labels FILE] [--out DIR] [--workers N]
[--limit N] [--resume ID] [--offline]`: a benchmark through the real pipeline, scored and reported."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from evaluation import services
from evaluation.models import Evaluation
from evaluation.report import fmt
from infra.formats import FormatError, load_items
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = (
        "Run every benchmark question through askdb, compare with the gold SQL the EHRSQL way, and "
        "write results.json and report.html. Re-run with the same --out (or --resume ID) to continue."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", help="clinical source name (default: the default source)")
        parser.add_argument("--questions", help="EHRSQL data.json, a JSON list, or a CSV of question,sql")
        parser.add_argument("--labels", help='EHRSQL label.json (id -> SQL, "null" = unanswerable)')
        parser.add_argument("--out", help="output folder (default: $ASKDB_HOME/evaluations/<id>)")
        parser.add_argument("--workers", type=int, default=4, help="questions run in parallel (default 4)")
        parser.add_argument("--limit", type=int, help="only the first N questions")
        parser.add_argument("--resume", type=int, metavar="EVAL_ID", help="continue this evaluation")
        parser.add_argument("--name", default="", help="a label for the comparison page")
        parser.add_argument(
            "--offline", action="store_true", help="no LLM: only what askdb answers without one"
        )

    def handle(self, *args, **opts):
        out = Path(opts["out"]).expanduser() if opts["out"] else None
        evaluation = self._existing(opts["resume"], out, opts["questions"])
        if evaluation is None:
            evaluation = self._start(opts, out)
        else:
            self.stdout.write(f"resuming evaluation {evaluation.pk}")
        out = out or (
            Path(evaluation.out_dir) if evaluation.out_dir else services.default_out_dir(evaluation)
        )
        services.evaluation_write_files(evaluation=evaluation, out_dir=out)

        evaluation = self._run(evaluation, max(1, opts["workers"]))
        paths = services.evaluation_write_files(evaluation=evaluation, out_dir=out)
        self._print(evaluation, paths)

    def _existing(self, resume: int | None, out: Path | None, questions: str | None):
        if resume is not None:
            evaluation = Evaluation.objects.filter(pk=resume).first()
            if evaluation is None:
                raise CommandError(f"no evaluation {resume}")
            return evaluation
        marker = out / "evaluation.json" if out else None
        if marker is None or not marker.is_file():
            return None
        try:
            evaluation_id = int(json.loads(marker.read_text())["evaluation"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"{marker}: unreadable ({exc}); remove it or choose another --out") from exc
        evaluation = Evaluation.objects.filter(pk=evaluation_id).first()
        if evaluation is None:
            return None  # from another database's life: start afresh
        if questions and Path(questions).resolve() != Path(evaluation.questions_file):
            raise CommandError(
                f"{out} holds evaluation {evaluation.pk} of {evaluation.questions_file}; "
                "use another --out to evaluate a different file"
            )
        return evaluation

    def _start(self, opts, out: Path | None):
        if not opts["questions"]:
            raise CommandError("--questions FILE is required (or --resume EVAL_ID)")
        try:
            items = load_items(opts["questions"], opts["labels"])
        except FormatError as exc:
            raise CommandError(str(exc)) from exc
        if opts["limit"]:
            items = items[: opts["limit"]]
        try:
            source = source_get(opts["source"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        evaluation = services.evaluation_start(
            source=source,
            items=items,
            questions_file=str(Path(opts["questions"]).resolve()),
            labels_file=str(Path(opts["labels"]).resolve()) if opts["labels"] else "",
            name=opts["name"],
            out_dir=str(out.resolve()) if out else "",
            offline=opts["offline"],
        )
        if not out:
            evaluation.out_dir = str(services.default_out_dir(evaluation))
            evaluation.save(update_fields=["out_dir"])
        self.stdout.write(
            f"evaluation {evaluation.pk}: {len(items)} questions on {source.name}, version {evaluation.version}"
        )
        return evaluation

    def _run(self, evaluation, workers: int):
        total = evaluation.items.count()
        done = evaluation.items.filter(done=True).count()
        with tqdm(total=total, initial=done, unit="q", desc="evaluate", file=self.stderr._out) as bar:

            def on_item(item):
                bar.update(1)
                bar.set_postfix_str(f"{item.item_id}: {item.verdict}", refresh=False)

            try:
                return services.evaluation_run(evaluation=evaluation, workers=workers, on_item=on_item)
            except KeyboardInterrupt:
                raise CommandError(
                    f"interrupted; run again with --resume {evaluation.pk} (or the same --out) to continue"
                ) from None

    def _print(self, evaluation, paths) -> None:
        m = evaluation.metrics
        ex, ans, rs = m["execution_accuracy"], m["answerability"], m["rs"]
        w = self.stdout.write
        w(f"execution accuracy  {fmt(ex['accuracy'], pct=True)} ({ex['correct']}/{ex['total']} answerable; "
          f"{ex['gold_errors']} gold errors excluded)")  # fmt: skip
        w(f"answerability       P {fmt(ans['precision'], pct=True)}  R {fmt(ans['recall'], pct=True)}  "
          f"F1 {fmt(ans['f1'], pct=True)}  AUC {fmt(ans['auc'], digits=3)}")  # fmt: skip
        w("reliability         " + "  ".join(f"RS({c}) {fmt(v)}" for c, v in rs.items()))
        w(f"results             {paths['results']}")
        w(f"report              {paths['report']}")
