"""The offline matcher's calibration on held-out questions, and the demo's seeded library."""

from __future__ import annotations

import json
from pathlib import Path

from askdb.models import Example
from askdb.runner import library_cross_validate
from askdb.services.exports import examples_import
from infra.audit.services import audit_record


def library_calibrate(*, source, items: list[dict] | None = None, progress=None, processes: int = 1) -> dict:
    """Fit P(correct) for library answers and store it with the source (askdb.runner.library_cross_validate).

    Grouped cross-validation over the library itself (whole paraphrase groups held out, unanswerable
    examples included): no question file is needed; labelled `items` add held-out samples. The
    answering threshold is c / (c + 1) for ASKDB_WRONG_ANSWER_COST = c, and the report gives the
    coverage and precision expected at it. `processes`: forked processes for the folds (the
    command's choice; a worker thread must not fork).
    """
    report = library_cross_validate(source=source, items=items, progress=progress, processes=processes)
    source.library_calibration = report
    source.save(update_fields=["library_calibration"])
    audit_record(action="library.calibrated", target=source,
                 message=f"threshold {report['threshold']:.3f} from {report['matched']} held-out matches",
                 detail={k: v for k, v in report.items() if k != "risk"})  # fmt: skip
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
        f"({calibration['matched']} held-out matches, expected precision {calibration['precision']})"
    )
