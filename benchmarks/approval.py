"""A reviewer's approval right after the web process starts: how long it takes (target < 1 s)
and proof that the request loads no model (the worker embeds the new example).

    .venv/bin/python benchmarks/approval.py [--approvals 5] [--home .askdb/bench]

Each approval runs in a fresh Python process started like the web server (`config.wsgi`: no
embedding model loaded, no request served yet), through the real review view with Django's test client, against the
benchmark's own askdb (prepared like pipeline.py's). The broker is up but no worker listens, so
the embedding task waits in the queue: the request is measured alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # askdb itself; this folder is on the path as the script's own

from _django import percentile, table  # noqa: E402
from pipeline import DEFAULT_HOME, bench_env, prepare  # noqa: E402


def one_approval() -> dict:
    """In this (fresh) process: make an answered run, approve it through the view, time it."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from askdb.models import Example, Question, Run
    from infra.providers import embeddings
    from metadata_admin.services import source_get

    users = get_user_model().objects
    source = source_get(None)
    question = Question.objects.create(
        user=users.get(username="researcher"),
        source=source,
        text=f"How many patients are there? ({time.time_ns()})",
    )
    run = Run.objects.create(
        question=question, status="succeeded", outcome="answered", answered_by="llm", review_status="pending",
        sql="SELECT count(*) AS n FROM mimiciv_hosp.patients", result_columns=["n"], result_rows=[[1]], row_count=1,
    )  # fmt: skip
    client = Client()
    client.force_login(users.get(username="reviewer"))
    start = time.perf_counter()
    response = client.post(f"/runs/{run.pk}/review/", {"action": "approve"})
    elapsed_ms = (time.perf_counter() - start) * 1000
    example = Example.objects.filter(origin_run=run).first()
    return {
        "status": response.status_code,
        "ms": round(elapsed_ms, 1),
        "embedders_built": embeddings._build.cache_info().currsize,
        "example": example.pk if example else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvals", type=int, default=5)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        bench_env(args.home)
        print(json.dumps(one_approval()))
        return 0
    from infra import embedded

    started = prepare(args.home)
    try:
        results = []
        for _ in range(args.approvals):
            out = subprocess.run([sys.executable, __file__, "--one", "--home", str(args.home)], check=True,
                                 capture_output=True, text=True)  # fmt: skip
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        ms = [r["ms"] for r in results]
        print(table(["approvals", "p50 ms", "max ms", "embedding models loaded in the request process"],
                    [[len(ms), percentile(ms, 50), max(ms), sum(r["embedders_built"] for r in results)]]))  # fmt: skip
        ok = (
            all(r["status"] == 302 and r["example"] and not r["embedders_built"] for r in results)
            and max(ms) < 1000
        )
        print("target (< 1 s, no model loaded):", "met" if ok else "NOT met")
        return 0 if ok else 1
    finally:
        embedded.release(started)


if __name__ == "__main__":
    raise SystemExit(main())
