"""The offline matcher's calibration on held-out questions, and the demo's seeded library."""

from __future__ import annotations

import json
from pathlib import Path

from django.utils import timezone

from askdb.models import Example
from askdb.pipeline import offline
from askdb.pipeline.compare import results_match
from askdb.runner import LIBRARY_CANDIDATES, column_values_like, library_candidates
from askdb.services.exports import examples_import
from infra.adapters.catalog_search import examples_nearest
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_catalog_schema, source_executor


def library_calibrate(
    *, source, items: list[dict] | None = None, min_precision: float = 0.95, progress=None
) -> dict:
    """Fit the offline matcher's confidence and choose its answering threshold on held-out questions.

    `items` are labelled questions ({"question", "sql"}) that are not in the library. Without them,
    leave-one-out over the library: each verified example is asked of the library without it, and
    a match counts as correct when its bound SQL returns the example's own result. The threshold
    is the lowest at which precision stays at or above `min_precision` (an abstention is cheap, a
    wrong answer is not).
    """
    executor, catalog, embedder = source_executor(source), source_catalog_schema(source), get_embedder()
    timeout = 10

    def rows(sql: str):
        return executor.execute(sql, timeout_s=timeout, row_cap=1000).rows

    def lookup(table_column: str, text: str):
        return column_values_like(executor, table_column, text, dialect=source.dialect)

    held_out = [(None, str(i["question"]), str(i.get("sql") or "")) for i in (items or []) if i.get("sql")]
    if not items:
        held_out = [
            (e.pk, e.question, e.sql)
            for e in Example.objects.filter(source=source, kind="answerable", status="active").order_by("pk")
        ]
    vectors = embedder.embed([q for _, q, _ in held_out]) if held_out else []
    samples: list[tuple[dict, bool]] = []
    for n, ((own_id, question, gold), vector) in enumerate(zip(held_out, vectors, strict=True), start=1):
        nearest = examples_nearest(
            source_id=source.pk, vector=vector, model=embedder.model, k=LIBRARY_CANDIDATES + 1
        )
        candidates = library_candidates([(i, sim) for i, sim in nearest if i != own_id][:LIBRARY_CANDIDATES])
        results = offline.match(question, candidates, lookup=lookup, catalog=catalog)
        if results and results[0].hard_ok and results[0].sql:
            try:
                correct = results_match(rows(results[0].sql), rows(gold))
            except ExecutionError:
                correct = False
            samples.append((results[0].features, correct))
        if progress:
            progress(n)
    calibration = offline.fit_calibration(samples)
    scored = [(calibration.predict(f), ok) for f, ok in samples]
    threshold = offline.choose_threshold(scored, min_precision=min_precision)
    calibration = offline.Calibration(
        calibration.weights, calibration.intercept, threshold, calibration.samples
    )
    answered = [(c, ok) for c, ok in scored if c >= threshold]
    report = {
        "calibration": calibration.to_dict(),
        "held_out": len(held_out), "matched": len(samples), "correct_matches": sum(ok for _, ok in samples),
        "threshold": threshold, "answered": len(answered),
        "precision": round(sum(ok for _, ok in answered) / len(answered), 4) if answered else None,
        "mode": "file" if items else "leave-one-out", "at": timezone.now().isoformat(),
    }  # fmt: skip
    source.library_calibration = report
    source.save(update_fields=["library_calibration"])
    audit_record(action="library.calibrated", target=source,
                 message=f"threshold {threshold:.3f} from {len(samples)} matches", detail=report)  # fmt: skip
    return report


def library_seed_demo(*, source, path, approved_by=None) -> str:
    """Seed an empty library with our benchmark's train split, then calibrate the matcher on it.

    Only for the demo: a fresh demo with no LLM then answers the common questions the library
    covers and politely declines the rest. A library that holds anything is left alone.
    """
    if Example.objects.filter(source=source).exists():
        return f"library already holds {Example.objects.filter(source=source).count()} examples"
    path = Path(path)
    if not path.is_file():
        return f"no seed file at {path}; the library starts empty"
    items = [
        {"id": i.get("id"), "question": i["question"], "sql": i.get("sql") or ""}
        for i in json.loads(path.read_text())
    ]
    # Validation only: the synthetic demo data has other patients than the release the SQL was
    # checked on, and pairs that read tables this source lacks fail validation and are reported.
    report = examples_import(
        source=source, items=items, approved_by=approved_by, execute=False, origin="demo"
    )
    calibration = library_calibrate(source=source)
    return (
        f"{report.summary()} from {path.name}; offline answering threshold {calibration['threshold']:.2f} "
        f"({calibration['matched']} leave-one-out matches)"
    )
