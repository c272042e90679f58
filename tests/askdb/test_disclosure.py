"""Disclosure control end to end on the demo data: the differencing example of issue 24 (the
female patients, then "all but the patient with the lowest id") under each per-source mode, with
the same numbers on the page, in the CSV, the API and the text sent to the scripted LLM; the
near-identical probe limit; the differential-privacy budget; the admin's changes audited.
Real PostgreSQL, the real openai client against the scripted server."""

from __future__ import annotations

import csv
import io

import pytest
from rest_framework.test import APIClient

from askdb.models import Release, Run
from askdb.roles import AGGREGATE_RESEARCHER, REVIEWER
from askdb.selectors import run_provenance
from askdb.services.examples import example_upsert
from askdb.services.reviews import review_correct
from askdb.services.runs import question_submit_sync
from askdb.services.sql import ReviewError
from infra.audit.models import AuditEvent
from tests.askdb.test_privacy import BY_TYPE, SUMMARY, ask, summary_prompt
from tests.factories import make_user

pytestmark = pytest.mark.django_db

FEMALE = "SELECT COUNT(*) AS patients FROM mimiciv_hosp.patients WHERE gender = 'F'"
# "All but one woman", as an aggregate-only user can still write it: the safe aggregate language
# refuses filters on given identifier values (`subject_id <> (SELECT min(subject_id) …)`), but not
# on a quasi-identifier; 91, 47 and 73 are each the age of exactly one woman in the test data.
ALL_BUT_LOWEST = (
    "SELECT COUNT(*) AS patients FROM mimiciv_hosp.patients WHERE gender = 'F' AND anchor_age <> 91"
)
ALL_BUT_HIGHEST = ALL_BUT_LOWEST.replace("<> 91", "<> 47")
ALL_BUT_ONE = ALL_BUT_LOWEST.replace("<> 91", "<> 73")


def configure(source, **fields) -> None:
    for key, value in fields.items():
        setattr(source, key, value)
    source.save(update_fields=list(fields))


def count(run: Run):
    assert run.status == Run.Status.SUCCEEDED, (run.outcome, run.message)
    return run.result_rows[0][0]


def test_with_suppression_alone_the_probe_reveals_one_patient_until_the_limit_refuses_it(
    source, scripted_llm
):
    configure(source, differencing_limit=2)
    ann = make_user("ann", AGGREGATE_RESEARCHER)
    whole = count(ask(scripted_llm, ann, "How many female patients?", FEMALE, source))
    first = count(
        ask(scripted_llm, ann, "Female patients but the one with the lowest id?", ALL_BUT_LOWEST, source)
    )
    assert whole - first == 1  # what suppression alone gives away: the patient left out is female

    # The second probe one condition from the earlier answers is past the limit: refused, said why.
    refused = ask(
        scripted_llm, ann, "Female patients but the one with the highest id?", ALL_BUT_HIGHEST, source
    )
    assert refused.status == Run.Status.DECLINED and refused.outcome == "privacy_differencing"
    assert "differ from this one by a single condition" in refused.message
    assert refused.result_rows in (None, []) and refused.privacy["refused"] == "differencing"
    assert not any(SUMMARY in r[0]["content"] and "highest" in str(r) for r in scripted_llm.chat_requests())
    data = APIClient()
    data.force_login(ann)
    body = data.get(f"/api/runs/{refused.pk}/").json()
    assert body["outcome"] == "privacy_differencing" and not (body.get("result") or {}).get("rows")

    # Audited: the probe that was answered, and the run refused.
    probe = AuditEvent.objects.get(action="privacy.near_identical")
    assert probe.detail["near_identical"] == 1 and "anchor_age <> 91" in probe.detail["sql"]
    assert AuditEvent.objects.filter(action="run.declined", detail__outcome="privacy_differencing").exists()
    assert Release.objects.filter(user=ann, source=source).count() == 2  # the refused one was not released

    # Another question, or another person, is not held to ann's probes.
    assert count(
        ask(
            scripted_llm,
            make_user("bob", AGGREGATE_RESEARCHER),
            "How many female patients are there except patient 10000032?",
            ALL_BUT_ONE,
            source,
        )
    )
    by_type = "SELECT admission_type, COUNT(*) AS n FROM mimiciv_hosp.admissions GROUP BY admission_type"
    assert (
        ask(scripted_llm, ann, "How many admissions of each type are there?", by_type, source).status
        == Run.Status.SUCCEEDED
    )


def test_rounding_hides_the_difference_everywhere_the_answer_goes(client, source, scripted_llm):
    configure(source, disclosure_mode="round", round_base=5, min_cell_size=11)
    ann = make_user("ann", AGGREGATE_RESEARCHER)
    whole = ask(scripted_llm, ann, "How many female patients?", FEMALE, source)
    probe = ask(scripted_llm, ann, "Female patients but the one with the lowest id?", ALL_BUT_LOWEST, source,
                summary="Summary of the probe.")  # fmt: skip
    assert count(whole) % 5 == 0 and count(probe) % 5 == 0
    assert count(whole) == count(probe)  # both round to the same multiple of 5: nothing to subtract
    shown = count(probe)
    assert summary_prompt(scripted_llm).endswith(f"Result (1 rows):\npatients\n{shown}")

    client.force_login(ann)
    page = client.get(f"/runs/{probe.pk}/").content.decode()
    assert "Counts were rounded to the nearest 5." in page
    rows = list(csv.reader(io.StringIO(b"".join(client.get(f"/runs/{probe.pk}/result.csv").streaming_content)
                                       .decode())))  # fmt: skip
    assert rows[1] == [str(shown)]
    api = APIClient()
    api.force_login(ann)
    assert api.get(f"/api/runs/{probe.pk}/").json()["result"]["rows"] == [[shown]]
    assert (
        "Counts were rounded to the nearest 5."
        in client.get(f"/runs/{probe.pk}/methods.txt").content.decode()
    )


def test_noise_gives_the_same_answer_to_the_same_question_and_hides_the_difference(
    client, source, scripted_llm
):
    truth = count(
        ask(
            scripted_llm,
            make_user("zoe", AGGREGATE_RESEARCHER),
            "How many female patients are there?",
            FEMALE,
            source,
        )
    )
    configure(source, disclosure_mode="noise", noise_scale=1.5, noise_clip=3, differencing_limit=0)
    users = [make_user(f"user{i}", AGGREGATE_RESEARCHER) for i in range(8)]
    differences = []
    for user in users:
        whole = count(ask(scripted_llm, user, "How many female patients?", FEMALE, source))
        again = count(ask(scripted_llm, user, "How many female patients, again?", FEMALE, source))
        assert whole == again  # asking again averages nothing away
        probe = count(
            ask(
                scripted_llm,
                user,
                "How many female patients apart from the one with the lowest id?",
                ALL_BUT_LOWEST,
                source,
            )
        )
        assert abs(whole - truth) <= 3 and abs(probe - (truth - 1)) <= 3
        differences.append(whole - probe)
    assert len(set(differences)) > 1  # the difference is noise, not one patient
    assert summary_prompt(scripted_llm).endswith(
        f"Result (1 rows):\npatients\n{probe}"
    )  # the LLM saw the same
    run = Run.objects.filter(question__user=users[0]).order_by("pk").first()
    assert run.privacy["disclosure"]["mode"] == "noise" and run.privacy["disclosure"]["perturbed"] == 1
    client.force_login(users[0])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Noise was added to counts (Gaussian, standard deviation 1.5, at most ±3" in page


def test_differential_privacy_spends_a_budget_per_user_and_refuses_when_it_is_spent(source, scripted_llm):
    truth = count(ask(scripted_llm, make_user("zoe", AGGREGATE_RESEARCHER), "How many female patients are there?",
                      FEMALE, source))  # fmt: skip
    configure(
        source, disclosure_mode="dp", dp_epsilon=2.0, dp_budget=6.0, dp_contributions=1, min_cell_size=0
    )
    ann = make_user("ann", AGGREGATE_RESEARCHER)
    run = ask(scripted_llm, ann, "How many female patients are there?", FEMALE, source)
    assert abs(count(run) - truth) <= 10  # Laplace noise of scale 0.5 (never this far in practice)
    info = run.privacy["disclosure"]
    assert info["mode"] == "dp" and info["epsilon_spent"] == 2.0 and info["perturbed"] == 1
    # What ran is smartnoise-sql's rewrite, checked and audited like any SQL askdb runs.
    executed = AuditEvent.objects.filter(action="sql.executed", detail__sql__icontains="row_number").latest(
        "id"
    )
    assert "row_num <= 1" in executed.detail["sql"]
    assert "differential privacy" in run_provenance(run=run).suppression
    by_gender = (
        "SELECT gender, COUNT(DISTINCT subject_id) AS patients FROM mimiciv_hosp.patients GROUP BY gender"
    )
    grouped = ask(scripted_llm, ann, "How many patients of each gender?", by_gender, source)
    assert count(grouped) and grouped.privacy["disclosure"]["epsilon_spent"] == 4.0  # the groups' sizes too
    assert sum(Release.objects.filter(user=ann).values_list("epsilon", flat=True)) == pytest.approx(6.0)

    spent = ask(scripted_llm, ann, "How many female patients are there in total?", FEMALE, source)
    assert spent.outcome == "privacy_budget" and "privacy budget on this source is spent" in spent.message
    assert not spent.result_rows
    # Another user has their own budget; what DP cannot answer is refused with the reason.
    bob = make_user("bob", AGGREGATE_RESEARCHER)
    average = "SELECT gender, AVG(anchor_age) AS age FROM mimiciv_hosp.patients GROUP BY gender"
    refused = ask(scripted_llm, bob, "What is the average age of each gender?", average, source)
    assert refused.outcome == "privacy_dp_counts_only" and "age is not a count" in refused.message
    # A row-level researcher is not held to DP (they may see the rows); SQL smartnoise-sql cannot
    # rewrite is refused as dp_unsupported (tests/core/test_disclosure.py), and the
    # subquery probe of the issue is refused earlier by the safe aggregate language.
    by_id = (
        FEMALE + " AND subject_id <> (SELECT MIN(subject_id) FROM mimiciv_hosp.patients WHERE gender = 'F')"
    )
    probe = ask(
        scripted_llm, bob, "How many female patients apart from the one with the lowest id?", by_id, source
    )
    assert probe.outcome == "privacy_aggregate_fragment" and not probe.result_rows
    assert count(ask(scripted_llm, bob, "How many female patients are there?", FEMALE, source)) >= 0


def test_a_reviewers_correction_is_released_like_any_answer(source, scripted_llm):
    """result_protect: a correction reaches the run outside the pipeline, with the same rounding,
    noise and differencing limit as the asker's own answers."""
    configure(source, disclosure_mode="round", round_base=5, differencing_limit=1)
    ann = make_user("ann", AGGREGATE_RESEARCHER)
    run = ask(scripted_llm, ann, "How many female patients are there?", FEMALE, source)
    reviewer = make_user("rev", REVIEWER)
    by_type = "SELECT admission_type, COUNT(*) AS n FROM mimiciv_hosp.admissions GROUP BY admission_type"
    review_correct(run=run, reviewer=reviewer, sql=by_type)
    run.refresh_from_db()
    shown = [n for _, n in run.result_rows if n != "<11"]
    assert shown and all(n % 5 == 0 for n in shown) and run.privacy["disclosure"]["mode"] == "round"
    assert "Counts were rounded to the nearest 5." in run_provenance(run=run).suppression

    # A correction that is a probe one condition from ann's answers is refused for her.
    other = ask(scripted_llm, ann, "How many admissions are there?", "SELECT COUNT(*) FROM mimiciv_hosp.admissions",
                source)  # fmt: skip
    assert other.status == Run.Status.SUCCEEDED, other.message
    with pytest.raises(ReviewError, match="single condition"):
        review_correct(run=other, reviewer=reviewer, sql=ALL_BUT_ONE)


def test_a_library_answer_is_rounded_like_any_answer(source):
    configure(source, disclosure_mode="round", round_base=5)
    example_upsert(source=source, question="how many admissions of each admission type are there?", sql=BY_TYPE,
                   approved_by=make_user("rev", REVIEWER))  # fmt: skip
    run = Run.objects.get(pk=question_submit_sync(user=make_user("ann", AGGREGATE_RESEARCHER),
                                                  text="how many admissions of each admission type are there?",
                                                  source=source).pk)  # fmt: skip
    assert run.answered_by == "library", run.message
    # The safe aggregate language counts the patients behind each row: only emergency admissions
    # come from 11 or more patients (58 admissions, rounded to 60); every other row is hidden whole.
    assert run.result_rows[0] == ["EW EMER.", 60]
    assert all(row == ["<11", "<11"] for row in run.result_rows[1:]) and len(run.result_rows) > 1
    assert run.privacy["disclosure"] == {"mode": "round", "base": 5, "perturbed": 1}
