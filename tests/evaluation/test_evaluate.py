"""The evaluate command end to end on the test source, with the scripted LLM: real Questions and
Runs, gold and predicted SQL executed, metrics, results.json, the HTML report, resume, pages."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command

from askdb.models import Question, Run
from evaluation.models import Evaluation, EvaluationItem
from tests.factories import make_user
from tests.support.scripted_llm import Reply

GATE = "You screen questions"
WRITE = "You write one"
SUMMARY = "You explain the result"

PATIENTS_Q = "How many patients are there?"
ADMISSIONS_Q = "How many hospital admissions are there?"
ADDRESS_Q = "What is the home address of patient 10000032?"
BENCHMARK = [
    {"id": "q1", "question": PATIENTS_Q, "sql": "SELECT count(*) FROM mimiciv_hosp.patients", "category": "count",
     "tables": ["mimiciv_hosp.patients"], "paraphrase_of": None},
    {"id": "q2", "question": ADMISSIONS_Q, "sql": "SELECT count(*) FROM mimiciv_hosp.admissions",
     "category": "count", "tables": ["mimiciv_hosp.admissions"], "paraphrase_of": None},
    {"id": "q3", "question": ADDRESS_Q, "sql": "", "category": "unanswerable", "tables": [], "paraphrase_of": None},
]  # fmt: skip


def _asks(system_start: str, question: str):
    """A rule for the prompt whose system message starts a stage and whose user turn is `question`
    (the question text alone; other prompts may quote it among examples)."""

    def match(body) -> bool:
        messages = body.get("messages") or []
        return (
            bool(messages)
            and messages[0].get("content", "").startswith(system_start)
            and question in messages[-1].get("content", "")
        )

    return match


def script(llm) -> None:
    """q1 answered correctly, q2 answered with the wrong table, q3 declined by the gate."""
    llm.when(
        _asks(GATE, ADDRESS_Q), Reply('{"category": "private_data", "reason": "addresses are not kept"}')
    )
    llm.when(lambda body: body["messages"][0]["content"].startswith(GATE),
             Reply('{"category": "answerable", "reason": "the data holds this"}'))  # fmt: skip
    llm.when(_asks(WRITE, PATIENTS_Q), Reply("```sql\nSELECT count(*) AS n FROM mimiciv_hosp.patients\n```"))
    llm.when(
        _asks(WRITE, ADMISSIONS_Q),
        Reply("```sql\nSELECT count(*) FROM mimiciv_hosp.patients WHERE gender = 'F'\n```"),
    )
    llm.when(lambda body: body["messages"][0]["content"].startswith(SUMMARY), Reply("A sentence."))


@pytest.fixture
def benchmark_file(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(json.dumps(BENCHMARK), encoding="utf-8")
    return path


def evaluate(*args: str) -> str:
    out = StringIO()
    call_command("evaluate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.django_db(transaction=True)  # the worker threads use their own connections
def test_evaluate_end_to_end_in_parallel(source, scripted_llm, settings, benchmark_file, tmp_path):
    settings.ASKDB_SIMILARITY_FLOOR = 0.0  # the address question must reach the gate
    script(scripted_llm)
    out_dir = tmp_path / "out"
    printed = evaluate("--source", source.name, "--questions", str(benchmark_file), "--out", str(out_dir),
                       "--workers", "2")  # fmt: skip

    evaluation = Evaluation.objects.get()
    assert evaluation.status == Evaluation.Status.FINISHED and evaluation.finished_at
    items = {i.item_id: i for i in EvaluationItem.objects.filter(evaluation=evaluation)}
    q1, q2, q3 = items["q1"], items["q2"], items["q3"]
    assert (q1.verdict, q1.abstained, q1.correct, q1.outcome) == ("correct", False, True, "answered")
    assert (q2.verdict, q2.abstained, q2.correct) == ("wrong", False, False)
    assert "rows" in q2.why or "values" in q2.why
    assert (q3.verdict, q3.abstained, q3.outcome) == ("correct_abstention", True, "private_data")
    assert q2.predicted_sql.endswith("gender = 'F'") and q2.category == "count"
    assert q1.metadata == {"tables": ["mimiciv_hosp.patients"], "paraphrase_of": None}

    # Real askdb runs, asked as the inactive evaluator through the evaluation channel.
    runs = Run.objects.filter(pk__in=[i.run_id for i in items.values()])
    assert runs.count() == 3
    assert set(
        Question.objects.filter(runs__in=runs).values_list("channel", "user__username", "user__is_active")
    ) == {("evaluation", "askdb-evaluator", False)}
    assert q1.scores["stages_ms"]["generate"] >= 0 and q1.latency_ms > 0 and q1.tokens_prompt > 0

    m = evaluation.metrics
    assert m["execution_accuracy"]["correct"] == 1 and m["execution_accuracy"]["total"] == 2
    assert m["rs"]["0"] == pytest.approx(100 * 2 / 3)  # +1, 0, +1
    assert m["rs"]["10"] == pytest.approx(100 * (1 - 10 + 1) / 3)
    assert m["rs"]["N"] == pytest.approx(100 * (1 - 3 + 1) / 3)
    assert m["answerability"]["precision"] == 1.0 and m["answerability"]["recall"] == 1.0
    assert m["answerability"]["auc"] == 1.0
    assert set(m["latency_ms"]) >= {"embed", "retrieve", "gate", "generate", "execute", "total"}
    assert m["usage"]["tokens_prompt"] > 0
    assert evaluation.settings["llm_model"] == "scripted" and evaluation.settings["library_size"] == 0
    assert evaluation.version.startswith(evaluation.settings["prompt_version"] + "+")

    results = json.loads((out_dir / "results.json").read_text())
    assert results["evaluation"]["id"] == evaluation.pk
    assert [r["verdict"] for r in results["items"]] == ["correct", "wrong", "correct_abstention"]
    assert results["metrics"]["rs"] == m["rs"]

    report = (out_dir / "report.html").read_text()
    assert report == evaluation.report_html
    assert report.count("<svg") >= 4 and ADMISSIONS_Q in report and "gender = &#x27;F&#x27;" in report
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", report)  # self-contained: nothing external
    assert "RS(10)" in printed and str(out_dir / "report.html") in printed


@pytest.mark.django_db
def test_resume_skips_items_already_done(source, scripted_llm, settings, benchmark_file, tmp_path):
    settings.ASKDB_SIMILARITY_FLOOR = 0.0
    script(scripted_llm)
    out_dir = tmp_path / "out"
    evaluate("--source", source.name, "--questions", str(benchmark_file), "--out", str(out_dir),
             "--workers", "1", "--limit", "2")  # fmt: skip
    evaluation = Evaluation.objects.get()
    first_runs = dict(evaluation.items.values_list("item_id", "run_id"))
    assert evaluation.items.count() == 2 and all(first_runs.values())

    # Interrupted after q1: q2 was never asked.
    Run.objects.filter(pk=first_runs["q2"]).delete()
    evaluation.items.filter(item_id="q2").update(done=False, verdict="")
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.INTERRUPTED)
    calls_before = len(scripted_llm.chat_requests())

    evaluate(
        "--out", str(out_dir), "--questions", str(benchmark_file), "--workers", "1"
    )  # same --out: resumes
    evaluation.refresh_from_db()
    assert Evaluation.objects.count() == 1 and evaluation.status == Evaluation.Status.FINISHED
    runs = dict(evaluation.items.values_list("item_id", "run_id"))
    assert runs["q1"] == first_runs["q1"] and runs["q2"] not in (None, first_runs["q2"])
    new_calls = scripted_llm.chat_requests()[calls_before:]
    assert new_calls and all(ADMISSIONS_Q in json.dumps(c) for c in new_calls)  # only q2 went to the LLM
    assert evaluation.items.get(item_id="q2").verdict == "wrong"

    calls_before = len(scripted_llm.chat_requests())
    evaluate("--resume", str(evaluation.pk), "--workers", "1")  # everything done: only re-reports
    assert len(scripted_llm.chat_requests()) == calls_before
    assert json.loads((out_dir / "results.json").read_text())["metrics"]["counts"]["questions"] == 2


@pytest.mark.django_db
def test_offline_evaluates_without_an_llm(source, scripted_llm, benchmark_file, tmp_path, settings):
    evaluate("--source", source.name, "--questions", str(benchmark_file), "--out", str(tmp_path / "o"),
             "--workers", "1", "--offline")  # fmt: skip
    evaluation = Evaluation.objects.get()
    assert scripted_llm.chat_requests() == []
    assert evaluation.settings["llm_model"] == "none" and evaluation.settings["offline"] is True
    assert set(evaluation.items.values_list("abstained", flat=True)) == {True}
    assert evaluation.metrics["library"]["coverage"] == 0.0
    assert settings.LLM_MODEL == "scripted"  # the override ended with the evaluation


@pytest.mark.django_db
def test_gold_sql_that_fails_is_excluded_not_counted_against_the_model(
    source, scripted_llm, settings, tmp_path
):
    settings.ASKDB_SIMILARITY_FLOOR = 0.0
    script(scripted_llm)
    path = tmp_path / "broken.json"
    path.write_text(
        json.dumps([{"id": "b", "question": PATIENTS_Q, "sql": "SELECT nope FROM mimiciv_hosp.patients"}])
    )
    evaluate(
        "--source", source.name, "--questions", str(path), "--out", str(tmp_path / "o"), "--workers", "1"
    )
    item = EvaluationItem.objects.get()
    assert item.verdict == "gold_error" and "nope" in item.gold_error and item.correct is None
    m = Evaluation.objects.get().metrics
    assert m["execution_accuracy"]["total"] == 0 and m["execution_accuracy"]["gold_errors"] == 1
    assert m["rs"]["10"] is None


def _finished_evaluation(source) -> Evaluation:
    from evaluation import services
    from infra.formats import BenchmarkItem

    evaluation = services.evaluation_start(
        source=source, items=[BenchmarkItem("x1", "How many?", "SELECT 1")], questions_file="/tmp/q.json",
        name="baseline",
    )  # fmt: skip
    evaluation.items.update(done=True, abstained=False, correct=True, verdict="correct", why="")
    return services.evaluation_finish(evaluation=evaluation)


@pytest.mark.django_db
def test_pages_for_admins_only(client, source):
    evaluation = _finished_evaluation(source)
    client.force_login(make_user("boss", "admin"))
    page = client.get("/evaluations/")
    assert (
        page.status_code == 200
        and b"baseline" in page.content
        and evaluation.version.encode() in page.content
    )
    assert b"100.0%" in page.content  # its accuracy, side by side with the others
    detail = client.get(f"/evaluations/{evaluation.pk}/")
    assert detail.status_code == 200 and b"prompt_version" in detail.content
    report = client.get(f"/evaluations/{evaluation.pk}/report.html")
    assert report.status_code == 200 and report.content.decode() == evaluation.report_html
    assert "default-src 'none'" in report["Content-Security-Policy"]
    Evaluation.objects.filter(pk=evaluation.pk).update(report_html="")  # regenerated when not stored
    assert b"<svg" in client.get(f"/evaluations/{evaluation.pk}/report.html").content
    assert client.get("/evaluations/999999/").status_code == 404

    client.force_login(make_user("res", "researcher"))
    for url in (
        "/evaluations/",
        f"/evaluations/{evaluation.pk}/",
        f"/evaluations/{evaluation.pk}/report.html",
    ):
        assert client.get(url).status_code == 403


@pytest.mark.django_db
def test_a_run_left_running_by_a_killed_evaluation_is_failed_and_asked_again(source, scripted_llm, settings):
    from evaluation import services
    from infra.formats import BenchmarkItem

    settings.ASKDB_SIMILARITY_FLOOR = 0.0
    script(scripted_llm)
    evaluation = services.evaluation_start(
        source=source, items=[BenchmarkItem("q1", PATIENTS_Q, "SELECT count(*) FROM mimiciv_hosp.patients")],
        questions_file="/tmp/q.json",
    )  # fmt: skip
    question = Question.objects.create(
        user=services.evaluator_user(), source=source, text=PATIENTS_Q, channel="evaluation"
    )
    stale = Run.objects.create(question=question, status=Run.Status.RUNNING)
    evaluation.items.update(run=stale)

    services.evaluation_run(evaluation=evaluation, workers=1)
    item = evaluation.items.get()
    stale.refresh_from_db()
    assert stale.status == Run.Status.FAILED and stale.outcome == "worker_lost"
    assert item.run_id != stale.pk and item.verdict == "correct"
