"""The example library's pages and commands (askdb/views_library.py, import_examples, export_examples)
against the real catalog and clinical database of the `source` fixture."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from askdb.adapters.library_cache import LIBRARY
from askdb.library_io import MAX_UPLOAD_BYTES, parse_examples
from askdb.models import Example, Question, Run
from askdb.roles import ADMIN, RESEARCHER, REVIEWER
from askdb.services.examples import library_refresh, library_warm_up
from askdb.services.exports import examples_import
from infra.adapters import catalog_search
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_executor
from tests.factories import make_user

pytestmark = pytest.mark.django_db

COUNT_SQL = "SELECT COUNT(*) AS patients FROM mimiciv_hosp.patients"
FEMALE_SQL = "SELECT COUNT(*) AS women FROM mimiciv_hosp.patients WHERE gender = 'F'"
BAD_COLUMN_SQL = "SELECT weight_kg FROM mimiciv_hosp.patients"
FAILS_WHEN_RUN_SQL = "SELECT CAST(gender AS INTEGER) AS g FROM mimiciv_hosp.patients"

EHRSQL_DATA = {
    "version": "test",
    "data": [
        {"id": "ok-1", "question": "How many patients are there?"},
        {"id": "bad-col", "question": "What does each patient weigh?"},
        {"id": "bad-run", "question": "Gender of each patient as a number"},
        {"id": "no-sql", "question": "Which patients will be admitted next week?"},
        {"id": "ok-2", "question": "How many female patients are there?"},
    ],
}
EHRSQL_LABELS = {
    "ok-1": COUNT_SQL,
    "bad-col": BAD_COLUMN_SQL,
    "bad-run": FAILS_WHEN_RUN_SQL,
    "no-sql": "null",
    "ok-2": FEMALE_SQL,
}


def upload(name: str, value) -> SimpleUploadedFile:
    body = value if isinstance(value, bytes) else json.dumps(value).encode()
    return SimpleUploadedFile(name, body, content_type="application/json")


def logged_in(client, role: str, username: str | None = None):
    user = make_user(username or role, role)
    client.force_login(user)
    return user


def import_ehrsql(client):
    return client.post(
        "/library/import/",
        {"file": upload("data.json", EHRSQL_DATA), "labels": upload("label.json", EHRSQL_LABELS)},
    )


# --------------------------------------------------------------------------- import


def test_the_ehrsql_pair_imports_the_good_pairs_and_reports_each_bad_one(client, source):
    reviewer = logged_in(client, REVIEWER)
    response = import_ehrsql(client)
    assert response.status_code == 200
    page = response.content.decode()
    assert "3 added, 0 merged into existing examples, 2 failed" in page

    report = response.context["report"]
    failures = {f["id"]: f["error"] for f in report.failed}
    assert set(failures) == {"bad-col", "bad-run"}
    assert failures["bad-col"].startswith("The SQL is not valid") and "weight_kg" in failures["bad-col"]
    assert failures["bad-run"].startswith("The SQL failed when run")
    for ident, error in failures.items():
        assert f"<code>{ident}</code>" in page and error.split(":")[0] in page

    examples = {e.question: e for e in Example.objects.all()}
    assert set(examples) == {
        "How many patients are there?",
        "How many female patients are there?",
        "Which patients will be admitted next week?",
    }
    unanswerable = examples["Which patients will be admitted next week?"]
    assert unanswerable.kind == Example.Kind.UNANSWERABLE and unanswerable.sql == ""
    counted = examples["How many patients are there?"]
    assert counted.kind == Example.Kind.ANSWERABLE and counted.tables == ["mimiciv_hosp.patients"]
    assert counted.origin == "import" and counted.approved_by == reviewer and counted.status == "active"


def test_re_importing_merges_near_duplicates_instead_of_adding_them(client, source, settings):
    # The two wordings below are 0.947 apart with the local model; the default threshold is stricter.
    settings.ASKDB_EXAMPLE_MERGE_SIMILARITY = 0.9
    logged_in(client, REVIEWER)
    import_ehrsql(client)
    before = Example.objects.count()

    again = import_ehrsql(client).context["report"]
    assert (len(again.created), len(again.merged), len(again.failed)) == (0, 3, 2)
    assert Example.objects.count() == before

    reworded = client.post(
        "/library/import/",
        {
            "file": upload(
                "more.json",
                [{"id": "p", "question": "How many patients are there in total?", "sql": COUNT_SQL}],
            )
        },
    ).context["report"]
    original = Example.objects.get(question="How many patients are there?")
    assert reworded.merged == [original.pk] and not reworded.created
    assert original.paraphrases == ["How many patients are there in total?"]
    assert Example.objects.count() == before


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "Choose a file to import."),
        ({"file": upload("lib.json", b'[{"question": "a b c", "sql": "SELECT 1",}]')},
         "lib.json: bad JSON at line 1, column 42: Expecting property name enclosed in double quotes."),
        ({"file": upload("lib.json", [{"question": "How many?", "sql": COUNT_SQL}, {"sql": COUNT_SQL}])},
         'lib.json: item 2 has no "question" key.'),
        ({"file": upload("data.json", EHRSQL_DATA), "labels": upload("label.json", {**EHRSQL_LABELS, "x9": "null"})},
         'label.json has 1 id(s) not in data.json: "x9".'),
        ({"file": upload("huge.json", b"[" + b" " * MAX_UPLOAD_BYTES + b"]")}, "huge.json is 5.0 MB, over the 5 MB limit."),
    ],
)  # fmt: skip
def test_a_malformed_upload_is_refused_whole_with_what_is_wrong(client, source, files, message):
    logged_in(client, REVIEWER)
    response = client.post("/library/import/", files)
    assert response.status_code == 400
    assert response.context["error"] == message
    assert message.split("(")[0].replace('"', "&quot;") in response.content.decode()
    assert not Example.objects.exists()


def test_our_benchmark_format_imports_as_is(client, source):
    bench = [
        {"id": "b1", "question": "How many patients are there?", "sql": COUNT_SQL, "category": "count",
         "difficulty": "easy"},
        {"id": "b2", "question": "Patients by gender", "category": "group",
         "sql": "SELECT gender, COUNT(*) AS n FROM mimiciv_hosp.patients GROUP BY gender"},
    ]  # fmt: skip
    logged_in(client, ADMIN)
    report = client.post("/library/import/", {"file": upload("test.json", bench)}).context["report"]
    assert len(report.created) == 2 and not report.failed


# --------------------------------------------------------------------------- browse, retire, restore


def test_the_list_searches_and_filters_and_retired_examples_leave_it_and_few_shot(client, source):
    logged_in(client, REVIEWER)
    import_ehrsql(client)
    counted = Example.objects.get(question="How many patients are there?")

    def listed(**params) -> set[str]:
        response = client.get("/library/", params)
        assert response.status_code == 200
        return {e.question for e in response.context["page"].object_list}

    assert len(listed()) == 3
    assert listed(q="female") == {"How many female patients are there?"}
    assert listed(q="gender = 'F'") == {"How many female patients are there?"}  # the SQL is searched too
    assert listed(kind="unanswerable") == {"Which patients will be admitted next week?"}
    assert listed(table="mimiciv_hosp.patients") == listed(table="patients") == {
        "How many patients are there?", "How many female patients are there?",
    }  # fmt: skip
    assert listed(table="admissions") == set()

    def nearest_ids() -> list[int]:
        vector = get_embedder().embed([counted.question])[0]
        hits = catalog_search.examples_nearest(
            source_id=source.pk, vector=vector, model=get_embedder().model, k=5
        )
        return [pk for pk, _ in hits]

    assert counted.pk in nearest_ids()
    response = client.post(f"/library/{counted.pk}/retire/", {"note": "duplicate of a better one"})
    assert response.status_code == 302 and response["Location"] == f"/library/{counted.pk}/"
    counted.refresh_from_db()
    assert counted.status == Example.Status.RETIRED and counted.note == "duplicate of a better one"
    assert "How many patients are there?" not in listed()
    assert listed(status="retired") == {"How many patients are there?"}
    assert len(listed(status="all")) == 3
    assert counted.pk not in nearest_ids()  # no longer a few-shot candidate

    client.post(f"/library/{counted.pk}/restore/")
    counted.refresh_from_db()
    assert counted.status == Example.Status.ACTIVE and counted.pk in nearest_ids()


def test_restoring_an_example_whose_sql_broke_is_refused_with_the_reason(client, source):
    logged_in(client, REVIEWER)
    import_ehrsql(client)
    example = Example.objects.get(question="How many patients are there?")
    Example.objects.filter(pk=example.pk).update(status=Example.Status.RETIRED, sql=BAD_COLUMN_SQL)
    response = client.post(f"/library/{example.pk}/restore/", follow=True)
    page = response.content.decode()
    assert f"Example {example.pk} was not restored: The SQL is not valid" in page and "weight_kg" in page
    example.refresh_from_db()
    assert example.status == Example.Status.RETIRED


def test_the_detail_page_shows_provenance_sql_runs_and_template(client, source):
    reviewer = logged_in(client, REVIEWER)
    asker = make_user("asker", RESEARCHER)
    run = Run.objects.create(
        question=Question.objects.create(user=asker, source=source, text="How many patients are there?"),
        status=Run.Status.SUCCEEDED, sql=COUNT_SQL,
    )  # fmt: skip
    examples_import(source=source, items=[{"question": "How many patients are there?", "sql": COUNT_SQL}],
                    approved_by=reviewer)  # fmt: skip
    example = Example.objects.get()
    later = Run.objects.create(question=run.question, status=Run.Status.SUCCEEDED, answered_by="library",
                               example=example)  # fmt: skip
    Example.objects.filter(pk=example.pk).update(
        origin_run=run, validation_error="column x is gone",
        template={"masked_question": "How many patients older than {number} are there?",
                  "slots": [{"name": "number", "type": "number", "text": "65", "start": 27, "end": 29,
                             "column": "mimiciv_hosp.patients.anchor_age", "uses": [{"case": "asis", "like": False}]}]},
    )  # fmt: skip
    page = client.get(f"/library/{example.pk}/").content.decode()
    assert '<code id="example-sql" class="language-sql">SELECT\n  COUNT(*) AS patients\nFROM' in page
    assert f'href="/runs/{run.pk}/"' in page and f'href="/runs/{later.pk}/"' in page
    assert "This example no longer validates: column x is gone" in page
    assert "How many patients older than {number} are there?" in page
    # the slot as a reviewer reads it, not the matcher's bookkeeping
    assert (
        "<td>number</td><td><code>65</code></td><td><code>mimiciv_hosp.patients.anchor_age</code></td>"
        in page
    )
    assert "&#x27;case&#x27;" not in page and '<th scope="col">uses</th>' not in page
    assert reviewer.username in page and f'action="/library/{example.pk}/retire/"' in page


def test_the_list_says_which_questions_share_a_template(client, source):
    logged_in(client, RESEARCHER)
    sql = "SELECT count(*) FROM mimiciv_hosp.patients WHERE anchor_age > {}"
    examples_import(source=source, execute=False, items=[
        {"question": "how many patients are older than 65?", "sql": sql.format(65)},
        {"question": "count the patients over 80.", "sql": sql.format(80)},
        {"question": "How many patients are there?", "sql": COUNT_SQL}])  # fmt: skip
    library_refresh(source=source)  # as the worker's warm-up does
    keys = dict(Example.objects.values_list("question", "template_key"))
    assert keys["how many patients are older than 65?"] == keys["count the patients over 80."] != ""
    page = client.get("/library/").content.decode()
    assert page.count("same template as 1 other question<") == 2  # the two paraphrases, not the count


def test_a_worker_warm_up_loads_what_the_first_question_would(source):
    sql = "SELECT count(*) FROM mimiciv_hosp.patients WHERE anchor_age > {}"
    examples_import(source=source, execute=False, items=[
        {"question": "how many patients are older than 65?", "sql": sql.format(65)},
        {"question": "count the patients over 80.", "sql": sql.format(80)}])  # fmt: skip
    embedder = get_embedder()
    LIBRARY.clear()
    library_warm_up(source, embedder)
    index = LIBRARY._indexes[source.pk][1]
    assert source.pk in LIBRARY._values
    assert LIBRARY.index(source, source_executor(source), embedder)[0] is index  # not rebuilt
    assert len(index.entries) == 2 and len(LIBRARY._vectors[(source.pk, embedder.model)][1]) == 2


# --------------------------------------------------------------------------- permissions


@pytest.mark.parametrize(
    ("role", "expected"),
    [(RESEARCHER, 403), (REVIEWER, 200), (ADMIN, 200)],
)
def test_everyone_browses_and_only_reviewers_and_admins_edit(client, source, role, expected):
    logged_in(client, role)
    examples_import(source=source, items=[{"question": "How many patients are there?", "sql": COUNT_SQL}])
    example = Example.objects.get()
    assert client.get("/library/").status_code == 200  # researchers browse and ask, read-only
    assert client.get(f"/library/{example.pk}/").status_code == 200
    assert client.get("/library/import/").status_code == expected
    assert client.get("/library/export/").status_code == expected
    retire = client.post(f"/library/{example.pk}/retire/")
    assert retire.status_code == (403 if role == RESEARCHER else 302)


def test_revalidate_all_is_for_admins_and_reports_what_broke(client, source):
    reviewer = make_user("rev", REVIEWER)
    examples_import(source=source, items=[{"question": "How many patients are there?", "sql": COUNT_SQL},
                                          {"question": "How many women?", "sql": FEMALE_SQL}])  # fmt: skip
    broken = Example.objects.get(question="How many women?")
    Example.objects.filter(pk=broken.pk).update(sql=BAD_COLUMN_SQL)

    client.force_login(reviewer)
    assert client.post("/library/revalidate/").status_code == 403
    assert "Re-validate all" not in client.get("/library/").content.decode()

    logged_in(client, ADMIN)
    assert "Re-validate all" in client.get("/library/").content.decode()
    response = client.post("/library/revalidate/", {"source": source.name})
    assert response.status_code == 200
    page = response.content.decode()
    assert "2 checked, 1 newly broken, 0 working again" in page
    assert f'href="/library/{broken.pk}/"' in page and "weight_kg" in page
    broken.refresh_from_db()
    assert broken.status == Example.Status.NEEDS_REVIEW


# --------------------------------------------------------------------------- export


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_an_export_imports_back_into_the_same_library(client, source, fmt):
    logged_in(client, REVIEWER)
    import_ehrsql(client)
    kept = sorted(Example.objects.values_list("question", "sql", "kind"))

    response = client.get("/library/export/", {"format": fmt})
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith(f'attachment; filename="askdb-examples-{source.name}-')
    body = b"".join(response) if response.streaming else response.content
    assert len(parse_examples(body, f"export.{fmt}")) == 3

    Example.objects.all().delete()
    report = client.post("/library/import/", {"file": upload(f"export.{fmt}", body)}).context["report"]
    assert len(report.created) == 3 and not report.failed
    assert sorted(Example.objects.values_list("question", "sql", "kind")) == kept


def test_an_unknown_export_format_is_400(client, source):
    logged_in(client, REVIEWER)
    assert client.get("/library/export/", {"format": "csv"}).status_code == 400


# --------------------------------------------------------------------------- commands


def test_the_import_command_reports_failures_and_exits_zero(source, tmp_path):
    make_user("imp", REVIEWER)
    data, labels = tmp_path / "data.json", tmp_path / "label.json"
    data.write_text(json.dumps(EHRSQL_DATA))
    labels.write_text(json.dumps(EHRSQL_LABELS))
    out = StringIO()
    call_command("import_examples", str(data), labels=str(labels), source=source.name, approved_by="imp",
                 stdout=out, stderr=StringIO())  # fmt: skip
    text = out.getvalue()
    assert f"data.json into {source.name}: 3 added, 0 merged into existing examples, 2 failed" in text
    assert (
        "  failed bad-col: The SQL is not valid" in text
        and "  failed bad-run: The SQL failed when run" in text
    )
    assert "    question: What does each patient weigh?" in text
    assert Example.objects.count() == 3
    assert set(Example.objects.values_list("approved_by__username", flat=True)) == {"imp"}

    out = StringIO()
    call_command("import_examples", str(data), labels=str(labels), source=source.name, no_execute=True,
                 stdout=out, stderr=StringIO())  # fmt: skip
    # Without running, the SQL that only fails at run time passes the catalog check.
    assert "1 added, 3 merged into existing examples, 1 failed" in out.getvalue()


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        ('[{"question": "How many?"}]', {}, 'lib.json: item 1 has no "sql" key'),
        ("[", {}, "lib.json: bad JSON at line 1, column 2: Expecting value."),
        ("[]", {"source": "nope"}, "no clinical source named 'nope'"),
        ("[]", {"approved_by": "ghost"}, "no user named 'ghost' (for --approved-by)"),
        (None, {}, "cannot read"),
    ],
)
def test_the_import_command_fails_only_when_the_file_is_unusable(source, tmp_path, content, options, message):
    path = tmp_path / "lib.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_command("import_examples", str(path), stdout=StringIO(), stderr=StringIO(), **options)
    assert not Example.objects.exists()


def test_the_export_command_writes_what_the_import_command_reads(source, tmp_path):
    examples_import(source=source, items=[{"question": "How many patients are there?", "sql": COUNT_SQL},
                                          {"question": "Will it rain tomorrow?", "sql": ""}])  # fmt: skip
    out = tmp_path / "library.yaml"
    call_command("export_examples", source=source.name, out=str(out), stdout=StringIO(), stderr=StringIO())
    assert out.read_text().startswith(f"source: {source.name}\nexamples:\n")
    stdout = StringIO()
    call_command("export_examples", format="json", stdout=stdout)
    assert [e["question"] for e in json.loads(stdout.getvalue())["examples"]] == [
        "How many patients are there?", "Will it rain tomorrow?",
    ]  # fmt: skip

    Example.objects.all().delete()
    result = StringIO()
    call_command("import_examples", str(out), stdout=result, stderr=StringIO())
    assert "2 added, 0 merged into existing examples, 0 failed" in result.getvalue()
    assert set(Example.objects.values_list("kind", flat=True)) == {"answerable", "unanswerable"}
