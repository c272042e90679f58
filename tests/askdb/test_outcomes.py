"""One place words every outcome: pages, the API and exports read the same sentence."""

from __future__ import annotations

import pytest

from askdb.models import Question, Run, SqlAttempt
from askdb.outcomes import OUTCOMES, outcome_label, register_outcome, run_outcome
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def a_run(source, text="How many patients are there?", **fields) -> Run:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username="olive").first() or make_user("olive", "researcher")
    return Run.objects.create(question=Question.objects.create(user=user, source=source, text=text), **fields)


def test_every_code_the_pipeline_ends_with_has_plain_words():
    codes = ["answered", "no_rows", "ambiguous", "no_llm", "no_data", "not_in_schema", "advice", "out_of_scope", "non_medical", "future_data",
             "private_data", "sql_invalid", "execution_error", "timeout", "time_limit", "llm_error", "worker_lost",
             "error", "cancelled"]  # fmt: skip
    for code in codes:
        text = OUTCOMES[code]
        assert text.label and text.sentence.endswith(".") and "_" not in text.label + text.sentence, code


def test_a_refused_write_reads_as_read_only_not_as_a_failure(source):
    run = a_run(source, text="delete all patients older than 90", status="failed", outcome="sql_invalid",
                message="askdb could not write valid SQL after 4 attempts")  # fmt: skip
    SqlAttempt.objects.create(
        run=run, number=1, sql="DELETE FROM x", error_code="not_a_query", error="not a query"
    )
    text = run_outcome(run)
    assert text.code == "read_only" and text.sentence.startswith("askdb only reads data")
    asked = a_run(source, text="Please remove patient 7 from the data", status="declined", outcome="no_llm")
    assert run_outcome(asked).code == "read_only"  # with no LLM too: it is a write request, not a gap
    removed = a_run(
        source, text="How many patients had a stent removed?", status="failed", outcome="sql_invalid"
    )
    assert run_outcome(removed).code == "sql_invalid"


def test_failed_candidates_are_not_called_an_ambiguous_question(source):
    candidates = {"k": 5, "groups": [{"members": [0]}], "failures": [{"index": i} for i in range(1, 5)]}
    failed = a_run(source, status="succeeded", outcome="ambiguous", candidates=candidates)
    assert run_outcome(failed).code == "candidates_failed" and "not a problem with your question" in run_outcome(
        failed
    ).sentence  # fmt: skip
    split = {"k": 5, "groups": [{"members": [0, 1]}, {"members": [2, 3]}], "failures": [{"index": 4}]}
    assert (
        run_outcome(a_run(source, status="succeeded", outcome="ambiguous", candidates=split)).code
        == "ambiguous"
    )


def test_a_plain_reason_from_the_gate_replaces_the_generic_sentence(source):
    run = a_run(source, status="declined", outcome="out_of_scope", message="Billing is not in this database.")
    assert run_outcome(run).sentence == "Billing is not in this database."
    assert run_outcome(a_run(source, status="declined", outcome="no_llm", message="x (no_llm)")).sentence.startswith(
        "askdb can only answer questions like those in its verified library"
    )  # fmt: skip


def test_other_helpers_plug_in_their_own_codes():
    register_outcome("small_counts", label="Answered: small counts hidden",
                     sentence="Counts under 10 are hidden to protect privacy.", tone="ok")  # fmt: skip
    try:
        assert outcome_label("small_counts") == "Answered: small counts hidden"
    finally:
        OUTCOMES.pop("small_counts")
    assert outcome_label("never_heard_of") == "Ended"


def test_the_api_and_history_show_the_same_words(client, source):
    run = a_run(source, status="declined", outcome="no_llm")
    client.force_login(run.question.user)
    listed = client.get("/api/runs/").json()
    item = (listed["results"] if isinstance(listed, dict) else listed)[0]
    assert item["outcome_text"]["label"] == "Declined: not in the verified library"
    history = client.get("/runs/").content.decode()
    assert "Declined: not in the verified library" in history and "no_llm" not in history
