"""The clinical database at scale: `python benchmarks/scale.py [--patients 10000] [--repeat 5]
[--questions 40] [--home DIR]` (what `make bench-scale` runs).

For the demo size (100 patients) and for `--patients`, each in a state folder of its own under
--home (default `.askdb/bench-scale`, so the demo's and `make bench`'s folders are never touched):
generates synthetic MIMIC-IV-shaped data (metadata_admin.clinical.synthetic, seed 42), loads it
with the loader (`load_mimic`'s COPY and indexes), refreshes the catalog and the value tables
(what load_mimic runs after loading), seeds the verified library the demo seeds
(benchmarks/data/mimiciv/train.json) and calibrates it, warms a worker up, then times

- every library template's query (each active example's SQL as the reader runs it: one warm-up
  run, then `--repeat` runs; p50/p95/max), and
- a question set (benchmarks/data/mimiciv/test.json, `--questions` of them) through
  `question_submit_sync` with no LLM (what a no-LLM deployment answers: the library or a decline).

Then each template's time is extrapolated to the full MIMIC-IV by the row counts of the tables it
reads: t_full = t_N × (rows_full / rows_N) ** b, where b is the growth exponent measured between
the two sizes for the fastest-growing table the query reads (clamped to 0..1; a scan grows like
its table, an index lookup hardly at all), beside the linear ("as if it scanned") bound.

Targets (a met / NOT met table): at 10,000 patients every template ≤ 200 ms p95; single-patient
templates (a subject_id / hadm_id / stay_id = literal) ≤ 50 ms p95; no template whose
extrapolation passes 5 s. Numbers go to <home>/results/scale.json. Loads are the slow part
(about 100k rows/s); on 2 cores the 10,000-patient run takes 10–25 minutes, a second run reuses
the loaded data (`--reload` to load again; `--reseed` after a change of the layout or the library's
SQL: adds the indexes and summaries the loaded data lacks and seeds the library again).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pipeline
import targets
from _django import ROOT, percentile, table

DEFAULT_HOME = ROOT / ".askdb" / "bench-scale"
DEMO_PATIENTS = 100
SEED = 42
LIBRARY = ROOT / "benchmarks" / "data" / "mimiciv" / "train.json"
QUESTIONS = ROOT / "benchmarks" / "data" / "mimiciv" / "test.json"

# Rows of the full MIMIC-IV v2.2 (PhysioNet's documentation of the hosp, icu and note modules).
FULL_ROWS = {
    "admissions": 431_231, "patients": 299_712, "transfers": 1_890_972, "services": 468_029,
    "labevents": 118_171_367, "microbiologyevents": 3_228_713, "prescriptions": 15_416_708,
    "pharmacy": 13_584_514, "emar": 26_850_359, "emar_detail": 54_744_789, "poe": 39_366_291,
    "poe_detail": 3_879_418, "diagnoses_icd": 4_756_326, "procedures_icd": 669_186,
    "hcpcsevents": 150_771, "drgcodes": 604_377, "omr": 6_439_169, "d_labitems": 1_622,
    "d_icd_diagnoses": 109_775, "d_icd_procedures": 85_257, "d_hcpcs": 89_200, "provider": 40_508,
    "icustays": 73_181, "chartevents": 313_645_063, "inputevents": 8_978_893,
    "outputevents": 4_234_967, "procedureevents": 696_092, "datetimeevents": 7_112_999,
    "ingredientevents": 11_627_821, "d_items": 4_014, "caregiver": 15_468,
    "discharge": 331_794, "radiology": 2_321_355, "discharge_detail": 186_138,
    "radiology_detail": 6_046_121,
}  # fmt: skip
SINGLE_PATIENT = re.compile(r"\b(subject_id|hadm_id|stay_id)\s*=\s*\d+", re.I)
LIMITS = {"template_p95_ms": 200.0, "single_patient_p95_ms": 50.0, "extrapolated_s": 5.0}


# --------------------------------------------------------------------------- one size, one process


def _log(text: str) -> None:
    print(f"[scale bench] {text}", file=sys.stderr, flush=True)


def _timed(label: str, fn):
    _log(f"{label} …")
    t0 = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - t0
    _log(f"{label}: {seconds:.1f} s")
    return value, seconds


def _load(home: Path, patients: int, reload: bool, notes: bool) -> dict:
    """Generate and load `patients` (skipped when this folder already holds them); the numbers."""
    from django.conf import settings

    from metadata_admin.clinical import synthetic
    from metadata_admin.services import clinical_release_load

    marker = home / "loaded.json"
    if marker.is_file() and not reload:
        done = json.loads(marker.read_text())
        if done.get("patients") == patients and done.get("notes") == notes:
            _log(f"{patients} patients already loaded (--reload to load again)")
            return done
    data = home / "data"
    _, gen_s = _timed(f"generating {patients:,} patients", lambda: synthetic.generate(data, patients=patients,
                                                                                          seed=SEED, notes=notes))  # fmt: skip
    report, load_s = _timed("loading (COPY, keys, indexes)", lambda: clinical_release_load(
        data, dsn=settings.CLINICAL_ADMIN_DATABASE_URL, replace=True, progress=False))  # fmt: skip
    if report.failed:
        raise SystemExit("load failed: " + "; ".join(f"{r.name}: {r.message}" for r in report.failed))
    rows = sum(r.rows for r in report.loaded)
    done = {"patients": patients, "notes": notes, "generate_s": gen_s, "load_s": load_s, "rows": rows,
            "rows_per_s": rows / load_s if load_s else 0.0}  # fmt: skip
    marker.write_text(json.dumps(done))
    return done


def _database_size() -> tuple[int, dict[str, int]]:
    import psycopg
    from django.conf import settings

    from metadata_admin.clinical import loader

    with psycopg.connect(settings.CLINICAL_ADMIN_DATABASE_URL) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    rows = {
        name.rpartition(".")[2]: n
        for name, n in loader.loaded_tables(settings.CLINICAL_ADMIN_DATABASE_URL).items()
    }
    return int(size), rows


def _template_times(source, repeat: int) -> list[dict]:
    """Each active library example's SQL ("now" rewritten to the source's as-of time, as askdb runs
    it) on one open connection as the reader, in a read-only transaction: one warm-up run, then
    `repeat` timed runs (execute and fetch). One connection, so the numbers are the database's
    work, not the executor's per-statement connection set-up (reported apart: `connect_ms`)."""
    import psycopg
    import sqlglot
    from django.conf import settings
    from psycopg import sql as psql

    from askdb.models import Example
    from metadata_admin.services import source_executor, source_schemas

    executor = source_executor(source)
    out = []
    examples = Example.objects.filter(
        source=source, status=Example.Status.ACTIVE, kind=Example.Kind.ANSWERABLE
    )
    path = psql.SQL(", ").join(psql.Identifier(s) for s in source_schemas(source))
    timeout_ms = int(settings.CLINICAL_STATEMENT_TIMEOUT_S * 1000)
    with psycopg.connect(settings.CLINICAL_DATABASE_URL, autocommit=True) as conn:
        for example in examples.order_by("id"):
            statement, times, error = executor.rewrite(example.sql), [], ""
            for i in range(repeat + 1):
                try:
                    with conn.transaction():
                        conn.execute("SET TRANSACTION READ ONLY")
                        conn.execute(psql.SQL("SET LOCAL search_path = {}").format(path))
                        conn.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
                        t0 = time.perf_counter()
                        conn.execute(statement).fetchall()
                        elapsed = (time.perf_counter() - t0) * 1000
                except psycopg.Error as exc:
                    error = str(exc).strip().splitlines()[0]
                    break
                if i:
                    times.append(elapsed)
            try:
                tables = sorted({t.name.lower() for t in sqlglot.parse_one(statement, read="postgres").find_all(
                    sqlglot.exp.Table)})  # fmt: skip
            except sqlglot.errors.ParseError:
                tables = []
            out.append({
                "example": example.pk, "question": example.question, "tables": tables, "error": error,
                "single_patient": bool(SINGLE_PATIENT.search(example.sql)),
                "p50": percentile(times, 50), "p95": percentile(times, 95), "max": max(times, default=float("nan")),
                "min": min(times, default=float("nan")),
            })  # fmt: skip
    return out


def _connect_ms(source, count: int = 10) -> float:
    """p50 of the executor's own cost per statement (a fresh read-only connection): `SELECT 1`."""
    from metadata_admin.services import source_executor

    executor, times = source_executor(source), []
    for _ in range(count):
        t0 = time.perf_counter()
        executor.execute("SELECT 1", timeout_s=5, row_cap=1)
        times.append((time.perf_counter() - t0) * 1000)
    return percentile(times, 50)


def _questions(source, count: int) -> dict:
    """`count` questions of the held-in question file through question_submit_sync, no LLM."""
    from django.contrib.auth import get_user_model

    from askdb.models import Run
    from askdb.services.runs import question_submit_sync

    user = get_user_model().objects.get(username="researcher")
    items = json.loads(QUESTIONS.read_text())[:count]
    walls, library, single = [], 0, []
    question_submit_sync(user=user, text=items[0]["question"], source=source)  # the first pays the loads
    for item in items:
        t0 = time.perf_counter()
        run = question_submit_sync(user=user, text=item["question"], source=source)
        wall = (time.perf_counter() - t0) * 1000
        walls.append(wall)
        run = Run.objects.get(pk=run.pk)
        library += run.answered_by == "library"
        if SINGLE_PATIENT.search(item.get("sql") or ""):
            single.append(wall)
    return {"asked": len(items), "answered_by_library": library, "p50": percentile(walls, 50),
            "p95": percentile(walls, 95), "max": max(walls, default=float("nan")),
            "single_patient_p50": percentile(single, 50), "single_patient_count": len(single)}  # fmt: skip


def retime(home: Path, repeat: int) -> dict:
    """After a change of the layout's indexes: add the ones the loaded data lacks (`load_mimic
    --indexes-only`) and time the templates again; the other numbers stay as measured."""
    pipeline.bench_env(home)
    os.environ["LLM_MODEL"] = ""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from infra import embedded

    started = embedded.ensure_started()
    try:
        import django

        django.setup()
        from django.conf import settings

        from metadata_admin.clinical import loader
        from metadata_admin.services import source_get

        _timed(
            "indexes the data lacks",
            lambda: loader.build_indexes(settings.CLINICAL_ADMIN_DATABASE_URL, out=_log),
        )
        found = json.loads((home / "measured.json").read_text())
        found["templates"], _ = _timed("library templates", lambda: _template_times(source_get(None), repeat))
        return found
    finally:
        embedded.release(started)


def one_size(
    home: Path, patients: int, *, repeat: int, questions: int, reload: bool, notes: bool, reseed: bool = False
) -> dict:
    """Measure one size in this process (its own askdb state folder); the numbers as a dict."""
    pipeline.bench_env(home)
    os.environ["LLM_MODEL"] = ""  # a no-LLM deployment: the library answers or the question is declined
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from infra import embedded

    started = embedded.ensure_started()
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from askdb.adapters.library_cache import LIBRARY as CACHE
        from askdb.models import Example
        from askdb.services.calibration import library_calibrate, library_seed_demo
        from askdb.services.users import demo_users_ensure
        from askdb.tasks import worker_warm_up
        from metadata_admin.clinical import synthetic
        from metadata_admin.services import clinical_indexes_build, clinical_source_refresh, source_get

        call_command("migrate", interactive=False, verbosity=0)
        demo_users_ensure()
        loaded = _load(home, patients, reload, notes)
        as_of = synthetic.AS_OF if synthetic.AS_OF.tzinfo else synthetic.AS_OF.replace(tzinfo=dt.UTC)
        _, refresh_s = _timed("catalog and value tables (load_mimic's refresh)",
                              lambda: clinical_source_refresh(as_of=as_of, force_values=True))  # fmt: skip
        source = source_get(None)
        if reseed:  # the library's SQL changed: what the layout adds since the load, then the seed again
            _timed("indexes and summaries the data lacks (load_mimic --indexes-only)", lambda: clinical_indexes_build(
                dsn=settings.CLINICAL_ADMIN_DATABASE_URL, out=_log))  # fmt: skip
            loaded.pop("seeded", None)
        if loaded.get("seeded") != patients or not Example.objects.filter(source=source).exists():
            Example.objects.filter(source=source).delete()
            reviewer = get_user_model().objects.get(username="reviewer")
            _timed(
                "seeding the library",
                lambda: library_seed_demo(source=source, path=LIBRARY, approved_by=reviewer),
            )
            (home / "loaded.json").write_text(json.dumps(loaded | {"seeded": patients}))
        _, calibrate_s = _timed("calibration", lambda: library_calibrate(source=source))
        CACHE.clear()
        _, warm_s = _timed("worker warm-up", worker_warm_up)
        templates, _ = _timed("library templates", lambda: _template_times(source, repeat))
        asked, _ = _timed("question set", lambda: _questions(source, questions))
        size, rows = _database_size()
        return {"patients": patients, "connect_ms": _connect_ms(source), "load": loaded, "refresh_s": refresh_s, "calibrate_s": calibrate_s,
                "warm_up_s": warm_s, "database_bytes": size, "rows": rows, "templates": templates,
                "questions": asked}  # fmt: skip
    finally:
        embedded.release(started)


# --------------------------------------------------------------------------- both sizes, the report


def _growth(small: dict, big: dict, name: str) -> float:
    """Rows of `name` at the big size over the small one (1 for a table that does not grow)."""
    a, b = small["rows"].get(name, 0), big["rows"].get(name, 0)
    return b / a if a and b else 1.0


def _shape(question: str) -> str:
    """A question with its numbers masked: the same template at both sizes, whose patient ids the
    library's seeding replaced by patients each size's data has."""
    return re.sub(r"\d+", "#", question.lower())


def extrapolate(small: dict, big: dict) -> list[dict]:
    """Each template at full MIMIC-IV size: by its fastest-growing table and the exponent its own
    time grew with between the two sizes (0..1), and the linear bound."""
    before = {_shape(t["question"]): t for t in small["templates"]}
    out = []
    for t in big["templates"]:
        if t["error"] or math.isnan(t["p95"]):
            out.append(t | {"full_s": float("nan"), "linear_s": float("nan"), "by": ""})
            continue
        # The tables that grow with the patients (a dictionary does not): the fastest of them drives it.
        growing = [(FULL_ROWS.get(n, 0) / big["rows"][n], n) for n in t["tables"]
                   if big["rows"].get(n) and _growth(small, big, n) > 1.5]  # fmt: skip
        factor, by = max(growing, default=(1.0, ""))
        factor = max(factor, 1.0)
        grew = _growth(small, big, by) if by else 1.0
        old = before.get(_shape(t["question"]))
        exponent = 1.0  # no measurement at the demo size: as if it scanned
        # Fitted on each size's fastest run (the least disturbed by whatever else the machine runs).
        fast, fast_before = t.get("min", t["p50"]), old and old.get("min", old["p50"])
        if fast_before and not math.isnan(fast_before) and fast_before > 0 and grew > 1.5:
            exponent = min(1.0, max(0.0, math.log(max(fast, 1e-3) / fast_before) / math.log(grew)))
        out.append(t | {"full_s": t["p95"] * factor**exponent / 1000, "linear_s": t["p95"] * factor / 1000,
                        "by": by, "exponent": exponent})  # fmt: skip
    return out


def report(small: dict, big: dict) -> tuple[str, dict[str, float]]:
    full = extrapolate(small, big)
    ok = [t for t in full if not t["error"]]
    single = [t for t in ok if t["single_patient"]]
    worst = max(ok, key=lambda t: t["p95"], default=None)
    worst_full = max(ok, key=lambda t: t["full_s"], default=None)
    values = {
        "template_p95_ms": max((t["p95"] for t in ok), default=float("nan")),
        "single_patient_p95_ms": max((t["p95"] for t in single), default=float("nan")),
        "extrapolated_s": max((t["full_s"] for t in ok), default=float("nan")),
    }
    lines = [f"running on: {targets.machine()}", ""]
    rows = []
    for label, d in (("demo", small), ("bench", big)):
        q, load = d["questions"], d["load"]
        tp = [t["p95"] for t in d["templates"] if not t["error"]]
        rows.append([
            f"{label} ({d['patients']:,} patients)", f"{load['rows']:,}", f"{load['rows_per_s']:,.0f}",
            f"{d['database_bytes'] / 2**20:,.0f} MB", f"{load['generate_s']:.0f}", f"{d['refresh_s']:.1f}",
            f"{d['warm_up_s']:.1f}", f"{d['calibrate_s']:.1f}", f"{percentile(tp, 50):.1f} / {percentile(tp, 95):.1f} / "
            f"{max(tp, default=float('nan')):.1f}", f"{q['p50']:.0f} / {q['p95']:.0f} / {q['max']:.0f}",
            f"{q['answered_by_library']}/{q['asked']}", f"{d['connect_ms']:.1f}",
        ])  # fmt: skip
    lines.append(table(["size", "rows", "load rows/s", "database", "generate s", "refresh s", "warm-up s",
                        "calibrate s", "templates p50/p95/max ms", "questions p50/p95/max ms", "by library", "connect ms"], rows))  # fmt: skip
    lines += ["", "slowest templates at this size, and extrapolated to the full MIMIC-IV:", ""]
    slow = sorted(ok, key=lambda t: -t["full_s"])[:12]
    lines.append(table(
        ["template (question)", "single patient", "p50 ms", "p95 ms", "max ms", "grows with", "exponent",
         "full MIMIC-IV s", "linear bound s"],
        [[t["question"][:60], "yes" if t["single_patient"] else "", t["p50"], t["p95"], t["max"], t["by"],
          f"{t['exponent']:.2f}", f"{t['full_s']:.2f}", f"{t['linear_s']:.1f}"] for t in slow],
    ))  # fmt: skip
    failed = [t for t in full if t["error"]]
    if failed:
        lines += [
            "",
            f"{len(failed)} template(s) failed: "
            + "; ".join(f"{t['question'][:50]}: {t['error']}" for t in failed),
        ]
    verdicts = []
    for key, what, unit in (
        ("template_p95_ms", f"every library template, p95 (worst: {worst['question'][:40] if worst else '-'})", "ms"),
        ("single_patient_p95_ms", f"single-patient templates, p95 ({len(single)} of them)", "ms"),
        ("extrapolated_s", f"slowest template extrapolated to full MIMIC-IV ({worst_full['question'][:40] if worst_full else '-'})", "s"),
    ):  # fmt: skip
        v = values[key]
        verdicts.append([what, f"{v:.1f} {unit}" if unit == "ms" else f"{v:.2f} {unit}", f"≤ {LIMITS[key]:g} {unit}",
                         "met" if v <= LIMITS[key] else "NOT met"])  # fmt: skip
    floor = max((t.get("min", t["p50"]) for t in single), default=float("nan"))
    lines += [
        "",
        f"the slowest single-patient template's fastest run: {floor:.1f} ms (what the query costs; its p95 "
        f"adds whatever else the machine ran, load average {targets.load_average()})",
        "",
        f"targets at {big['patients']:,} patients:",
        "",
        table(["what", "measured", "target", "verdict"], verdicts),
    ]
    return "\n".join(lines), values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each template's query")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--reload", action="store_true", help="generate and load again")
    parser.add_argument("--notes", action="store_true", help="also generate and load the notes module")
    parser.add_argument(
        "--retime", action="store_true", help="add indexes the loaded data lacks, time the templates again"
    )
    parser.add_argument(
        "--reseed",
        action="store_true",
        help="keep the loaded data, add what the layout gained since (indexes, summaries), seed the library again",
    )
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)  # a child: one size, JSON out
    args = parser.parse_args(argv)
    home = args.home.resolve()
    if args.one_size:
        folder = home / f"p{args.one_size}"
        folder.mkdir(parents=True, exist_ok=True)
        if args.retime:
            found = retime(folder, args.repeat)
        else:
            found = one_size(folder, args.one_size, repeat=args.repeat, questions=args.questions,
                             reload=args.reload, notes=args.notes, reseed=args.reseed)  # fmt: skip
        (folder / "measured.json").write_text(json.dumps(found, indent=1, default=str))
        return 0
    load_at_start = targets.load_average()
    measured = {}
    for patients in (DEMO_PATIENTS, args.patients):
        cmd = [sys.executable, __file__, "--one-size", str(patients), "--home", str(home), "--repeat",
               str(args.repeat), "--questions", str(args.questions)] + ["--reload"] * args.reload + ["--notes"] * args.notes + ["--retime"] * args.retime + ["--reseed"] * args.reseed  # fmt: skip
        t0 = time.monotonic()
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            print(f"the {patients}-patient run failed", file=sys.stderr)
            return 1
        _log(f"{patients} patients measured in {time.monotonic() - t0:.0f} s")
        measured[patients] = json.loads((home / f"p{patients}" / "measured.json").read_text())
    text, values = report(measured[DEMO_PATIENTS], measured[args.patients])
    print(text)
    targets.save(home, "scale", values | {"patients": args.patients}, load_at_start=load_at_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
