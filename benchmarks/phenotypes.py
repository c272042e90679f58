"""Phenotypes from notes: `python benchmarks/phenotypes.py [--parts assertions,f1,scale]
[--patients 400] [--scale-patients 10000] [--json FILE]`.

- **assertions**: the ConText judge on the 300 annotated sentences of
  tests/phenotypes/data/assertions.psv: accuracy, precision and recall of "negated", recall per
  category (target accuracy ≥ 0.90 with no LLM).
- **f1**: a synthetic release (`--patients`, hosp + icu + note, seed 11) loaded into a scratch
  clinical database; each bundled phenotype run through `phenotype_run_execute` (ConText, no LLM)
  and scored against note_truth.json at patient level: F1 of "present" for the notes path and for
  the code-only definition (the phenotype's ICD patterns over diagnoses_icd). Target notes F1 ≥ 0.90.
- **llm**: the map step with the scripted LLM (tests/support) answering each call after 0.5 s:
  50 snippets through the Celery chord on a threads worker (target ≤ 5 s), none lost.
- **scale**: notes only for `--scale-patients` invented patients (one discharge summary and one
  radiology report each): load + index throughput in notes/s (target ≥ 2,000), then one phenotype
  over them (target ≤ 120 s), extrapolated linearly to the full MIMIC-IV-Note module (331,794
  discharge + 2,321,355 radiology notes).

The scratch databases are dropped at the end. Runs against the embedded server of ASKDB_HOME.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from _django import ROOT, setup, table

FULL_MODULE_NOTES = 331_794 + 2_321_355


@contextmanager
def scratch_database():
    import psycopg

    from infra import embedded

    name = f"bench_notes_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield embedded.pg_dsn(name)
    finally:
        with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def part_assertions() -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.phenotypes.test_assertion import annotated, predict

    rows = annotated()
    predicted = predict(rows)
    pairs = list(zip(predicted, (r[0] for r in rows), strict=True))
    tp = sum(p == a == "negated" for p, a in pairs)
    result = {
        "sentences": len(rows),
        "accuracy": sum(p == a for p, a in pairs) / len(rows),
        "negated_precision": tp / max(1, sum(p == "negated" for p, _ in pairs)),
        "negated_recall": tp / max(1, sum(a == "negated" for _, a in pairs)),
        "recall_by_category": {
            c: sum(p == a == c for p, a in pairs) / max(1, sum(a == c for _, a in pairs))
            for c in sorted({a for _, a in pairs})
        },
    }
    print(table(["metric", "value"], [[k, v] for k, v in result.items() if not isinstance(v, dict)]))
    print(table(["category", "recall"], [[k, v] for k, v in result["recall_by_category"].items()]))
    return result


def _source():
    from django.conf import settings

    from metadata_admin.models import ClinicalSource

    source, _ = ClinicalSource.objects.get_or_create(
        name=settings.CLINICAL_SOURCE_NAME, defaults={"url": "env:CLINICAL_DATABASE_URL"}
    )
    return source


def _f1(predicted: set[int], actual: set[int]) -> float:
    if not predicted and not actual:
        return 1.0
    return 2 * len(predicted & actual) / (len(predicted) + len(actual))


def part_f1(patients: int) -> dict:
    from django.conf import settings

    from metadata_admin.clinical import loader, synthetic, synthetic_notes
    from phenotypes.models import PatientDecision
    from phenotypes.services import phenotype_define_bundled, phenotype_run_create, phenotype_run_execute

    rows, result = [], {}
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as dsn:
        generated = synthetic.generate(Path(tmp), patients=patients, seed=11)
        report = loader.load_release(Path(tmp), dsn=dsn, progress=False, out=lambda s: None)
        assert report.ok, report.summary()
        truth = synthetic_notes.read_truth(Path(tmp) / synthetic_notes.TRUTH_FILE)
        settings.NOTES_DATABASE_URL = dsn
        source = _source()
        for phenotype in phenotype_define_bundled():
            t = truth["phenotypes"][phenotype.name]
            started = time.perf_counter()
            run = phenotype_run_execute(run_id=phenotype_run_create(phenotype=phenotype, source=source).pk)
            seconds = time.perf_counter() - started
            decisions = dict(PatientDecision.objects.filter(run=run).values_list("subject_id", "decision"))
            coded = set(
                PatientDecision.objects.filter(run=run, coded=True).values_list("subject_id", flat=True)
            )
            present = {s for s, d in decisions.items() if d == "present"}
            actual = set(t["present"])
            notes_f1, codes_f1 = _f1(present, actual), _f1(coded, actual)
            result[phenotype.name] = {
                "patients": len(decisions),
                "truly_present": len(actual),
                "notes_f1": notes_f1,
                "codes_f1": codes_f1,
                "agreement": run.agreement,
                "seconds": seconds,
            }
            rows.append([phenotype.name, len(actual), notes_f1, codes_f1, round(seconds, 1)])
    print(f"{patients} patients, {generated.notes.discharge + generated.notes.radiology:,} notes")
    print(table(["phenotype", "truly present", "notes F1", "codes F1", "run s"], rows))
    return result


def part_scale(patients: int) -> dict:
    from django.conf import settings

    from metadata_admin.clinical import loader, synthetic_notes
    from phenotypes.models import Phenotype
    from phenotypes.services import phenotype_define_bundled, phenotype_run_create, phenotype_run_execute

    with tempfile.TemporaryDirectory() as tmp, scratch_database() as dsn:
        notes = synthetic_notes.generate_notes(Path(tmp), patients=patients, seed=5)
        n_notes = notes.discharge + notes.radiology
        started = time.perf_counter()
        report = loader.load_release(Path(tmp), dsn=dsn, progress=False, out=lambda s: None)
        load_s = time.perf_counter() - started
        assert report.ok, report.summary()
        settings.NOTES_DATABASE_URL = dsn
        phenotype_define_bundled()
        phenotype = Phenotype.objects.get(name="heart failure")
        started = time.perf_counter()
        run = phenotype_run_execute(run_id=phenotype_run_create(phenotype=phenotype, source=_source()).pk)
        run_s = time.perf_counter() - started
    rate = n_notes / load_s
    result = {
        "patients": patients,
        "notes": n_notes,
        "load_seconds": load_s,
        "load_notes_per_s": rate,
        "run_seconds": run_s,
        "snippets": run.counts.get("snippets"),
        "full_module_load_hours": FULL_MODULE_NOTES / rate / 3600,
        "full_module_run_hours": run_s * FULL_MODULE_NOTES / n_notes / 3600,
    }
    print(
        table(
            ["measure", "value"],
            [[k, round(v, 3) if isinstance(v, float) else v] for k, v in result.items()],
        )
    )
    print(
        "note: synthetic notes are ~1 kB; MIMIC-IV-Note discharge summaries average ~10 kB, so the "
        "extrapolation to the full module is a lower bound on time."
    )
    return result


def part_llm(snippets: int = 50, latency_s: float = 0.5) -> dict:
    """The map step with the scripted LLM answering each call after `latency_s`: wall time of
    `snippets` calls through a Celery chord on an in-process threads worker (target ≤ 5 s)."""
    from celery import chord
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings

    from config.celery import app
    from metadata_admin.clinical import loader, synthetic_notes
    from phenotypes.models import Evidence, Phenotype, PhenotypeRun
    from phenotypes.services import (
        notes_policy_set,
        phenotype_define_bundled,
        phenotype_run_create,
        phenotype_run_execute,
        snippets_for_llm,
    )
    from phenotypes.tasks import phenotype_run_reduce_task, phenotype_snippet_judge_task
    from tests.support.scripted_llm import Delay, Reply, ScriptedLLM

    with tempfile.TemporaryDirectory() as tmp, scratch_database() as dsn, ScriptedLLM() as llm:
        synthetic_notes.generate_notes(Path(tmp), patients=400, seed=9)
        assert loader.load_release(Path(tmp), dsn=dsn, progress=False, out=lambda s: None).ok
        settings.NOTES_DATABASE_URL = dsn
        settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_API_KEY = llm.base_url, "scripted", "x"
        llm.default = Delay(latency_s, Reply('{"assertion": "affirmed"}'))
        phenotype_define_bundled()
        source = _source()
        notes_policy_set(source=source, snippets_to_llm=True)
        run = phenotype_run_create(
            phenotype=Phenotype.objects.get(name="heart failure"), source=source, judge="llm"
        )
        phenotype_run_execute(run_id=run.pk, final=False)
        ids = snippets_for_llm(run_id=run.pk)[:snippets]
        Evidence.objects.filter(decision__run=run).exclude(pk__in=ids).delete()
        app.loader.import_module("celery.contrib.testing.tasks")
        with start_worker(
            app, pool="threads", concurrency=settings.CELERY_WORKER_CONCURRENCY, perform_ping_check=True
        ):
            started = time.perf_counter()
            chord(phenotype_snippet_judge_task.s(i) for i in ids)(phenotype_run_reduce_task.s(run.pk))
            while PhenotypeRun.objects.get(pk=run.pk).status != "done" and time.perf_counter() - started < 60:
                time.sleep(0.05)
            seconds = time.perf_counter() - started
        run.refresh_from_db()
    result = {
        "snippets": len(ids),
        "latency_s": latency_s,
        "seconds": seconds,
        "sent": run.counts.get("sent_to_llm"),
        "failed": run.counts.get("llm_failed"),
        "worker_concurrency": settings.CELERY_WORKER_CONCURRENCY,
    }
    print(table(["measure", "value"], [[k, v] for k, v in result.items()]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="assertions,f1,scale,llm")
    parser.add_argument("--patients", type=int, default=400)
    parser.add_argument("--scale-patients", type=int, default=10_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    parts = args.parts.split(",")
    results = {}
    if "assertions" in parts:
        results["assertions"] = part_assertions()
    if "f1" in parts:
        results["f1"] = part_f1(args.patients)
    if "scale" in parts:
        results["scale"] = part_scale(args.scale_patients)
    if "llm" in parts:
        results["llm"] = part_llm()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
