"""Review of runs: who must review, approve, correct, flag, reassign."""

from __future__ import annotations

import difflib
import hashlib

from django.conf import settings
from django.db import transaction

from askdb.models import Example, Review, Run
from askdb.services.examples import example_upsert, library_generation_bump
from askdb.services.privacy import run_sql_protected
from askdb.services.sql import ReviewError
from infra.audit.services import audit_record


def library_answer_sampled(run_id: int) -> bool:
    """Whether this library answer is among the ASKDB_LIBRARY_REVIEW_SHARE that a reviewer rechecks
    (by a hash of the run id: stable, and spread evenly over time)."""
    share = settings.ASKDB_LIBRARY_REVIEW_SHARE
    bucket = int(hashlib.sha1(f"library-review:{run_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return share > 0 and bucket < share


def review_required(run) -> bool:
    """Does this finished run wait for a reviewer, under ASKDB_REVIEW_POLICY?

    "all": every answered run. "low_confidence": runs whose sampled candidates disagreed or whose
    answerability score was low. "first_of_kind": runs no approved example is close to. Runs
    answered from a verified example were reviewed already, through that example.
    """
    if run.question.channel == "evaluation" or run.status != "succeeded":
        return False
    if run.outcome == "ambiguous":  # the candidates disagreed: a person must look, whatever the policy
        return True
    if not run.sql:
        return False
    if run.answered_by == "library":  # reviewed through its example; a sampled share is checked again
        return library_answer_sampled(run.pk)
    if run.answered_by == "composed":  # composed from verified parts, itself verified by nobody yet
        return True
    policy = settings.ASKDB_REVIEW_POLICY
    if policy == "low_confidence":
        low = run.question.source.confidence_threshold or settings.ASKDB_CONFIDENCE_THRESHOLD
        score = (run.answerability or {}).get("probability")
        return (run.confidence is not None and run.confidence < low) or (score is not None and score < low)
    if policy == "first_of_kind":
        nearest = max((e.get("score", 0.0) for e in (run.retrieval or {}).get("examples", [])), default=0.0)
        return nearest < settings.ASKDB_FIRST_OF_KIND_SIMILARITY
    return True


def _review_guard(run, reviewer, *, approving: bool) -> None:
    if not reviewer.has_perm("askdb.review_runs"):
        raise ReviewError("Only reviewers can review runs.")
    if approving and run.question.user_id == reviewer.pk:
        raise ReviewError(
            "You cannot approve or correct your own question; an admin can assign it to another reviewer."
        )
    if approving and (run.status != "succeeded" or not run.sql):
        raise ReviewError("Only an answered run with SQL can be approved or corrected.")


def _review_save(run, reviewer, action: str, **fields):
    review = Review.objects.create(run=run, reviewer=reviewer, action=action, **fields)
    audit_record(
        action=f"review.{action}", actor=reviewer, target=run,
        message=(fields.get("comment") or "")[:500],
        detail={k: v for k, v in fields.items() if k in ("category", "diff") and v} | {"review": review.pk},
    )  # fmt: skip
    return review


def review_approve(*, run, reviewer, comment: str = ""):
    """Approve a run's SQL: the pair becomes (or strengthens) a verified library example."""
    _review_guard(run, reviewer, approving=True)
    with transaction.atomic():
        # Two reviewers acting at once: the second sees the first one's decision, not a stale page.
        locked = Run.objects.select_for_update(of=("self",)).get(pk=run.pk)
        if locked.review_status in (Run.Review.APPROVED, Run.Review.CORRECTED):
            raise ReviewError(f"This run was already {locked.get_review_status_display()}.")
        example = example_upsert(
            source=run.question.source, question=run.question.text, sql=run.sql,
            approved_by=reviewer, origin="review", origin_run=run, defer_embedding=True,
        )  # fmt: skip
        run.review_status = Run.Review.APPROVED
        run.save(update_fields=["review_status"])
        return _review_save(run, reviewer, Review.Action.APPROVE, comment=comment, example=example,
                            sql_before=run.sql, sql_after=run.sql)  # fmt: skip


def review_correct(*, run, reviewer, sql: str, comment: str = ""):
    """Replace a run's SQL with a reviewer's: validated and executed first, so nothing broken is
    saved; the run then shows the corrected result, and the diff is kept."""
    _review_guard(run, reviewer, approving=True)
    if not isinstance(sql, str) or not sql.strip():
        raise ReviewError("Type the corrected SQL.")
    validated, result = run_sql_protected(run=run, sql=sql, actor=reviewer, purpose="correction")
    before = run.sql
    diff = "".join(
        difflib.unified_diff(
            before.strip().splitlines(keepends=True), validated.sql.strip().splitlines(keepends=True),
            fromfile="generated", tofile="corrected", lineterm="\n",
        )
    )  # fmt: skip
    with transaction.atomic():
        example = example_upsert(
            source=run.question.source, question=run.question.text, sql=validated.sql,
            approved_by=reviewer, origin="correction", origin_run=run, note=comment, defer_embedding=True,
        )  # fmt: skip
        run.sql = validated.sql
        run.privacy = result.privacy
        run.result_columns = list(result.columns)
        run.result_rows = [list(r) for r in result.rows]
        run.result_truncated = result.truncated
        run.row_count = result.row_count
        run.review_status = Run.Review.CORRECTED
        run.save(update_fields=["sql", "privacy", "result_columns", "result_rows", "result_truncated",
                                "row_count", "review_status"])  # fmt: skip
        return _review_save(run, reviewer, Review.Action.CORRECT, comment=comment, example=example,
                            sql_before=before, sql_after=validated.sql, diff=diff)  # fmt: skip


def review_flag(*, run, reviewer, category: str, comment: str = ""):
    """Flag a run as wrong. "unanswerable" keeps the question as a negative example for the gate."""
    _review_guard(run, reviewer, approving=False)
    if category not in Review.Category.values:
        raise ReviewError(f"Pick a category: {', '.join(Review.Category.values)}.")
    if not (comment or "").strip():
        raise ReviewError("Say what is wrong: flagging needs a comment.")
    with transaction.atomic():
        example = None
        if category == Review.Category.UNANSWERABLE:
            example = example_upsert(
                source=run.question.source, question=run.question.text, sql="",
                kind=Example.Kind.UNANSWERABLE, approved_by=reviewer, origin="review", origin_run=run,
                note=comment, defer_embedding=True,
            )  # fmt: skip
        if run.answered_by == "library" and run.example_id:
            _example_needs_review(run, reviewer, category, comment)
        run.review_status = Run.Review.FLAGGED
        run.save(update_fields=["review_status"])
        return _review_save(run, reviewer, Review.Action.FLAG, category=category, comment=comment,
                            example=example, sql_before=run.sql)  # fmt: skip


def _example_needs_review(run, reviewer, category: str, comment: str) -> None:
    """A flagged library answer puts its example on hold: no question is answered from it (nor
    given it as a few-shot example) until a reviewer restores it. The reason goes in the note, not
    in validation_error, so that re-validation does not bring it back on its own."""
    note = f"Flagged on run {run.pk} ({category.replace('_', ' ')}): {comment}"[:2000]
    updated = Example.objects.filter(pk=run.example_id, status=Example.Status.ACTIVE).update(
        status=Example.Status.NEEDS_REVIEW, note=note
    )
    if updated:  # a queryset update sends no signal: number the change here, for every worker
        library_generation_bump(source_id=run.question.source_id, examples=True)
        audit_record(action="example.needs_review", actor=reviewer, target=run.example, message=note[:500])


def review_reassign(*, run, admin, reviewer):
    """An admin hands a run to a reviewer (for instance when the only reviewer asked it)."""
    if not admin.has_perm("askdb.manage_users"):
        raise ReviewError("Only admins can reassign reviews.")
    if reviewer is None or not reviewer.has_perm("askdb.review_runs"):
        raise ReviewError("Runs can only be assigned to reviewers.")
    with transaction.atomic():
        run.assigned_to = reviewer
        run.save(update_fields=["assigned_to"])
        return _review_save(run, admin, Review.Action.REASSIGN, comment=f"assigned to {reviewer.username}")
