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
from askdb.answerability.model import TrainConfig, TrainingError
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
                source=source, question=template.format(p=patient + n), sql="SELECT 1", kind="answerable",
                tables=_qualified(tables), origin="import",
            )  # fmt: skip
    for text in UNANSWERABLE:
        Example.objects.create(source=source, question=text, sql="", kind="unanswerable", origin="import")
    return source


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
        answerability_train(source=library, config=TrainConfig(folds=0))


@pytest.mark.slow
def test_train_store_score_and_switch_versions(library, home, tmp_path):
    out = io.StringIO()
    call_command(
        "train_answerability", "--source", library.name, "--folds", "0", "--epochs", "2", "--threads", "1",
        stdout=out,
    )  # fmt: skip
    text = out.getvalue()
    assert "held-out metrics" in text and "F1" in text and "AUC" in text

    versions = store.list_versions(library.name)
    assert len(versions) == 1 and versions[0]["current"]
    manifest = versions[0]
    version = manifest["version"]
    assert (home / "models" / "answerability" / library.name / version / "encoder").is_dir()
    assert manifest["source"] == library.name and manifest["embedding_base_model"] == "all-MiniLM-L6-v2"
    assert manifest["library"] == library_snapshot(library)
    assert manifest["train_size"] + manifest["held_out_size"] == 2 * len(ANSWERABLE) + len(UNANSWERABLE)
    assert {"precision", "recall", "f1"} <= set(manifest["metrics"]["unanswerable"])
    assert manifest["metrics"]["auc"] is not None

    scorer = scorer_module.get_scorer(library)
    assert scorer is not None and scorer.version == version
    assert scorer_module.get_scorer(library.name) is scorer  # cached per process

    lab = scorer.score("what was the most recent creatinine lab result for patient 10002428?")
    assert lab.per_table[0][0] in {H + "labevents", H + "d_labitems"}
    assert len(lab.per_table) == len(manifest["tables"]) and all(0 <= r <= 1 for _, r in lab.per_table)
    assert [r for _, r in lab.per_table] == sorted((r for _, r in lab.per_table), reverse=True)
    weather = scorer.score("what is the weather in Paris", linked_values=[])
    assert not weather.answerable and weather.probability < lab.probability
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

    labelled = tmp_path / "eval.json"
    labelled.write_text(json.dumps([
        {"id": "e1", "question": "what was the glucose lab value of patient 10001?", "sql": "SELECT 1",
         "category": "answerable"},
        {"id": "e2", "question": "which antibiotics were prescribed to patient 10002?", "sql": "SELECT 1",
         "category": "answerable"},
        {"id": "e3", "question": "what is the weather in Paris today?", "sql": "", "category": "non_medical"},
    ]))  # fmt: skip
    report = io.StringIO()
    call_command("train_answerability", "--source", library.name, "--evaluate", str(labelled), stdout=report)
    assert "unanswerable as positive" in report.getvalue() and "non_medical: 0/1 called answerable" in (
        report.getvalue()
    )

    # The gate uses the model before any LLM call, and the run page explains it with bars.
    from askdb.models import Run
    from askdb.services.runs import question_submit_sync
    from tests.factories import make_user

    asker = make_user("gate-asker", "researcher")
    run = Run.objects.get(pk=question_submit_sync(user=asker, text="what is the home phone number and street address of patient 10002428?",
                                                  source=library).pk)  # fmt: skip
    assert run.status == "declined" and run.outcome == "no_data" and not run.llm_calls.exists()
    assert run.answerability["answerable"] is False and run.answerability["per_table"]
    gate = run.stages.get(name="gate")
    assert gate.status == "stopped" and gate.detail["answerability"]["answerable"] is False
    from django.test import Client

    client = Client()
    client.force_login(asker)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Answerability:" in page and "no table here is what the question needs" in page
