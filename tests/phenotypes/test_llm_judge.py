"""The LLM judge: a map task per snippet on a real worker (Celery chord over the embedded Redis),
the reduce per patient, the per-source consent, and a failed call kept on its snippet."""

from __future__ import annotations

import json

import pytest

from infra.audit.models import AuditEvent
from phenotypes.llm_judge import JudgeAnswerError, parse_assertion
from phenotypes.models import Evidence, PatientDecision, PhenotypeRun
from phenotypes.services import (
    PhenotypeError,
    notes_policy_set,
    phenotype_define_bundled,
    phenotype_run_create,
    phenotype_run_submit,
)
from tests.celery_worker import running_worker, wait_for
from tests.support.scripted_llm import Error, Reply


def _ph():
    return next(p for p in phenotype_define_bundled() if p.name == "pulmonary hypertension")


@pytest.mark.django_db
def test_no_snippet_leaves_unless_an_admin_allowed_it_for_the_source(source, scripted_llm):
    with pytest.raises(PhenotypeError, match="may not be sent to an LLM"):
        phenotype_run_create(phenotype=_ph(), source=source, judge="llm")
    assert scripted_llm.chat_requests() == []
    notes_policy_set(source=source, snippets_to_llm=True)
    assert AuditEvent.objects.filter(action="notes.policy_changed").count() == 1
    assert phenotype_run_create(phenotype=_ph(), source=source, judge="llm").judge == "llm"


def _sentence(body: dict) -> str:
    return body["messages"][-1]["content"].split("Sentence: ", 1)[1]


def _answer(body: dict) -> str:
    sentence = _sentence(body)
    # The scripted LLM calls every mention affirmed, except the ones in a "no evidence" sentence.
    return json.dumps({"assertion": "negated" if "no evidence" in sentence.lower() else "affirmed"})


@pytest.mark.django_db(transaction=True)
def test_map_reduce_on_a_worker_records_what_left_and_survives_a_failed_call(source, scripted_llm):
    notes_policy_set(source=source, snippets_to_llm=True)
    # Calls about echocardiogram sentences (those naming the RVSP) always fail.
    scripted_llm.when(lambda body: "RVSP" in _sentence(body), Error(500, "upstream down"))
    scripted_llm.default = Reply(_answer)
    with running_worker(concurrency=8):
        run = phenotype_run_submit(phenotype=_ph(), source=source, judge="llm")
        wait_for(
            lambda: PhenotypeRun.objects.get(pk=run.pk).status in ("done", "failed"),
            timeout=120,
            message=lambda: f"run stuck: {PhenotypeRun.objects.get(pk=run.pk).stage}",
        )
    run.refresh_from_db()
    assert run.status == "done", run.error
    asked = Evidence.objects.filter(decision__run=run, sent_to_llm=True)
    # A call that fails three times (two retries) is reported on its snippet; the run goes on.
    failed = list(Evidence.objects.filter(decision__run=run).exclude(llm_error=""))
    assert failed and all("RVSP" in e.text and "HTTP 500" in e.llm_error and e.sent_to_llm for e in failed)
    assert run.counts["llm_failed"] == len(failed) == asked.filter(text__contains="RVSP").count()
    assert run.counts["sent_to_llm"] == asked.count() == len(scripted_llm.chat_requests()) - 2 * len(failed)
    # Each request carried one sentence and its section, never a whole note or an identifier.
    for messages in scripted_llm.chat_requests():
        user = messages[-1]["content"]
        assert "Sentence: " in user and "Discharge Date" not in user
    # The reduce used the LLM's answers: every snippet it called affirmed made its patient present.
    for e in asked.exclude(llm_assertion=""):
        if e.llm_assertion == "affirmed":
            assert e.decision.decision == PatientDecision.Decision.PRESENT
    assert AuditEvent.objects.filter(action="notes.snippets_sent", target_id=str(run.pk)).exists()


@pytest.mark.parametrize(
    "content, expected",
    [('{"assertion": "negated"}', "negated"), ('```json\n{"assertion": "Family"}\n```', "family")],
)
def test_answers_are_read_tolerantly(content, expected):
    assert parse_assertion(content) == expected


@pytest.mark.parametrize("content", ["affirmed", '{"assertion": "maybe"}', "", "{not json}"])
def test_unreadable_answers_are_errors_for_the_snippet(content):
    with pytest.raises(JudgeAnswerError):
        parse_assertion(content)


@pytest.mark.django_db
def test_a_consent_withdrawn_during_a_run_stops_the_snippets_leaving(source, scripted_llm):
    from phenotypes.services import phenotype_run_execute, phenotype_snippet_judge, snippets_for_llm

    notes_policy_set(source=source, snippets_to_llm=True)
    run = phenotype_run_create(phenotype=_ph(), source=source, judge="llm")
    phenotype_run_execute(run_id=run.pk, rerank=False, final=False)
    (first, *_) = snippets_for_llm(run_id=run.pk)
    notes_policy_set(source=source, snippets_to_llm=False)
    assert phenotype_snippet_judge(evidence_id=first, record_failure=True) == ""
    e = Evidence.objects.get(pk=first)
    assert not e.sent_to_llm and "does not allow" in e.llm_error
    assert scripted_llm.chat_requests() == []
