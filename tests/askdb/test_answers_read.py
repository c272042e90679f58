"""Answers a researcher reads at a glance (issue 30): labels and units from the catalog in the
table, the chart, the downloads and the sentence; sentences a person would write; values linked
only when the question says them; a methods paragraph that names its reviewer once."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from openpyxl import load_workbook

from askdb.models import Question, Review, Run
from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from askdb.selectors import methods_paragraph, run_provenance
from askdb.services.runs import question_submit_sync
from metadata_admin.models import ColumnDoc
from metadata_admin.selectors import link_values
from tests.factories import make_user

pytestmark = pytest.mark.django_db

LOS_SQL = (
    "SELECT i.first_careunit, ROUND(AVG(i.los), 2) AS avg_los_days, COUNT(DISTINCT i.subject_id) AS n "
    "FROM mimiciv_icu.icustays AS i GROUP BY i.first_careunit ORDER BY avg_los_days DESC"
)


def _run(source, user, *, sql=LOS_SQL, columns=("first_careunit", "avg_los_days", "n"), rows=None, text=None):
    rows = rows if rows is not None else [["MICU", 4.364982, 25], ["SICU", 3.1, 14], ["CCU", 2.0, "<11"]]
    question = Question.objects.create(
        user=user, source=source, text=text or "What is the average ICU length of stay by care unit?"
    )
    return Run.objects.create(
        question=question, status=Run.Status.SUCCEEDED, outcome="answered", sql=sql,
        result_columns=list(columns), result_rows=rows, row_count=len(rows),
    )  # fmt: skip


def test_tables_charts_downloads_and_sentences_read_labels_and_units(client, source):
    ann = make_user("ann", RESEARCHER)
    client.force_login(ann)
    run = _run(source, ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    table = page[page.index('id="result-table"') :]
    # the example, from the catalog's doc of icustays.los ("… in fractional days")
    assert ">Average ICU length of stay (days)" in table and ">Number of patients" in table
    assert ">avg_los_days<" not in table and 'title="avg_los_days (days)"' in table  # the name on hover
    chart = json.loads(re.search(r'id="chart-data"[^>]*>(.*?)</script>', page, re.S).group(1))
    assert (chart["x"], chart["y"]) == ("First care unit", "Average ICU length of stay (days)")
    sentence = re.search(r'id="answer-sentence">(.*?)</p>', page, re.S).group(1)
    assert sentence == "Of 3 first care units, MICU has the highest average ICU length of stay: 4.36 days."

    lines = list(
        csv.reader(io.StringIO(b"".join(client.get(f"/runs/{run.pk}/result.csv").streaming_content).decode()))
    )
    assert lines[0] == ["First care unit", "Average ICU length of stay (days)", "Number of patients"]
    assert lines[1] == ["MICU", "4.364982", "25"]  # every digit kept in the download
    sheet = load_workbook(io.BytesIO(b"".join(client.get(f"/runs/{run.pk}/result.xlsx").streaming_content)))[
        "result"
    ]
    rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert rows[0] == lines[0] and rows[1] == ["first_careunit", "avg_los_days", "n"]  # the SQL's names below
    assert "AS avg_los_days" in page  # and in the SQL shown


def test_a_label_curated_on_the_catalog_page_is_what_results_show(client, source):
    admin = make_user("ada", ADMIN)
    client.force_login(admin)
    column = ColumnDoc.objects.get(table__name="icustays", name="first_careunit")
    page = client.get(f"/catalog/tables/{column.table_id}/").content.decode()
    assert 'placeholder="First care unit"' in page  # the draft shows where the label is blank
    form = {"description": column.table.description, f"col-{column.name}-label": "ICU type",
            f"col-{column.name}-unit": "", f"col-{column.name}-display_format": "", "note": "labels"}  # fmt: skip
    for other in column.table.columns.exclude(pk=column.pk):
        form[f"col-{other.name}-meaning"] = other.meaning
    response = client.post(f"/catalog/tables/{column.table_id}/", form)
    assert response.status_code == 302
    column.refresh_from_db()
    assert column.label == "ICU type"

    run = _run(source, admin)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert ">ICU type" in page[page.index('id="result-table"') :]
    assert "Of 3 ICU types, MICU has the highest" in page


def test_a_withheld_count_is_said_in_words(client, source):
    ann = make_user("ann", RESEARCHER)
    client.force_login(ann)
    run = _run(source, ann, sql="SELECT COUNT(DISTINCT p.subject_id) AS n FROM mimiciv_hosp.patients AS p "
               "WHERE p.gender = 'F' AND p.anchor_age > 80", columns=["n"], rows=[["<11"]],
               text="How many female patients are older than 80?")  # fmt: skip
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert (
        "Fewer than 11 female patients are older than 80 — the exact number is withheld to protect privacy."
        in page
    )
    assert "count: &lt;11" not in page and "count: <11" not in page


def test_the_methods_paragraph_names_the_reviewer_once(source):
    ann, reviewer = make_user("ann", RESEARCHER), make_user("reviewer", REVIEWER)
    run = _run(source, ann)
    Review.objects.create(run=run, reviewer=reviewer, action=Review.Action.APPROVE)
    text = methods_paragraph(run_provenance(run=run))
    assert "approved by reviewer on" in text and "reviewer reviewer" not in text
    reviewer.first_name, reviewer.last_name = "Rita", "Reyes"
    reviewer.save()
    assert "approved by Rita Reyes on" in methods_paragraph(run_provenance(run=run))


def test_an_icu_length_of_stay_question_links_no_values(source):
    """The issue's case: "Values mentioned: Encounter for palliative care, Height, …" for this question."""
    linked = link_values(source=source, question="What is the average ICU length of stay by care unit?")
    assert linked == [], [(v.value, v.term, v.method) for v in linked]
    linked = link_values(source=source, question="How many patients got palliative care?")
    assert "Encounter for palliative care" in {v.value for v in linked}


def test_how_askdb_got_this_lists_no_values_for_an_icu_length_of_stay_question(client, source):
    """End to end (no LLM): the question is asked, retrieval records what it linked, the run page
    shows it under "How askdb got this"."""
    ann = make_user("ann", RESEARCHER)
    run = question_submit_sync(
        user=ann, text="What is the average ICU length of stay by care unit?", source=source
    )
    run = Run.objects.get(pk=run.pk)
    assert run.retrieval["tables"] and run.retrieval["values"] == []
    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Values mentioned" not in page
    for shouting in ("Encounter for palliative care", "Height", "Subendocardial infarction"):
        assert shouting not in page


def test_a_curated_label_cannot_become_a_spreadsheet_formula(client, source):
    """Attack on the labels: an admin's label (or a SQL alias) starting with "=" would be a formula
    in the Excel download and the CSV opened in a spreadsheet."""
    ColumnDoc.objects.filter(table__name="icustays", name="first_careunit").update(
        label='=HYPERLINK("http://evil.example","click")'
    )
    ann = make_user("ann", RESEARCHER)
    client.force_login(ann)
    run = _run(source, ann)
    headers = next(
        csv.reader(io.StringIO(b"".join(client.get(f"/runs/{run.pk}/result.csv").streaming_content).decode()))
    )
    assert not any(h.startswith(("=", "+", "-", "@")) for h in headers), headers
    book = load_workbook(io.BytesIO(b"".join(client.get(f"/runs/{run.pk}/result.xlsx").streaming_content)))
    first, second = list(book["result"].iter_rows(min_row=1, max_row=2))
    assert all(c.data_type == "s" for c in (*first, *second))
    assert first[0].value == 'HYPERLINK("http://evil.example","click")'
