"""askdb's reads, shaped for views and the API."""

from __future__ import annotations

import csv
import datetime as dt
import difflib
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import sqlglot
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.postgres.search import TrigramSimilarity
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from askdb.models import Example, Review, Run
from askdb.roles import ADMIN, user_role
from core import disclosure, privacy
from core.answer import answer_sentence
from core.labels import ColumnLabel, result_labels, sql_tables
from core.match.spans import ADMISSION_ID, PATIENT_ID, STAY_ID
from core.validation import SqlValidationError, referenced_tables
from infra.audit.models import AuditEvent
from metadata_admin.models import TableDoc
from metadata_admin.selectors import column_labels

IDENTIFIER_SLOTS = {PATIENT_ID, ADMISSION_ID, STAY_ID}


def audit_event_list(
    *,
    search: str = "",
    action: str = "",
    actor: str = "",
    target_type: str = "",
    target_id: str = "",
    date_from: dt.date | None = None,
    date_to: dt.date | None = None,
) -> QuerySet[AuditEvent]:
    """Audit events matching every filter given, newest first.

    `action` is a prefix ("review." finds every review action); dates are whole days in the
    site's time zone, both ends included; `search` also looks inside the detail JSON, so a
    piece of SQL finds the `sql.executed` events that ran it.
    """
    qs = AuditEvent.objects.select_related("actor")
    if action:
        qs = qs.filter(action__startswith=action)
    if actor:
        qs = qs.filter(actor_name__iexact=actor)
    if target_type:
        qs = qs.filter(target_type__iexact=target_type)
    if target_id:
        qs = qs.filter(target_id=target_id)
    if date_from:
        qs = qs.filter(at__gte=_day_start(date_from))
    if date_to:
        qs = qs.filter(at__lt=_day_start(date_to + dt.timedelta(days=1)))
    if search:
        qs = qs.filter(
            Q(actor_name__icontains=search)
            | Q(message__icontains=search)
            | Q(target_id=search)
            | Q(detail__icontains=search)
        )
    return qs


def _day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


AUDIT_CSV_COLUMNS = ("at", "actor", "action", "target_type", "target_id", "message", "ip", "detail")


def audit_event_csv_lines(*, events: QuerySet[AuditEvent]) -> Iterator[str]:
    """The given events as CSV lines (detail as compact JSON), read from the database in chunks."""
    yield _csv_line(AUDIT_CSV_COLUMNS)
    for e in events.iterator(chunk_size=2000):
        yield _csv_line(
            (
                e.at.isoformat(), e.actor_name, e.action, e.target_type, e.target_id, e.message, e.ip or "",
                json.dumps(e.detail, separators=(",", ":"), sort_keys=True, default=str),
            )
        )  # fmt: skip


def _csv_line(values) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(["" if v is None else v for v in values])
    return buffer.getvalue()


# --------------------------------------------------------------------------- runs


def runs_visible_to(user) -> QuerySet:
    """Runs a user may see: their own, or everyone's for reviewers and admins."""
    qs = Run.objects.select_related("question", "question__user", "question__source")
    if not user.has_perm("askdb.view_all_runs"):
        qs = qs.filter(question__user=user)
    return qs


def run_list_for_user(*, user, search: str = "", status: str = "", mine_only: bool = False) -> QuerySet:
    qs = runs_visible_to(user)
    if mine_only:
        qs = qs.filter(question__user=user)
    if search:
        qs = qs.filter(Q(question__text__icontains=search) | Q(sql__icontains=search))
    if status in Run.Status.values:
        qs = qs.filter(status=status)
    return qs.defer("result_rows", "result_columns", "retrieval")


def run_get_for_user(*, user, run_id: int):
    """The run, or None when it does not exist or is not the user's to see (both look like 404).

    A read: it never reaps. A run whose worker died, or that the broker never got, is put right by
    the worker's reaper (config.celery.RunReaper, every ASKDB_REAP_INTERVAL_SECONDS)."""
    return runs_visible_to(user).filter(pk=run_id).first()


SUPPRESSED = re.compile(r"<\d+")  # a count cell hidden by small-cell suppression (core/privacy.py)


def _sort_key(value):
    # NULLs last; numbers before text, each in its natural order; a suppressed count ("<11") is
    # a number below its k, so it sorts just under k.
    if value is None:
        return (2, 0, "")
    if isinstance(value, bool | int | float):
        return (0, value, "")
    if isinstance(value, str) and SUPPRESSED.fullmatch(value):
        return (0, int(value[1:]) - 0.5, "")
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


def run_result_csv_lines(*, run, labels: bool = False):
    """The full stored result as CSV lines, for a streaming download. With `labels` (the page's
    download, for a person) the header reads the columns' labels and units; without (the API's,
    for a script) the names the SQL gives."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(["" if v is None else v for v in values])
        return buffer.getvalue()

    yield line([label.heading for label in run_labels(run=run)] if labels else (run.result_columns or []))
    for row in run.result_rows or []:
        yield line(row)


_TIME_COLUMNS = ("year", "month", "day", "hour", "week")


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_time(v) -> bool:
    if not isinstance(v, str) or len(v) < 4:
        return False
    try:
        dt.datetime.fromisoformat(v if len(v) > 4 else f"{v}-01-01")
        return True
    except ValueError:
        return False


def _suppressed(v) -> bool:  # a small count hidden by privacy: no bar, said so
    return isinstance(v, str) and bool(SUPPRESSED.fullmatch(v))


def _numeric(rows: list, i: int) -> bool:
    cells = [r[i] for r in rows]
    return all(_is_number(v) or v is None or _suppressed(v) for v in cells) and any(
        _is_number(v) for v in cells
    )


def _chart_axes(columns: list[str], rows: list) -> tuple[int, int, bool] | None:
    """(x column, y column, whether x is an integer time step), or None when no chart fits."""
    stepped = [i for i, c in enumerate(columns) if c.lower() in _TIME_COLUMNS and _numeric(rows, i)]
    labels = [i for i in range(len(columns)) if not _numeric(rows, i)]
    xi = stepped[0] if stepped else (labels[0] if labels else 0)
    yi = next((i for i in range(len(columns)) if i != xi and _numeric(rows, i)), None)
    if yi is None or (len(columns) > 2 and len(labels) > 1):
        return None  # two label columns: a table says it better than one chart
    return xi, yi, xi in stepped


def _stepped_line(xs: list, ys: list) -> tuple[list, list]:
    """A line over integer steps (years): the missing steps kept as gaps when the range is small."""
    pairs = dict(sorted((int(x), y) for x, y in zip(xs, ys, strict=True) if x is not None))
    if pairs and max(pairs) - min(pairs) <= 500:
        steps = list(range(min(pairs), max(pairs) + 1))
        return steps, [pairs.get(x) for x in steps]  # a missing year is a gap, not a jump
    return list(pairs), list(pairs.values())


def run_chart_spec(*, run) -> dict | None:
    """A chart when the shape suits: a category and a number → bars, a time and a number → a line.

    With more than two columns the first label column and the first number column after it are
    drawn; a line over whole years (or other integer steps) keeps the missing steps as gaps."""
    columns, rows = list(run.result_columns or []), list(run.result_rows or [])
    if len(columns) < 2 or not 2 <= len(rows) <= 500:
        return None
    axes = _chart_axes(columns, rows)
    if axes is None:
        return None
    xi, yi, stepped = axes
    xs, ys = [r[xi] for r in rows], [r[yi] for r in rows]
    hidden = [x for x, y in zip(xs, ys, strict=True) if _suppressed(y)]
    ys = [None if _suppressed(y) else y for y in ys]
    if all(_is_time(x) for x in xs if x is not None):
        kind = "line"
        pairs = sorted((x, y) for x, y in zip(xs, ys, strict=True) if x is not None)
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    elif stepped:
        kind = "line"
        xs, ys = _stepped_line(xs, ys)
    elif len(rows) > 50:
        return None
    else:
        kind = "bar"
    labels = run_labels(run=run)
    return {"type": kind, "labels": ["NULL" if x is None else str(x) for x in xs], "values": ys,
            "x": labels[xi].heading, "y": labels[yi].heading, "x_name": columns[xi], "y_name": columns[yi],
            "suppressed": len(hidden)}  # fmt: skip


def run_answer(*, run) -> str:
    """The answer in one sentence: the LLM's summary, or (no LLM) a sentence built from the
    question and the result; "" when the run has no result to state."""
    if run.status != Run.Status.SUCCEEDED or not run.result_columns or run.outcome == "ambiguous":
        return ""
    if run.summary:
        return run.summary
    rows = (run.result_rows or [])[:50]
    return answer_sentence(
        run.question.text, run.result_columns, rows, row_count=run.row_count, labels=run_labels(run=run)
    )


def run_labels(*, run) -> list[ColumnLabel]:
    """How each result column is shown (label, unit, format): the catalog's labels of the columns
    the SQL reads, an aggregate's word before its column's label, drafts for the rest. Kept on the
    run object, so a page that shows the table, the chart and the sentence asks the catalog once."""
    cached = getattr(run, "_column_labels", None)
    if cached is not None:
        return cached
    columns = list(run.result_columns or [])
    labels: list[ColumnLabel] = []
    if columns:
        source = run.question.source
        dialect = source.dialect or "postgres"
        catalog = column_labels(source=source, tables=sql_tables(run.sql, dialect)) if run.sql else {}
        labels = result_labels(columns, sql=run.sql or "", dialect=dialect, catalog=catalog)
    run._column_labels = labels
    return labels


def run_may_act(*, user, run) -> bool:
    """Cancelling or re-asking a run is for the person who asked it, or an admin."""
    return run.question.user_id == user.pk or user_role(user) == ADMIN


# --------------------------------------------------------------------------- SQL display


def sql_pretty(sql: str, dialect: str = "postgres") -> str:
    """SQL laid out one clause per line (so diffs are readable), or as written if it does not parse."""
    try:
        return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, IndexError, ValueError):
        return sql


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff, classified for colouring: add, del, ctx, hunk or file."""

    kind: str
    text: str


def diff_lines(diff_text: str) -> list[DiffLine]:
    """Classify the lines of a unified diff so a template can colour added and removed lines."""
    lines = []
    for raw in diff_text.splitlines():
        if raw.startswith(("+++", "---")):
            kind = "file"
        elif raw.startswith("@@"):
            kind = "hunk"
        elif raw.startswith("+"):
            kind = "add"
        elif raw.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append(DiffLine(kind, raw))
    return lines


def sql_diff(before: str, after: str, *, fromfile: str = "before", tofile: str = "after") -> str:
    """A unified diff of two SQL texts, whole (every line as context): SQL is short and a reviewer
    needs to see a change inside the query around it."""
    a, b = before.strip().splitlines(), after.strip().splitlines()
    return "\n".join(
        difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile, lineterm="", n=max(len(a), len(b)))
    )


# --------------------------------------------------------------------------- review


REVIEW_QUEUE_STATUSES = ("pending", "approved", "corrected", "flagged", "all")

REVIEW_POLICIES = {
    "all": "every answer an LLM wrote waits for a reviewer",
    "low_confidence": "answers an LLM wrote wait only when its candidates disagreed or the answerability "
    "score was low",
    "first_of_kind": "answers an LLM wrote wait only when no approved example is close to the question",
}


# What review_required (askdb/services/reviews.py) does whatever the policy, said the same way.
def review_policy_always() -> str:
    """What waits for review whatever the policy, with the share of library answers rechecked."""
    share = settings.ASKDB_LIBRARY_REVIEW_SHARE
    library = (
        f"Answers from the verified library wait only when drawn for a recheck ({share:.0%} of them; their "
        "example was reviewed already)"
        if share > 0
        else "Answers from the verified library do not wait (their example was reviewed already)"
    )
    return f"{library}; answers whose candidates disagreed always do; declined and failed runs have no SQL to review."


def review_policy() -> tuple[str, str]:
    """The active review policy and a sentence saying what it means."""
    policy = settings.ASKDB_REVIEW_POLICY
    return policy, REVIEW_POLICIES.get(policy, REVIEW_POLICIES["all"])


def review_not_waiting_counts() -> dict:
    """Answered runs that are not in the queue, by why, so an empty queue explains itself."""
    answered = Run.objects.exclude(question__channel="evaluation").filter(status=Run.Status.SUCCEEDED)
    return {
        "library": answered.filter(answered_by="library", review_status="").count(),
        "policy": answered.exclude(answered_by="library").filter(review_status="").count(),
        "decided": answered.exclude(review_status__in=("", Run.Review.PENDING)).count(),
    }


def run_tables(run) -> list[str]:
    """Tables the run's SQL reads, parsed; the retrieved tables when there is no SQL that parses."""
    if run.sql:
        try:
            return list(referenced_tables(run.sql, run.question.source.dialect))
        except SqlValidationError:
            pass
    return [t.get("table", "") for t in (run.retrieval or {}).get("tables", []) if t.get("table")]


def _reads_table(tables: list[str], table: str) -> bool:
    table = table.lower()
    return any(t == table or table.endswith("." + t) for t in tables)


def review_queue_list(
    *,
    user,
    status: str = "pending",
    source: str = "",
    asked_by: str = "",
    table: str = "",
    assigned_to_me: bool = False,
) -> QuerySet:
    """Runs for review, oldest first. Evaluation runs never appear: no person asked them.

    The table filter narrows in the database (the SQL mentions the name, or retrieval found the
    table) and then keeps only runs whose parsed SQL really reads it.
    """
    qs = (
        Run.objects.select_related("question__user", "question__source", "assigned_to")
        .exclude(question__channel="evaluation")
        .defer("result_rows", "result_columns", "candidates", "library_match")
    )
    if status == "all":
        qs = qs.exclude(review_status="")
    else:
        qs = qs.filter(review_status=status if status in REVIEW_QUEUE_STATUSES else Run.Review.PENDING)
    if source:
        qs = qs.filter(question__source__name=source)
    if asked_by:
        qs = qs.filter(question__user__username__iexact=asked_by)
    if assigned_to_me:
        qs = qs.filter(assigned_to=user)
    if table:
        bare = table.rsplit(".", 1)[-1]
        maybe = qs.filter(Q(sql__icontains=bare) | Q(retrieval__tables__contains=[{"table": table}]))
        qs = qs.filter(pk__in=[run.pk for run in maybe if _reads_table(run_tables(run), table)])
    return qs.order_by("created_at", "id")


def review_queue_next(*, user, after=None):
    """The run a reviewer should look at next: the oldest pending one they may act on."""
    qs = (
        Run.objects.filter(review_status=Run.Review.PENDING)
        .exclude(question__channel="evaluation")
        .exclude(question__user=user)
        .filter(Q(assigned_to__isnull=True) | Q(assigned_to=user))
    )
    if after is not None:
        qs = qs.exclude(pk=after.pk)
    return qs.order_by("created_at", "id").first()


def review_table_choices() -> list[str]:
    """Qualified names of the catalogued tables, for the queue's table filter."""
    names = TableDoc.objects.filter(exists_in_source=True).values_list("schema_name", "name").distinct()
    return sorted({f"{schema}.{name}" if schema else name for schema, name in names})


def reviewers_list() -> QuerySet:
    """Active users who may review (through a role, a direct permission, or as superuser)."""
    perms = Permission.objects.filter(codename="review_runs", content_type__app_label="askdb")
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(groups__permissions__in=perms) | Q(user_permissions__in=perms) | Q(is_superuser=True))
        .distinct()
        .order_by("username")
    )


def run_review_outcome(*, run):
    """The latest review that decided something (approve, correct or flag), or None."""
    return run.reviews.exclude(action=Review.Action.REASSIGN).select_related("reviewer", "example").first()


def run_nearest_examples(*, run, limit: int = 5) -> list[dict]:
    """The approved examples retrieval found closest to this question, each with the diff of its
    SQL against this run's (both laid out the same way, so only real changes show)."""
    refs = [r for r in (run.retrieval or {}).get("examples", []) if r.get("id")][:limit]
    found = Example.objects.in_bulk([r["id"] for r in refs])
    dialect = run.question.source.dialect
    mine = sql_pretty(run.sql, dialect) if run.sql else ""
    nearest = []
    for ref in refs:
        example = found.get(ref["id"])
        if example is None:
            continue
        diff = ""
        if example.sql and mine:
            diff = sql_diff(sql_pretty(example.sql, dialect), mine, fromfile=f"example {example.pk}",
                            tofile=f"run {run.pk}")  # fmt: skip
        nearest.append({"example": example, "score": ref.get("score"), "diff": diff_lines(diff)})
    return nearest


# --------------------------------------------------------------------------- provenance


@dataclass(frozen=True)
class Provenance:
    """What produced a run's answer: enough to cite it in a paper and to reproduce it."""

    run_id: int
    question: str
    sql: str
    sha256: str
    source: str
    as_of: dt.datetime | None
    catalog_version: str
    model: str
    prompt_version: str
    examples_used: tuple[int, ...]
    answered_by: str  # "llm" | "library" | ""
    example_id: int | None
    review_status: str
    review_action: str  # "approve" | "correct" | "example" (a library answer's approval) | ""
    reviewer: str
    reviewed_at: dt.datetime | None
    askdb_version: str
    suppression: str = (
        ""  # "Counts below 11 were suppressed …", "Counts were rounded to the nearest 5.", or ""
    )
    privacy_notes: tuple[str, ...] = ()  # where askdb could not tell whether a number is a small cell
    composed_from: tuple[int, ...] = ()  # a composed answer: the verified examples it was composed from
    composed_with: str = ""  # …and the condition's words ("female", "without male")


def askdb_version() -> str:
    try:
        return version("askdb")
    except PackageNotFoundError:
        return "dev"


def sql_sha256(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


THREAD_DEPTH = 20  # earlier questions of a follow-up shown at most


def run_thread(*, run) -> list:
    """The earlier runs a follow-up builds on, oldest first (its question's follow_up_of chain)."""
    out, seen = [], {run.pk}
    earlier = run.question.follow_up_of
    while earlier is not None and earlier.pk not in seen and len(out) < THREAD_DEPTH:
        out.append(earlier)
        seen.add(earlier.pk)
        earlier = earlier.question.follow_up_of
    return out[::-1]


def run_provenance(*, run) -> Provenance:
    """Gather a run's provenance: the SQL and its hash, data, catalog, model, examples, approval."""
    approval = (
        run.reviews.filter(action__in=(Review.Action.APPROVE, Review.Action.CORRECT))
        .select_related("reviewer")
        .first()
    )
    action, reviewer, reviewed_at = "", "", None
    if approval is not None:
        action = approval.action
        reviewer = _person(approval.reviewer) if approval.reviewer else "(deleted user)"
        reviewed_at = approval.created_at
    elif run.answered_by == "library" and run.example is not None and run.example.approved_at:
        action = "example"
        reviewer = _person(run.example.approved_by) if run.example.approved_by else ""
        reviewed_at = run.example.approved_at
    source = run.question.source

    def local(value):
        return timezone.localtime(value) if value is not None and timezone.is_aware(value) else value

    return Provenance(
        run_id=run.pk,
        question=run.question.text,
        sql=run.sql,
        sha256=sql_sha256(run.sql) if run.sql else "",
        source=source.name,
        as_of=local(source.as_of),
        catalog_version=run.catalog_version,
        model=run.model,
        prompt_version=run.prompt_version,
        examples_used=tuple(int(i) for i in (run.examples_used or []) if str(i).isdigit()),
        answered_by=run.answered_by,
        example_id=run.example_id,
        review_status=run.review_status,
        review_action=action,
        reviewer=reviewer,
        reviewed_at=local(reviewed_at),
        askdb_version=askdb_version(),
        suppression=" ".join(
            s
            for s in (
                privacy.suppression_sentence(run.privacy or {}),
                disclosure.disclosure_sentence(run.privacy or {}),
            )
            if s
        ),
        privacy_notes=tuple((run.privacy or {}).get("notes") or ()),
        composed_from=_composed_from(run),
        composed_with=str((run.library_match or {}).get("composed_with") or "")
        if run.answered_by == "composed"
        else "",
    )


def _person(user) -> str:
    """A user as a paper names them: the full name when set, else the username."""
    return (user.get_full_name() or "").strip() or user.get_username()


def _composed_from(run) -> tuple[int, ...]:
    """The verified examples a composed answer was composed from (none for any other answer)."""
    if run.answered_by != "composed":
        return ()
    ids = (run.library_match or {}).get("composed_from") or ()
    return tuple(dict.fromkeys(int(i) for i in ids if str(i).isdigit()))


def methods_paragraph(p: Provenance) -> str:
    """A paragraph for a paper's methods section: where the data came from, which SQL, how the
    query was made and who verified it. Says plainly when nothing verified it."""
    as_of = f" (as of {p.as_of:%Y-%m-%d})" if p.as_of else ""
    first = (
        f"Data were extracted from {p.source}{as_of} with askdb {p.askdb_version} using the SQL below "
        f"(SHA-256 {p.sha256})"
    )
    if p.answered_by == "composed":
        made = (
            "the query was composed by askdb from "
            + (" and ".join(f"verified example {i}" for i in p.composed_from) or "verified examples")
            + " of the askdb example library (the composition itself is not a verified example)"
        )
    elif p.answered_by == "library":
        made = "the query was adapted from " + (
            f"verified example {p.example_id} of the askdb example library"
            if p.example_id
            else "a verified example of the askdb example library"
        )
    elif p.model:
        n = len(p.examples_used)
        version = f" with prompt version {p.prompt_version}" if p.prompt_version else ""
        shots = f"from {n} verified example{'s' if n != 1 else ''}" if n else "without verified examples"
        made = f"the query was generated by {p.model}{version} {shots}"
    else:
        made = "the query was written without a language model"
    when = f" on {p.reviewed_at:%Y-%m-%d}" if p.reviewed_at else ""
    if p.review_status == "flagged":
        checked = "was flagged as wrong by a reviewer and should not be relied on"
    elif p.review_action == "approve":
        checked = f"approved by {p.reviewer or 'a reviewer'}{when}"
    elif p.review_action == "correct":
        checked = f"corrected and approved by {p.reviewer or 'a reviewer'}{when}"
    elif p.review_action == "example":
        checked = f"that example was approved by {p.reviewer or 'a reviewer'}{when}"
    elif p.review_status == "pending":
        checked = "it has not been reviewed yet"
    else:
        checked = "it was not reviewed"
    joiner = " and " if p.review_action in ("approve", "correct") or p.review_status == "flagged" else "; "
    suppressed = f" {p.suppression}" if p.suppression else ""
    return f"{first}; {made}{joiner}{checked}.{suppressed}"


def methods_text(p: Provenance) -> str:
    """The methods paragraph with the SQL it refers to and the details behind it, as plain text."""
    lines = [
        methods_paragraph(p),
        "",
        f"Question: {p.question}",
        f"askdb run: {p.run_id}",
        f"Catalog version: {p.catalog_version or 'unknown'}",
        f"Model: {p.model or 'none'}" + (f" (prompt version {p.prompt_version})" if p.prompt_version else ""),
        "Examples used: " + (", ".join(str(i) for i in p.examples_used) or "none"),
        f"SHA-256 of the SQL: {p.sha256}",
        "",
        "SQL:",
        p.sql.strip(),
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- what askdb can answer


def library_suggestions(
    *, source, policy: privacy.PrivacyPolicy | None = None, limit: int = 6
) -> list[Example]:
    """Questions the active library answers on this source, one per set of tables it reads, so a
    first session (even with no LLM) starts with questions askdb will answer. Questions about the
    whole population come first: one about a given patient, admission or stay returns nothing on
    a source that lacks that individual (the demo's synthetic patients are not the library's).
    With the asker's `policy`, only questions whose answer they may see (an aggregate-only user
    is offered no listing). Once the library was asked on the source (library_suggestions_check,
    when the demo loads), only questions that answered with something to read."""
    examples = list(
        Example.objects.filter(source=source, kind=Example.Kind.ANSWERABLE, status=Example.Status.ACTIVE)
        .exclude(template={})
        .defer("embedding")
        .order_by("id")[:400]
    )
    if any(e.answers_as_is is not None for e in examples):  # checked on this data: offer what answers
        examples = [e for e in examples if e.answers_as_is]
    examples.sort(key=_names_an_individual)  # stable: library order within each kind
    seen: set[tuple[str, ...]] = set()
    first = []  # one per set of tables first, then the rest in order
    for example in examples:
        key = tuple(example.tables or ())
        if key not in seen:
            seen.add(key)
            first.append(example)
    rest = [e for e in examples if e not in first]
    return _visible(first + rest, policy, source.dialect, limit)


def _names_an_individual(example: Example) -> bool:
    return any(slot.get("type") in IDENTIFIER_SLOTS for slot in (example.template or {}).get("slots", []))


def _visible(examples: list[Example], policy, dialect: str, limit: int) -> list[Example]:
    """The first `limit` examples whose output `policy` lets the asker see (checked one by one,
    in order, so a page parses a few SQL statements, not the library)."""
    kept = []
    for example in examples:
        if len(kept) == limit:
            break
        if policy is not None:
            try:
                analysis = privacy.analyse_output(example.sql, dialect, policy=policy)
                privacy.check_access(analysis, policy, sql=example.sql, dialect=dialect)
            except privacy.PrivacyRefusal:
                continue
        kept.append(example)
    return kept


def run_suggestions(*, run, policy: privacy.PrivacyPolicy | None = None, limit: int = 3) -> list[dict]:
    """Verified questions close to a run's question that askdb can answer ("Did you mean …"):
    the matcher's best template, the examples retrieval found, then the library's closest wording
    by trigram similarity (no embedding model needed in the web process). With the asker's
    `policy`, only questions whose answer they may see."""
    ids: list[int] = []
    match, close_ones = run.library_match or {}, (run.retrieval or {}).get("examples", [])
    if match.get("example_id") and close_ones:  # with nothing close ("hello"), the best template is noise
        ids.append(match["example_id"])
    ids += [e["id"] for e in close_ones if e.get("id")]
    usable = Example.objects.filter(
        source=run.question.source_id, kind=Example.Kind.ANSWERABLE, status=Example.Status.ACTIVE
    ).defer("embedding")
    found = usable.in_bulk(ids)
    own = run.question.text.strip().lower()
    ordered = [found[i] for i in dict.fromkeys(ids) if i in found]
    ordered += list(
        usable.exclude(pk__in=[e.pk for e in ordered])
        .annotate(similarity=TrigramSimilarity("question", run.question.text))
        .filter(similarity__gt=0.1)
        .order_by("-similarity")[: 4 * limit]
    )
    ordered = [e for e in ordered if e.question.strip().lower() != own]
    return [
        {"id": e.pk, "question": e.question}
        for e in _visible(ordered, policy, run.question.source.dialect, limit)
    ]


def template_shares(examples: list[Example]) -> dict[int, int]:
    """For each example, how many other active examples share its template (one query for a page
    of the library), so the list shows which questions are one template asked several ways."""
    keys = {e.template_key for e in examples if e.template_key}
    sizes = {
        (row["source_id"], row["template_key"]): row["n"]
        for row in Example.objects.filter(template_key__in=keys, status=Example.Status.ACTIVE)
        .values("source_id", "template_key")
        .annotate(n=Count("id"))
    }
    return {
        e.pk: max(sizes.get((e.source_id, e.template_key), 0) - (e.status == Example.Status.ACTIVE), 0)
        for e in examples
        if e.template_key
    }


def paraphrases_of(example, limit: int = 50) -> dict:
    """The other active examples of the same template (same Example.template_key): how many, which."""
    if not example.template_key:
        return {"count": 0, "examples": []}
    same = (
        Example.objects.filter(source_id=example.source_id, template_key=example.template_key)
        .exclude(pk=example.pk)
        .filter(status=Example.Status.ACTIVE)
        .only("id", "question")
        .order_by("id")
    )
    return {"count": same.count(), "examples": list(same[:limit])}


def long_query_allowed(*, run: Run, user) -> str:
    """Why `user` may not run `run` again as a long query ("" when they may): the asker alone,
    holding run_long_queries, of a run that ran out of time and has SQL."""
    if not user.has_perm("askdb.run_long_queries"):
        return "Your role may not run long queries; an admin can allow it (the run_long_queries permission)."
    if run.question.user_id != user.pk:
        return "Only the person who asked can run this question as a long query."
    if run.outcome != "timeout" or not run.sql:
        return "Only a question whose query ran out of time can be run as a long query."
    if run.long_query_of_id is not None:
        return "This already was a long query, with the longest limit askdb allows."
    return ""


def long_query_progress(*, run: Run) -> dict:
    """What the run page says of a long query: of which run, its limit and how long it has run
    (until now while it runs). For a timed-out run, its latest long query ({"latest": run});
    {} for any other run."""
    if run.long_query_of_id is None:
        latest = run.long_queries.order_by("-pk").first() if run.outcome == "timeout" else None
        return {"latest": latest} if latest is not None else {}
    end = run.finished_at or timezone.now()
    elapsed = (end - run.started_at).total_seconds() if run.started_at else 0.0
    return {"of_run": run.long_query_of_id, "limit_s": run.time_limit_s or 0, "elapsed_s": round(elapsed)}
