"""`python manage.py train_answerability --source S`: train, store and activate the answerability
model; `--list`, `--activate VERSION` and `--evaluate FILE [--labels label.json]` manage and
measure it. Every held-out number it prints comes from folds that hold out whole kinds of
unanswerable question and whole paraphrase families of answerable ones."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from askdb.answerability import store
from askdb.answerability.data import answerability_train
from askdb.answerability.model import TrainConfig, TrainingError
from askdb.answerability.scorer import answerability_evaluate
from metadata_admin.services import source_get


def format_metrics(metrics: dict) -> list[str]:
    """Precision/recall/F1 both ways, AUC and the answerable share blocked, as report lines."""
    lines = []
    for view in ("unanswerable", "answerable"):
        m = metrics[view]
        lines.append(
            f"  {view:>12} as positive: precision {m['precision']:.3f}  recall {m['recall']:.3f}  F1 {m['f1']:.3f}"
        )
    auc = metrics.get("auc")
    blocked = metrics.get("answerable_blocked")
    lines.append(
        (f"  AUC {auc:.3f}  " if auc is not None else "  ")
        + f"accuracy {metrics['accuracy']:.3f}  threshold {metrics['threshold']:.3f}  "
        f"n {metrics['n']} ({metrics['n_unanswerable']} unanswerable)"
        + (f"  answerable blocked {blocked:.1%}" if blocked is not None else "")
    )
    return lines


class Command(BaseCommand):
    help = "Train the answerability model on the example library (and a file), or list/activate/evaluate."

    def add_arguments(self, parser):
        parser.add_argument("--source", help="clinical source name (default: the only one)")
        parser.add_argument(
            "--from-file", help="also train on a labelled file (JSON list, CSV, EHRSQL data.json)"
        )
        parser.add_argument("--labels", help="the EHRSQL label.json that goes with --from-file or --evaluate")
        parser.add_argument("--list", action="store_true", help="list stored versions")
        parser.add_argument("--activate", metavar="VERSION", help="make a stored version current")
        parser.add_argument("--evaluate", metavar="FILE", help="precision/recall/F1/AUC on a labelled file")
        parser.add_argument(
            "--model-version", help="with --evaluate: the version to measure (default: current)"
        )
        parser.add_argument(
            "--no-activate", action="store_true", help="store the new version, keep the current"
        )
        parser.add_argument(
            "--folds", type=int, default=TrainConfig.folds, help="grouped cross-validation folds"
        )
        parser.add_argument("--seed", type=int, default=TrainConfig.seed)
        parser.add_argument("--max-blocked", type=float, default=TrainConfig.max_blocked,
                            help="largest share of answerable questions the threshold may block")  # fmt: skip
        parser.add_argument("--threads", type=int, default=2, help="torch threads for encoding")

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
                return self._evaluate(source, opts["evaluate"], opts["labels"], opts["model_version"])
            self._train(source, opts)
        except (TrainingError, store.StoreError, ValueError) as exc:
            raise CommandError(str(exc)) from exc

    def _say(self, t0: float):
        def say(text: str) -> None:
            self.stdout.write(f"[{time.monotonic() - t0:6.1f}s] {text}")
            self.stdout.flush()  # a line per step also when the output is a file or a pipe

        return say

    def _train(self, source, opts) -> None:
        import torch

        torch.set_num_threads(max(1, opts["threads"]))
        config = TrainConfig(folds=opts["folds"], seed=opts["seed"], max_blocked=opts["max_blocked"])
        report = answerability_train(
            source=source, from_file=opts["from_file"], labels=opts["labels"], config=config,
            activate=not opts["no_activate"], progress=self._say(time.monotonic()),
        )  # fmt: skip
        m = report.manifest
        self.stdout.write(
            f"{m['evaluation']} ({m['size']} questions in {m['paraphrase_families']} families), the whole gate:"
        )
        for line in format_metrics(report.metrics):
            self.stdout.write(line)
        self.stdout.write("  the learned model alone:")
        for line in format_metrics(m["model_metrics"]):
            self.stdout.write(line)
        state = "current" if not opts["no_activate"] else "stored, not activated"
        self.stdout.write(
            self.style.SUCCESS(
                f"version {report.version} ({state}) in {report.path}: {m['seconds']:.0f}s, "
                f"peak memory {m['peak_memory_mb']:.0f} MB"
            )
        )

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
                f"grouped-CV F1 {f1 if f1 is not None else '?'}  AUC {m.get('auc', '?')}"
            )

    def _evaluate(self, source, path: str, labels: str | None, version: str | None) -> None:
        t0 = time.monotonic()
        metrics = answerability_evaluate(
            source=source, path=path, labels=labels, version=version, progress=self._say(t0)
        )
        self.stdout.write(f"{path} with model {metrics['version']} ({time.monotonic() - t0:.1f}s):")
        for line in format_metrics(metrics):
            self.stdout.write(line)
        if metrics.get("needs_absent_tables"):
            self.stdout.write(
                f"  ({metrics['needs_absent_tables']} answerable questions need tables {source.name} lacks)"
            )
        for kind, k in sorted(metrics["by_kind"].items()):
            self.stdout.write(
                f"  declined as {kind}: {k['declined']} ({k['of_them_unanswerable']} really unanswerable)"
            )
