"""The answerability model against the real catalog and library: training from the library,
versioned storage, the scorer the gate calls, and the command's refusals."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from django.core.management import CommandError, call_command

from askdb.answerability import scorer as scorer_module
from askdb.answerability import store
from askdb.answerability.data import answerability_train, library_questions, library_snapshot
from askdb.answerability.model import GROUND_MARGIN, VALUE_MARGIN, TrainConfig, TrainingError
from askdb.models import Example

H, ICU = "mimiciv_hosp.", "mimiciv_icu."
ANSWERABLE = [
    ("what is the gender of patient {p}?", ["patients"]),
    ("how old was patient {p} at the anchor year?", ["patients"]),
    ("did patient {p} die, and when is the date of death?", ["patients"]),
    ("when was patient {p} admitted to the hospital for the first time?", ["admissions"]),
    ("what insurance did patient {p} have on the last hospital admission?", ["admissions"]),
    ("how many hospital admissions did patient {p} have?", ["admissions"]),
    ("what was the last creatinine lab value of patient {p}?", ["labevents", "d_labitems"]),
    ("show the hemoglobin lab results of patient {p}", ["labevents", "d_labitems"]),
    ("what was the maximum glucose measured in the lab for patient {p}?", ["labevents", "d_labitems"]),
    ("which drugs were prescribed to patient {p}?", ["prescriptions"]),
    ("what dose of insulin was prescribed to patient {p}?", ["prescriptions"]),
    ("when was vancomycin first prescribed to patient {p}?", ["prescriptions"]),
    ("what diagnoses did patient {p} receive on the last admission?", ["diagnoses_icd", "d_icd_diagnoses"]),
    ("was patient {p} ever diagnosed with sepsis?", ["diagnoses_icd", "d_icd_diagnoses"]),
    ("which procedures were performed on patient {p}?", ["procedures_icd", "d_icd_procedures"]),
    ("how long was the first ICU stay of patient {p}?", [ICU + "icustays"]),
    ("which care unit was patient {p} in during the ICU stay?", [ICU + "icustays"]),
    ("what was the heart rate of patient {p} in the ICU chart?", [ICU + "chartevents", ICU + "d_items"]),
    ("what organisms grew in the blood culture of patient {p}?", ["microbiologyevents"]),
    ("what was the urine output of patient {p} in the ICU?", [ICU + "outputevents", ICU + "d_items"]),
]
UNANSWERABLE = [
    "what is the weather forecast for Boston tomorrow?",
    "show me the chest CT images of patient 10019003.",
    "who won the football match last night?",
    "what will the creatinine of patient 10004235 be next year?",
    "what is the home address and phone number of patient 10002428?",
    "write me a poem about the hospital cafeteria",
    "what is the stock price of the hospital's parent company?",
    "read the radiology report text of patient 10004235",
]


def _qualified(tables: list[str]) -> list[str]:
    return [t if t.startswith("mimiciv_") else H + t for t in tables]


@pytest.fixture
def library(source):
    """~48 examples: two phrasings of each answerable question, and eight unanswerable ones."""
    for n, (template, tables) in enumerate(ANSWERABLE):
        for patient in (10004235, 10019003):
            Example.objects.create(
                source=source, question=template.format(p=patient + n), kind="answerable",
                sql=f"SELECT subject_id FROM {_qualified(tables)[0]} WHERE question_{chr(97 + n)} = {patient}",
                tables=_qualified(tables), origin="import",
            )  # fmt: skip
    for text in UNANSWERABLE:
        Example.objects.create(source=source, question=text, sql="", kind="unanswerable", origin="import")
    return source


def held_patients(source, n: int = 2) -> list[int]:
    """Patients the test data holds (its ids are synthetic): a question about one passes the
    gate's lookup of named patients."""
    from metadata_admin.services import source_executor

    sql = "SELECT subject_id FROM mimiciv_hosp.patients ORDER BY subject_id"
    return [int(r[0]) for r in source_executor(source).execute(sql, timeout_s=10, row_cap=n).rows]


@pytest.fixture
def home(settings, tmp_path):
    settings.ASKDB_HOME = tmp_path
    scorer_module.clear_cache()
    yield tmp_path
    scorer_module.clear_cache()


def test_library_labels_come_from_approved_sql_and_flags(library):
    questions = library_questions(library)
    assert len(questions) == 2 * len(ANSWERABLE) + len(UNANSWERABLE)
    flagged = [q for q in questions if not q.answerable]
    assert len(flagged) == len(UNANSWERABLE) and all(q.tables == () for q in flagged)
    creatinine = next(q for q in questions if "creatinine lab" in q.text)
    assert set(creatinine.tables) == {H + "labevents", H + "d_labitems"}
    retired = Example.objects.filter(source=library, kind="unanswerable").first()
    before = library_snapshot(library)
    retired.status = Example.Status.RETIRED
    retired.save()
    assert len(library_questions(library)) == len(questions) - 1  # retired examples teach nothing
    assert library_snapshot(library)["hash"] != before["hash"]


def test_untrained_source_has_no_scorer(source, home):
    assert scorer_module.get_scorer(source) is None
    assert scorer_module.get_scorer(source.name) is None
    assert scorer_module.get_scorer("no-such-source") is None


def test_command_refuses_a_tiny_library_with_a_reason(source, home):
    Example.objects.create(
        source=source, question="how many patients?", sql="SELECT 1", tables=[H + "patients"]
    )
    with pytest.raises(
        CommandError, match="only 1 labelled questions; the answerability model needs at least 20"
    ):
        call_command("train_answerability", "--source", source.name, stdout=io.StringIO())
    assert store.list_versions(source.name) == []


def test_training_without_unanswerable_examples_is_refused(library, home):
    Example.objects.filter(source=library, kind="unanswerable").delete()
    with pytest.raises(TrainingError, match="flag at least 4 questions as unanswerable"):
        answerability_train(source=library, config=TrainConfig(folds=2))


def test_train_store_score_and_switch_versions(library, home, tmp_path):
    out = io.StringIO()
    call_command(
        "train_answerability", "--source", library.name, "--folds", "3", "--threads", "1", stdout=out
    )
    text = out.getvalue()
    assert "cross-validation holding out whole kinds" in text and "F1" in text and "AUC" in text
    assert "setting 3/3" in text and "peak memory" in text  # a line per step, and what it cost

    versions = store.list_versions(library.name)
    assert len(versions) == 1 and versions[0]["current"]
    manifest = versions[0]
    version = manifest["version"]
    assert (home / "models" / "answerability" / library.name / version / "library.npz").is_file()
    assert manifest["source"] == library.name and manifest["encoder"] == "all-MiniLM-L6-v2"
    assert manifest["library"] == library_snapshot(library)
    assert manifest["size"] == 2 * len(ANSWERABLE) + len(UNANSWERABLE)
    assert manifest["paraphrase_families"] <= manifest["size"]
    assert {"precision", "recall", "f1"} <= set(manifest["metrics"]["unanswerable"])
    assert manifest["metrics"]["auc"] is not None and "address" in manifest["absent_concepts"]

    scorer = scorer_module.get_scorer(library)
    assert scorer is not None and scorer.version == version
    assert scorer_module.get_scorer(library.name) is scorer  # cached per process

    lab = scorer.score("what was the most recent creatinine lab result for patient 10002428?")
    assert lab.answerable and lab.per_table[0][0] in {H + "labevents", H + "d_labitems"}
    assert [r for _, r in lab.per_table] == sorted((r for _, r in lab.per_table), reverse=True)
    assert lab.per_column and all("." in c for c, _ in lab.per_column)
    weather = scorer.score("what is the weather in Paris")
    assert not weather.answerable and weather.kind == "out_of_scope" and "weather" in weather.reason
    assert weather.nearest_unanswerable is not None
    assert Example.objects.get(pk=weather.nearest_unanswerable[0]).kind == "unanswerable"
    stored = weather.to_json()
    assert stored["version"] == version and len(stored["per_table"]) == 8
    assert json.loads(json.dumps(stored)) == stored

    # A second version, activated from the command: the cached scorer notices at once.
    base = home / "models" / "answerability" / library.name
    shutil.copytree(base / version, base / "20990101T000000-copy")
    call_command("train_answerability", "--source", library.name, "--activate", "20990101T000000-copy",
                 stdout=io.StringIO())  # fmt: skip
    assert scorer_module.get_scorer(library).version == "20990101T000000-copy"
    listing = io.StringIO()
    call_command("train_answerability", "--source", library.name, "--list", stdout=listing)
    assert "* 20990101T000000-copy" in listing.getvalue() and version in listing.getvalue()
    with pytest.raises(CommandError, match="no answerability model version 'nope'"):
        call_command("train_answerability", "--source", library.name, "--activate", "nope")

    # --evaluate reads the EHRSQL pair (data.json + label.json), as the error message promises.
    (tmp_path / "data.json").write_text(json.dumps({"version": "t", "data": [
        {"id": "e1", "question": "what was the glucose lab value of patient 10001?"},
        {"id": "e2", "question": "which antibiotics were prescribed to patient 10002?"},
        {"id": "e3", "question": "what is the weather in Paris today?"},
    ]}))  # fmt: skip
    (tmp_path / "label.json").write_text(json.dumps({"e1": "SELECT 1", "e2": "SELECT 1", "e3": "null"}))
    report = io.StringIO()
    call_command("train_answerability", "--source", library.name, "--evaluate", str(tmp_path / "data.json"),
                 "--labels", str(tmp_path / "label.json"), stdout=report)  # fmt: skip
    assert (
        "unanswerable as positive" in report.getvalue() and "declined as out_of_scope: 1" in report.getvalue()
    )
    with pytest.raises(CommandError, match=r"label\.json"):
        call_command(
            "train_answerability", "--source", library.name, "--evaluate", str(tmp_path / "data.json")
        )

    # The gate declines before any LLM call, and the run page and the API explain it in words.
    from askdb.models import Run
    from askdb.services.runs import question_submit_sync
    from tests.factories import make_user

    asker = make_user("gate-asker", "researcher")
    run = Run.objects.get(pk=question_submit_sync(user=asker, text="what is the home address of patient 10002428?",
                                                  source=library).pk)  # fmt: skip
    assert run.status == "declined" and run.outcome == "not_in_schema" and not run.llm_calls.exists()
    assert run.gate_reason.startswith("The database has no patient addresses, so askdb cannot answer this.")
    assert run.gate_reason.endswith(
        " The closest thing the database records is mimiciv_hosp.admissions.admission_location "
        "(Where the patient came from before admission); askdb can answer questions about that instead."
    )
    assert run.answerability["answerable"] is False and run.answerability["version"] == "20990101T000000-copy"
    gate = run.stages.get(name="gate")
    assert gate.status == "stopped" and gate.detail["answerability"]["answerable"] is False
    from django.test import Client

    client = Client()
    client.force_login(asker)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "The database has no patient addresses, so askdb cannot answer this." in page
    assert "20990101T000000-copy" in page and "not_in_schema" not in page


def test_without_a_model_the_rules_still_decline_with_a_reason(source, home):
    from askdb.models import Run
    from askdb.services.runs import question_submit_sync
    from tests.factories import make_user

    asker = make_user("rules-asker", "researcher")
    run = Run.objects.get(pk=question_submit_sync(
        user=asker, text="Which antibiotic should be prescribed to patient 10002428 next?", source=source).pk)  # fmt: skip
    assert run.status == "declined" and run.outcome == "advice" and not run.llm_calls.exists()
    assert "advice" in run.gate_reason and run.answerability["rules_only"] is True
    assert run.gate_label == "asks for advice or an opinion"
    # the catalog grounds the asked-for attribute without a model too
    run = Run.objects.get(pk=question_submit_sync(
        user=asker, text="What is the wedding date of patient 10002428?", source=source).pk)  # fmt: skip
    assert run.status == "declined" and run.outcome == "not_in_schema" and not run.llm_calls.exists()
    assert (
        run.gate_reason == "No column in this database records the wedding date, so askdb cannot answer this."
    )


def test_a_run_about_a_patient_the_data_lacks_is_declined_and_names_the_id(source, home):
    """A patient named by id is looked up (by askdb's own reader); one the data lacks is declined
    with the id, before any LLM; a patient it holds passes; an aggregate-only user gets no lookup."""
    from askdb.models import Run
    from askdb.roles import AGGREGATE_RESEARCHER, RESEARCHER
    from askdb.services.runs import question_submit_sync
    from tests.factories import make_user

    def ask(user, text):
        return Run.objects.get(pk=question_submit_sync(user=user, text=text, source=source).pk)

    ann = make_user("people-ann", RESEARCHER)
    run = ask(ann, "how many hospital admissions did patient 4711 have?")
    assert run.status == "declined" and run.outcome == "not_in_schema" and not run.llm_calls.exists()
    assert run.gate_reason.startswith("There is no patient 4711 in this database")
    assert "patients.subject_id" in run.gate_reason

    def rules(run):
        return {f["rule"] for f in (run.answerability or {}).get("findings", [])}

    run = ask(ann, f"how many hospital admissions did patient {held_patients(source, 1)[0]} have?")
    assert "unknown_patient" not in rules(run) and "There is no patient" not in (run.gate_reason or "")

    # An aggregate-only user would learn which ids exist: no lookup is made for them.
    agg = make_user("people-agatha", AGGREGATE_RESEARCHER)
    run = ask(agg, "how many hospital admissions did patient 4711 have?")
    assert "unknown_patient" not in rules(run) and "There is no patient" not in (run.gate_reason or "")


def test_without_a_model_a_question_that_leaves_unsaid_what_its_answer_depends_on_is_declined(source, home):
    """The rules-only gate reads what a question leaves open against the catalog too: a duration of a
    procedure (procedures_icd has no end time), a class of drugs no column records; a stay's length
    and a named drug's dose pass."""
    verdict = scorer_module.gate_verdict(
        source, "How long did the arterial catheterization of patient 10002428 take?"
    )
    assert verdict["rules_only"] and not verdict["answerable"] and verdict["kind"] == "not_in_schema"
    assert 'records when "arterial catheterization" happened, not when it ended' in verdict["reason"]
    verdict = scorer_module.gate_verdict(
        source, "what is the dose of the opioid prescribed to patient 10002428?"
    )
    assert not verdict["answerable"] and "not by class" in verdict["reason"]
    for question in ("how long was the last hospital stay of patient 10002428?",
                     "what is the dose of furosemide prescribed to patient 10002428?"):  # fmt: skip
        assert scorer_module.gate_verdict(source, question)["answerable"], question


def test_without_a_model_an_attribute_in_words_no_catalog_text_has_is_grounded_by_meaning(
    source, home, monkeypatch
):
    """The rules-only gate grounds by meaning as the trained one does, with the local MiniLM that
    retrieval already runs: a "health insurer" is admissions.insurance. The column docs' vectors are
    computed when the docs are embedded, never while answering (reads never write): before that a
    question writes nothing under ASKDB_HOME and the words alone decide (declined as not in the
    schema); after it, it is grounded, and a new process reads the vectors kept on disk without
    encoding the docs again. The attack meaning must not let through (a discharge letter is near
    admissions.discharge_location by "discharge" alone) is still declined."""
    from metadata_admin.services import table_docs_reembed

    def written() -> list:
        return sorted(p for p in home.rglob("*") if p.is_file())

    verdict = scorer_module.gate_verdict(source, "what is the health insurer of patient 10002428?")
    assert not verdict["answerable"] and verdict["kind"] == "not_in_schema", verdict
    assert written() == []
    table_docs_reembed(source=source)  # nothing to re-embed; the gate's column docs are embedded all the same
    kept = list((home / "cache" / "answerability").glob("column-docs-*.npy"))
    assert len(kept) == 1
    verdict = scorer_module.gate_verdict(source, "what is the health insurer of patient 10002428?")
    assert verdict["answerable"], verdict["reason"]
    scorer_module._meaning.clear()  # a new process
    encoder = scorer_module.shared_encoder()

    def no_docs(texts):
        raise AssertionError("the column docs were encoded again")

    monkeypatch.setattr(encoder, "encode_docs", no_docs)
    before = [(p, p.stat().st_mtime_ns) for p in written()]
    verdict = scorer_module.gate_verdict(source, "what was the relationship status of patient 10002428?")
    assert verdict["answerable"], verdict["reason"]
    verdict = scorer_module.gate_verdict(source, "what is the discharge letter of patient 10002428?")
    assert not verdict["answerable"] and verdict["kind"] == "not_in_schema", verdict["reason"]
    assert [(p, p.stat().st_mtime_ns) for p in written()] == before  # answering wrote nothing
    assert scorer_module.column_doc_vectors_compute(source) == kept[0]  # kept: not encoded again


def test_without_a_model_the_column_docs_file_is_named_once_until_the_catalog_changes(
    source, home, monkeypatch
):
    """Naming the column docs' vector file hashes every column's text: a question reuses the name its
    catalog had (two questions, one hash, nothing written), and an edited doc still picks the new
    vectors: the next question names the file the edit's embedding wrote and grounds by it."""
    from metadata_admin.models import TableDoc
    from metadata_admin.services import table_doc_update, table_docs_reembed

    table_docs_reembed(source=source)
    named = []
    real = scorer_module._column_docs_path
    monkeypatch.setattr(scorer_module, "_column_docs_path", lambda e, c: named.append(len(c)) or real(e, c))
    for question in (
        "what is the health insurer of patient 10002428?",
        "what was the relationship status of patient 10002428?",
    ):
        assert scorer_module.gate_verdict(source, question)["answerable"], question
    assert len(named) == 1
    first = scorer_module._meaning[source.pk][0]
    doc = TableDoc.objects.get(source=source, name="admissions")
    table_doc_update(
        doc=doc, data={"columns": {"insurance": {"meaning": "The payer who settles the stay's bill."}}}
    )
    # What the edit's embedding task runs: it names (and writes) the new file.
    table_docs_reembed(source=source)
    embedded = len(named)
    for question in (
        "what is the health insurer of patient 10002428?",
        "what is the discharge letter of patient 10002428?",
    ):
        scorer_module.gate_verdict(source, question)
    assert len(named) == embedded + 1  # the new catalog's name, once
    now = scorer_module._meaning[source.pk][0]
    assert (
        now != first and now.exists() and now in (home / "cache" / "answerability").glob("column-docs-*.npy")
    )
    assert not scorer_module.gate_verdict(source, "what is the discharge letter of patient 10002428?")[
        "answerable"
    ]


def test_a_trained_model_that_says_unanswerable_does_not_veto_a_confident_library_answer(
    library, home, settings
):
    """Issue 28: the learned model declined questions the library had bound the right SQL for.
    With the model made to decline everything (its threshold above any probability), a question
    a verified example answers is still answered from the library, the model's verdict kept on
    the run; a question that trips a decisive rule is still declined."""
    from askdb.models import Run
    from askdb.services.examples import example_upsert
    from askdb.services.runs import question_submit_sync
    from tests.factories import make_user

    settings.LLM_MODEL = ""
    settings.ASKDB_LIBRARY_REVIEW_SHARE = 0.0
    reviewer, asker = make_user("veto-rev", "reviewer"), make_user("veto-asker", "researcher")
    Example.objects.filter(
        source=library, question__startswith="what is the gender"
    ).delete()  # SQL that cannot run
    example_upsert(source=library, question="what is the gender of patient 10014729?",
                   sql="SELECT gender FROM mimiciv_hosp.patients WHERE subject_id = 10014729", approved_by=reviewer)  # fmt: skip
    answerability_train(source=library, config=TrainConfig(folds=2))
    scorer = scorer_module.get_scorer(library)
    assert scorer is not None
    # The model now declines every question, even an attribute the catalog holds in so many words or a
    # named value (their margins lower the bar to a share of the threshold).
    scorer.model.threshold = 1.01 / min(GROUND_MARGIN, VALUE_MARGIN)
    scorer.model._column_words = {}  # and no column's words hold an attribute,
    scorer.model._library_attributes = set()  # nor an approved question's, so nothing overrides it

    def ask(text: str) -> Run:
        return Run.objects.get(pk=question_submit_sync(user=asker, text=text, source=library).pk)

    held = held_patients(library, 1)[0]
    run = ask(f"what is the gender of patient {held}?")
    assert run.answerability["answerable"] is False and run.answerability["version"]  # the model said no
    assert (run.status, run.answered_by) == ("succeeded", "library"), (run.message, run.library_match)
    assert run.stages.get(name="match").detail["gate_overruled"] is True

    future = ask(f"what will the gender of patient {held} be?")
    assert (future.status, future.outcome, future.answered_by) == ("declined", "future_data", "")
    # A patient the data does not hold: the library would bind the id and answer with no rows.
    absent = ask("what is the gender of patient 10019003?")
    assert (absent.status, absent.outcome, absent.answered_by) == ("declined", "not_in_schema", "")
    assert absent.gate_reason.startswith("There is no patient 10019003 in this database")


@pytest.mark.django_db(transaction=True)  # the worker thread uses its own connection
def test_an_admin_trains_the_gate_from_the_library_page_through_a_worker(library, home):
    import time

    from django.test import Client

    from askdb.roles import ADMIN, REVIEWER
    from tests.celery_worker import running_worker
    from tests.factories import make_user

    client = Client()
    client.force_login(make_user("rev", REVIEWER))
    assert client.post("/library/answerability/train/", {"source": library.name}).status_code == 403
    client.force_login(make_user("boss", ADMIN))
    page = client.get("/library/").content.decode()
    assert "Train the answerability gate" in page and "rules only (no model trained)" in page
    with running_worker():
        response = client.post("/library/answerability/train/", {"source": library.name})
        assert response.status_code == 302 and "?training=" in response.url
        task_id = response.url.split("?training=")[1]
        page = client.get(response.url).content.decode()  # the page says training is under way
        assert 'id="gate-training"' in page and f'hx-get="/library/answerability/train/{task_id}/"' in page
        assert "disabled" in page.split("Train the answerability gate</button>")[0].rsplit("<button", 1)[1]
        deadline = time.monotonic() + 240
        while True:  # what the page polls, until the fragment stops polling
            fragment = client.get(f"/library/answerability/train/{task_id}/").content.decode()
            if "hx-get" not in fragment:
                break
            assert time.monotonic() < deadline, "training still under way after 240 s"
            time.sleep(0.3)
    version = store.current_version(library.name)
    assert f'model <code id="trained-version">{version}</code> is in use' in fragment and "F1" in fragment
    assert f"model <code>{version}</code>" in client.get("/library/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_training_that_fails_says_why_on_the_library_page(source, home):
    from django.test import Client

    from askdb.roles import ADMIN
    from tests.celery_worker import running_worker, wait_for
    from tests.factories import make_user

    Example.objects.create(
        source=source, question="how many patients?", sql="SELECT 1", tables=[H + "patients"]
    )
    client = Client()
    client.force_login(make_user("boss", ADMIN))

    def ended(task_id: str) -> str | None:  # the fragment once it stops polling
        fragment = client.get(f"/library/answerability/train/{task_id}/").content.decode()
        return None if "hx-get" in fragment else fragment

    with running_worker():
        response = client.post("/library/answerability/train/", {"source": source.name})
        task_id = response.url.split("?training=")[1]
        fragment = wait_for(lambda: ended(task_id), timeout=60)
    assert "Training the answerability gate failed: only 1 labelled questions" in fragment
    assert "The gate keeps its current model." in fragment and store.current_version(source.name) is None


def test_the_demo_trains_the_gate_on_its_seeded_library_and_declines_with_a_reason(source, home):
    """`make demo` seeds the library from our benchmark's train split, then trains the gate once:
    a newcomer's first unanswerable question is declined with its reason, not with "no LLM"."""
    from pathlib import Path

    from django.conf import settings

    from askdb.management.commands.demo import Command as DemoCommand
    from askdb.models import Run
    from askdb.services.exports import examples_import
    from askdb.services.runs import question_submit_sync
    from tests.factories import make_user

    seed = json.loads((Path(settings.BASE_DIR) / "benchmarks/data/mimiciv/train.json").read_text())
    examples_import(source=source, items=[{"question": i["question"], "sql": i.get("sql") or ""} for i in seed],
                    execute=False, origin="demo")  # fmt: skip
    demo = DemoCommand(stdout=io.StringIO())
    demo._train_gate(0.0)
    assert "answerability gate trained" in demo.stdout.getvalue()
    version = store.current_version(source.name)
    assert version is not None
    demo._train_gate(0.0)  # a second start keeps the trained model
    assert store.current_version(source.name) == version

    asker = make_user("newcomer", "researcher")
    run = Run.objects.get(pk=question_submit_sync(user=asker, text="What will my patients' blood pressure be next year?",
                                                  source=source).pk)  # fmt: skip
    assert run.status == "declined" and run.outcome == "future_data" and "future" in run.gate_reason
    assert run.answerability["version"] == version


def test_the_gate_decides_once_per_question_reusing_the_embedding_and_the_versions_the_run_read(
    source, home, monkeypatch
):
    """The match and the gate stage both ask; the embed stage's vector is passed on (not encoded
    again) and the catalog's and library's versions the run read already key the vocabulary, so
    a question's gate spends no query of its own once the vocabulary is built."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from askdb.adapters import ports as ports_module
    from askdb.adapters.ports import DjangoPorts

    calls = []
    real = ports_module.gate_verdict

    def counted(source, question, **kwargs):
        calls.append((question, kwargs))
        return real(source, question, **kwargs)

    monkeypatch.setattr(ports_module, "gate_verdict", counted)
    ports = DjangoPorts(source, chat=None, timeout_s=10, row_cap=10)
    question = "What is the wedding date of patient 10002428?"
    vector = ports.embed(question)
    first, again = ports.answerability(question, []), ports.answerability(question, [])
    assert first is again and len(calls) == 1 and not first.answerable
    assert calls[0][1]["vector"] == vector
    assert calls[0][1]["version"] == (ports.snapshot.stamp, ports._library_version())
    other = "What is the eye colour of patient 10002428?"
    ports.embed(other)
    with CaptureQueriesContext(connection) as queries:
        verdict = ports.answerability(other, [])
    assert not verdict.answerable and len(queries) == 0, [q["sql"] for q in queries]
    # a question longer than the gate model's 128 word pieces could be is encoded cut, as trained
    long = "What is the eye colour of patient 10002428 " + "and then some more words " * 10 + "?"
    ports.embed(long)
    ports.answerability(long, [])
    assert calls[-1][1]["vector"] is None
