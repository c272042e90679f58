"""Answering from the verified library without an LLM: a template's values rebound, executed
read-only, shown with the example it came from; flipped meanings and unknown values abstain."""

from __future__ import annotations

import psycopg
import pytest

from askdb.models import Run
from askdb.services.calibration import library_calibrate
from askdb.services.examples import example_upsert
from askdb.services.runs import question_submit_sync
from infra import embedded
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

GENDER_SQL = "SELECT gender FROM mimiciv_hosp.patients WHERE subject_id = {id}"
FIRST_ADMIT_SQL = (
    "SELECT admittime FROM mimiciv_hosp.admissions WHERE subject_id = {id} ORDER BY admittime ASC LIMIT 1"
)


def clinical_rows(sql: str):
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture
def ids(source):
    return [
        r[0]
        for r in clinical_rows("SELECT subject_id FROM mimiciv_hosp.patients ORDER BY subject_id LIMIT 3")
    ]


@pytest.fixture
def library(source, ids):
    reviewer = make_user("rev", "reviewer")
    gender = example_upsert(source=source, question=f"what is the gender of patient {ids[0]}?",
                            sql=GENDER_SQL.format(id=ids[0]), approved_by=reviewer)  # fmt: skip
    first = example_upsert(source=source, question=f"when was patient {ids[0]} first admitted to the hospital?",
                           sql=FIRST_ADMIT_SQL.format(id=ids[0]), approved_by=reviewer)  # fmt: skip
    return {"gender": gender, "first": first}


def ask(source, text):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username="asker").first() or make_user("asker", "researcher")
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def test_a_new_patient_id_is_answered_from_the_verified_example(source, ids, library, settings):
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    run = ask(source, f"What is the gender of patient {ids[1]}?")

    assert run.status == "succeeded" and run.answered_by == "library", run.message
    assert run.example_id == library["gender"].pk
    assert str(ids[1]) in run.sql and str(ids[0]) not in run.sql
    assert run.result_rows == [list(r) for r in clinical_rows(GENDER_SQL.format(id=ids[1]))]
    binding = run.library_match["bindings"][0]
    assert binding["old"] == str(ids[0]) and binding["new"] == str(ids[1])
    assert run.library_match["answered"] and run.review_status == ""  # verified already, via its example
    # the match stage ran the bound SQL; nothing else ran but the (skipped, no LLM) summary
    assert [s.name for s in run.stages.all()] == ["embed", "retrieve", "match", "summarize"]


def test_the_run_page_says_which_verified_example_answered(client, source, ids, library, settings):
    settings.LLM_MODEL = ""
    run = ask(source, f"What is the gender of patient {ids[1]}?")
    client.force_login(run.question.user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'From verified example <a href="/library/{library["gender"].pk}/">' in page
    assert "approved by <strong>rev</strong>" in page and f"<code>{ids[1]}</code>" in page


def test_a_flipped_meaning_or_unrelated_question_is_declined_without_an_llm(source, ids, library, settings):
    settings.LLM_MODEL = ""
    last = ask(source, f"when was patient {ids[1]} last admitted to the hospital?")
    assert last.status == "declined" and last.outcome == "no_llm" and last.answered_by == ""
    assert last.library_match["example_id"] == library["first"].pk and not last.library_match["answered"]
    assert last.library_match["confidence"] == 0 and last.sql == ""
    # Why, in words and as codes (user testing: "the question says None, the template ['first']")
    codes, reasons = last.library_match["reason_codes"], last.library_match["reasons"]
    assert codes[0] == "operator_differs" and len(codes) == len(reasons)
    assert reasons[0] == "This question asks for the last one, the verified question for the first one."

    other = ask(source, "How many prescriptions of heparin were written?")
    assert other.status == "declined" and "verified example" in other.message


def test_with_an_llm_a_confident_match_skips_generation(source, ids, library, scripted_llm):
    scripted_llm.when("You explain the result", Reply("The patient is listed as female or male."))
    run = ask(source, f"what is the gender of patient {ids[2]}?")

    assert run.answered_by == "library" and run.status == "succeeded"
    purposes = [c.purpose for c in run.llm_calls.all()]
    assert purposes == ["summarize"]  # no gate, no generation, no sampling


def test_leave_one_out_calibration_is_stored(source, ids, library):
    for other in ids[1:]:
        example_upsert(source=source, question=f"tell me the gender of patient {other}",
                       sql=GENDER_SQL.format(id=other))  # fmt: skip
    report = library_calibrate(source=source)
    source.refresh_from_db()
    assert report["mode"] == "grouped cross-validation" and report["held_out"] == 4
    assert report["correct_matches"] >= 2  # the gender examples answer each other
    assert source.library_calibration["threshold"] == report["threshold"] == round(10 / 11, 4)
    assert source.library_calibration["risk"]["weights"]


def test_a_calibration_with_nothing_held_out_to_match_says_the_default_threshold_applies(source, library):
    from askdb.services.calibration import calibration_summary

    report = library_calibrate(source=source)  # the fixture's templates each have one wording
    line = calibration_summary(report)
    if report["matched"]:
        pytest.fail(f"the fixture library should give no held-out match: {line}")
    assert "nothing to calibrate on" in line and f"{round(10 / 11, 3):.3f}" in line
    assert "None" not in line


def test_calibrate_command_reads_held_out_questions_and_refuses_a_broken_file(source, ids, library, tmp_path):
    import io
    import json

    from django.core.management import CommandError, call_command

    held_out = tmp_path / "held_out.json"
    held_out.write_text(json.dumps([
        {"id": "h1", "question": f"what is the gender of patient {ids[1]}?", "sql": GENDER_SQL.format(id=ids[1])},
        {"id": "h2", "question": "what is the weather in Paris?", "sql": ""},
    ]))  # fmt: skip
    out = io.StringIO()
    call_command("calibrate_library", "--questions", str(held_out), "--no-progress", stdout=out)
    source.refresh_from_db()
    assert "grouped cross-validation + file: 4 questions" in out.getvalue()
    assert source.library_calibration["mode"] == "grouped cross-validation + file"

    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": "x"}]')
    with pytest.raises(CommandError, match="missing or empty key 'question'"):
        call_command("calibrate_library", "--questions", str(broken), "--no-progress")


def test_a_share_of_library_answers_enters_the_review_queue(source, ids, library, settings):
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 1.0
    run = ask(source, f"What is the gender of patient {ids[1]}?")
    assert run.answered_by == "library" and run.review_status == Run.Review.PENDING


def test_flagging_a_library_answer_takes_its_example_out_at_once(source, ids, library, settings):
    from askdb.models import Example
    from askdb.services.reviews import review_flag

    settings.LLM_MODEL = ""
    run = ask(source, f"What is the gender of patient {ids[1]}?")
    assert run.answered_by == "library"
    review_flag(
        run=run, reviewer=make_user("rev2", "reviewer"), category="wrong_values", comment="not the gender"
    )
    example = Example.objects.get(pk=library["gender"].pk)
    assert example.status == Example.Status.NEEDS_REVIEW and "not the gender" in example.note
    again = ask(source, f"What is the gender of patient {ids[2]}?")
    assert again.answered_by != "library"  # it answers nothing until a reviewer looks at it


def test_a_verified_answer_whose_query_runs_out_of_time_says_so_not_no_match(source, ids, settings):
    """The matched example is right; its query is too big for the statement timeout. The researcher
    must read that it ran out of time, never "no reviewer-verified example matches"."""
    from askdb.outcomes import run_outcome

    pairs = (
        "SELECT count(*) FROM mimiciv_hosp.labevents a, mimiciv_hosp.labevents b WHERE a.subject_id = {id}"
    )
    example = example_upsert(source=source, question=f"how many lab result pairs does patient {ids[0]} have?",
                             sql=pairs.format(id=ids[0]), approved_by=make_user("rev", "reviewer"))  # fmt: skip
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    settings.CLINICAL_STATEMENT_TIMEOUT_S = 0.2
    run = ask(source, f"How many lab result pairs does patient {ids[1]} have?")

    assert (run.status, run.outcome) == ("failed", "timeout"), run.message
    assert run.message.startswith("This question reads about ")  # its size (tests/askdb/test_long_queries.py)
    assert "needed more than 0.2 s (the statement timeout), so it was stopped:" in run.message
    assert "No reviewer-verified example" not in run.message
    assert run_outcome(run).sentence == run.message  # the page shows the specific sentence
    assert run.example_id in (None, example.pk)
    assert run.library_match["example_id"] == example.pk and not run.library_match["answered"]
    assert str(ids[1]) in run.sql


def test_a_confident_library_answer_is_not_vetoed_by_the_similarity_floor_but_a_rule_declines(
    source, ids, library, settings
):
    """Issue 28: the floor declined right library answers. Above its calibrated threshold the
    verified answer stands though no table clears the floor; a question about the future that
    matches the same template just as closely is still declined by its rule, without an LLM."""
    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    settings.ASKDB_SIMILARITY_FLOOR = 0.99  # no table's documentation is this close to any question
    run = ask(source, f"What is the gender of patient {ids[1]}?")
    assert (run.status, run.answered_by, run.example_id) == ("succeeded", "library", library["gender"].pk)
    assert run.result_rows == [list(r) for r in clinical_rows(GENDER_SQL.format(id=ids[1]))]
    assert run.stages.get(name="match").detail["below_floor"] is True

    future = ask(source, f"When will patient {ids[1]} be first admitted to the hospital?")
    assert future.library_match["confidence"] >= future.library_match["threshold"]  # as close as a match gets
    assert (future.status, future.outcome, future.answered_by) == ("declined", "future_data", "")
    assert future.library_match["reason_codes"][-1] == "gate_declined" and future.sql == ""
    assert "future" in future.gate_reason and not future.llm_calls.exists()
