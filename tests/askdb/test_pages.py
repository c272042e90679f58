"""The web pages: ask, the live run page and its fragments, exports, history, and who sees what."""

from __future__ import annotations

import csv
import io

import pytest
from openpyxl import load_workbook

from askdb.models import Question, Run, StageEvent
from askdb.roles import RESEARCHER, REVIEWER
from tests.factories import make_user

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run-live"}


def finished_run(source, user, rows=None, columns=("care_unit", "stays")):
    rows = rows if rows is not None else [["MICU", 12], ["CCU", 5], ["SICU", None], ["TSICU", 9]]
    question = Question.objects.create(user=user, source=source, text="How many ICU stays per unit?")
    run = Run.objects.create(
        question=question, status=Run.Status.SUCCEEDED, outcome="answered", sql="SELECT 1",
        result_columns=list(columns), result_rows=rows, row_count=len(rows), summary="MICU has the most stays.",
        retrieval={"tables": [{"table": "mimiciv_icu.icustays", "score": 0.8, "via": ""}], "values": []},
    )  # fmt: skip
    from django.utils import timezone

    StageEvent.objects.create(run=run, name="embed", status="ok", started_at=timezone.now(), duration_ms=5)
    return run


def test_asking_opens_the_run_page(client, source):
    client.force_login(make_user("ann", RESEARCHER))
    response = client.post("/", {"question": "How many patients are there?"})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert "How many patients are there?" in page and 'hx-trigger="every 1s"' in page


def test_an_empty_question_is_refused_with_a_sentence(client, source):
    client.force_login(make_user("ann", RESEARCHER))
    response = client.post("/", {"question": "  "})
    assert response.status_code == 400 and b"Please type a question" in response.content
    assert not Run.objects.exists()


def test_a_question_over_the_limit_is_refused_with_its_length_and_kept_whole(client, source, settings):
    """No maxlength in the page: a pasted text would be cut without a word; the server says why."""
    settings.ASKDB_QUESTION_MAX_CHARS = 50
    client.force_login(make_user("ann", RESEARCHER))
    text = "how many patients " * 5 + "are older than 70?"
    response = client.post("/", {"question": text})
    page = response.content.decode()
    assert response.status_code == 400 and "The question is too long (108 characters; at most 50)." in page
    assert f">{text}</textarea>" in page and "maxlength" not in page
    assert not Run.objects.exists()


def test_the_live_fragment_polls_until_the_run_ends(client, source):
    user = make_user("ann", RESEARCHER)
    client.force_login(user)
    run = Run.objects.create(question=Question.objects.create(user=user, source=source, text="q q q"))
    fragment = client.get(f"/runs/{run.pk}/", **HX).content.decode()
    assert fragment.startswith('<div id="run-live"') and "every 1s" in fragment and "<html" not in fragment
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, message="The query failed: boom")
    fragment = client.get(f"/runs/{run.pk}/", **HX).content.decode()
    assert "every 1s" not in fragment  # no trigger: htmx stops polling
    assert "The query failed: boom" in fragment and f"(run {run.pk})" in fragment


def test_result_sorts_and_pages_on_the_server(client, source):
    user = make_user("ann", RESEARCHER)
    client.force_login(user)
    rows = [[f"unit{i:03d}", i] for i in range(120)]
    run = finished_run(source, user, rows=rows)
    fragment = client.get(
        f"/runs/{run.pk}/result/?sort=stays&desc=1", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert fragment.index("unit119") < fragment.index("unit118") and "unit000" not in fragment
    assert "Page 1 of 3" in fragment
    page3 = client.get(f"/runs/{run.pk}/result/?sort=stays&page=3", HTTP_HX_REQUEST="true").content.decode()
    assert "unit119" in page3 and "unit000" not in page3
    # without htmx the same link lands on the run page at the result
    response = client.get(f"/runs/{run.pk}/result/?page=2")
    assert response.status_code == 302 and response["Location"].startswith(f"/runs/{run.pk}/?page=2")


def test_csv_and_excel_exports_hold_the_full_result(client, source):
    user = make_user("ann", RESEARCHER)
    client.force_login(user)
    run = finished_run(source, user)
    response = client.get(f"/runs/{run.pk}/result.csv")
    assert response["Content-Disposition"] == f'attachment; filename="askdb-run-{run.pk}.csv"'
    lines = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    # A person's download reads labels; the XLSX keeps the SQL's names in a second header row.
    assert lines == [["Care unit", "Stays"], ["MICU", "12"], ["CCU", "5"], ["SICU", ""], ["TSICU", "9"]]
    response = client.get(f"/runs/{run.pk}/result.xlsx")
    sheet = load_workbook(io.BytesIO(b"".join(response.streaming_content)))["result"]
    assert [list(r) for r in sheet.iter_rows(values_only=True)] == [
        ["Care unit", "Stays"], ["care_unit", "stays"], ["MICU", 12], ["CCU", 5], ["SICU", None], ["TSICU", 9],
    ]  # fmt: skip


def test_a_category_and_a_number_get_a_bar_chart(client, source):
    user = make_user("ann", RESEARCHER)
    client.force_login(user)
    page = client.get(f"/runs/{finished_run(source, user).pk}/").content.decode()
    assert 'id="chart-data"' in page and '"type": "bar"' in page and "MICU has the most stays." in page


def test_other_researchers_cannot_see_a_run_but_reviewers_can(client, source):
    owner = make_user("ann", RESEARCHER)
    run = finished_run(source, owner)
    client.force_login(make_user("bob", RESEARCHER))
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/result.csv", f"/runs/{run.pk}/result.xlsx"):
        assert client.get(url).status_code == 404
    assert "How many ICU stays" not in client.get("/runs/").content.decode()
    client.force_login(make_user("rita", REVIEWER))
    assert client.get(f"/runs/{run.pk}/").status_code == 200
    history = client.get("/runs/").content.decode()
    assert "How many ICU stays" in history and "ann" in history


def test_history_searches_and_filters(client, source):
    user = make_user("ann", RESEARCHER)
    client.force_login(user)
    finished_run(source, user)
    Run.objects.create(question=Question.objects.create(user=user, source=source, text="Average lactate?"),
                       status=Run.Status.FAILED)  # fmt: skip
    page = client.get("/runs/", {"q": "lactate"}).content.decode()
    assert "Average lactate?" in page and "ICU stays" not in page
    page = client.get("/runs/", {"status": "succeeded"}).content.decode()
    assert "ICU stays" in page and "Average lactate?" not in page
    assert "No questions match." in client.get("/runs/", {"q": "nothing like this"}).content.decode()


def test_retry_and_cancel_from_the_page(client, source):
    user = make_user("ann", RESEARCHER)
    client.force_login(user)
    run = finished_run(source, user)
    response = client.post(f"/runs/{run.pk}/retry/")
    new = Run.objects.exclude(pk=run.pk).get()
    assert response["Location"] == f"/runs/{new.pk}/" and new.question_id == run.question_id
    client.post(f"/runs/{new.pk}/cancel/")
    new.refresh_from_db()
    assert new.status == Run.Status.CANCELLED
    client.force_login(make_user("rita", REVIEWER))
    assert client.post(f"/runs/{run.pk}/retry/").status_code == 404  # may see it, may not act on it


def test_the_ask_page_suggests_population_questions_before_questions_about_one_patient(client, source):
    """A patient the library names may be missing from this source (the demo's synthetic patients
    are not the benchmark's): a first click should not land on "nothing matches"."""
    from askdb.services.examples import example_upsert
    from metadata_admin.services import source_executor

    reviewer = make_user("vera", "reviewer")
    pid = (
        source_executor(source)
        .execute("SELECT min(subject_id) FROM mimiciv_hosp.patients", timeout_s=5, row_cap=1)
        .rows[0][0]
    )
    example_upsert(source=source, question=f"what is the gender of patient {pid}?",
                   sql=f"SELECT gender FROM mimiciv_hosp.patients WHERE subject_id = {pid}", approved_by=reviewer)  # fmt: skip
    example_upsert(source=source, question="how many patients are older than 70?",
                   sql="SELECT count(*) FROM mimiciv_hosp.patients WHERE anchor_age > 70", approved_by=reviewer)  # fmt: skip
    client.force_login(make_user("nina", "researcher"))
    suggestions = [e.question for e in client.get("/").context["suggestions"]]
    assert suggestions == ["how many patients are older than 70?", f"what is the gender of patient {pid}?"]
    example_upsert(source=source, question="what is the icd code for sepsis?", approved_by=reviewer,
                   sql="SELECT icd_code FROM mimiciv_hosp.d_icd_diagnoses WHERE long_title = 'Sepsis'")  # fmt: skip
    example_upsert(source=source, question="list the emergency admissions", approved_by=reviewer,
                   sql="SELECT hadm_id FROM mimiciv_hosp.admissions WHERE admission_type = 'EW EMER.'")  # fmt: skip
    assert "list the emergency admissions" in [e.question for e in client.get("/").context["suggestions"]]
    # an aggregate-only researcher is offered only what they may see (no listing of patients, no
    # question about one patient; a code lookup reads only a dictionary), here and in "Did you mean"
    analyst = make_user("al", "aggregate_researcher")
    client.force_login(analyst)
    assert sorted(e.question for e in client.get("/").context["suggestions"]) == [
        "how many patients are older than 70?",
        "what is the icd code for sepsis?",
    ]
    declined = Run.objects.create(
        question=Question.objects.create(user=analyst, source=source, text=f"what is the sex of patient {pid}?"),
        status=Run.Status.DECLINED, outcome="no_llm",
    )  # fmt: skip
    offered = [s["question"] for s in client.get(f"/runs/{declined.pk}/").context["suggestions"]]
    assert f"what is the gender of patient {pid}?" not in offered
