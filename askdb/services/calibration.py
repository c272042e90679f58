"""The offline matcher's calibration on held-out questions, and the demo's seeded library."""

from __future__ import annotations

import json
import re
from pathlib import Path

from askdb.models import Example
from askdb.runner import library_cross_validate
from askdb.services.exports import examples_import
from askdb.services.sql import ReviewError, sql_check
from infra.audit.services import audit_record


def library_calibrate(*, source, items: list[dict] | None = None, progress=None) -> dict:
    """Fit P(correct) for library answers and store it with the source (askdb.runner.library_cross_validate).

    Grouped cross-validation over the library itself (whole paraphrase groups held out, unanswerable
    examples included): no question file is needed; labelled `items` add held-out samples. The
    answering threshold is c / (c + 1) for ASKDB_WRONG_ANSWER_COST = c, and the report gives the
    coverage and precision expected at it.
    """
    report = library_cross_validate(source=source, items=items, progress=progress)
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
    items, remapped = _seed_patients_present(source, items)
    # Validation only: pairs that read tables this source lacks fail validation and are reported.
    report = examples_import(
        source=source, items=items, approved_by=approved_by, execute=False, origin="demo"
    )
    calibration = library_calibrate(source=source)
    moved = f"; {remapped} patient ids the data lacks replaced by patients it has" if remapped else ""
    return f"{report.summary()} from {path.name}{moved}; {calibration_summary(calibration)}"


def calibration_summary(report: dict) -> str:
    """One line on what a calibration found, in words an admin can act on.

    With no held-out match (a small library whose templates each have one wording, like the demo's
    seed) there is nothing to fit: say that the hand-set threshold applies, not "precision None".
    """
    threshold = (
        f"P(correct) threshold {report['threshold']:.3f} (wrong-answer cost {report['wrong_answer_cost']:g})"
    )
    if not report["matched"]:
        return (
            f"{report['held_out']} questions held out, none matched another paraphrase group's template, "
            f"so there is nothing to calibrate on: the default {threshold} applies until the library "
            "holds more paraphrases of each template"
        )
    precision = "n/a" if report["precision"] is None else f"{report['precision']:.3f}"
    return (
        f"{report['mode']}: {report['held_out']} questions ({report['templates']} templates), "
        f"{report['matched']} matched a template ({report['correct_matches']} correctly); {threshold}: "
        f"expected coverage {report['expected_coverage']}, answering {report['answered']} "
        f"with precision {precision}"
    )


_PATIENT_ID = re.compile(r"\bsubject_id\s*=\s*(\d+)\b")
_CANDIDATES_TRIED = 6


def _seed_patients_present(source, items: list[dict]) -> tuple[list[dict], int]:
    """Rewrite the seed's patient ids that the loaded data lacks to patients it has.

    The seed was written on the MIMIC-IV release; the demo's synthetic data has other patients, so
    every patient-specific example would answer "nothing matches". Each missing id becomes one
    present patient (the same one in every example and paraphrase naming it), in the question and
    the SQL alike, so the templates built from them stay valid. Among the richest patients the one
    for which most of those examples return rows is chosen. Ids the data has (real MIMIC-IV) stay.
    """
    named = sorted({int(m) for item in items for m in _PATIENT_ID.findall(item["sql"])})
    if not named:
        return items, 0

    def rows(sql: str) -> int:
        try:
            _, result = sql_check(source=source, sql=sql, row_cap=1, purpose="demo library seeding")
        except ReviewError:
            return 0
        return result.row_count

    def query(sql: str) -> list[int]:
        try:
            _, result = sql_check(source=source, sql=sql, purpose="demo library seeding")
        except ReviewError:
            return []
        return [int(row[0]) for row in result.rows]

    ids = ", ".join(str(i) for i in named)
    present = set(query(f"SELECT p.subject_id FROM mimiciv_hosp.patients AS p WHERE p.subject_id IN ({ids})"))
    missing = [i for i in named if i not in present]
    # The patients with the most admissions first: the likeliest to have the labs, drugs, stays asked for.
    candidates = [
        i
        for i in query(
            "SELECT a.subject_id FROM mimiciv_hosp.admissions AS a GROUP BY a.subject_id "
            "ORDER BY COUNT(*) DESC, a.subject_id"
        )
        if i not in present
    ]
    if not missing or not candidates:
        return items, 0

    def moved(item: dict, old: int, new: int) -> dict:
        pattern = re.compile(rf"\b{old}\b")
        return {
            **item,
            "question": pattern.sub(str(new), item["question"]),
            "sql": pattern.sub(str(new), item["sql"]),
        }

    mapping: dict[int, int] = {}
    for old in missing:
        naming = [i for i in items if re.search(rf"\b{old}\b", i["question"] + " " + i["sql"])]
        free = [c for c in candidates if c not in mapping.values()] or candidates
        best, best_hits = free[0], -1
        for new in free[:_CANDIDATES_TRIED]:
            hits = sum(rows(moved(i, old, new)["sql"]) > 0 for i in naming if i["sql"])
            if hits > best_hits:
                best, best_hits = new, hits
            if hits == sum(1 for i in naming if i["sql"]):
                break
        mapping[old] = best
    out = []
    for item in items:
        for old, new in mapping.items():
            item = moved(item, old, new)
        out.append(item)
    return out, len(mapping)
