"""askdb's reads, shaped for views and the API."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from askdb.models import AuditEvent


def audit_event_list(*, search: str = "", action: str = "") -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor")
    if action:
        qs = qs.filter(action__startswith=action)
    if search:
        qs = qs.filter(Q(actor_name__icontains=search) | Q(message__icontains=search) | Q(target_id=search))
    return qs


# --------------------------------------------------------------------------- runs


def runs_visible_to(user) -> QuerySet:
    """Runs a user may see: their own, or everyone's for reviewers and admins."""
    from askdb.models import Run

    qs = Run.objects.select_related("question", "question__user", "question__source")
    if not user.has_perm("askdb.view_all_runs"):
        qs = qs.filter(question__user=user)
    return qs


def run_list_for_user(*, user, search: str = "", status: str = "", mine_only: bool = False) -> QuerySet:
    from askdb.models import Run

    qs = runs_visible_to(user)
    if mine_only:
        qs = qs.filter(question__user=user)
    if search:
        qs = qs.filter(Q(question__text__icontains=search) | Q(sql__icontains=search))
    if status in Run.Status.values:
        qs = qs.filter(status=status)
    return qs.defer("result_rows", "result_columns", "retrieval")


def run_get_for_user(*, user, run_id: int):
    """The run, or None when it does not exist or is not the user's to see (both look like 404)."""
    from askdb.services import runs_reap_stale

    runs_reap_stale()  # a run whose worker died is shown as failed, not "running" forever
    return runs_visible_to(user).filter(pk=run_id).first()


def _sort_key(value):
    # NULLs last; numbers before text, each in its natural order.
    if value is None:
        return (2, 0, "")
    if isinstance(value, bool | int | float):
        return (0, value, "")
    return (1, 0, str(value).lower())


def run_result_page(
    *, run, page: int = 1, per_page: int = 50, sort: str = "", descending: bool = False
) -> dict:
    """One page of a run's stored result, sorted on the server by a column name."""
    columns = list(run.result_columns or [])
    rows = list(run.result_rows or [])
    if sort in columns:
        i = columns.index(sort)
        rows.sort(key=lambda r: _sort_key(r[i]), reverse=descending)
    per_page = max(1, min(per_page, 500))
    pages = max(1, -(-len(rows) // per_page))
    page = max(1, min(page, pages))
    return {
        "columns": columns,
        "rows": rows[(page - 1) * per_page : page * per_page],
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "total": len(rows),
        "sort": sort if sort in columns else "",
        "descending": descending,
        "truncated": run.result_truncated,
    }


def run_result_csv_lines(*, run):
    """The full stored result as CSV lines, for a streaming download."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(["" if v is None else v for v in values])
        return buffer.getvalue()

    yield line(run.result_columns or [])
    for row in run.result_rows or []:
        yield line(row)


def run_chart_spec(*, run) -> dict | None:
    """A chart when the shape suits: a category and a number → bars, a time and a number → a line."""
    import datetime as dt

    columns, rows = list(run.result_columns or []), list(run.result_rows or [])
    if len(columns) != 2 or not 2 <= len(rows) <= 500:
        return None

    def is_number(v) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    def is_time(v) -> bool:
        if not isinstance(v, str) or len(v) < 4:
            return False
        try:
            dt.datetime.fromisoformat(v if len(v) > 4 else f"{v}-01-01")
            return True
        except ValueError:
            return False

    xs, ys = [r[0] for r in rows], [r[1] for r in rows]
    if not all(is_number(y) or y is None for y in ys):
        return None
    if all(is_time(x) for x in xs if x is not None):
        kind = "line"
        pairs = sorted((x, y) for x, y in zip(xs, ys, strict=True) if x is not None)
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    elif all(is_number(x) for x in xs) and columns[0].lower() in ("year", "month", "day", "hour", "week"):
        kind = "line"
    else:
        if len(rows) > 50:
            return None
        kind = "bar"
    return {"type": kind, "labels": ["NULL" if x is None else str(x) for x in xs], "values": ys,
            "x": columns[0], "y": columns[1]}  # fmt: skip


def run_may_act(*, user, run) -> bool:
    """Cancelling or re-asking a run is for the person who asked it, or an admin."""
    from askdb.roles import ADMIN, user_role

    return run.question.user_id == user.pk or user_role(user) == ADMIN
