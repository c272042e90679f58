"""One real question end to end, for `demo --smoke`: through the broker, a worker, the pipeline."""

from __future__ import annotations

import time

from django.contrib.auth import get_user_model

from askdb.models import Run
from askdb.services.runs import question_submit

# Outcomes that prove the pipeline ran as it should with the configuration at hand.
GOOD_OUTCOMES = {"answered", "no_rows", "result_cut", "no_llm"}


def smoke_question(question: str, *, stdout, timeout_s: float = 120) -> bool:
    user = get_user_model().objects.get(username="researcher")
    run = question_submit(user=user, text=question)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_terminal:
            break
        time.sleep(0.2)
    stages = ", ".join(f"{s.name} {s.status} {s.duration_ms or 0:.0f} ms" for s in run.stages.all())
    stdout.write(
        f"question: {question!r}\n  run {run.pk}: {run.status} ({run.outcome or 'unfinished'})\n  stages: {stages}"
    )
    if run.message:
        stdout.write(f"  {run.message}")
    if run.answered_by == "library" and run.example_id:
        stdout.write(
            f"  answered from verified example #{run.example_id}: {run.library_match.get('example_question', '')!r}"
        )
    if run.sql:
        stdout.write(f"  SQL: {run.sql}\n  rows: {run.result_rows[:5]}")
    return run.status in (Run.Status.SUCCEEDED, Run.Status.DECLINED) and run.outcome in GOOD_OUTCOMES
