"""The review pages: who may review what, each action through HTTP, and what the researcher sees
afterwards (outcome, badge, provenance, methods text). Runs are built in the database directly;
corrections run against the synthetic clinical data of the `source` fixture."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from django.utils import timezone

from askdb.models import Example, Question, Review, Run, SqlAttempt, StageEvent
from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from askdb.selectors import DiffLine, Provenance, diff_lines, methods_paragraph, sql_diff
from infra.audit.models import AuditEvent
from tests.factories import make_user

COUNT_SQL = "SELECT count(*) AS n FROM mimiciv_hosp.patients"


def pending_run(source, user, *, text="How many patients are there?", sql=COUNT_SQL, channel="web", **fields):
    question = Question.objects.create(user=user, source=source, text=text, channel=channel)
    values = {
        "status": Run.Status.SUCCEEDED, "outcome": "answered", "sql": sql, "result_columns": ["n"],
        "result_rows": [[40]], "row_count": 1, "review_status": Run.Review.PENDING, "model": "scripted-model",
        "prompt_version": "p7", "catalog_version": "cat123", "answered_by": "llm", "summary": "There are 40.",
        "gate_category": "answerable", "gate_reason": "asks for a count of patients",
    } | fields  # fmt: skip
    run = Run.objects.create(question=question, **values)
    SqlAttempt.objects.create(run=run, number=1, sql=sql, valid=True)
    StageEvent.objects.create(
        run=run, name="generate", status="ok", started_at=timezone.now(), duration_ms=812
    )
    return run


@pytest.fixture
def ann(db):
    return make_user("ann", RESEARCHER)


@pytest.fixture
def rita(db):
    return make_user("rita", REVIEWER)


# --------------------------------------------------------------------------- permissions


def test_a_researcher_is_refused_the_queue_and_the_review_page(client, source, ann):
    run = pending_run(source, ann)
    client.force_login(ann)
    assert client.get("/review/").status_code == 403
    assert client.get(f"/runs/{run.pk}/review/").status_code == 403
    assert client.post(f"/runs/{run.pk}/review/", {"action": "approve"}).status_code == 403
    run.refresh_from_db()
    assert run.review_status == Run.Review.PENDING and not Review.objects.exists()


def test_the_queue_lists_others_pending_runs_oldest_first_with_filters(client, source, ann, rita):
    older = pending_run(source, ann, text="How many patients are there?")
    newer = pending_run(source, ann, text="How many admissions are there?",
                        sql="SELECT count(*) AS n FROM mimiciv_hosp.admissions")  # fmt: skip
    Run.objects.filter(pk=older.pk).update(created_at=timezone.now() - dt.timedelta(hours=2))
    pending_run(source, ann, text="An approved one", review_status=Run.Review.APPROVED)
    pending_run(source, ann, text="An evaluation question", channel="evaluation")
    bob = make_user("bob", RESEARCHER)
    pending_run(source, bob, text="Bob asks about patients")
    client.force_login(rita)

    page = client.get("/review/").content.decode()
    assert "Review policy <strong>all</strong>: every answer an LLM wrote waits for a reviewer" in page
    assert "Answers from the verified library wait only when drawn for a recheck (5% of them" in page
    assert page.index("How many patients") < page.index("How many admissions")  # oldest first
    assert "An approved one" not in page and "An evaluation question" not in page
    assert f"/runs/{newer.pk}/review/" in page

    page = client.get("/review/", {"status": "approved"}).content.decode()
    assert "An approved one" in page and "How many patients" not in page
    page = client.get("/review/", {"user": "bob"}).content.decode()
    assert "Bob asks" in page and "How many patients" not in page
    page = client.get("/review/", {"table": "mimiciv_hosp.admissions"}).content.decode()
    assert "How many admissions" in page and "How many patients" not in page and "Bob asks" not in page
    page = client.get("/review/", {"mine": "1"}).content.decode()
    assert "No runs match these filters." in page
    Run.objects.filter(pk=newer.pk).update(assigned_to=rita)
    page = client.get("/review/", {"mine": "1"}).content.decode()
    assert "How many admissions" in page and "How many patients" not in page


def test_an_empty_queue_says_so(client, source, rita):
    client.force_login(rita)
    assert "Nothing is waiting for review." in client.get("/review/").content.decode()


def test_the_queue_pages_by_25(client, source, ann, rita):
    for i in range(27):
        pending_run(source, ann, text=f"Question number {i:02d}")
    client.force_login(rita)
    first = client.get("/review/", {"user": "ann"}).content.decode()
    assert "Question number 24" in first and "Question number 25" not in first and "Page 1 of 2" in first
    second = client.get("/review/", {"user": "ann", "page": "2"}).content.decode()
    assert "Question number 26" in second and "Question number 00" not in second


# --------------------------------------------------------------------------- the review page


def test_the_review_page_shows_gate_attempts_preview_trace_and_nearest_examples(client, source, ann, rita):
    example = Example.objects.create(
        source=source, question="How many female patients are there?",
        sql="SELECT count(*) AS n FROM mimiciv_hosp.patients WHERE gender = 'F'",
    )  # fmt: skip
    rows = [[i] for i in range(30)]
    run = pending_run(source, ann, result_rows=rows, row_count=30,
                      retrieval={"examples": [{"id": example.pk, "score": 0.91, "question": example.question}]})  # fmt: skip
    SqlAttempt.objects.create(run=run, number=2, sql="SELECT nope FROM x", valid=False, error_code="unknown_table",
                              error="table x does not exist")  # fmt: skip
    client.force_login(rita)
    page = client.get(f"/runs/{run.pk}/review/").content.decode()
    assert "asks for a count of patients" in page  # gate reason
    assert "table x does not exist" in page  # every attempt, with its error
    assert "812 ms" in page  # the stage trace with durations
    assert "first 20 of 30 rows" in page and "<td>19</td>" in page and "<td>20</td>" not in page
    assert "How many female patients are there?" in page and f'href="/library/{example.pk}/"' in page
    # the example's extra WHERE shows as removed lines of a diff against this run's SQL
    assert '<span class="dl del"><span class="sr-only">removed: </span>-WHERE' in page
    assert 'value="approve"' in page and 'value="correct"' in page and 'value="flag"' in page
    assert 'value="reassign"' not in page  # admins only


def test_a_library_answer_for_review_names_its_example_the_hold_and_the_gates_verdict(
    client, source, ann, rita
):
    example = Example.objects.create(source=source, question="How many patients are there?", sql=COUNT_SQL)
    run = pending_run(source, ann, answered_by="library", example=example, gate_category="",
                      answerability={"answerable": True, "probability": 0.97, "threshold": 0.38, "version": "v42"})  # fmt: skip
    client.force_login(rita)
    assert (
        f"from verified example #{example.pk}, drawn for a recheck" in client.get("/review/").content.decode()
    )
    page = client.get(f"/runs/{run.pk}/review/").content.decode()
    assert f'Answered from verified example <a href="/library/{example.pk}/">#{example.pk}</a>' in page
    assert f"Example #{example.pk} goes on hold" in page  # said where the reviewer flags
    assert "Attempt 1 (written by the LLM)" in page  # where each attempt came from, in words
    assert "the data can answer this" in page and "gate score 0.97, needs 0.38" in page and "v42" in page
    done = client.post(f"/runs/{run.pk}/review/", {"action": "flag", "category": "wrong_values",
                                                    "comment": "wrong age column"}, follow=True).content.decode()  # fmt: skip
    assert f"Verified example #{example.pk} is on hold" in done
    example.refresh_from_db()
    assert example.status == Example.Status.NEEDS_REVIEW


def test_a_reviewer_cannot_approve_or_correct_their_own_question(client, source, rita):
    run = pending_run(source, rita)
    client.force_login(rita)
    page = client.get(f"/runs/{run.pk}/review/").content.decode()
    assert 'value="approve"' not in page and 'value="correct"' not in page
    assert "You asked this question" in page and 'value="flag"' in page
    for action in ("approve", "correct"):
        response = client.post(f"/runs/{run.pk}/review/", {"action": action, "sql": COUNT_SQL})
        assert response.status_code == 400
        assert "You cannot approve or correct your own question" in response.content.decode()
    run.refresh_from_db()
    assert run.review_status == Run.Review.PENDING
    assert not Review.objects.exists() and not Example.objects.exists()


def test_an_admin_reassigns_a_run_and_a_reviewer_may_not(client, source, rita):
    admin = make_user("root", ADMIN)
    run = pending_run(source, rita)  # the only reviewer asked it: an admin hands it on
    other = make_user("rex", REVIEWER)
    client.force_login(rita)
    response = client.post(f"/runs/{run.pk}/review/", {"action": "reassign", "assignee": other.pk})
    assert response.status_code == 400 and "Only admins can reassign" in response.content.decode()

    client.force_login(admin)
    page = client.get(f"/runs/{run.pk}/review/").content.decode()
    assert 'value="reassign"' in page and f'<option value="{other.pk}"' in page
    assert f'<option value="{rita.pk}"' not in page  # not to the person who asked it
    response = client.post(f"/runs/{run.pk}/review/", {"action": "reassign", "assignee": other.pk})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.assigned_to == other and run.review_status == Run.Review.PENDING
    assert Review.objects.get().action == Review.Action.REASSIGN
    client.force_login(other)
    assert "How many patients" in client.get("/review/", {"mine": "1"}).content.decode()


def test_approving_makes_an_example_and_moves_on_to_the_next_run(client, source, ann, rita):
    first = pending_run(source, ann)
    second = pending_run(source, ann, text="How many admissions are there?",
                         sql="SELECT count(*) AS n FROM mimiciv_hosp.admissions")  # fmt: skip
    Run.objects.filter(pk=first.pk).update(created_at=timezone.now() - dt.timedelta(hours=1))
    client.force_login(rita)
    response = client.post(f"/runs/{first.pk}/review/", {"action": "approve", "comment": "Looks right."})
    assert response.status_code == 302 and response["Location"] == f"/runs/{second.pk}/review/"
    first.refresh_from_db()
    assert first.review_status == Run.Review.APPROVED
    example = Example.objects.get()
    assert example.question == "How many patients are there?" and example.approved_by == rita
    assert "mimiciv_hosp.patients" in example.sql and example.origin_run == first
    assert f"Run {first.pk} approved" in client.get(response["Location"]).content.decode()
    response = client.post(f"/runs/{second.pk}/review/", {"action": "approve"})
    assert response["Location"] == "/review/"  # nothing left


def test_a_correction_with_bad_sql_is_refused_and_keeps_the_typed_text(client, source, ann, rita):
    run = pending_run(source, ann)
    client.force_login(rita)
    typed = "SELECT count(*) AS n FROM mimiciv_hosp.patients WHERE no_such_column = 1"
    response = client.post(
        f"/runs/{run.pk}/review/", {"action": "correct", "sql": typed, "comment": "filter"}
    )
    page = response.content.decode()
    assert response.status_code == 400 and "The SQL is not valid" in page and "no_such_column" in page
    assert f">{typed}</textarea>" in page and ">filter</textarea>" in page
    run.refresh_from_db()
    assert run.sql == COUNT_SQL and run.review_status == Run.Review.PENDING and run.result_rows == [[40]]
    assert not Review.objects.exists() and not Example.objects.exists()


def test_a_correction_reruns_and_the_run_page_shows_the_corrected_result_and_diff(client, source, ann, rita):
    run = pending_run(source, ann)
    client.force_login(rita)
    corrected = "SELECT gender, count(*) AS n FROM mimiciv_hosp.patients GROUP BY gender ORDER BY gender"
    response = client.post(f"/runs/{run.pk}/review/", {"action": "correct", "sql": corrected,
                                                      "comment": "They wanted it by sex."})  # fmt: skip
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.review_status == Run.Review.CORRECTED and run.result_columns == ["gender", "n"]
    assert sum(n for _, n in run.result_rows) == 40  # really executed against the clinical data
    review = Review.objects.get(action=Review.Action.CORRECT)
    assert review.sql_before == COUNT_SQL and "+" in review.diff and "gender" in review.diff
    assert Example.objects.get().origin == "correction"

    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "The result below is the corrected result." in page and "They wanted it by sex." in page
    assert '<span class="dl add"><span class="sr-only">added: </span>' in page
    assert '<th scope="col"' in page and "gender" in page.split('id="result"')[1]


def test_flagging_needs_a_comment_and_unanswerable_makes_a_negative_example(client, source, ann, rita):
    run = pending_run(source, ann, text="What will the weather be tomorrow?")
    client.force_login(rita)
    response = client.post(f"/runs/{run.pk}/review/", {"action": "flag", "category": "unanswerable"})
    assert response.status_code == 400 and "flagging needs a comment" in response.content.decode()
    assert not Review.objects.exists()
    response = client.post(f"/runs/{run.pk}/review/", {"action": "flag", "category": "unanswerable",
                                                      "comment": "The data has no weather."})  # fmt: skip
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.review_status == Run.Review.FLAGGED
    example = Example.objects.get()
    assert example.kind == Example.Kind.UNANSWERABLE and example.sql == ""

    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Flagged" in page and "unanswerable" in page and "The data has no weather." in page


def test_the_researcher_sees_the_approval_on_the_run_page_and_a_badge_in_history(client, source, ann, rita):
    run = pending_run(source, ann)
    other = pending_run(source, ann, text="Still waiting for a reviewer")
    client.force_login(ann)
    assert (
        "Not checked yet: a reviewer will look at this SQL"
        in client.get(f"/runs/{other.pk}/").content.decode()
    )
    client.force_login(rita)
    client.post(f"/runs/{run.pk}/review/", {"action": "approve", "comment": "Checked against the docs."})
    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "<strong>Approved</strong> by rita" in page and "Checked against the docs." in page
    assert 'href="/runs/' + str(run.pk) + '/review/"' not in page  # no review link for researchers
    history = client.get("/runs/").content.decode()
    assert '<span class="badge review-approved">approved</span>' in history
    assert '<span class="badge review-pending">awaiting review</span>' in history


def test_provenance_panel_and_methods_text_cite_the_sql_hash_and_the_reviewer(client, source, ann, rita):
    run = pending_run(source, ann, examples_used=[11, 12])
    client.force_login(rita)
    client.post(f"/runs/{run.pk}/review/", {"action": "approve"})
    sha = hashlib.sha256(COUNT_SQL.encode()).hexdigest()
    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    panel = page[page.index('id="provenance"') :]
    assert sha in panel and "rita" in panel and "cat123" in panel and "scripted-model" in panel
    assert 'href="/library/11/"' in panel and 'href="/library/12/"' in panel
    assert "from 2 verified examples and approved by rita on" in panel

    response = client.get(f"/runs/{run.pk}/methods.txt")
    text = response.content.decode()
    assert (
        response["Content-Type"].startswith("text/plain") and "attachment" in response["Content-Disposition"]
    )
    assert f"SHA-256 {sha}" in text and "approved by rita" in text and COUNT_SQL in text
    assert f"Data were extracted from {source.name}" in text
    client.force_login(make_user("bob", RESEARCHER))
    assert client.get(f"/runs/{run.pk}/methods.txt").status_code == 404  # not bob's run


# --------------------------------------------------------------------------- pure helpers (no database)


def _provenance(**changes) -> Provenance:
    values = {
        "run_id": 7, "question": "How many?", "sql": "SELECT 1", "sha256": "ab" * 32, "source": "mimic-demo",
        "as_of": dt.datetime(2180, 3, 1, 12, 0), "catalog_version": "c1", "model": "gpt-x",
        "prompt_version": "p7", "examples_used": (1, 2, 3), "answered_by": "llm", "example_id": None,
        "review_status": "approved", "review_action": "approve", "reviewer": "rita",
        "reviewed_at": dt.datetime(2024, 5, 6, 9, 30), "askdb_version": "0.1.0",
    } | changes  # fmt: skip
    return Provenance(**values)


def test_methods_paragraph_names_source_sql_hash_model_examples_and_approval():
    text = methods_paragraph(_provenance())
    assert text == (
        "Data were extracted from mimic-demo (as of 2180-03-01) with askdb 0.1.0 using the SQL below "
        f"(SHA-256 {'ab' * 32}); the query was generated by gpt-x with prompt version p7 from 3 verified "
        "examples and approved by rita on 2024-05-06."
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"review_status": "pending", "review_action": "", "reviewer": "", "reviewed_at": None},
         "it has not been reviewed yet."),
        ({"review_status": "corrected", "review_action": "correct"},
         "and corrected and approved by rita on 2024-05-06."),
        ({"review_status": "flagged"}, "should not be relied on."),
        ({"answered_by": "library", "model": "", "example_id": 42, "review_status": "",
          "review_action": "example"},
         "adapted from verified example 42 of the askdb example library; that example was approved by"),
        ({"examples_used": (1,)}, "from 1 verified example and"),
        ({"examples_used": ()}, "without verified examples and"),
        ({"as_of": None}, "Data were extracted from mimic-demo with askdb"),
    ],
)  # fmt: skip
def test_methods_paragraph_says_plainly_what_checked_the_query(changes, expected):
    assert expected in methods_paragraph(_provenance(**changes))


def test_diff_lines_colour_added_and_removed_lines():
    diff = sql_diff("SELECT a\nFROM t", "SELECT a\nFROM t\nWHERE b = 1", fromfile="old", tofile="new")
    lines = diff_lines(diff)
    assert DiffLine("add", "+WHERE b = 1") in lines and DiffLine("file", "--- old") in lines
    assert DiffLine("ctx", " SELECT a") in lines and not [line for line in lines if line.kind == "del"]
    assert sql_diff("SELECT 1", "SELECT 1") == ""


def test_review_actions_are_audited_with_the_reviewer(client, source, ann, rita):
    run = pending_run(source, ann)
    client.force_login(rita)
    client.post(f"/runs/{run.pk}/review/", {"action": "flag", "category": "wrong_table", "comment": "icu"})
    event = AuditEvent.objects.get(action="review.flag")
    assert (
        event.actor_name == "rita"
        and event.target_id == str(run.pk)
        and event.detail["category"] == "wrong_table"
    )
