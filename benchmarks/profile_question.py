"""Where a no-LLM question's time goes, counted rather than timed: `python benchmarks/profile_question.py
[--questions 40] [--home DIR] [--top 25] [--import]`.

Wall times on a shared machine are noise; counts are not. For each question asked as a run does
(question_submit_sync, no LLM, after the worker's warm-up) this counts the app-database statements,
the clinical statements and connections, the sqlglot parses, the privacy analyses and the texts the
embedding model computes (parses and statements also by caller, so repeated work has a name), and prints
cProfile's top functions by their own time and by cumulative time. It asks questions of the
EHRSQL-2024 *train* split against the library made of it (library_scale.py's `ehrsql` source; with
`--import` it is imported first, timed, with a cProfile of the import written beside the results).
Train questions are answered from the library, so the whole answered path runs: match, execute,
release. Valid questions are never read here.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import sys
import time
from collections import Counter
from pathlib import Path

import library_scale
import pipeline
from _django import percentile

COUNTS: Counter = Counter()


def _count(owner, name: str, key: str) -> None:
    """Wrap owner.name so that every call adds one to COUNTS[key]."""
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        COUNTS[key] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)


def install_counters() -> None:
    import sqlglot.parser
    from django.db.backends import utils

    import core.privacy
    import core.validation
    from infra.adapters import clinical

    _count(sqlglot.parser.Parser, "parse", "sqlglot parses")
    _count_callers(sqlglot.parser.Parser, "parse", PARSED_BY)
    _count_callers(utils.CursorWrapper, "_execute", STATEMENTS_BY)
    _count_callers(utils.CursorWrapper, "_executemany", STATEMENTS_BY)
    _count(utils.CursorWrapper, "_execute", "app-database statements")
    _count(utils.CursorWrapper, "_executemany", "app-database statements")
    _count(clinical.PostgresExecutor, "_connect", "clinical connections opened (PostgreSQL)")
    _count(clinical.SqliteExecutor, "_connect", "clinical connections opened (SQLite)")
    _count(clinical.PostgresExecutor, "execute", "clinical statements")
    _count(clinical.SqliteExecutor, "execute", "clinical statements")
    _count(core.privacy, "analyse_output", "privacy analyses")
    _count(core.validation, "validate_sql", "validations")
    _count_embeddings()


PARSED_BY: Counter = Counter()  # which of askdb's functions asked sqlglot for a parse
STATEMENTS_BY: Counter = Counter()  # which of askdb's functions sent an app-database statement


def _count_callers(owner, name: str, into: Counter) -> None:
    """Count calls of owner.name by the nearest caller outside sqlglot (file:function)."""
    import sys as _sys

    original = getattr(owner, name)

    def counted(*args, **kwargs):
        frame = _sys._getframe(1)
        while frame is not None and (
            "site-packages" in frame.f_code.co_filename
            or "/lib/python" in frame.f_code.co_filename
            or frame.f_code.co_filename == __file__
        ):
            frame = frame.f_back
        names = []
        while frame is not None and len(names) < 2:  # the caller and its caller
            names.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")
            frame = frame.f_back
        if names:
            into[" < ".join(names)] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)


EMBEDDED: list[str] = []  # the texts the model computed a vector for, in order


def _count_embeddings() -> None:
    """Count the texts the embedding model really computes (a text found in the provider's cache
    costs nothing), and keep them, so a repeated or avoidable embedding can be named."""
    from infra.providers.minilm import MiniLM

    original = MiniLM.encode

    def counted(self, texts, *args, **kwargs):
        COUNTS["embedding computations"] += 1
        COUNTS["texts embedded"] += len(texts)
        EMBEDDED.extend(texts)
        return original(self, texts, *args, **kwargs)

    MiniLM.encode = counted


def _questions(n: int) -> list[str]:
    data = json.loads((library_scale.DATA / "train" / "data.json").read_text())["data"]
    return [d["question"] for d in random.Random(25).sample(data, n + 1)]


def _top(profile: cProfile.Profile, key: str, n: int) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).strip_dirs().sort_stats(key).print_stats(n)
    return "\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--import", dest="do_import", action="store_true", help="import train first")
    parser.add_argument("--no-profile", dest="profile", action="store_false", help="counts and times only")
    args = parser.parse_args(argv)
    if not library_scale.available():
        print(f"{library_scale.DATA} is not there: nothing to profile")
        return 1
    home = args.home.resolve()
    started = pipeline.prepare(home)
    try:
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from askdb.models import Example
        from askdb.services.runs import question_submit_sync
        from askdb.tasks import worker_warm_up

        source = library_scale.ensure_source()
        if args.do_import:
            import os

            env = {k: v for k, v in os.environ.items() if k not in (*pipeline.EXTERNAL_ENV, "LLM_BASE_URL")}
            values: dict = {}
            rows: list = []
            library_scale.part_import(source, env, values, rows)
            print(f"import_examples: {values['import_s']:.1f} s wall, {values['import_cpu_s']:.1f} s CPU")
        if not Example.objects.filter(source=source).exists():
            print("the ehrsql library is empty: run with --import (or library_scale.py --parts import)")
            return 1
        settings.LLM_BASE_URL = settings.LLM_MODEL = settings.LLM_API_KEY = ""
        user = get_user_model().objects.get(username="researcher")
        questions = _questions(args.questions)
        worker_warm_up()
        question_submit_sync(user=user, text=questions[0], source=source)  # the first pays for caches
        install_counters()
        profile, walls, cpus, outcomes = cProfile.Profile(), [], [], Counter()
        for text in questions[1:]:
            t0, c0 = time.perf_counter(), time.process_time()
            if args.profile:
                profile.enable()
            run = question_submit_sync(user=user, text=text, source=source)
            if args.profile:
                profile.disable()
            walls.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
            outcomes[f"{run.status}/{run.outcome}"] += 1
    finally:
        from infra import embedded

        embedded.release(started)
    n = len(walls)
    under = ", under cProfile" if args.profile else ""
    print(f"{n} train questions{under}: wall p50 {percentile(walls, 50):.0f} ms, p95 {percentile(walls, 95):.0f} ms; "
          f"this process's CPU p50 {percentile(cpus, 50):.1f} ms, p95 {percentile(cpus, 95):.1f} ms; "
          f"outcomes: {dict(outcomes)}\n")  # fmt: skip
    print("per question:")
    for key, value in sorted(COUNTS.items()):
        print(f"  {key}: {value / n:.1f}")
    print(f"texts embedded (the first 12): {EMBEDDED[:12]}")
    print("sqlglot parses per question, by caller:")
    for caller, value in PARSED_BY.most_common():
        print(f"  {caller}: {value / n:.2f}")
    print("app-database statements per question, by caller:")
    for caller, value in STATEMENTS_BY.most_common():
        print(f"  {caller}: {value / n:.2f}")
    if args.profile:
        saved = args.home / "results" / "profile_question.prof"  # for pstats' print_callers
        saved.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(saved)
        print(f"\ncProfile saved in {saved}")
        print(f"\ntop {args.top} by own time:\n{_top(profile, 'tottime', args.top)}")
        print(f"\ntop {args.top} by cumulative time:\n{_top(profile, 'cumulative', args.top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
