"""The answer-first run page: the answer block, charts that fit the data, scaled bars, the
values that really changed, and pages that explain themselves (empty queue, bad dates)."""

from __future__ import annotations

import pytest

from askdb import selectors
from askdb.models import Question, Run
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def a_run(source, user=None, **fields) -> Run:
    user = user or make_user("rona", "researcher")
    text = fields.pop("text", "How many admissions were there per year?")
    return Run.objects.create(question=Question.objects.create(user=user, source=source, text=text), **fields)


def test_a_line_over_years_keeps_missing_years_as_gaps(source):
    run = a_run(
        source,
        status="succeeded",
        result_columns=["year", "n"],
        result_rows=[[2150, 3], [2153, 5], [2151, 4]],
    )
    chart = selectors.run_chart_spec(run=run)
    assert chart["type"] == "line" and chart["labels"] == ["2150", "2151", "2152", "2153"]
    assert chart["values"] == [3, 4, None, 5]


def test_more_than_two_columns_still_chart_a_label_and_a_number(source):
    run = a_run(source, status="succeeded", result_columns=["care_unit", "stays", "avg_los"],
                result_rows=[["MICU", 10, 3.2], ["SICU", 4, 2.5]])  # fmt: skip
    chart = selectors.run_chart_spec(run=run)
    assert (chart["type"], chart["values"]) == ("bar", [10, 4])
    assert (chart["x_name"], chart["y_name"]) == ("care_unit", "stays")
    assert (chart["x"], chart["y"]) == ("Care unit", "Stays")  # the axes read labels, not names


def test_the_run_page_leads_with_the_answer_and_scales_bars_to_the_score(client, source):
    user = make_user("rona", "researcher")
    run = a_run(source, user, text="What was the average length of stay?", status="succeeded", outcome="answered",
                result_columns=["avg"], result_rows=[[4.364982638888889]], row_count=1, sql="SELECT 1", answered_by="llm",
                retrieval={"tables": [{"table": "mimiciv_hosp.admissions", "score": 0.05}]},
                library_match={"bindings": [{"type": "year", "old": "2150", "new": "2150", "value": "2150"},
                                            {"type": "patient_id", "old": "1", "new": "2", "value": "2"}]})  # fmt: skip
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    page = response.content.decode()
    assert page.index('id="answer"') < page.index('id="how"')  # the answer before how askdb got it
    assert "{#" not in page  # no template comment leaks into the page
    assert "<dt>Answered by</dt><dd>SQL written by a language model" in page  # not the code "llm"
    assert "The average length of stay was 4.36." in page and "4.364982638888889" not in page
    assert 'style="width: 5%"' in page  # 0.05 draws a 5 % bar, not a full one
    assert [b["type"] for b in response.context["changed_bindings"]] == ["patient_id"]
    api = client.get(f"/api/runs/{run.pk}/").json()  # the API states the same answer
    assert (
        api["answer"] == "The average length of stay was 4.36." and api["outcome_text"]["label"] == "Answered"
    )


def test_an_empty_queue_says_why_answered_runs_are_not_in_it(client, source):
    a_run(source, status="succeeded", outcome="answered", answered_by="library", sql="SELECT 1")
    client.force_login(make_user("rex", "reviewer"))
    page = client.get("/review/").content.decode()
    assert "Nothing is waiting for review." in page
    assert "1 answered run came from the verified library and was not drawn for a recheck." in page


def test_a_date_the_audit_filter_cannot_read_is_said_not_ignored(client):
    client.force_login(make_user("ada", "admin"))
    page = client.get("/audit/?from=2024-13-45").content.decode()
    assert "“2024-13-45” is not a date" in page


def test_no_template_comment_spans_lines():
    """Django's {# … #} ends at the line's end: one spanning lines is printed on the page as text."""
    from pathlib import Path

    from django.conf import settings

    roots = [Path(d) for t in settings.TEMPLATES for d in t["DIRS"]]
    spanning = [
        f"{path.relative_to(root)}:{n}"
        for root in roots
        for path in root.rglob("*.html")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "{#" in line and "#}" not in line[line.index("{#") :]
    ]
    assert not spanning, f"use {{% comment %}} for comments over several lines: {spanning}"


def test_a_gate_decline_says_its_reason_without_repeating_it_or_the_matchers_noise(client, source):
    user = make_user("rona", "researcher")
    reason = "The database has no patient addresses, so askdb cannot answer this."
    run = a_run(source, user, text="what is the address of patient 10004235?", status="declined",
                outcome="not_in_schema", message=reason, gate_category="not_in_schema", gate_reason=reason,
                answerability={"answerable": False, "reason": reason, "kind": "not_in_schema"},
                library_match={"example_id": 1, "example_question": "when was patient 1 first transferred?",
                               "answered": False, "confidence": 0.0, "threshold": 0.9,
                               "reasons": ["The verified question asks for the first one, which this question does not say."]},
                retrieval={"tables": [{"table": "mimiciv_hosp.emar", "score": 0.4}], "values": [
                    {"value": "Alkaline Phosphatase", "term": "phone", "score": 0.47, "table": "t", "column": "c"},
                    {"value": "Heparin", "term": "heparin", "score": 0.98, "table": "emar", "column": "c"},
                    {"value": "Heparin", "term": "heparin", "score": 0.98, "table": "prescriptions", "column": "c"}]})  # fmt: skip
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count(reason) == 2  # the answer's headline, and once under how askdb got it
    assert "Closest verified question" not in page and "which this question does not say" not in page
    assert "Alkaline Phosphatase" not in page and page.count("<code>Heparin</code>") == 1


def test_a_question_nothing_in_the_library_is_close_to_gets_no_did_you_mean(client, source):
    from askdb.models import Example

    user = make_user("rona", "researcher")
    example = Example.objects.create(source=source, question="what was the first service of patient 7?",
                                     sql="SELECT 1", template={"slots": []})  # fmt: skip
    run = a_run(source, user, text="hello", status="declined", outcome="out_of_scope", message="Not about the data.",
                library_match={"example_id": example.pk, "answered": False, "confidence": 0.0},
                retrieval={"tables": [], "examples": []})  # fmt: skip
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    assert response.context["suggestions"] == [] and "Did you mean" not in response.content.decode()


def test_a_near_miss_of_the_library_names_the_closest_verified_question_up_front(client, source):
    from askdb.models import Example

    user = make_user("rona", "researcher")
    near = "count the number of patients older than 65."
    # Named only when it is a real, usable verified question above the "Did you mean" floor.
    example = Example.objects.create(source=source, question=near,
                                     sql="SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE anchor_age > 65")  # fmt: skip
    run = a_run(source, user, text="count patients older than 70 who died in the hospital", status="declined",
                outcome="no_llm", message="No reviewer-verified example matches this question closely enough.",
                library_match={"example_id": example.pk, "example_question": near, "answered": False, "confidence": 0.0,
                               "reasons": ["This question also says 'died' and 'hospital', which no wording of the verified question says: answering with it would drop that condition."]},
                retrieval={"tables": [], "examples": [{"id": example.pk, "score": 0.8, "question": near}]})  # fmt: skip
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    answer = page[page.index('id="answer"') : page.index('id="how"')]
    assert f"The closest verified question is “{near}”, but askdb could not make sure" in answer
