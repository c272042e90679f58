"""calibrate_library says how far it got, question by question, and remembering results, value
lookups and probes across folds does not change what it fits (askdb.services.calibration.library_cross_validate)."""

from __future__ import annotations

import time

import psycopg
import pytest

from askdb.services.calibration import library_cross_validate
from askdb.services.examples import example_upsert
from core.match import calibrate
from infra import embedded

pytestmark = pytest.mark.django_db

GENDER_SQL = "SELECT gender FROM mimiciv_hosp.patients WHERE subject_id = {id}"
ADMITS_SQL = "SELECT COUNT(*) AS admissions FROM mimiciv_hosp.admissions WHERE subject_id = {id}"


def calibration_library(source, *, patients: int, examples: int | None = None) -> list[int]:
    """A small library to calibrate: two templates (a patient's gender, their admissions) asked of the
    first `examples` of `patients` demo patients (all of them by default), and one unanswerable
    question; the patients' ids, so labelled questions can name ones the library has or lacks."""
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        rows = conn.execute("SELECT subject_id FROM mimiciv_hosp.patients ORDER BY 1 LIMIT %s", (patients,))
        ids = [r[0] for r in rows]
    for i in ids[:examples]:
        example_upsert(
            source=source, question=f"what is the gender of patient {i}?", sql=GENDER_SQL.format(id=i)
        )
        example_upsert(source=source, question=f"how many times was patient {i} admitted?",
                       sql=ADMITS_SQL.format(id=i))  # fmt: skip
    example_upsert(source=source, question="what will the weather be tomorrow?", sql="", kind="unanswerable")
    return ids


def test_calibration_reports_each_question_and_is_the_same_when_run_again(source):
    ids = calibration_library(source, patients=4)
    items = [
        {"question": f"tell me the gender of patient {ids[0]}", "sql": GENDER_SQL.format(id=ids[0])},
        {"question": "which patients will come back next year?", "sql": ""},
    ]
    reports, counts = [], []
    for _ in range(2):
        seen: list[int] = []
        reports.append(library_cross_validate(source=source, items=items, progress=seen.append))
        counts.append(seen)
    one, two = ({k: v for k, v in r.items() if k != "at"} for r in reports)
    assert one == two and one["held_out"] == 11 and one["matched"] > 0
    assert counts[0] == counts[1] == list(range(1, 12))  # one step per question asked


def _library(source) -> tuple[list[int], list[dict]]:
    ids = calibration_library(source, patients=6)
    items = [{"question": f"tell me the gender of patient {i}", "sql": GENDER_SQL.format(id=i)} for i in ids]
    items += [
        {"question": f"number of admissions of patient {i}", "sql": ADMITS_SQL.format(id=i)} for i in ids
    ]
    return ids, [*items, {"question": "which patients will come back next year?", "sql": ""}]


@pytest.mark.django_db(transaction=True)  # committed: the worker process reads the library too
def test_calibration_in_two_processes_is_the_one_of_one_process(source, monkeypatch):
    """Worker processes (spawn) do whole parts of the cross-validation; the samples come back in
    order, so the report is exactly the one-process one, and every question is still counted once.
    Parts small enough that both processes get labelled ones (a slice of the file each)."""
    monkeypatch.setattr(calibrate, "LABELLED_PART", 2)
    monkeypatch.setattr(calibrate, "TAIL_PART", 2)  # the labelled questions come last: cut as the tail
    _, items = _library(source)
    reports, counts, here = [], [], []
    for processes in (1, 2):
        if processes == 2:  # this process slowed down, so the worker (seconds to start) gets parts
            monkeypatch.setattr(calibrate, "run_part", _slowly(calibrate.run_part, here))
        seen: list[int] = []
        reports.append(
            library_cross_validate(
                source=source, items=items, progress=seen.append, processes=processes, reuse=False
            )
        )
        counts.append(seen)
    one, two = ({k: v for k, v in r.items() if k != "at"} for r in reports)
    assert one["matched"] > 0 and one["held_out"] == 13 + len(items)
    assert two == one
    assert counts[0] == counts[1] == list(range(1, one["held_out"] + 1))
    assert 0 < len(here) < len(calibrate.calibration_parts(len(items)))  # the worker did the others


def _slowly(run_part, done: list):
    def slow(part, *args, **kwargs):
        done.append(part)
        time.sleep(0.5)
        return run_part(part, *args, **kwargs)

    return slow


def test_the_command_line_ends_without_teardown_once_done_and_call_command_returns(source, monkeypatch):
    """manage.py calibrate_library ends its process without freeing the calibration's objects one by
    one (11.5 s of an 89 s first calibration of the EHRSQL train library); call_command (a task, a
    test, the demo's seed) returns as ever, and a failed command exits as Django makes it."""
    import io

    from django.core.management import call_command

    from askdb.management.commands import calibrate_library as command

    calibration_library(source, patients=2)
    left: list[bool] = []
    monkeypatch.setattr(command, "leave", lambda: left.append(True))
    out = io.StringIO()
    call_command("calibrate_library", "--no-progress", stdout=out)
    assert left == [] and "grouped cross-validation" in out.getvalue()

    command.Command(stdout=out).run_from_argv(["manage.py", "calibrate_library", "--no-progress"])
    assert left == [True]

    with pytest.raises(SystemExit):  # Django's own exit for a CommandError: the teardown as ever
        command.Command(stdout=out, stderr=io.StringIO()).run_from_argv(
            ["manage.py", "calibrate_library", "--labels", "x.json", "--no-progress"]
        )
    assert left == [True]
