"""The review workflow and the example library as services: permissions, the correction path,
the library growing into the next prompt, re-validation after schema changes, and the audit."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from askdb.models import Example, Question, Review, Run
from askdb.services.examples import example_embed, example_upsert, examples_revalidate
from askdb.services.exports import examples_import
from askdb.services.reviews import (
    review_approve,
    review_correct,
    review_flag,
    review_reassign,
    review_required,
)
from askdb.services.runs import question_submit_sync
from askdb.services.sql import ReviewError
from infra.audit.models import AuditEvent
from metadata_admin.models import TableDoc
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

GATE, WRITE, SUMMARY = "You screen questions", "You write one", "You explain the result"
COUNT_SQL = "SELECT count(*) AS patients FROM mimiciv_hosp.patients"


def answered_run(source, user, *, text="How many patients are there?", sql=COUNT_SQL) -> Run:
    question = Question.objects.create(user=user, source=source, text=text)
    return Run.objects.create(
        question=question, status=Run.Status.SUCCEEDED, outcome="answered", sql=sql,
        result_columns=["patients"], result_rows=[[40]], row_count=1, review_status=Run.Review.PENDING,
    )  # fmt: skip


@pytest.fixture
def people(db):
    return {
        "researcher": make_user("rita", "researcher"),
        "reviewer": make_user("rex", "reviewer"),
        "reviewer2": make_user("rosa", "reviewer"),
        "admin": make_user("ada", "admin"),
    }


def test_approve_adds_a_verified_example_with_parsed_tables(source, people):
    run = answered_run(source, people["researcher"])
    review = review_approve(run=run, reviewer=people["reviewer"], comment="looks right")

    run.refresh_from_db()
    assert run.review_status == Run.Review.APPROVED
    example = review.example
    assert example.kind == "answerable" and example.status == "active"
    assert example.tables == ["mimiciv_hosp.patients"]
    assert example.approved_by == people["reviewer"] and example.origin_run == run
    assert example.embedding is None  # the worker embeds it: a reviewer's request never loads a model
    example_embed(example_id=example.pk)
    example.refresh_from_db()
    assert example.embedding is not None and example.embedding_model
    assert AuditEvent.objects.filter(action="review.approve", target_id=str(run.pk)).exists()
    assert AuditEvent.objects.filter(action="example.created", target_id=str(example.pk)).exists()


@pytest.mark.parametrize("who", ["researcher", "self"])
def test_only_reviewers_approve_and_never_their_own_question(source, people, who):
    asker = people["reviewer"] if who == "self" else people["researcher"]
    run = answered_run(source, asker)
    actor = people["reviewer"] if who == "self" else people["researcher"]
    with pytest.raises(ReviewError):
        review_approve(run=run, reviewer=actor)
    with pytest.raises(ReviewError):
        review_correct(run=run, reviewer=actor, sql=COUNT_SQL)
    assert not Example.objects.exists() and not Review.objects.exists()


def test_admin_reassigns_to_a_reviewer_only(source, people):
    run = answered_run(source, people["reviewer"])
    with pytest.raises(ReviewError):
        review_reassign(run=run, admin=people["reviewer2"], reviewer=people["reviewer2"])
    with pytest.raises(ReviewError):
        review_reassign(run=run, admin=people["admin"], reviewer=people["researcher"])
    review_reassign(run=run, admin=people["admin"], reviewer=people["reviewer2"])
    run.refresh_from_db()
    assert run.assigned_to == people["reviewer2"]
    review_approve(run=run, reviewer=people["reviewer2"])  # the other reviewer may approve it


def test_correction_is_validated_and_executed_before_it_is_saved(source, people):
    run = answered_run(source, people["researcher"])
    for bad in ("SELECT nope FROM mimiciv_hosp.patients", "DELETE FROM mimiciv_hosp.patients", "   "):
        with pytest.raises(ReviewError):
            review_correct(run=run, reviewer=people["reviewer"], sql=bad)
    run.refresh_from_db()
    assert run.sql == COUNT_SQL and run.review_status == Run.Review.PENDING
    assert not Review.objects.exists() and not Example.objects.exists()

    fixed = "SELECT count(*) AS women FROM mimiciv_hosp.patients WHERE gender = 'F'"
    review = review_correct(run=run, reviewer=people["reviewer"], sql=fixed, comment="only women")
    run.refresh_from_db()
    # The SQL kept (and run) is the one generated from the validated tree.
    generated = fixed.replace("count(*)", "COUNT(*)")
    assert run.review_status == Run.Review.CORRECTED and run.sql == generated
    assert run.result_columns == ["women"] and 0 < run.result_rows[0][0] < 40  # re-executed
    assert "-SELECT count(*) AS patients" in review.diff and "+SELECT COUNT(*) AS women" in review.diff
    assert review.example.sql == generated and review.example.origin == "correction"
    executed = AuditEvent.objects.filter(action="sql.executed", target_id=str(run.pk)).first()
    assert executed.detail["purpose"] == "correction" and executed.detail["rows"] == 1
    assert len(executed.detail["sha256"]) == 64


def test_flag_unanswerable_keeps_a_negative_example(source, people):
    run = answered_run(source, people["researcher"], text="What is the blood type of each patient?")
    with pytest.raises(ReviewError):
        review_flag(run=run, reviewer=people["reviewer"], category="nonsense")
    review = review_flag(
        run=run, reviewer=people["reviewer"], category="unanswerable", comment="no blood type"
    )
    run.refresh_from_db()
    assert run.review_status == Run.Review.FLAGGED
    assert review.example.kind == "unanswerable" and review.example.sql == ""
    assert AuditEvent.objects.filter(action="review.flag", detail__category="unanswerable").exists()


def test_near_duplicates_merge_and_different_sql_does_not(source, people):
    first = example_upsert(source=source, question="How many patients are there?", sql=COUNT_SQL)
    again = example_upsert(source=source, question="how many patients are there", sql=COUNT_SQL + ";")
    reworded = example_upsert(source=source, question="How many patients are there in total?", sql=COUNT_SQL)
    other = example_upsert(
        source=source, question="How many patients are female?",
        sql="SELECT count(*) FROM mimiciv_hosp.patients WHERE gender = 'F'",
    )  # fmt: skip
    assert again.pk == first.pk == reworded.pk and other.pk != first.pk
    first.refresh_from_db()
    assert first.paraphrases == ["How many patients are there in total?"]
    assert Example.objects.count() == 2


def test_approved_examples_reach_the_next_prompt(source, people, scripted_llm):
    example_upsert(
        source=source, question="How many female patients are there?",
        sql="SELECT count(*) AS n FROM mimiciv_hosp.patients WHERE gender = 'F'", approved_by=people["reviewer"],
    )  # fmt: skip
    retired = example_upsert(
        source=source, question="How many male patients are there?",
        sql="SELECT count(*) AS n FROM mimiciv_hosp.patients WHERE gender = 'M' AND 1 = 1",
    )  # fmt: skip
    retired.status = Example.Status.RETIRED
    retired.save()
    scripted_llm.when(GATE, Reply('{"category": "answerable", "reason": "patients"}'))
    scripted_llm.when(WRITE, Reply(f"```sql\n{COUNT_SQL}\n```"))
    scripted_llm.when(SUMMARY, Reply("ok"))

    run = question_submit_sync(
        user=people["researcher"], text="How many female patients had an emergency admission?", source=source
    )
    run.refresh_from_db()
    prompt = next(m for m in scripted_llm.chat_requests() if WRITE in m[0]["content"])
    text = "\n".join(m["content"] for m in prompt)
    assert "WHERE gender = 'F'" in text  # the verified example is a few-shot example
    assert "gender = 'M' AND 1 = 1" not in text  # a retired one never is
    assert run.examples_used and run.retrieval["examples"][0]["id"] == run.examples_used[0]
    assert run.review_status == Run.Review.PENDING and run.model == "scripted" and run.catalog_version
    assert AuditEvent.objects.filter(action="llm.call", target_id=str(run.pk)).count() == 3
    executed = AuditEvent.objects.get(action="sql.executed", target_id=str(run.pk))
    assert executed.detail["purpose"] == "question" and executed.detail["source"] == source.name


def test_review_policy(source, people, settings):
    run = answered_run(source, people["researcher"])
    settings.ASKDB_REVIEW_POLICY = "all"
    assert review_required(run)
    settings.ASKDB_REVIEW_POLICY = "low_confidence"
    assert not review_required(run)
    run.confidence = 0.4
    assert review_required(run)
    settings.ASKDB_REVIEW_POLICY = "first_of_kind"
    run.retrieval = {"examples": [{"id": 1, "score": 0.97}]}
    assert not review_required(run)
    run.retrieval = {"examples": [{"id": 1, "score": 0.5}]}
    assert review_required(run)
    run.answered_by = "library"  # reviewed already, through its example (none sampled for recheck)
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0
    assert not review_required(run)
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 1.0  # every library answer rechecked
    assert review_required(run)


def test_schema_change_marks_broken_examples_and_restores_them(source, people):
    ok = example_upsert(source=source, question="How many patients are there?", sql=COUNT_SQL)
    icu = example_upsert(
        source=source,
        question="How many ICU stays are there?",
        sql="SELECT count(*) FROM mimiciv_icu.icustays",
    )
    TableDoc.objects.filter(source=source, name="icustays").update(exists_in_source=False)
    report = examples_revalidate(source=source, execute=True)
    assert report["broken"] == [icu.pk] and report["checked"] == 2
    icu.refresh_from_db()
    ok.refresh_from_db()
    assert icu.status == "needs_review" and "icustays" in icu.validation_error and ok.status == "active"

    TableDoc.objects.filter(source=source, name="icustays").update(exists_in_source=True)
    assert examples_revalidate(source=source)["restored"] == [icu.pk]


def test_import_reports_failures_and_keeps_the_good_pairs(source, people):
    report = examples_import(
        source=source, approved_by=people["reviewer"],
        items=[
            {"id": "a", "question": "How many patients are there?", "sql": COUNT_SQL},
            {"id": "b", "question": "Broken query", "sql": "SELECT FROM WHERE"},
            {"id": "c", "question": "Missing column", "sql": "SELECT shoe_size FROM mimiciv_hosp.patients"},
            {"id": "d", "question": "What is the weather in Paris?", "sql": "null"},
            {"id": "e", "question": "", "sql": COUNT_SQL},
        ],
    )  # fmt: skip
    assert len(report.created) == 2 and not report.merged
    assert [f["id"] for f in report.failed] == ["b", "c", "e"]
    assert "shoe_size" in report.failed[1]["error"]
    assert Example.objects.get(question__startswith="What is the weather").kind == "unanswerable"
    again = examples_import(
        source=source, items=[{"question": "how many patients are there", "sql": COUNT_SQL}]
    )
    assert len(again.merged) == 1 and not again.created


def test_user_and_role_changes_are_audited(db):
    user = make_user("uma")
    assert AuditEvent.objects.filter(action="user.created", target_id=str(user.pk)).exists()
    user.groups.add(Group.objects.get(name="reviewer"))
    event = AuditEvent.objects.filter(action="user.roles_changed", target_id=str(user.pk)).first()
    assert event is not None and event.detail["roles"] == ["reviewer"]
    user.is_active = False
    user.save()
    assert AuditEvent.objects.filter(action="user.changed", detail__is_active=False).exists()
    user.last_name = "unimportant"
    user.save()
    assert AuditEvent.objects.filter(action="user.changed").count() == 1
