"""A real web process for tests that need one of their own: Django's threaded development server
(what `runserver` serves with, without its start-up checks, which need the database) in a session
of its own, on a free port, with the environment a test gives it (a database role, pool
sizes, DEBUG), against the test database."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


SERVE = """
import sys
import django
django.setup()
from django.core.servers.basehttp import run
from config.wsgi import application
run("127.0.0.1", int(sys.argv[1]), application, threading=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def web_process(log: Path, env: dict[str, str], *, settings: str = "config.settings.test"):
    """Yields the base URL once the server answers; stops it (and its threads) afterwards."""
    port = free_port()
    full_env = os.environ | {"DJANGO_SETTINGS_MODULE": settings} | env
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port)],
            cwd=ROOT, env=full_env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"web process exited: {log.read_text(errors='replace')[-3000:]}")
                try:
                    urllib.request.urlopen(url + "/accounts/login/", timeout=5).close()
                    break
                except urllib.error.HTTPError:
                    break  # it answers
                except OSError:
                    if time.monotonic() > deadline:
                        raise AssertionError(
                            f"web process never answered: {log.read_text(errors='replace')[-3000:]}"
                        ) from None
                    time.sleep(0.3)
            yield url
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def request(url: str, *, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    """(status, headers, body) without raising for 4xx/5xx."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
