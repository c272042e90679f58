"""`python manage.py train_answerability --source S`: train, store and activate the schema-relevance
answerability model; `--list`, `--activate VERSION` and `--evaluate FILE` manage and measure it."""

from __future__ import annotations

import time
from dataclasses import replace

from django.core.management.base import BaseCommand, CommandError

from askdb.answerability import store
from askdb.answerability.data import answerability_evaluate, answerability_train
from askdb.answerability.model import FineTuneConfig, TrainConfig, TrainingError
from metadata_admin.services import source_get


def _fmt(metrics: dict) -> list[str]:
    lines = []
    for view in ("unanswerable", "answerable"):
        m = metrics[view]
        lines.append(
            f"  {view:>12} as positive: precision {m['precision']:.3f}  recall {m['recall']:.3f}  F1 {m['f1']:.3f}"
        )
    auc = metrics.get("auc")
    lines.append(
        f"  AUC {auc:.3f}  accuracy {metrics['accuracy']:.3f}  threshold {metrics['threshold']:.3f}  "
        f"n {metrics['n']} ({metrics['n_unanswerable']} unanswerable)"
        if auc is not None
        else f"  accuracy {metrics['accuracy']:.3f}  n {metrics['n']} ({metrics['n_unanswerable']} unanswerable)"
    )
    return lines


class Command(BaseCommand):
    help = "Train the answerability model on the example library (and a file), or list/activate/evaluate."

    def add_arguments(self, parser):
        parser.add_argument("--source", help="clinical source name (default: the only one)")
        parser.add_argument("--from-file", help="also train on a labelled JSON file (benchmark format)")
        parser.add_argument("--list", action="store_true", help="list stored versions")
        parser.add_argument("--activate", metavar="VERSION", help="make a stored version current")
        parser.add_argument("--evaluate", metavar="FILE", help="precision/recall/F1/AUC on a labelled file")
        parser.add_argument(
            "--model-version", help="with --evaluate: the version to measure (default: current)"
        )
        parser.add_argument(
            "--no-activate", action="store_true", help="store the new version, keep the current"
        )
        parser.add_argument("--epochs", type=int, default=FineTuneConfig.epochs)
        parser.add_argument(
            "--folds", type=int, default=TrainConfig.folds, help="cross-fitting folds (0: none)"
        )
        parser.add_argument("--held-out", type=float, default=TrainConfig.held_out)
        parser.add_argument("--seed", type=int, default=TrainConfig.seed)
        parser.add_argument("--max-seconds", type=float, default=FineTuneConfig.max_seconds,
                            help="time cap per fine-tuning round")  # fmt: skip
        parser.add_argument("--threads", type=int, default=FineTuneConfig.threads)

    def handle(self, *args, **opts):
        try:
            source = source_get(opts["source"])
            if opts["list"]:
                return self._list(source)
            if opts["activate"]:
                store.set_current(source.name, opts["activate"])
                self.stdout.write(f"answerability model {opts['activate']} is now current for {source.name}")
                return
            if opts["evaluate"]:
                return self._evaluate(source, opts["evaluate"], opts["model_version"])
            self._train(source, opts)
        except (TrainingError, store.StoreError, ValueError) as exc:
            raise CommandError(str(exc)) from exc

    def _say(self, t0: float):
        return lambda text: self.stdout.write(f"[{time.monotonic() - t0:6.1f}s] {text}")

    def _train(self, source, opts) -> None:
        fine = replace(
            FineTuneConfig(), epochs=opts["epochs"], seed=opts["seed"], max_seconds=opts["max_seconds"],
            threads=opts["threads"],
        )  # fmt: skip
        config = TrainConfig(
            held_out=opts["held_out"], folds=opts["folds"], seed=opts["seed"], fine_tune=fine
        )
        report = answerability_train(
            source=source, from_file=opts["from_file"], config=config, activate=not opts["no_activate"],
            progress=self._say(time.monotonic()),
        )  # fmt: skip
        m = report.manifest
        self.stdout.write(
            f"held-out metrics ({m['held_out_size']} questions; {m['train_size']} used to fit):"
        )
        for line in _fmt(report.metrics):
            self.stdout.write(line)
        rr = m.get("relevance_recall") or {}
        if rr.get("questions"):
            self.stdout.write(
                f"  table relevance: a needed table ranked first {rr['top1']:.0%}, in the top 3 {rr['top3']:.0%}"
            )
        state = "current" if not opts["no_activate"] else "stored, not activated"
        self.stdout.write(self.style.SUCCESS(f"version {report.version} ({state}) in {report.path}"))

    def _list(self, source) -> None:
        versions = store.list_versions(source.name)
        if not versions:
            self.stdout.write(f"no answerability model trained for {source.name}")
            return
        for v in versions:
            m = v.get("metrics") or {}
            f1 = (m.get("unanswerable") or {}).get("f1")
            lib = v.get("library") or {}
            self.stdout.write(
                f"{'*' if v['current'] else ' '} {v['version']}  created {v.get('created', '?')[:19]}  "
                f"library {lib.get('examples', '?')} examples ({lib.get('hash', '?')})  "
                f"held-out F1 {f1 if f1 is not None else '?'}  AUC {m.get('auc', '?')}"
            )

    def _evaluate(self, source, path: str, version: str | None) -> None:
        t0 = time.monotonic()
        metrics = answerability_evaluate(source=source, path=path, version=version, progress=self._say(t0))
        self.stdout.write(f"{path} with model {metrics['version']} ({time.monotonic() - t0:.1f}s):")
        for line in _fmt(metrics):
            self.stdout.write(line)
        if metrics.get("present_tables_only"):
            self.stdout.write(
                f"without the {metrics['needs_absent_tables']} answerable questions needing tables "
                f"{source.name} lacks:"
            )
            for line in _fmt(metrics["present_tables_only"]):
                self.stdout.write(line)
        for category, c in sorted(metrics["by_category"].items()):
            self.stdout.write(f"  {category:>14}: {c['said_answerable']}/{c['n']} called answerable")
