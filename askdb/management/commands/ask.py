"""`python manage.py ask "QUESTION" [--source S] [--json]`: the pipeline, synchronously."""

from __future__ import annotations

import json as jsonlib

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from askdb.models import Run
from askdb.services.runs import QuestionError, question_submit_sync
from metadata_admin.services import source_get


class Command(BaseCommand):
    help = "Ask a question in this process (no worker needed); prints stage timings, SQL and the result."

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--source")
        parser.add_argument(
            "--user", default="", help="run as this user (default: the first superuser or admin)"
        )
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--rows", type=int, default=20, help="rows to print")

    def handle(self, *args, question, source, user, json: bool, rows: int, **options):
        User = get_user_model()
        who = User.objects.filter(username=user).first() if user else None
        who = (
            who
            or User.objects.filter(is_superuser=True).first()
            or User.objects.filter(groups__name="admin").first()
        )
        if who is None:
            raise CommandError("no user to ask as; create one (make demo does) or pass --user")
        try:
            run = question_submit_sync(user=who, text=question, source=source_get(source) if source else None)
        except (QuestionError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        run = Run.objects.prefetch_related("stages", "attempts").get(pk=run.pk)
        if json:
            self.stdout.write(jsonlib.dumps(run_as_dict(run, rows), indent=2, default=str))
        else:
            self._print(run, rows)
        if run.status == Run.Status.FAILED:
            raise CommandError(f"run {run.pk} failed: {run.message}")

    def _print(self, run: Run, rows: int) -> None:
        w = self.stdout.write
        w(f"run {run.pk}: {run.get_status_display()} ({run.outcome})")
        for st in run.stages.all():
            w(f"  {st.name:<10} {st.status:<8} {st.duration_ms or 0:8.1f} ms")
        for a in run.attempts.all():
            w(f"-- attempt {a.number} ({a.origin}) {'ok' if a.valid else 'error: ' + a.error}")
        if run.sql:
            w("SQL:\n" + run.sql)
        if run.result_columns:
            w(" | ".join(run.result_columns))
            for row in run.result_rows[:rows]:
                w(" | ".join("NULL" if v is None else str(v) for v in row))
            if (run.row_count or 0) > rows:
                w(
                    f"… {run.row_count - rows} more rows"
                    + (" (truncated at the row cap)" if run.result_truncated else "")
                )
        if run.message:
            w(run.message)
        if run.summary:
            w("Summary: " + run.summary)


def run_as_dict(run: Run, rows: int = 50) -> dict:
    return {
        "run": run.pk,
        "status": run.status,
        "outcome": run.outcome,
        "message": run.message,
        "gate": {"category": run.gate_category, "reason": run.gate_reason},
        "stages": [
            {"name": s.name, "status": s.status, "ms": s.duration_ms, "detail": s.detail}
            for s in run.stages.all()
        ],
        "attempts": [
            {"number": a.number, "sql": a.sql, "valid": a.valid, "error": a.error} for a in run.attempts.all()
        ],
        "sql": run.sql,
        "columns": run.result_columns,
        "rows": run.result_rows[:rows],
        "row_count": run.row_count,
        "truncated": run.result_truncated,
        "summary": run.summary,
    }
