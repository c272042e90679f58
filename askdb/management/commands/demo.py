"""`python manage.py demo [--smoke]`: everything `make demo` does, in one supervised process.

Sets up the embedded services, migrates, loads demo clinical data, creates one user per role,
starts a Celery worker and the web server, and on Ctrl-C stops every process it started.
`--smoke` does the same set-up, sends one job through the real broker and worker, prints
what came back, stops everything and exits 0 or 1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from infra import embedded


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _who_listens(port: int) -> str:
    try:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f" by PID {conn.pid} ({psutil.Process(conn.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return ""


class _Timed:
    """A stdout for the steps inside a step (generating data, embedding docs…): each line gets the
    time since the demo started, like the demo's own step lines."""

    def __init__(self, out, t0: float) -> None:
        self.out, self.t0 = out, t0

    def write(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                self.out.write(f"[{time.monotonic() - self.t0:6.1f}s]   {line.strip()}")


def quiet_console(log: Path) -> None:
    """Keep the newcomer's screen to the demo's own lines: library log lines (INFO
    sentence_transformers…), Python warnings and progress bars ("Loading weights") go to `log`.
    Warnings and errors of askdb's own still reach the screen."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TQDM_DISABLE", "1")
    if "transformers" in sys.modules:  # imported already: tell it directly
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    log.parent.mkdir(parents=True, exist_ok=True)
    into_file = logging.FileHandler(log, encoding="utf-8")
    into_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for handler in root.handlers:
        if type(handler) is logging.StreamHandler:
            handler.setLevel(logging.WARNING)
            handler.addFilter(
                lambda record: record.name.split(".")[0] in ("askdb", "infra", "metadata_admin", "core")
            )
    root.addHandler(into_file)
    logging.captureWarnings(True)
    warnings_logger = logging.getLogger("py.warnings")
    warnings_logger.handlers, warnings_logger.propagate = [into_file], False


class Supervisor:
    """Child processes in their own sessions, so one Ctrl-C here ends them all, in order."""

    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen]] = []

    def spawn(self, name: str, cmd: list[str], log: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        out = open(log, "ab")  # noqa: SIM115 - lives as long as the child
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append((name, proc))
        return proc

    def dead(self) -> list[str]:
        return [name for name, proc in self.children if proc.poll() is not None]

    def stop_all(self, timeout: float = 15.0) -> None:
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for _, proc in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group (prefork children)


class Command(BaseCommand):
    help = "Set up and run the askdb demo: services, data, users, worker and web server."

    def add_arguments(self, parser):
        parser.add_argument("--smoke", action="store_true", help="set up, send one job end to end, stop")
        parser.add_argument("--host", default=os.environ.get("ASKDB_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("ASKDB_PORT", "8000")))
        parser.add_argument(
            # A question the seeded library answers with no LLM (a verified example, another number).
            "--question",
            default="count the number of patients older than 70.",
        )

    def handle(self, *args, smoke: bool, host: str, port: int, question: str, **options):
        home: Path = settings.ASKDB_HOME
        home.mkdir(parents=True, exist_ok=True)
        pidfile = home / ("smoke.pid" if smoke else "demo.pid")
        supervisor = Supervisor()
        started_services = [s for s in os.environ.get("ASKDB_STARTED_SERVICES", "").split(",") if s]
        stopping = {"now": False}

        def on_signal(signum, frame):
            stopping["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        quiet_console(settings.ASKDB_HOME / "log" / ("smoke.log" if smoke else "demo.log"))
        t0 = time.monotonic()
        ok, claimed = False, False
        try:
            self._claim_pidfile(pidfile)
            claimed = True
            if not smoke and not _port_free(host, port):
                raise CommandError(
                    f"port {port} on {host} is already in use{_who_listens(port)}; stop that program "
                    f"or choose another port: ASKDB_PORT={port + 1} make demo"
                )
            ok = self._run(supervisor, smoke, host, port, question, stopping, t0)
        finally:
            supervisor.stop_all()
            # The demo owns the services it started; `--smoke` always leaves nothing behind. Either is
            # left to another process still using them, the last of which stops them.
            stopped = embedded.release(["redis", "postgresql"] if smoke else started_services)
            if stopped:
                self.stdout.write(f"stopped {', '.join(stopped)}")
            if claimed:
                pidfile.unlink(missing_ok=True)
        if smoke and not ok:
            raise CommandError("smoke test failed")

    def _claim_pidfile(self, pidfile: Path) -> None:
        if pidfile.exists():
            try:
                other = int(pidfile.read_text().strip())
            except ValueError:
                other = 0
            if other and other != os.getpid() and psutil.pid_exists(other):
                raise CommandError(
                    f"askdb demo is already running (PID {other}); stop it with Ctrl-C in its terminal "
                    f"or `kill {other}`"
                )
            self.stdout.write(f"(removed a stale {pidfile.name} left by a previous run)")
        pidfile.write_text(str(os.getpid()))

    def _step(self, text: str, t0: float) -> None:
        self.stdout.write(f"[{time.monotonic() - t0:6.1f}s] {text}")

    def _run(self, supervisor, smoke, host, port, question, stopping, t0) -> bool:
        from askdb import health
        from askdb.services.users import demo_users_ensure

        self._step("services ready (PostgreSQL + pgvector, Redis)", t0)
        call_command("migrate", interactive=False, verbosity=0)
        self._step("database migrated", t0)
        self._load_demo_data(t0)
        users = demo_users_ensure()
        self._step("demo users ready", t0)
        self._seed_library(t0)
        self._train_gate(t0)

        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        logs = settings.ASKDB_HOME / "log"
        worker_cmd = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--loglevel", "INFO", "--pool", settings.CELERY_WORKER_POOL,
            "--concurrency", str(settings.CELERY_WORKER_CONCURRENCY),
            "--hostname", f"askdb-{'smoke' if smoke else 'demo'}-{os.getpid()}@%h",
        ]  # fmt: skip
        supervisor.spawn("worker", worker_cmd, logs / "worker.log")
        if not self._wait(lambda: health.worker(timeout=0.5).ok, 60, stopping, supervisor):
            self.stderr.write(f"the Celery worker did not start; see {logs / 'worker.log'}")
            return False
        self._step("Celery worker answering", t0)

        if smoke:
            return self._smoke(question, t0)

        supervisor.spawn("web", [*manage, "runserver", f"{host}:{port}", "--noreload"], logs / "web.log")
        url = f"http://{host}:{port}/"
        if not self._wait(lambda: self._http_ok(url + "healthz"), 60, stopping, supervisor):
            self.stderr.write(f"the web server did not start; see {logs / 'web.log'}")
            return False
        self._step("web server up", t0)
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"askdb is running at {url}"))
        self.stdout.write("Log in as:")
        width = max(len(role) for _, _, role in users)
        for username, password, role in users:
            self.stdout.write(f"  {role:<{width}} {username} / {password}")
        if not health.llm_configured():
            self.stdout.write(
                "No LLM configured (set LLM_BASE_URL, LLM_MODEL, LLM_API_KEY to enable SQL writing)."
            )
        self.stdout.write(f"Logs: {logs}. Press Ctrl-C to stop everything.")
        while not stopping["now"]:
            dead = supervisor.dead()
            if dead:
                self.stderr.write(f"{', '.join(dead)} stopped unexpectedly; see the logs in {logs}")
                return False
            time.sleep(0.5)
        return True

    def _seed_library(self, t0: float) -> None:
        from django.contrib.auth import get_user_model

        from askdb.services.calibration import library_seed_demo
        from metadata_admin.services import source_get

        path = (
            os.environ.get("ASKDB_DEMO_LIBRARY")
            or Path(settings.BASE_DIR) / "benchmarks/data/mimiciv/train.json"
        )
        reviewer = get_user_model().objects.filter(username="reviewer").first()
        summary = library_seed_demo(
            source=source_get(None), path=path, approved_by=reviewer, log_dir=settings.ASKDB_HOME / "log"
        )
        self._step(f"example library: {summary}", t0)

    def _train_gate(self, t0: float) -> None:
        """Train the answerability gate on the seeded library once, so the first unanswerable
        question is declined with its reason (the rules alone would still run without it)."""
        from askdb.answerability import store
        from askdb.answerability.data import answerability_train
        from askdb.answerability.model import TrainingError
        from metadata_admin.services import source_get

        source = source_get(None)
        if store.current_version(source.name):
            self._step("answerability gate ready (trained earlier)", t0)
            return
        try:
            report = answerability_train(source=source)
        except TrainingError as exc:
            self._step(f"answerability model not trained ({exc}); the gate's rules still run", t0)
            return
        f1 = report.metrics["unanswerable"]["f1"]
        self._step(
            f"answerability gate trained: it tells questions the data cannot answer apart "
            f"(F1 {f1:.2f} on held-out library questions)",
            t0,
        )

    def _load_demo_data(self, t0: float) -> None:
        from metadata_admin.services import clinical_demo_ensure

        summary = clinical_demo_ensure(stdout=_Timed(self.stdout, t0))
        self._step(f"clinical data ready ({summary})", t0)

    def _smoke(self, question: str, t0: float) -> bool:
        from askdb.tasks import ping as ping_task

        result = ping_task.delay().get(timeout=30)
        self._step(f"job through broker and worker: {result}", t0)
        ok = bool(result.get("pong") and result.get("database"))
        from askdb.smoke import smoke_question

        ok = smoke_question(question, stdout=self.stdout) and ok
        self.stdout.write(self.style.SUCCESS("smoke test passed") if ok else "smoke test FAILED")
        return ok

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return resp.status in (200, 503)
        except OSError as exc:
            return getattr(exc, "code", None) == 503

    @staticmethod
    def _wait(predicate, timeout: float, stopping, supervisor) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not stopping["now"] and not supervisor.dead():
            if predicate():
                return True
            time.sleep(0.3)
        return False
