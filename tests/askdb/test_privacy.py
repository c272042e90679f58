"""Privacy end to end on the demo data: small-cell suppression in every place a result goes
(page, CSV, XLSX, API, the text sent to the scripted LLM), sensitive columns by role, and
aggregate-only access. Real PostgreSQL, the real openai client against the scripted server."""

from __future__ import annotations

import csv
import io

import psycopg
import pytest
from openpyxl import load_workbook
from rest_framework.test import APIClient

from askdb.adapters.ports import DjangoPorts
from askdb.models import Run
from askdb.roles import AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER
from askdb.selectors import run_result_page
from askdb.services.examples import example_upsert
from askdb.services.reviews import review_correct
from askdb.services.runs import question_submit_sync
from askdb.services.sql import ReviewError
from infra import embedded
from infra.audit.models import AuditEvent
from metadata_admin.models import ColumnDoc, ValueEntry
from metadata_admin.selectors import link_values
from tests.factories import make_user
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db

GATE = "You screen questions"
WRITE = "You write one"
SUMMARY = "You explain the result"
# In the 40-patient demo data: 58, 16, 11, 9, 8, 6, 1, 1, 1 admissions per type.
BY_TYPE = (
    "SELECT admission_type, COUNT(*) AS admissions FROM mimiciv_hosp.admissions "
    "GROUP BY admission_type ORDER BY admissions DESC, admission_type"
)
# 15, 13 and 2 patients per year group once one group is left out: one small group beside a total.
WITH_TOTAL = (
    "SELECT anchor_year_group, COUNT(*) AS patients FROM mimiciv_hosp.patients "
    "WHERE anchor_year_group <> '2017 - 2019' GROUP BY anchor_year_group "
    "UNION ALL SELECT 'all', COUNT(*) FROM mimiciv_hosp.patients WHERE anchor_year_group <> '2017 - 2019'"
)
SEPSIS_LIST = (
    "SELECT DISTINCT d.subject_id FROM mimiciv_hosp.diagnoses_icd d JOIN mimiciv_hosp.d_icd_diagnoses t "
    "ON t.icd_code = d.icd_code AND t.icd_version = d.icd_version WHERE t.long_title ILIKE '%sepsis%'"
)


def ask(llm, user, text: str, sql: str, source, summary: str = "Summary.") -> Run:
    llm.when(GATE, Reply('{"category": "answerable", "reason": "in the data"}'))
    llm.when(WRITE, Reply(f"```sql\n{sql}\n```"), times=1)
    llm.when(SUMMARY, Reply(summary))
    return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)


def summary_prompt(llm) -> str:
    requests = [r for r in llm.chat_requests() if SUMMARY in r[0]["content"]]
    assert requests, "no summary was asked for"
    return "\n".join(m["content"] for m in requests[-1])


def test_small_counts_show_as_less_than_k_everywhere(client, source, scripted_llm):
    assert source.min_cell_size == 11  # the default, the usual publication rule
    ann = make_user("ann", RESEARCHER)
    run = ask(scripted_llm, ann, "How many admissions of each type are there?", BY_TYPE, source)

    assert run.status == Run.Status.SUCCEEDED, run.message
    counts = dict(run.result_rows)
    assert counts["EW EMER."] == 58 and counts["DIRECT EMER."] == 11  # 11 is not below 11
    small = [
        "SURGICAL SAME DAY ADMISSION",
        "EU OBSERVATION",
        "OBSERVATION ADMIT",
        "ELECTIVE",
        "DIRECT OBSERVATION",
    ]
    assert all(counts[t] == "<11" for t in small)
    assert (
        run.privacy["k"] == 11
        and run.privacy["suppressed"] == 6
        and run.privacy["count_columns"] == ["admissions"]
    )

    # The LLM never saw a small count.
    prompt = summary_prompt(scripted_llm)
    assert "AMBULATORY OBSERVATION | <11" in prompt and "OBSERVATION ADMIT | <11" in prompt
    assert "OBSERVATION ADMIT | 9" not in prompt and "EW EMER. | 58" in prompt

    client.force_login(ann)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "&lt;11" in page and "Counts below 11 were suppressed (6 cells shown as &lt;11)" in page
    assert 'id="privacy-suppression"' in page
    assert '<dd id="prov-privacy">Counts below 11 were suppressed' in page
    # The chart leaves the suppressed bars out, says so, and sorting puts "<11" just below 11.
    assert 'id="chart-suppressed"' in page and "6 suppressed counts (shown as &lt;11 in the table)" in page
    ordered = [r[1] for r in run_result_page(run=run, sort="admissions")["rows"]]
    assert ordered == ["<11"] * 6 + [11, 16, 58]
    csv_rows = list(
        csv.reader(io.StringIO(b"".join(client.get(f"/runs/{run.pk}/result.csv").streaming_content).decode()))
    )
    assert ["OBSERVATION ADMIT", "<11"] in csv_rows and ["EW EMER.", "58"] in csv_rows
    sheet = load_workbook(io.BytesIO(b"".join(client.get(f"/runs/{run.pk}/result.xlsx").streaming_content)))[
        "result"
    ]
    xlsx_rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert ["OBSERVATION ADMIT", "<11"] in xlsx_rows and ["EW EMER.", 58] in xlsx_rows

    api = APIClient()
    api.force_login(ann)
    data = api.get(f"/api/runs/{run.pk}/").json()
    assert ["OBSERVATION ADMIT", "<11"] in data["result"]["rows"] and data["privacy"]["suppressed"] == 6
    api_csv = b"".join(api.get(f"/api/runs/{run.pk}/result.csv").streaming_content).decode()
    assert "OBSERVATION ADMIT,<11" in api_csv and ",9\r\n" not in api_csv

    methods = client.get(f"/runs/{run.pk}/methods.txt").content.decode()
    assert "Counts below 11 were suppressed" in methods
    audit = AuditEvent.objects.filter(action="run.succeeded").latest("id")
    assert audit.detail["privacy"]["suppressed"] == 6


def test_a_total_beside_one_small_group_cannot_reveal_it(source, scripted_llm):
    run = ask(scripted_llm, make_user("ann", RESEARCHER), "Patients per year group, with the total", WITH_TOTAL,
              source)  # fmt: skip
    rows = dict(run.result_rows)
    assert rows["all"] == 30 and rows["2011 - 2013"] == 15
    # 2 is below 11; 13 is hidden as well, so "all" minus the rest gives 15 = 2 + 13, not 2.
    assert rows["2008 - 2010"] == "<11" and rows["2014 - 2016"] == "<11"
    assert run.privacy["suppressed"] == 1 and run.privacy["complementary"] == 1
    assert "| 2\n" not in summary_prompt(scripted_llm) and "| 13\n" not in summary_prompt(scripted_llm)


def test_k_is_set_per_source_and_zero_turns_it_off(source, scripted_llm):
    source.min_cell_size = 0
    source.save(update_fields=["min_cell_size"])
    run = ask(
        scripted_llm, make_user("ann", RESEARCHER), "How many admissions of each type?", BY_TYPE, source
    )
    assert dict(run.result_rows)["OBSERVATION ADMIT"] == 9 and run.privacy["suppressed"] == 0


DOD = "SELECT subject_id, dod FROM mimiciv_hosp.patients WHERE dod IS NOT NULL ORDER BY subject_id"


def test_a_sensitive_column_is_refused_for_a_researcher_and_allowed_with_the_permission(source, scripted_llm):
    assert ColumnDoc.objects.get(
        table__source=source, table__name="patients", name="dod"
    ).sensitive  # curated
    run = ask(scripted_llm, make_user("ann", RESEARCHER), "When did the patients die?", DOD, source)
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_sensitive_column"
    assert "patients.dod" in run.message and "sensitive" in run.message
    assert run.result_rows == [] and run.privacy["refused"] == "sensitive_column"
    assert [s.status for s in run.stages.all() if s.name == "execute"] == ["stopped"]
    assert AuditEvent.objects.filter(
        action="run.declined", detail__outcome="privacy_sensitive_column"
    ).exists()

    reviewer = make_user("rev", REVIEWER)
    run = ask(scripted_llm, reviewer, "When did the patients die?", DOD, source)
    assert (
        run.status == Run.Status.SUCCEEDED and run.result_rows and run.result_columns == ["subject_id", "dod"]
    )
    # Seen by the reviewer, never by the LLM.
    assert run.privacy["sensitive_columns"] == ["dod"]
    prompt = summary_prompt(scripted_llm)
    assert str(run.result_rows[0][1]) not in prompt


def test_an_aggregate_only_researcher_gets_the_count_instead_of_the_list(client, source, scripted_llm):
    agg = make_user("agatha", AGGREGATE_RESEARCHER)
    run = ask(scripted_llm, agg, "list the patients with sepsis", SEPSIS_LIST, source)
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_row_level"
    assert "aggregated results" in run.message and "one row per subject_id" in run.message
    assert run.privacy["alternative"]["question"] == "How many patients with sepsis?"
    assert "How many patients with sepsis?" in run.message and run.result_rows == []
    client.force_login(agg)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="privacy-alternative"' in page and "Ask instead: How many patients with sepsis?" in page

    count = f"SELECT COUNT(*) AS patients FROM ({SEPSIS_LIST}) AS s"
    run = ask(scripted_llm, agg, "How many patients with sepsis?", count, source)
    assert run.status == Run.Status.SUCCEEDED and run.result_rows == [["<11"]]  # 8 in the demo data

    # A researcher (the default role) may still list rows.
    run = ask(
        scripted_llm, make_user("ann", RESEARCHER), "list the patients with sepsis", SEPSIS_LIST, source
    )
    assert run.status == Run.Status.SUCCEEDED and len(run.result_rows) == 8


ICD_LOOKUP = (
    "SELECT t.icd_code, t.icd_version, t.long_title FROM mimiciv_hosp.d_icd_diagnoses t "
    "WHERE t.long_title ILIKE '%sepsis%' ORDER BY t.icd_version, t.icd_code"
)


def test_an_aggregate_only_researcher_may_look_up_codes_in_the_dictionaries(source, scripted_llm):
    # The catalog's code dictionaries are reference data by their kind (no patient, admission or
    # stay column); the tables about patients are not.
    from metadata_admin.models import TableDoc
    from metadata_admin.selectors import reference_tables

    dictionaries = reference_tables(source, ["subject_id", "hadm_id", "stay_id"])
    assert {"d_icd_diagnoses", "d_icd_procedures", "d_labitems", "d_items"} <= dictionaries
    assert not dictionaries & {"patients", "admissions", "diagnoses_icd", "labevents", "icustays"}

    agg = make_user("agatha", AGGREGATE_RESEARCHER)
    run = ask(scripted_llm, agg, "what is the ICD code for sepsis?", ICD_LOOKUP, source)
    assert run.status == Run.Status.SUCCEEDED, run.message
    assert run.result_rows and all("sepsis" in row[2].lower() for row in run.result_rows)

    # Joined with a table about patients, a listing of patients keeps today's rule.
    run = ask(scripted_llm, agg, "list the patients with sepsis", SEPSIS_LIST, source)
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_row_level"

    # An admin who marks a dictionary as not reference data takes the lookup back.
    TableDoc.objects.filter(source=source, name="d_icd_diagnoses").update(reference=False)
    run = ask(scripted_llm, agg, "what is the ICD code for sepsis?", ICD_LOOKUP, source)
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_row_level"


def test_a_source_can_be_aggregate_only_for_every_role(source, scripted_llm):
    source.aggregate_only = True
    source.save(update_fields=["aggregate_only"])
    run = ask(scripted_llm, make_user("rev", REVIEWER), "list the patients with sepsis", SEPSIS_LIST, source)
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_row_level"


def test_a_correction_is_protected_for_the_person_who_asked(source, scripted_llm):
    agg = make_user("agatha", AGGREGATE_RESEARCHER)
    run = ask(scripted_llm, agg, "How many admissions of each type?", BY_TYPE, source)
    reviewer = make_user("rev", REVIEWER)
    with pytest.raises(ReviewError, match="may see only aggregated results"):
        review_correct(run=run, reviewer=reviewer, sql="SELECT hadm_id FROM mimiciv_hosp.admissions")
    # A total beside its groups is a set operation, outside the aggregate fragment (issue 24).
    with pytest.raises(ReviewError, match="combines queries"):
        review_correct(run=run, reviewer=reviewer, sql=WITH_TOTAL)
    by_group = WITH_TOTAL.split(" UNION ALL ")[0]
    review_correct(run=run, reviewer=reviewer, sql=by_group)
    run.refresh_from_db()
    # 2 patients in 2008 - 2010: the row is hidden whole, and one more so no total gives it back.
    assert ["<11", "<11"] in run.result_rows and "2008 - 2010" not in str(run.result_rows)
    assert run.privacy["suppressed"] == 1 and run.privacy["complementary"] == 1


def test_sensitive_values_are_never_linked(source):
    entry = (
        ValueEntry.objects.filter(source=source, value__iregex=r"^[a-z]{6,}$").select_related("table").first()
    )
    question = f"how many {entry.value}"
    assert any(v.value == entry.value for v in link_values(source=source, question=question, semantic=False))
    ColumnDoc.objects.filter(table=entry.table, name=entry.column).update(sensitive=True)
    assert not [
        v for v in link_values(source=source, question=question, semantic=False) if v.column == entry.column
    ]


def test_library_answers_follow_the_same_rules(source, settings):
    settings.LLM_MODEL = ""  # answered from the verified library, no LLM
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        first, second = (r[0] for r in conn.execute(
            "SELECT subject_id FROM mimiciv_hosp.admissions GROUP BY subject_id ORDER BY subject_id LIMIT 2"
        ))  # fmt: skip
    count_sql = "SELECT COUNT(*) AS admissions FROM mimiciv_hosp.admissions WHERE subject_id = {id}"
    example_upsert(source=source, question=f"how many admissions did patient {first} have?",
                   sql=count_sql.format(id=first), approved_by=make_user("rev", REVIEWER))  # fmt: skip
    question = f"how many admissions did patient {second} have?"

    run = Run.objects.get(
        pk=question_submit_sync(user=make_user("ann", RESEARCHER), text=question, source=source).pk
    )
    assert run.answered_by == "library" and run.status == Run.Status.SUCCEEDED, run.message
    # One patient's own count is row-level data, which a researcher may see: not a population cell.
    with psycopg.connect(embedded.pg_dsn(embedded.CLINICAL_DB)) as conn:
        n = conn.execute(count_sql.format(id=second)).fetchone()[0]
    assert 0 < n < 11 and run.result_rows == [[n]] and run.privacy["suppressed"] == 0
    assert any(note.startswith("Not suppressed: it is restricted to given values of subject_id") for note in
               run.privacy["notes"])  # fmt: skip

    # The same verified example, regrouped by a non-identifier, is a population table: suppressed.
    example_upsert(source=source, question="how many admissions of each admission type are there?", sql=BY_TYPE,
                   approved_by=make_user("rev2", REVIEWER))  # fmt: skip
    run = Run.objects.get(pk=question_submit_sync(user=make_user("ann2", RESEARCHER),
                                                  text="how many admissions of each admission type are there?",
                                                  source=source).pk)  # fmt: skip
    assert run.answered_by == "library", run.message
    assert dict(run.result_rows)["OBSERVATION ADMIT"] == "<11"

    agg = make_user("agatha", AGGREGATE_RESEARCHER)
    run = Run.objects.get(pk=question_submit_sync(user=agg, text=question, source=source).pk)
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_row_level"
    assert "given values of subject_id" in run.message and run.result_rows == []


@pytest.fixture
def sampling(scripted_llm, settings):
    settings.ASKDB_CANDIDATES = 3
    settings.ASKDB_CONFIDENCE_THRESHOLD = 0.7
    scripted_llm.when(GATE, Reply('{"category": "answerable", "reason": "ok"}'))
    scripted_llm.when(SUMMARY, Reply("summary"))
    return scripted_llm


def test_sampled_candidates_are_protected_like_one_answer(source, sampling):
    """Several candidates: their previews are suppressed, and listings are refused one by one."""
    sampling.when(WRITE, Reply([BY_TYPE, BY_TYPE, WITH_TOTAL]), times=1)
    run = Run.objects.get(pk=question_submit_sync(user=make_user("ann", RESEARCHER), text="Admissions by type?",
                                                  source=source).pk)  # fmt: skip
    assert run.outcome == "ambiguous"  # 2 of 3 agree, below 0.7
    previews = {tuple(r) for g in run.candidates["groups"] for r in g["rows"]}
    assert ("OBSERVATION ADMIT", "<11") in previews and ("2008 - 2010", "<11") in previews
    assert not {("OBSERVATION ADMIT", 9), ("2008 - 2010", 2)} & previews

    sampling.when(WRITE, Reply([SEPSIS_LIST, SEPSIS_LIST + " ORDER BY 1", SEPSIS_LIST]), times=1)
    agg = make_user("agatha", AGGREGATE_RESEARCHER)
    run = Run.objects.get(
        pk=question_submit_sync(user=agg, text="list the patients with sepsis", source=source).pk
    )
    assert run.status == Run.Status.DECLINED and run.outcome == "privacy_row_level"
    assert run.privacy["alternative"]["question"] == "How many patients with sepsis?"
    assert {a.error_code for a in run.attempts.all()} == {""}  # valid SQL, refused for this user only


def test_the_library_matcher_never_binds_a_sensitive_columns_values(source):
    """Binding a value into a verified template is value linking too: not for sensitive columns."""
    assert DjangoPorts(source, chat=None, timeout_s=10, row_cap=10).lookup_value(
        "mimiciv_hosp.admissions.admission_type", "URGENT"
    )[0] == ("URGENT", 1.0)
    ColumnDoc.objects.filter(table__source=source, table__name="admissions", name="admission_type").update(
        sensitive=True
    )
    ports = DjangoPorts(source, chat=None, timeout_s=10, row_cap=10)
    assert ports.lookup_value("mimiciv_hosp.admissions.admission_type", "URGENT") == []
