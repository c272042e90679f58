"""The request desk: a declined or failed question sent to reviewers, answered in SQL by one of
them, the asker told, the pair added to the library, and every request that asks the same thing
asked again so that the library answers it too.

Writes audit in their own transaction; side effects (the embedding task, the re-asks, email) are
sent after commit. The matcher's reading (masked question, its vector) groups requests."""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from sqlglot import exp

from askdb.adapters.library_cache import LIBRARY
from askdb.models import AnswerRequest, Notification, Review, Run, SqlAttempt
from askdb.outcomes import run_outcome_code
from askdb.services.examples import example_upsert
from askdb.services.privacy import result_protect
from askdb.services.runs import run_execute
from askdb.services.sql import ReviewError, sql_check
from core import match
from core.code_check import CodeFilter, code_filters
from core.request_groups import group_vectors
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from infra.queue import task_send
from metadata_admin.clinical.synthetic import load_vocab
from metadata_admin.models import TableDoc
from metadata_admin.selectors import catalog_snapshot
from metadata_admin.services import source_executor

logger = logging.getLogger(__name__)

# Runs a person may send as a request: askdb gave them no answer.
REQUESTABLE = (Run.Status.DECLINED, Run.Status.FAILED)


class RequestError(ReviewError):
    """A request action that cannot be done, with a sentence the user can act on."""


def run_requestable(run) -> bool:
    """A declined or failed run (no answer) of a question that is not an evaluation's, and not a
    request to change data (askdb only reads: no reviewer can answer it)."""
    return (
        run.status in REQUESTABLE
        and run.question.channel != "evaluation"
        and run_outcome_code(run) != "read_only"
    )


# --------------------------------------------------------------------------- asking


def request_create(*, run, user, note: str = "") -> AnswerRequest:
    """Send a declined or failed run to the reviewers. One pending request per run and person:
    sending it twice returns the first."""
    if run.question.user_id != user.pk:
        raise RequestError("Only the person who asked this question can request an answer for it.")
    if not run_requestable(run):
        raise RequestError("Only a question askdb declined or could not answer can be sent as a request.")
    note = " ".join((note or "").split())[:2000]
    with transaction.atomic():
        existing = AnswerRequest.objects.filter(run=run, requested_by=user).exclude(
            status=AnswerRequest.Status.CLOSED
        )
        if (found := existing.first()) is not None:
            return found
        request = AnswerRequest.objects.create(
            run=run, source=run.question.source, requested_by=user, question=run.question.text, note=note
        )
        audit_record(action="request.created", actor=user, target=request, message=request.question[:500],
                     detail={"run": run.pk, "note": note[:500]})  # fmt: skip
        transaction.on_commit(lambda: _embed_later(request.pk))
    return request


def _embed_later(request_id: int) -> None:
    try:
        task_send("askdb.embed_request", request_id)
    except Exception:  # no broker (a management command on a stopped demo): embed inline
        request_embed(request_id=request_id)


def request_embed(*, request_id: int) -> AnswerRequest | None:
    """The masked question and its vector, read the way the library matcher reads a question
    (its values masked, then embedded), so that grouping agrees with what the library answers."""
    request = AnswerRequest.objects.select_related("source").filter(pk=request_id).first()
    if request is None:
        return None
    masked, vector, model = request_reading(source=request.source, question=request.question)
    AnswerRequest.objects.filter(pk=request.pk).update(
        masked_question=masked, masked_embedding=vector, embedding_model=model
    )
    request.masked_question, request.masked_embedding, request.embedding_model = masked, vector, model
    return request


def request_reading(*, source, question: str) -> tuple[str, list[float], str]:
    """(masked question, its vector, embedding model), through the matcher's public functions."""
    embedder = get_embedder()
    snapshot = catalog_snapshot(source)
    executor = source_executor(source, schemas=snapshot.schemas)
    values = LIBRARY.values(source, executor)
    masked = match.mask_question(question, values)
    return masked, list(embedder.embed([masked])[0]), embedder.model


def request_groups(*, source=None, requests=None) -> list[list[AnswerRequest]]:
    """Pending requests grouped by what they ask (largest group first, then oldest). Requests are
    only grouped within a source and an embedding model."""
    if requests is None:
        requests = AnswerRequest.objects.filter(status=AnswerRequest.Status.PENDING).select_related(
            "run", "requested_by", "source"
        )
        if source is not None:
            requests = requests.filter(source=source)
    requests = list(requests)
    buckets: dict[tuple, list[AnswerRequest]] = {}
    for r in requests:
        buckets.setdefault((r.source_id, r.embedding_model), []).append(r)
    groups: list[list[AnswerRequest]] = []
    for bucket in buckets.values():
        vectors = [list(r.masked_embedding) if r.masked_embedding is not None else None for r in bucket]
        groups += [
            [bucket[i] for i in g] for g in group_vectors(vectors, settings.ASKDB_REQUEST_GROUP_SIMILARITY)
        ]
    return sorted(groups, key=lambda g: (-len(g), g[0].created_at, g[0].pk))


def request_group_of(request: AnswerRequest) -> list[AnswerRequest]:
    """The pending requests grouped with this one (itself included, first)."""
    for group in request_groups(source=request.source):
        if any(r.pk == request.pk for r in group):
            return sorted(group, key=lambda r: r.pk != request.pk)
    return [request]


# --------------------------------------------------------------------------- answering


def _guard_reviewer(request: AnswerRequest, reviewer) -> None:
    if not reviewer.has_perm("askdb.review_runs"):
        raise RequestError("Only reviewers can answer requests.")
    if request.requested_by_id == reviewer.pk:
        raise RequestError("You cannot answer your own request; another reviewer must.")


def request_preview(*, request: AnswerRequest, reviewer, sql: str):
    """Validate a reviewer's SQL (the pipeline's validation) and run it read-only, with the
    privacy rules of the person who asked. Returns (ValidatedSql, ProtectedResult)."""
    _guard_reviewer(request, reviewer)
    if not isinstance(sql, str) or not sql.strip():
        raise RequestError("Type the SQL that answers the question.")
    validated, result = sql_check(
        source=request.source, sql=sql, actor=reviewer, purpose="request_preview", run=request.run,
        row_cap=settings.ASKDB_REQUEST_PREVIEW_ROWS,
    )  # fmt: skip
    return validated, result_protect(run=request.run, sql=validated.sql, result=result)


def request_answer(*, request: AnswerRequest, reviewer, sql: str, comment: str = "") -> AnswerRequest:
    """Answer a request with a reviewer's SQL: validated and run first (nothing broken is saved),
    then the original run shows the answer, the pair enters the library, the asker is told, and
    every request grouped with this one is asked again (after commit, by a worker)."""
    _guard_reviewer(request, reviewer)
    if request.status != AnswerRequest.Status.PENDING:
        raise RequestError(f"This request was {request.get_status_display()} already.")
    if not isinstance(sql, str) or not sql.strip():
        raise RequestError("Type the SQL that answers the question.")
    run = request.run
    validated, result = sql_check(
        source=request.source, sql=sql, actor=reviewer, purpose="request_answer", run=run
    )
    result = result_protect(run=run, sql=validated.sql, result=result)
    siblings = [r.pk for r in request_group_of(request) if r.pk != request.pk]
    with transaction.atomic():
        locked = AnswerRequest.objects.select_for_update().get(pk=request.pk)
        if locked.status != AnswerRequest.Status.PENDING:
            raise RequestError(f"This request was {locked.get_status_display()} already.")
        example = example_upsert(
            source=request.source, question=run.question.text, sql=validated.sql, approved_by=reviewer,
            origin="request", origin_run=run, note=comment, defer_embedding=True,
        )  # fmt: skip
        number = (run.attempts.order_by("-number").values_list("number", flat=True).first() or 0) + 1
        SqlAttempt.objects.create(run=run, number=number, sql=validated.sql, origin="reviewer", valid=True)
        run.sql = validated.sql
        run.status, run.outcome, run.message = Run.Status.SUCCEEDED, "answered", ""
        run.privacy = result.privacy
        run.result_columns = list(result.columns)
        run.result_rows = [list(r) for r in result.rows]
        run.result_truncated = result.truncated
        run.row_count = result.row_count
        run.answered_by, run.example, run.review_status = "reviewer", example, Run.Review.APPROVED
        run.finished_at = run.finished_at or timezone.now()
        run.save()
        Review.objects.create(run=run, reviewer=reviewer, action=Review.Action.ANSWER, comment=comment,
                              sql_after=validated.sql, example=example)  # fmt: skip
        _mark_answered(locked, run=run, example=example, reviewer=reviewer)
        # Others who asked the same run (one run, several people) are answered by the same run.
        for other in AnswerRequest.objects.filter(run=run, status=AnswerRequest.Status.PENDING).exclude(
            pk=locked.pk
        ):
            _mark_answered(other, run=run, example=example, reviewer=reviewer)
        audit_record(action="request.answered", actor=reviewer, target=locked, message=validated.sql[:500],
                     detail={"run": run.pk, "example": example.pk, "grouped": siblings, "comment": comment[:500]})  # fmt: skip
        transaction.on_commit(lambda: _reask_later(siblings, reviewer.pk))
    locked.refresh_from_db()
    return locked


def request_close(*, request: AnswerRequest, reviewer, comment: str) -> AnswerRequest:
    """Close a request without an answer (the data cannot answer it), telling the asker why."""
    _guard_reviewer(request, reviewer)
    if not (comment or "").strip():
        raise RequestError("Say why: closing a request needs a comment the person who asked can act on.")
    with transaction.atomic():
        updated = AnswerRequest.objects.filter(pk=request.pk, status=AnswerRequest.Status.PENDING).update(
            status=AnswerRequest.Status.CLOSED, answered_by=reviewer, answered_at=timezone.now()
        )
        if not updated:
            raise RequestError("This request is not waiting any more.")
        audit_record(action="request.closed", actor=reviewer, target=request, message=comment[:500])
        notification_send(
            user=request.requested_by, run=request.run,
            message=f"{reviewer.get_username()} could not answer “{request.question[:120]}”: {comment.strip()[:500]}",
        )  # fmt: skip
    request.refresh_from_db()
    return request


def _mark_answered(request: AnswerRequest, *, run, example, reviewer) -> None:
    request.status, request.answer_run, request.example = AnswerRequest.Status.ANSWERED, run, example
    request.answered_by, request.answered_at = reviewer, timezone.now()
    request.save(update_fields=["status", "answer_run", "example", "answered_by", "answered_at"])
    who = reviewer.get_username() if reviewer is not None else "the verified library"
    notification_send(user=request.requested_by, run=run,
                      message=f"Your question “{request.question[:200]}” was answered by {who}.")  # fmt: skip


def _reask_later(request_ids: list[int], reviewer_id: int) -> None:
    if not request_ids:
        return
    try:
        task_send("askdb.reask_requests", request_ids, reviewer_id)
    except Exception:  # no broker: the requests stay pending and a reviewer answers them in turn
        logger.warning("grouped requests %s not asked again: the queue is unreachable", request_ids)


def requests_reask(*, request_ids: list[int], reviewer_id: int | None = None) -> list[AnswerRequest]:
    """Ask each pending request's question again (a new run, in this worker); where the library
    now answers it, the request is answered by that run and its asker told. Idempotent: requests
    answered or closed meanwhile are left alone."""
    from django.contrib.auth import get_user_model

    reviewer = get_user_model().objects.filter(pk=reviewer_id).first() if reviewer_id else None
    answered = []
    for request in AnswerRequest.objects.filter(pk__in=request_ids, status=AnswerRequest.Status.PENDING):
        with transaction.atomic():
            new = Run.objects.create(question=request.run.question)
            audit_record(action="run.retried", actor=reviewer, target=new,
                         message=f"request {request.pk} asked again after a grouped request was answered")  # fmt: skip
        new = run_execute(run_id=new.pk, worker="request-desk") or new
        new.refresh_from_db()
        if new.status != Run.Status.SUCCEEDED or not new.sql:
            continue
        with transaction.atomic():
            locked = AnswerRequest.objects.select_for_update().get(pk=request.pk)
            if locked.status != AnswerRequest.Status.PENDING:
                continue
            _mark_answered(locked, run=new, example=new.example, reviewer=reviewer)
            audit_record(action="request.answered", actor=reviewer, target=locked,
                         message=f"answered by run {new.pk} from the library", detail={"run": new.pk})  # fmt: skip
        answered.append(locked)
    return answered


# --------------------------------------------------------------------------- inbox


def notification_send(*, user, message: str, run=None) -> Notification:
    """A line in the user's inbox and, where Django's email is configured and the user has an
    address, an email after commit."""
    url = reverse("run_detail", args=[run.pk]) if run is not None else ""
    note = Notification.objects.create(user=user, message=message, url=url, run=run)
    if settings.ASKDB_EMAIL_NOTIFICATIONS and user.email:
        link = f"{settings.ASKDB_BASE_URL.rstrip('/')}{url}" if url else ""

        def send() -> None:
            try:
                send_mail("askdb: your question", f"{message}\n\n{link}".strip(), None, [user.email])
            except Exception:  # the inbox has it; a mail server down must not undo the answer
                logger.warning("notification email to user %s failed", user.pk, exc_info=True)

        transaction.on_commit(send)
    return note


def notifications_mark_read(*, user, ids: list[int] | None = None) -> int:
    """Mark the user's notifications (these, or all) read."""
    unread = Notification.objects.filter(user=user, read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=ids)
    return unread.update(read_at=timezone.now())


# --------------------------------------------------------------------------- code check

_STOP = frozenset(
    "unspecified other of and or the with without in to due not elsewhere classified nos".split()
)


def _lit(value: str) -> str:
    return exp.Literal.string(value).sql()


def _table(source, name: str) -> str | None:
    doc = (
        TableDoc.objects.filter(source=source, name=name, exists_in_source=True)
        .only("schema_name", "name")
        .first()
    )
    return doc.qualified_name if doc else None


def _rows(source, sql: str, actor) -> list[tuple]:
    try:
        _, result = sql_check(source=source, sql=sql, actor=actor, purpose="code_check", row_cap=500)
    except ReviewError:
        logger.info("code check lookup failed: %s", sql, exc_info=True)
        return []
    return [tuple(r) for r in result.rows]


def _words(title: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", title.lower()) if len(w) > 2 and w not in _STOP]


def _trigrams(text: str) -> set[str]:
    t = f"  {' '.join(re.findall(r'[a-z0-9]+', text.lower()))} "
    return {t[i : i + 3] for i in range(len(t) - 2)}


def _similar(a: str, b: str) -> float:
    x, y = _trigrams(a), _trigrams(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def sql_code_check(*, source, sql: str, actor=None) -> list[dict]:
    """For each filter of `sql` on a diagnosis, procedure, item or drug: the codes it matches and
    the codes the data holds that it probably misses (the other ICD version by the bundled
    vocabulary's concept groups and by the title's words, near titles by trigrams, other item ids
    of the same label, other names of a drug), each with how many patients have it."""
    checks = []
    for f in code_filters(sql, source.dialect):
        if f.concept in ("diagnosis", "procedure"):
            checks.append(_icd_check(source, f, actor))
        elif f.concept == "item":
            checks.append(_item_check(source, f, actor))
        elif f.concept == "drug":
            checks.append(_drug_check(source, f, actor))
    return [c for c in checks if c]


def _where(column: str, f: CodeFilter) -> str:
    parts = [f"{column} IN ({', '.join(_lit(v) for v in f.values)})"] if f.values else []
    parts += [f"LOWER({column}) LIKE {_lit(p.lower())}" for p in f.patterns]
    return " OR ".join(parts) or "FALSE"


_Candidates = dict[tuple[str, int], tuple[str, str]]  # (code, version) -> (title, why it may be missed)


def _icd_check(source, f: CodeFilter, actor) -> dict | None:
    dictionary = _table(source, "d_icd_procedures" if f.concept == "procedure" else "d_icd_diagnoses")
    data = _table(source, "procedures_icd" if f.concept == "procedure" else "diagnoses_icd")
    if dictionary is None or data is None:
        return None
    column = "icd_code" if f.kind == "code" else "long_title"
    matched = _rows(source, f"SELECT icd_code, icd_version, long_title FROM {dictionary} WHERE {_where(column, f)} "
                            "ORDER BY icd_version, icd_code LIMIT 200", actor)  # fmt: skip
    if not matched:
        return {"concept": f.concept, "filter": f"{f.column}", "matched": [], "missing": [], "note":
                "No code in the dictionary matches this filter."}  # fmt: skip
    matched = [(str(c).strip(), int(v), t) for c, v, t in matched]  # codes are CHAR(n): padded
    have = {(c, v) for c, v, _ in matched}
    candidates = _vocab_candidates(f.concept, have)
    for title in {t for _, _, t in matched}:
        _title_candidates(source, dictionary, title, matched, candidates, actor)
    counts = _patient_counts(source, data, [*have, *candidates], actor)
    return _icd_report(f, matched, candidates, counts)


def _vocab_candidates(concept: str, have: set[tuple[str, int]]) -> _Candidates:
    """The codes of the same concept groups in the bundled vocabulary: the usual miss is the other
    ICD version (a filter on ICD-9 codes only), which no title search finds when the titles differ."""
    vocab = load_vocab()
    codes = vocab.procedures if concept == "procedure" else vocab.diagnoses
    groups = {c.group for c in codes if (c.code, c.version) in have and c.group}
    return {(c.code, c.version): (c.title, "same concept in the bundled ICD-9/ICD-10 vocabulary")
            for c in codes if c.group in groups and (c.code, c.version) not in have}  # fmt: skip


def _title_candidates(source, dictionary: str, title: str, matched: list[tuple[str, int, str]],
                      candidates: _Candidates, actor) -> None:  # fmt: skip
    """Adds to `candidates` the dictionary's codes whose titles hold the same first words as a
    matched title, then those near it by trigrams: codes the vocabulary does not group, found in
    the data's own dictionary. A code already matched or already a candidate keeps its reason."""
    words = _words(title)[:4]
    if not words:
        return
    have = {(c, v) for c, v, _ in matched}
    like = " AND ".join(f"LOWER(long_title) LIKE {_lit('%' + w + '%')}" for w in words)
    for code, version, other in _rows(source, f"SELECT icd_code, icd_version, long_title FROM {dictionary} "
                                              f"WHERE {like} LIMIT 200", actor):  # fmt: skip
        key = (str(code).strip(), int(version))
        if key not in have and key not in candidates:
            why = (
                "the other ICD version, same title words"
                if all(int(v) != int(version) for _, v, _ in matched)
                else "title with the same words"
            )
            candidates[key] = (other, why)
    longest = max(words, key=len)
    for code, version, other in _rows(source, f"SELECT icd_code, icd_version, long_title FROM {dictionary} "
                                              f"WHERE LOWER(long_title) LIKE {_lit('%' + longest + '%')} LIMIT 500", actor):  # fmt: skip
        key = (str(code).strip(), int(version))
        if key not in have and key not in candidates and _similar(title, other) >= 0.5:
            candidates[key] = (other, "near title")


def _icd_report(f: CodeFilter, matched: list[tuple[str, int, str]], candidates: _Candidates,
                counts: dict[tuple[str, int], int]) -> dict:  # fmt: skip
    """The check as the reviewer reads it: what the filter matches, and only the candidates some
    patient has (a code nobody has changes no answer), most patients first."""
    return {
        "concept": f.concept,
        "filter": f.column,
        "matched": [{"code": c, "version": v, "title": t, "patients": counts.get((c, v), 0)} for c, v, t in matched],
        "missing": sorted(
            ({"code": c, "version": v, "title": t, "why": why, "patients": counts.get((c, v), 0)}
             for (c, v), (t, why) in candidates.items() if counts.get((c, v), 0) > 0),
            key=lambda m: (-m["patients"], m["code"]),
        ),
    }  # fmt: skip


def _patient_counts(source, data: str, keys, actor) -> dict[tuple[str, int], int]:
    codes = sorted({c for c, _ in keys})
    if not codes:
        return {}
    rows = _rows(source, f"SELECT icd_code, icd_version, COUNT(DISTINCT subject_id) FROM {data} WHERE icd_code IN "
                         f"({', '.join(_lit(c) for c in codes)}) GROUP BY icd_code, icd_version", actor)  # fmt: skip
    return {(str(c).strip(), int(v)): int(n) for c, v, n in rows}


def _item_check(source, f: CodeFilter, actor) -> dict | None:
    found = []
    for name in ("d_labitems", "d_items"):
        dictionary = _table(source, name)
        if dictionary is None or (
            f.table
            and f.table
            not in (
                name,
                "labevents",
                "chartevents",
                "inputevents",
                "outputevents",
                "procedureevents",
                "datetimeevents",
            )
        ):
            continue  # fmt: skip
        if name == "d_labitems" and f.table not in ("", "d_labitems", "labevents"):
            continue
        if name == "d_items" and f.table in ("d_labitems", "labevents"):
            continue
        if f.kind == "itemid":
            ids = [v for v in f.values if v.isdigit()]
            where = f"itemid IN ({', '.join(ids)})" if ids else "FALSE"
        else:
            where = _where("label", f)
        matched = _rows(source, f"SELECT itemid, label FROM {dictionary} WHERE {where} LIMIT 200", actor)
        if not matched:
            continue
        have = {int(i) for i, _ in matched}
        labels = sorted({str(label).lower() for _, label in matched})
        same = _rows(source, f"SELECT itemid, label FROM {dictionary} WHERE LOWER(label) IN "
                             f"({', '.join(_lit(x) for x in labels)}) LIMIT 200", actor)  # fmt: skip
        found.append({
            "concept": "item", "filter": f"{name}.{f.column}",
            "matched": [{"code": str(i), "title": label} for i, label in matched],
            "missing": [{"code": str(i), "title": label, "why": "another item id with the same label"}
                        for i, label in same if int(i) not in have],
        })  # fmt: skip
    return found[0] if found else None


def _drug_check(source, f: CodeFilter, actor) -> dict | None:
    data = _table(source, "prescriptions")
    if data is None:
        return None
    matched = _rows(source, f"SELECT drug, COUNT(DISTINCT subject_id) FROM {data} WHERE {_where('drug', f)} "
                            "GROUP BY drug ORDER BY drug LIMIT 200", actor)  # fmt: skip
    have = {str(d) for d, _ in matched}
    first = sorted({w for d in have for w in _words(d)[:1]})
    if not first and f.patterns:
        first = _words(f.patterns[0])[:1]
    near = []
    for word in first:
        for drug, n in _rows(source, f"SELECT drug, COUNT(DISTINCT subject_id) FROM {data} WHERE LOWER(drug) LIKE "
                                     f"{_lit('%' + word + '%')} GROUP BY drug LIMIT 200", actor):  # fmt: skip
            if str(drug) not in have:
                near.append(
                    {
                        "code": str(drug),
                        "title": str(drug),
                        "why": f"another name with “{word}”",
                        "patients": int(n),
                    }
                )
    return {
        "concept": "drug", "filter": "prescriptions.drug",
        "matched": [{"code": str(d), "title": str(d), "patients": int(n)} for d, n in matched],
        "missing": near,
    }  # fmt: skip
