"""Pipeline overhead and throughput: `python benchmarks/pipeline.py [--questions N] [--latencies 0,0.5]
[--concurrency 1,10,50] [--pools threads,prefork] [--torch-threads N] [--home DIR]`.

Sets up its own embedded askdb (PostgreSQL + Redis under --home, default `.askdb/bench`, never
the demo's), with synthetic MIMIC-IV-shaped data, the bundled docs, embeddings and the value
index, and answers every LLM call from the scripted OpenAI-compatible server
(`tests/support/scripted_llm.py`) run as a separate process with a fixed latency per call.

Part 1 runs questions in this process (`question_submit_sync`) one after another and reports
p50/p95 of each stage and of the non-LLM overhead per question: the sum of the stage durations
minus the LLM call durations minus the execute stage (the SQL itself). Target: p50 <= 50 ms.
60 questions per latency by default (the 20 below, three times, in order), after three warm-up
questions, each with the embedder's cache emptied first: the same work in every run and latency.

Part 2 starts a real Celery worker and submits 1, 10 and 50 questions at once through
`question_submit` (broker → worker → pipeline), and reports wall time, throughput, end-to-end
latency (finished_at - created_at) and the runs that did not succeed. Target: no errors at 50.
The largest batch to the default worker is submitted --batch-rounds times (default 3), one after
another, and its middle round by wall time is the one reported (every round's wall beside it), as
part 1's rows take their middle round: one batch swung ±0.3 s around its target on a shared machine.

Everything it started (LLM server, worker, embedded services) is stopped at the end, also on
Ctrl-C. The tables are printed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import cycle, islice
from pathlib import Path
from typing import Any

import targets
from _django import ROOT, percentile, table

DEFAULT_HOME = ROOT / ".askdb" / "bench"
OVERHEAD_TARGET_MS = 50.0
LOAD_AT_START = "-"
LLM_MODEL = "scripted-llm"

# Settings that would point askdb at external services: the benchmark always uses its own
# embedded ones, and synthetic data (MIMIC_DIR would load the real release instead).
EXTERNAL_ENV = (
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "CELERY_RESULT_BACKEND",
    "CLINICAL_DATABASE_URL",
    "CLINICAL_ADMIN_DATABASE_URL",
    "CLINICAL_SOURCE_NAME",
    "MIMIC_DIR",
    "EMBEDDING_PROVIDER",
)

_PATIENTS = "SELECT count(*) AS patients FROM mimiciv_hosp.patients"
_BY_ADMISSION_TYPE = (
    "SELECT a.admission_type, count(*) AS admissions FROM mimiciv_hosp.admissions a "
    "GROUP BY a.admission_type ORDER BY admissions DESC"
)
_LAB_MEAN = (
    "SELECT d.label, avg(l.valuenum) AS mean_value, count(*) AS measurements "
    "FROM mimiciv_hosp.labevents l JOIN mimiciv_hosp.d_labitems d ON d.itemid = l.itemid "
    "WHERE d.label ILIKE '%{label}%' GROUP BY d.label ORDER BY measurements DESC"
)
_TOP_LABS = (
    "SELECT d.label, count(*) AS measurements FROM mimiciv_hosp.labevents l "
    "JOIN mimiciv_hosp.d_labitems d ON d.itemid = l.itemid GROUP BY d.label ORDER BY measurements DESC LIMIT 10"
)

# (question, the SQL the scripted LLM writes for it). Each SQL is valid over the synthetic data.
QUESTIONS: list[tuple[str, str]] = [
    ("How many patients are in the database?", _PATIENTS),
    ("How many female patients are there?", f"{_PATIENTS} WHERE gender = 'F'"),
    (
        "What is the average anchor age of patients by gender?",
        "SELECT gender, avg(anchor_age) AS mean_age FROM mimiciv_hosp.patients GROUP BY gender",
    ),
    ("How many admissions are there by admission type?", _BY_ADMISSION_TYPE),
    ("What are the most common admission types?", _BY_ADMISSION_TYPE),
    ("What is the average creatinine value?", _LAB_MEAN.format(label="creatinine")),
    ("What is the mean hemoglobin lab result?", _LAB_MEAN.format(label="hemoglobin")),
    ("Which lab tests are measured most often?", _TOP_LABS),
    (
        "How many lab events are there per lab category?",
        "SELECT d.category, count(*) AS measurements FROM mimiciv_hosp.labevents l "
        "JOIN mimiciv_hosp.d_labitems d ON d.itemid = l.itemid GROUP BY d.category ORDER BY measurements DESC",
    ),
    (
        "How many patients died in the hospital?",
        "SELECT count(DISTINCT subject_id) AS deaths FROM mimiciv_hosp.admissions WHERE hospital_expire_flag = 1",
    ),
    (
        "What is the average length of stay in the ICU?",
        "SELECT avg(los) AS mean_los_days FROM mimiciv_icu.icustays",
    ),
    (
        "How many ICU stays were there per first care unit?",
        "SELECT first_careunit, count(*) AS stays FROM mimiciv_icu.icustays GROUP BY first_careunit "
        "ORDER BY stays DESC",
    ),
    (
        "What are the ten most common diagnoses?",
        "SELECT d.long_title, count(*) AS diagnoses FROM mimiciv_hosp.diagnoses_icd i "
        "JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = i.icd_code AND d.icd_version = i.icd_version "
        "GROUP BY d.long_title ORDER BY diagnoses DESC LIMIT 10",
    ),
    (
        "Which drugs are prescribed most often?",
        "SELECT drug, count(*) AS prescriptions FROM mimiciv_hosp.prescriptions GROUP BY drug "
        "ORDER BY prescriptions DESC LIMIT 10",
    ),
    (
        "How many admissions came in through the emergency room?",
        "SELECT count(*) AS admissions FROM mimiciv_hosp.admissions WHERE admission_location ILIKE '%emergency%'",
    ),
    (
        "What is the average number of admissions per patient?",
        "SELECT avg(n) AS admissions_per_patient FROM "
        "(SELECT subject_id, count(*) AS n FROM mimiciv_hosp.admissions GROUP BY subject_id) t",
    ),
    (
        "How many patients had a glucose measurement above 200?",
        "SELECT count(DISTINCT l.subject_id) AS patients FROM mimiciv_hosp.labevents l "
        "JOIN mimiciv_hosp.d_labitems d ON d.itemid = l.itemid WHERE d.label ILIKE '%glucose%' AND l.valuenum > 200",
    ),
    (
        "How are patients distributed across age groups?",
        "SELECT CASE WHEN anchor_age < 40 THEN 'under 40' WHEN anchor_age < 65 THEN '40-64' ELSE '65+' END "
        "AS age_group, count(*) AS patients FROM mimiciv_hosp.patients GROUP BY 1 ORDER BY 1",
    ),
    (
        "How many procedures were recorded per ICD version?",
        "SELECT icd_version, count(*) AS procedures FROM mimiciv_hosp.procedures_icd GROUP BY icd_version",
    ),
    (
        "What is the average heart rate charted in the ICU?",
        "SELECT avg(c.valuenum) AS mean_heart_rate FROM mimiciv_icu.chartevents c "
        "JOIN mimiciv_icu.d_items d ON d.itemid = c.itemid WHERE d.label ILIKE 'heart rate'",
    ),
]

# Not in QUESTIONS, so the measured questions never follow an identical one (the LLM default answers it).
WARM_UP_QUESTION = "Warm-up: how many patients does the database hold?"
WARM_UP_ROUNDS = 3  # part 1's warm-up questions per latency, not measured
GATE_REPLY = '{"category": "answerable", "reason": "ok"}'
SUMMARY_REPLY = "The query answers the question; see the table for the numbers. Dates are shifted."


def llm_script() -> dict[str, Any]:
    """The scripted LLM's rules: gate and summary by their prompt's wording, SQL by the question.

    The gate and summary prompts also contain the question, so their rules come first; the
    question-text rules then only match the SQL-writing (and repair) prompts.
    """
    rules = [
        {"match": "You screen questions", "reply": GATE_REPLY},
        {"match": "You explain the result", "reply": SUMMARY_REPLY},
    ]
    rules += [{"match": q, "reply": f"```sql\n{sql}\n```"} for q, sql in QUESTIONS]
    return {"rules": rules, "default": f"```sql\n{_PATIENTS}\n```"}


# --------------------------------------------------------------------------- set-up


def bench_env(home: Path) -> dict[str, str]:
    """Point this process (and the children it starts) at the benchmark's own askdb."""
    for name in EXTERNAL_ENV:
        os.environ.pop(name, None)
    os.environ["ASKDB_HOME"] = str(home.resolve())
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.local"
    os.environ["LLM_MODEL"] = LLM_MODEL
    os.environ["LLM_API_KEY"] = "bench"
    os.environ.setdefault("LLM_BASE_URL", "http://127.0.0.1:9/v1")  # replaced once a server runs
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    return dict(os.environ)


def prepare(home: Path = DEFAULT_HOME, *, log: Callable[[str], None] | None = None) -> list[str]:
    """Make `home` a ready askdb: services up, migrated, demo data, catalog and users loaded.

    Returns the embedded services this call started (the caller stops them). Idempotent and
    quick on a second run: each step skips what is already done.
    """
    log = log or _log
    bench_env(home)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from infra import embedded

    started = embedded.ensure_started()
    try:
        import django

        django.setup()
        from django.core.management import call_command

        from askdb.services.users import demo_users_ensure
        from metadata_admin.services import clinical_demo_ensure

        call_command("migrate", interactive=False, verbosity=0)

        class _Out:
            def write(self, text: str) -> None:
                log(text.rstrip())

        t0 = time.monotonic()
        summary = clinical_demo_ensure(stdout=_Out())
        log(f"clinical data ready in {time.monotonic() - t0:.1f} s ({summary})")
        demo_users_ensure()
    except BaseException:
        embedded.release(started)
        raise
    return started


def _log(text: str) -> None:
    print(f"[pipeline bench] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- child processes


@dataclass
class Child:
    """A process this benchmark started, in its own session so it can be stopped as a group."""

    name: str
    proc: subprocess.Popen

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever is left of the group (pool children)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def start_llm(latency: float, script: Path, logfile: Path) -> tuple[Child, str]:
    """The scripted LLM server as its own process; returns it and its base URL."""
    err = open(logfile, "ab")  # noqa: SIM115 - lives as long as the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_llm", "--port", "0", "--latency", str(latency),
         "--model", LLM_MODEL, "--script", str(script)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
    )  # fmt: skip
    child = Child(f"scripted LLM ({latency:g} s)", proc)
    assert proc.stdout is not None
    base_url = proc.stdout.readline().strip()
    if not base_url.startswith("http"):
        child.stop()
        raise RuntimeError(f"the scripted LLM did not start; see {logfile}")
    return child, base_url


def start_worker(pool: str, concurrency: int, env: dict[str, str], logfile: Path) -> Child:
    """A real Celery worker on the benchmark's broker; returns once it answers a ping."""
    from askdb import health

    out = open(logfile, "ab")  # noqa: SIM115 - lives as long as the child
    cmd = [
        sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", "WARNING",
        "--pool", pool, "--concurrency", str(concurrency),
        "--hostname", f"askdb-bench-{os.getpid()}-{pool}@%h",
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    # Celery prefers a configured pool to `--pool prefork`, which it cannot tell from its default.
    env = env | {"ASKDB_WORKER_POOL": pool}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    child = Child(f"celery worker ({pool} x{concurrency})", proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"the Celery worker exited; see {logfile}")
        if health.worker(timeout=0.5).ok:
            return child
        time.sleep(0.3)
    child.stop()
    raise RuntimeError(f"the Celery worker did not answer within 120 s; see {logfile}")


# --------------------------------------------------------------------------- measuring


@dataclass
class RunTimes:
    """What one run cost, from its StageEvents and LlmCalls (milliseconds)."""

    status: str
    outcome: str
    stages: dict[str, float]
    llm_by_stage: dict[str, float]
    llm_total: float
    e2e_s: float | None = None
    wait_s: float | None = None
    message: str = ""

    @property
    def overhead(self) -> float:
        """Every stage's time except the LLM calls and the SQL execution."""
        return sum(self.stages.values()) - self.llm_total - self.stages.get("execute", 0.0)


# The pipeline stage whose duration includes an LLM call of this purpose.
PURPOSE_STAGE = {"gate": "gate", "generate": "generate", "repair": "validate", "summarize": "summarize"}


def run_times(run) -> RunTimes:
    from askdb.models import LlmCall, StageEvent

    stages: dict[str, float] = {}
    for name, ms in StageEvent.objects.filter(run=run).values_list("name", "duration_ms"):
        stages[name] = stages.get(name, 0.0) + (ms or 0.0)
    llm_by_stage: dict[str, float] = {}
    for purpose, ms in LlmCall.objects.filter(run=run).values_list("purpose", "duration_ms"):
        stage = PURPOSE_STAGE.get(purpose, purpose)
        llm_by_stage[stage] = llm_by_stage.get(stage, 0.0) + (ms or 0.0)
    e2e = wait = None
    if run.finished_at and run.created_at:
        e2e = (run.finished_at - run.created_at).total_seconds()
    if run.started_at and run.created_at:
        wait = (run.started_at - run.created_at).total_seconds()
    return RunTimes(
        status=run.status,
        outcome=run.outcome,
        stages=stages,
        llm_by_stage=llm_by_stage,
        llm_total=sum(llm_by_stage.values()),
        e2e_s=e2e,
        wait_s=wait,
        message=run.message,
    )


@dataclass
class SyncResult:
    latency: float
    runs: list[RunTimes] = field(default_factory=list)
    wall_overhead: list[float] = field(default_factory=list)  # incl. run bookkeeping outside stages
    # The round of each run and of each wall_overhead value: round i is the i-th pass over QUESTIONS.
    run_rounds: list[int] = field(default_factory=list)
    wall_rounds: list[int] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return max(self.run_rounds, default=-1) + 1

    def series(self, round_: int | None = None) -> dict[str, list[float]]:
        """Each row's values, over every run or over one round's (`round_`)."""
        ok = [
            r for r, k in zip(self.runs, self.run_rounds, strict=True)
            if r.status == "succeeded" and round_ in (None, k)
        ]  # fmt: skip
        out: dict[str, list[float]] = {}
        for name in ("embed", "retrieve", "prompt", "validate", "execute"):
            out[name] = [r.stages.get(name, 0.0) for r in ok]
        for name in ("gate", "generate", "summarize"):
            out[f"{name} (non-LLM part)"] = [
                r.stages.get(name, 0.0) - r.llm_by_stage.get(name, 0.0) for r in ok
            ]
        out["LLM calls (3 per question)"] = [r.llm_total for r in ok]
        out["non-LLM overhead (stages)"] = [r.overhead for r in ok]
        out["non-LLM overhead (wall, incl. run set-up/finish)"] = [
            v for v, k in zip(self.wall_overhead, self.wall_rounds, strict=True) if round_ in (None, k)
        ]
        return out


def forget_vectors() -> None:
    """Empty the embedder's in-process cache of question vectors, so every measured question is new
    to the process, as a researcher's question is: otherwise a question asked a second time (the
    same 20 cycle, and every later latency asks them again) skips its embedding, and the rows
    measured whatever share of questions happened to be repeats."""
    from infra.providers.embeddings import get_embedder

    cache = getattr(get_embedder(), "_cache", None)  # the local embedder's; a remote one keeps none
    if cache is not None:
        cache.clear()


def part_sync(user, questions: list[tuple[str, str]], latency: float) -> SyncResult:
    """Questions one after another in this process, as `manage.py ask` runs them: after
    WARM_UP_ROUNDS warm-up questions (the model, the library and catalog caches, connection pools),
    each measured question with the embedder's cache emptied (forget_vectors), so every latency,
    and every run of the benchmark, measures the same thing."""
    from askdb.services.runs import question_submit_sync

    result = SyncResult(latency)
    for i in range(WARM_UP_ROUNDS):
        question_submit_sync(user=user, text=f"{WARM_UP_QUESTION} ({i + 1})")
    for i, (text, _) in enumerate(questions):
        forget_vectors()
        t0 = time.perf_counter()
        run = question_submit_sync(user=user, text=text)
        wall = (time.perf_counter() - t0) * 1000
        times = run_times(run)
        result.runs.append(times)
        result.run_rounds.append(i // len(QUESTIONS))
        if times.status == "succeeded":
            result.wall_overhead.append(wall - times.llm_total - times.stages.get("execute", 0.0))
            result.wall_rounds.append(i // len(QUESTIONS))
    return result


@dataclass
class Batch:
    """Questions submitted at once through Celery, and what became of them."""

    wall_s: float = 0.0
    runs: list[RunTimes] = field(default_factory=list)  # the runs that reached a terminal status
    problems: Counter = field(default_factory=Counter)  # failures that left no terminal run
    samples: list[str] = field(default_factory=list)  # the first error messages, verbatim

    @property
    def errors(self) -> int:
        return sum(1 for r in self.runs if r.status != "succeeded") + sum(self.problems.values())

    def error_detail(self) -> str:
        kinds = Counter(f"run {r.status} ({r.outcome})" for r in self.runs if r.status != "succeeded")
        kinds.update(self.problems)
        return ", ".join(f"{k} x{v}" for k, v in kinds.most_common())

    def note(self, kind: str, message: str) -> None:
        self.problems[kind] += 1
        if len(self.samples) < 3:
            self.samples.append(" ".join(message.split())[:400])


@dataclass
class BatchResult:
    latency: float
    pool: str
    worker_concurrency: int
    concurrent: int
    batch: Batch  # the middle round's (by wall time): the row shown and decided on
    rounds: list[Batch] = field(default_factory=list)  # every round, in order

    @classmethod
    def of_rounds(cls, latency: float, pool: str, slots: int, concurrent: int, rounds: list[Batch]):
        """A batch size measured in several rounds: the middle round by wall time stands for it
        (as the in-process rows take their middle round), the others' walls shown beside it."""
        middle = sorted(rounds, key=lambda b: b.wall_s)[len(rounds) // 2]
        return cls(latency, pool, slots, concurrent, middle, rounds)

    @property
    def walls(self) -> list[float]:
        return [b.wall_s for b in self.rounds]

    @property
    def errors(self) -> int:
        """Over every round: one round's errors are not hidden by a clean middle round."""
        return sum(b.errors for b in self.rounds) if self.rounds else self.batch.errors


def part_batch(user, questions: list[tuple[str, str]], timeout_s: float) -> Batch:
    """Submit every question at once through Celery; wait until every run is terminal, its task
    failed (the run then stays queued or running for ever), or `timeout_s` passed."""
    from celery.result import AsyncResult
    from django.db import DatabaseError

    from askdb.models import Run
    from askdb.services.runs import question_submit

    batch = Batch()
    ids = []
    for text, _ in questions:
        try:
            ids.append(question_submit(user=user, text=text).pk)
        except DatabaseError as exc:  # the submission itself failed: the user saw an error page
            batch.note(f"submit failed ({type(exc).__name__})", str(exc))
    deadline = time.monotonic() + timeout_s
    pending = set(ids)
    last_task_check = 0.0
    while pending and time.monotonic() < deadline:
        done = Run.objects.filter(pk__in=pending, status__in=Run.TERMINAL).values_list("pk", flat=True)
        pending -= set(done)
        if pending and time.monotonic() - last_task_check > 1.0:
            last_task_check = time.monotonic()
            for pk, task_id in Run.objects.filter(pk__in=pending).values_list("pk", "task_id"):
                task = AsyncResult(task_id) if task_id else None
                if task is not None and task.state == "FAILURE":
                    pending.discard(pk)
                    status = Run.objects.filter(pk=pk).values_list("status", flat=True).first()
                    batch.note(
                        f"task raised, run left {status} ({type(task.result).__name__})", str(task.result)
                    )
        if pending:
            time.sleep(0.1)
    for status in Run.objects.filter(pk__in=pending).values_list("status", flat=True):
        batch.note(f"still {status} after {timeout_s:g} s", "")
    runs = list(Run.objects.filter(pk__in=ids, status__in=Run.TERMINAL))
    if runs:
        batch.wall_s = (max(r.finished_at for r in runs) - min(r.created_at for r in runs)).total_seconds()
    batch.runs = [run_times(r) for r in runs]
    return batch


def warm_worker(user, slots: int, timeout_s: float = 180) -> None:
    """A question per worker slot first, a moment apart: loads the embedding model in every pool
    process (the threads pool loads it on first use) and opens the database connections."""
    from askdb.models import Run
    from askdb.services.runs import question_submit

    ids = []
    for _ in range(slots):
        with contextlib.suppress(Exception):  # a failed warm-up question is no measurement
            ids.append(question_submit(user=user, text=WARM_UP_QUESTION).pk)
        time.sleep(0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if Run.objects.filter(pk__in=ids, status=Run.Status.SUCCEEDED).count() >= len(ids) // 2 + 1:
            time.sleep(1.0)  # let the slowest slot finish loading
            return
        time.sleep(0.2)
    raise RuntimeError("the warm-up questions did not succeed through the worker; see its log")


# --------------------------------------------------------------------------- report


def machine_facts(pools: list[tuple[str, int]]) -> list[list[Any]]:
    from django.conf import settings

    from infra.providers.embeddings import get_embedder

    embedder = get_embedder()
    try:
        import torch

        torch_threads = str(torch.get_num_threads())
    except ImportError:
        torch_threads = "-"
    return [
        ["cores", os.cpu_count()],
        ["python", f"{platform.python_version()} ({platform.machine()}, {platform.system()})"],
        ["embedding", f"{settings.EMBEDDING_PROVIDER} {embedder.model} ({'local, CPU' if settings.EMBEDDING_PROVIDER == 'local' else 'remote'})"],
        ["torch threads", torch_threads],
        ["load average at start", LOAD_AT_START],
        ["Celery worker(s)", ", ".join(f"--pool {p} --concurrency {c}" for p, c in pools)],
        ["LLM", "scripted OpenAI-compatible server (separate process), 3 calls per question"],
        ["state folder", str(settings.ASKDB_HOME)],
    ]  # fmt: skip


BATCH_HEADERS = [
    "LLM latency s",
    "worker",
    "concurrent",
    "wall s",
    "answered/s",
    "e2e p50 s",
    "e2e p95 s",
    "queue wait p50 s",
    "overhead p50 ms",
    "errors",
]


def report(sync: list[SyncResult], batches: list[BatchResult], facts: list[list[Any]]) -> str:
    out = ["## Machine", "", table(["fact", "value"], facts), ""]
    if sync:
        out += _report_sync(sync)
    if batches:
        out += _report_batches(batches)
    return "\n".join(out)


def _report_sync(sync: list[SyncResult]) -> list[str]:
    """Part 1: per-stage latency percentiles in process, and the overhead target's verdict."""
    n = len(sync[0].runs)
    out = [
        f"## Part 1: in-process, sequential ({n} questions per latency, the same {min(n, len(QUESTIONS))} "
        f"in the same order every run, each embedded anew, after {WARM_UP_ROUNDS} warm-up questions; "
        "milliseconds)",
        "",
    ]
    headers = ["stage"]
    for s in sync:
        headers += [f"p50 @{s.latency:g}s", f"p95 @{s.latency:g}s"]
    rows = []
    for name in list(sync[0].series()):
        row: list[Any] = [name]
        for s in sync:
            values = s.series()[name]
            row += [f"{percentile(values, 50):.1f}", f"{percentile(values, 95):.1f}"]
        rows.append(row)
    out += [table(headers, rows), ""]
    for s in sync:
        p50s = round_p50s([s], "non-LLM overhead (stages)")
        p50 = targets.middle(p50s)
        failed = sum(1 for r in s.runs if r.status != "succeeded")
        verdict = "met" if p50 <= OVERHEAD_TARGET_MS else "NOT met"
        out.append(
            f"- LLM latency {s.latency:g} s: non-LLM overhead p50 {p50:.1f} ms (the middle round's; "
            f"rounds {' / '.join(f'{v:.1f}' for v in p50s)}), target ≤ {OVERHEAD_TARGET_MS:g} ms: {verdict}"
            + (f" ({failed} of {len(s.runs)} runs did not succeed)" if failed else "")
        )
    for name in ("embed", "non-LLM overhead (wall, incl. run set-up/finish)"):
        p50s = round_p50s(sync[:1] if name == "embed" else sync, name)
        out.append(f"- {name} p50 by round: {' / '.join(f'{v:.1f}' for v in p50s)} ms")
    return [*out, ""]


def round_p50s(sync: list[SyncResult], name: str) -> list[float]:
    """The p50 of row `name` in each round (each pass over QUESTIONS), the latencies in `sync`
    pooled within a round: a near-target row is decided by the middle round, not by one noisy
    stretch of the run (the rows' ranges are shown beside them)."""
    rounds = max((s.rounds for s in sync), default=0)
    return [percentile([v for s in sync for v in s.series(k)[name]], 50) for k in range(rounds)]


def _batch_row(res: BatchResult) -> list[Any]:
    b = res.batch
    ok = [r for r in b.runs if r.status == "succeeded"]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    wait = [r.wait_s for r in ok if r.wait_s is not None]
    walls = f" ({' / '.join(f'{w:.2f}' for w in res.walls)})" if len(res.walls) > 1 else ""
    return [
        f"{res.latency:g}",
        f"{res.pool} x{res.worker_concurrency}",
        res.concurrent,
        f"{b.wall_s:.2f}{walls}",
        f"{len(ok) / b.wall_s:.2f}" if b.wall_s else "-",
        f"{percentile(e2e, 50):.2f}",
        f"{percentile(e2e, 95):.2f}",
        f"{percentile(wait, 50):.2f}",
        f"{percentile([r.overhead for r in ok], 50):.1f}",
        res.errors,
    ]


def _report_batches(batches: list[BatchResult]) -> list[str]:
    """Part 2: throughput and latency through Celery, the errors, and the zero-error verdict."""
    out = [
        "## Part 2: through Celery (submitted at once; seconds unless noted; the largest batch is "
        "submitted in rounds, one after another, and its middle round by wall time is shown, every "
        "round's wall in brackets; errors count every round)",
        "",
    ]
    out += [table(BATCH_HEADERS, [_batch_row(res) for res in batches]), ""]
    for res in batches:
        b = next((r for r in res.rounds if r.errors), res.batch)  # a round with errors, if any
        if b.errors:
            out.append(
                f"- errors at {res.concurrent} concurrent ({res.pool}, LLM {res.latency:g} s): {b.error_detail()}"
            )
            first = next((r.message for r in b.runs if r.status != "succeeded" and r.message), "")
            for message in ([first[:300]] if first else []) + b.samples[:1]:
                out.append(f"  e.g. {message}")
    top = [b for b in batches if b.concurrent == max(x.concurrent for x in batches)]
    verdict = "met" if all(b.errors == 0 for b in top) else "NOT met"
    out.append(f"- zero errors at {top[0].concurrent} concurrent: {verdict}")
    return out


def target_values(sync: list[SyncResult], batches: list[BatchResult]) -> dict[str, float]:
    """The numbers targets.py checks: stage p50s of the in-process runs (embed over the first
    latency's, as before; every measured question is embedded anew, see forget_vectors), each the
    middle of the rounds' p50s with their range beside it (KEY_lo, KEY_hi), and the biggest batch
    through the default worker."""
    from django.conf import settings

    out: dict[str, float] = {}
    rows = [(f"overhead_p50@{s.latency:g}", [s], "non-LLM overhead (stages)") for s in sync]
    if sync:
        rows += [
            ("validate_p50", sync, "validate"),
            ("retrieve_p50", sync, "retrieve"),
            ("embed_p50", sync[:1], "embed"),
            ("wall_overhead_p50", sync, "non-LLM overhead (wall, incl. run set-up/finish)"),
        ]
    for key, part, name in rows:
        out.update(targets.spread(key, round_p50s(part, name)))
    default = (settings.CELERY_WORKER_POOL, settings.CELERY_WORKER_CONCURRENCY)
    for res in batches:
        if (res.pool, res.worker_concurrency) == default and res.concurrent == 50 and not res.errors:
            wait = [r.wait_s for r in res.batch.runs if r.wait_s is not None]
            out.update(targets.spread(f"batch50_wall@{res.latency:g}", res.walls or [res.batch.wall_s]))
            out[f"batch50_wait_p50@{res.latency:g}"] = percentile(wait, 50)
    return out


# --------------------------------------------------------------------------- main


def worker_pools(names: str, concurrency: int = 0) -> list[tuple[str, int]]:
    """(pool, slots) to measure: `default` is the worker `make demo` and `celery -A config worker`
    start (CELERY_WORKER_POOL x CELERY_WORKER_CONCURRENCY); `threads` and `prefork` name a pool,
    with the default's slots for threads and one process per core for prefork."""
    from django.conf import settings

    out = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        pool = settings.CELERY_WORKER_POOL if name == "default" else name
        slots = concurrency or (
            settings.CELERY_WORKER_CONCURRENCY
            if name == "default" or pool == settings.CELERY_WORKER_POOL
            else (os.cpu_count() or 1)
        )
        if (pool, slots) not in out:
            out.append((pool, slots))
    return out


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--questions", type=int, default=60,
        help="part 1 questions per latency (default 60: each of the 20 three times, none with its vector cached)",
    )  # fmt: skip
    parser.add_argument("--latencies", type=_floats, default=[0.0, 0.5], help="seconds per LLM call")
    parser.add_argument("--concurrency", type=_ints, default=[1, 10, 50], help="questions submitted at once")
    parser.add_argument(
        "--pools",
        default="default,prefork",
        help="Celery pools to measure, comma-separated: default (what make demo starts), threads, prefork",
    )
    parser.add_argument(
        "--worker-concurrency", type=int, default=0,
        help="worker slots (default: CELERY_WORKER_CONCURRENCY for the default pool, the number of cores for prefork)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-rounds", type=int, default=3,
        help="times the largest batch goes to the default worker; its middle round by wall time is reported (default 3)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for one batch")
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME, help="state folder (default .askdb/bench)")
    parser.add_argument(
        "--torch-threads", type=int, default=0,
        help="OMP_NUM_THREADS for this process and the worker (default: torch's own choice, as askdb runs)",
    )  # fmt: skip
    parser.add_argument("--skip-sync", action="store_true", help="leave out part 1")
    parser.add_argument("--skip-celery", action="store_true", help="leave out part 2")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    global LOAD_AT_START
    LOAD_AT_START = (
        " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min; other work skews timings)"
    )

    if args.torch_threads:  # before anything imports torch; the worker inherits it
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.torch_threads)
    home = args.home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    logs = home / "log"
    logs.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    started = prepare(home)
    pools = worker_pools(args.pools, args.worker_concurrency)
    children: list[Child] = []
    sync_results: list[SyncResult] = []
    batches: list[BatchResult] = []
    try:
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from config.celery import app

        user = get_user_model().objects.get(username="researcher")
        script = home / "bench-llm-script.json"
        script.write_text(json.dumps(llm_script(), indent=1))
        part1 = list(islice(cycle(QUESTIONS), args.questions))
        for latency in args.latencies:
            llm, base_url = start_llm(latency, script, logs / "scripted-llm.log")
            children.append(llm)
            settings.LLM_BASE_URL = base_url  # the in-process runs; the worker gets it by env
            os.environ["LLM_BASE_URL"] = base_url
            _log(f"scripted LLM at {base_url}, {latency:g} s per call")
            if not args.skip_sync:
                _log(f"part 1: {len(part1)} questions in process")
                sync_results.append(part_sync(user, part1, latency))
            if args.skip_celery:
                llm.stop()
                continue
            for pool, slots in pools:
                app.control.purge()  # nothing left over from an earlier, timed-out batch
                worker = start_worker(pool, slots, dict(os.environ), logs / "bench-worker.log")
                children.append(worker)
                _log(f"part 2: {worker.name} up")
                warm_worker(user, slots)
                # The largest batch on the default worker (the row with a target) in rounds; prefork
                # answers 50 at once in ~40 s, so its one batch is shown once.
                targeted = (pool, slots) == (settings.CELERY_WORKER_POOL, settings.CELERY_WORKER_CONCURRENCY)
                for n in args.concurrency:
                    rounds = []
                    for _ in range(args.batch_rounds if targeted and n == max(args.concurrency) else 1):
                        batch = part_batch(user, list(islice(cycle(QUESTIONS), n)), args.timeout)
                        rounds.append(batch)
                        _log(
                            f"  {n} at once: {batch.wall_s:.1f} s, {batch.errors} errors {batch.error_detail()}"
                        )
                    batches.append(BatchResult.of_rounds(latency, pool, slots, n, rounds))
                worker.stop()
            llm.stop()
        facts = machine_facts(pools if not args.skip_celery else [])
    except KeyboardInterrupt:
        _log("interrupted; stopping what the benchmark started")
        return 130
    finally:
        for child in reversed(children):
            child.stop()
        from infra import embedded

        stopped = embedded.release(started)
        if stopped:
            _log(f"stopped {', '.join(stopped)}")
    print(f"running on: {targets.machine()}\n")
    print(report(sync_results, batches, facts))
    targets.save(home, "pipeline", target_values(sync_results, batches), load_at_start=LOAD_AT_START)
    print(f"\n(benchmark took {time.monotonic() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
