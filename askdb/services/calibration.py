"""The offline matcher's calibration on held-out questions, and the demo's seeded library."""

from __future__ import annotations

import collections
import functools
import json
import logging
import multiprocessing
import re
import shutil
import tempfile
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from askdb.adapters.library_cache import LIBRARY
from askdb.models import Example
from askdb.services import calibration_worker
from askdb.services.calibration_context import TIMEOUT_KINDS, cv_context, cv_prepare, shared_answers
from askdb.services.calibration_reuse import content_hash, keep_parts, kept_parts, reuse_key, reusing
from askdb.services.examples import example_upsert
from askdb.services.exports import examples_import
from askdb.services.privacy import privacy_policy
from askdb.services.sql import ReviewError, sql_check
from core import match
from infra.audit.services import audit_record
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_executor

logger = logging.getLogger(__name__)


def library_calibrate(*, source, items: list[dict] | None = None, progress=None, reuse: bool = True) -> dict:
    """Fit P(correct) for library answers and store it with the source (library_cross_validate, below).

    Grouped cross-validation over the library itself (whole paraphrase groups held out, unanswerable
    examples included): no question file is needed; labelled `items` add held-out samples. The
    answering threshold is c / (c + 1) for ASKDB_WRONG_ANSWER_COST = c, and the report gives the
    coverage and precision expected at it. `reuse=False`: ask the library's own questions again even
    when the last calibration kept their samples for this very library (calibration_reuse).
    """
    report = library_cross_validate(source=source, items=items, progress=progress, reuse=reuse)
    source.library_calibration = report
    source.save(update_fields=["library_calibration"])
    audit_record(action="library.calibrated", target=source,
                 message=f"threshold {report['threshold']:.3f} from {report['matched']} held-out matches",
                 detail={k: v for k, v in report.items() if k != "risk"})  # fmt: skip
    return report


def library_seed_demo(*, source, path, approved_by=None, log_dir: Path | None = None) -> str:
    """Seed an empty library with our benchmark's train split, then calibrate the matcher on it.

    Only for the demo: a fresh demo with no LLM then answers the common questions the library
    covers and politely declines the rest. A library that holds anything is left alone.
    """
    if Example.objects.filter(source=source).exists():
        upgraded = _seed_upgrade(source, Path(path))
        faster = f"; {upgraded} made faster with the same answer" if upgraded else ""
        return f"{Example.objects.filter(source=source).count()} verified questions, loaded earlier{faster}"
    path = Path(path)
    if not path.is_file():
        return f"no seed file at {path}; the library starts empty"
    items = [
        {"id": i.get("id"), "question": i["question"], "sql": i.get("sql") or ""}
        for i in json.loads(path.read_text())
    ]
    items, remapped = _seed_patients_present(source, items)
    items, years = _seed_years_present(source, items)
    # Validation only: pairs that read tables this source lacks fail validation and are reported.
    report = examples_import(
        source=source, items=items, approved_by=approved_by, execute=False, origin="demo"
    )
    calibration = library_calibrate(source=source)
    moved = f"; {remapped} patient ids the data lacks replaced by patients it has" if remapped else ""
    moved += f"; {years} years the data lacks replaced by years it has" if years else ""
    checked = library_suggestions_check(source=source)
    return f"{_seed_line(report, calibration, path, log_dir)}{moved}; {checked}"


# Seed SQL since replaced by an equivalent that reads less (the same answer, checked on the demo
# by tests/metadata_admin/clinical/test_loader.py): "the top 5 most frequent lab tests" counted
# every row of labevents, it now reads the counts the loader keeps (labevents_item_counts).
_SEED_SUPERSEDED: dict[str, str] = {
    "tr-048": "SELECT d.label, COUNT(*) AS n_tests\nFROM mimiciv_hosp.labevents AS l\n"
    "JOIN mimiciv_hosp.d_labitems AS d ON d.itemid = l.itemid\nGROUP BY d.label\n"
    "ORDER BY n_tests DESC, d.label ASC\nLIMIT 5",
}


def _seed_upgrade(source, path: Path) -> int:
    """A demo library seeded before a seed SQL was replaced gets the new SQL: only examples of the
    demo whose SQL is still exactly the old seed's (nobody edited them), and only where the new SQL
    passes this source's checks (a database without the summary keeps the old one)."""
    items = {i.get("id"): i for i in json.loads(path.read_text())} if path.is_file() else {}
    upgraded = 0
    for item_id, old in _SEED_SUPERSEDED.items():
        item = items.get(item_id)
        if item is None or not item.get("sql") or item["sql"] == old:
            continue
        try:
            stored = sql_check(source=source, sql=old, execute=False)[0].sql
            sql_check(source=source, sql=item["sql"], execute=False)
        except ReviewError:
            continue
        for example in Example.objects.filter(source=source, origin="demo", sql=stored).exclude(
            status=Example.Status.RETIRED
        ):
            example_upsert(source=source, question=example.question, sql=item["sql"], origin="demo",
                           approved_by=example.approved_by, note=example.note)  # fmt: skip
            upgraded += 1
    if upgraded:
        LIBRARY.clear()
    return upgraded


def _seed_line(report, calibration: dict, path: Path, log_dir: Path | None) -> str:
    """'119 verified questions loaded; 15 skipped because …': what a newcomer needs to know, with the
    details (each skipped question and its reason, the calibration) in a file for whoever asks."""
    loaded = f"{len(report.created)} verified questions loaded from {path.name}"
    if report.merged:
        loaded += f" ({len(report.merged)} more as other wordings of them)"
    log = None
    if log_dir is not None:
        log = Path(log_dir) / "library-seed.txt"
        log.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            f"Seeded from {path}: {report.summary()}.",
            "",
            "Calibration: " + calibration_summary(calibration),
        ]
        lines += ["", f"Skipped ({len(report.failed)}):"]
        lines += [
            f"- {f.get('id') or '?'}: {f.get('question', '')}\n    {f.get('error', '')}"
            for f in report.failed
        ]
        log.write_text("\n".join(lines) + "\n")
    if not report.failed:
        return loaded + (f" (details in {_shown(log)})" if log else "")
    errors = [str(f.get("error", "")).lower() for f in report.failed]
    tables = sum(1 for e in errors if re.search(r"\btable `", e))
    columns = sum(1 for e in errors if re.search(r"\bcolumn `", e) and not re.search(r"\btable `", e))
    lacking, other = tables + columns, len(errors) - tables - columns
    needs = "tables" if not columns else "columns" if not tables else "tables or columns"
    reasons = {f"because their SQL needs {needs} the demo data lacks": lacking,
               "because their SQL does not pass the checks": other}  # fmt: skip
    said = [(why, n) for why, n in reasons.items() if n]
    skipped = (
        f"{len(report.failed)} skipped {said[0][0]}" if len(said) == 1
        else f"{len(report.failed)} skipped ({lacking} {said[0][0]}, {other} {said[1][0]})"
    )  # fmt: skip
    return f"{loaded}; {skipped}" + (f" — listed in {_shown(log)}" if log else "")


def _shown(path: Path) -> str:
    """A path as a newcomer would type it: relative to where they ran `make demo`, when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def calibration_summary(report: dict) -> str:
    """One line on what a calibration found, in words an admin can act on.

    With no held-out match (a small library whose templates each have one wording, like the demo's
    seed) there is nothing to fit: say that the hand-set threshold applies, not "precision None".
    """
    threshold = (
        f"P(correct) threshold {report['threshold']:.3f} (wrong-answer cost {report['wrong_answer_cost']:g})"
    )
    if not report["matched"]:
        return (
            f"{report['held_out']} questions held out, none matched another paraphrase group's template, "
            f"so there is nothing to calibrate on: the default {threshold} applies until the library "
            "holds more paraphrases of each template"
        )
    precision = "n/a" if report["precision"] is None else f"{report['precision']:.3f}"
    timed_out = sum((report.get("timeouts") or {}).values())  # reports made before it have none
    return (
        f"{report['mode']}: {report['held_out']} questions ({report['templates']} templates), "
        f"{report['matched']} matched a template ({report['correct_matches']} correctly); {threshold}: "
        f"expected coverage {report['expected_coverage']}, answering {report['answered']} "
        f"with precision {precision}"
        + (f"; {timed_out} statements ran out of time (a busy machine: it may decide otherwise when idle)"
           if timed_out else "")
    )  # fmt: skip


SUPPRESSED = re.compile(r"<\d+")  # a small count withheld (core/privacy.py)
_PATIENT_ID = re.compile(r"\bsubject_id\s*=\s*(\d+)\b")
_CANDIDATES_TRIED = 6


def _seed_patients_present(source, items: list[dict]) -> tuple[list[dict], int]:
    """Rewrite the seed's patient ids that the loaded data lacks to patients it has.

    The seed was written on the MIMIC-IV release; the demo's synthetic data has other patients, so
    every patient-specific example would answer "nothing matches". Each missing id becomes one
    present patient (the same one in every example and paraphrase naming it), in the question and
    the SQL alike, so the templates built from them stay valid. Among the richest patients the one
    for which most of those examples return rows is chosen. Ids the data has (real MIMIC-IV) stay.
    """
    named = sorted({int(m) for item in items for m in _PATIENT_ID.findall(item["sql"])})
    if not named:
        return items, 0
    ids = ", ".join(str(i) for i in named)
    query = f"SELECT p.subject_id FROM mimiciv_hosp.patients AS p WHERE p.subject_id IN ({ids})"
    present = set(_seed_ids(source, query))
    missing = [i for i in named if i not in present]
    # The patients with the most admissions first: the likeliest to have the labs, drugs, stays asked for.
    richest = ("SELECT a.subject_id FROM mimiciv_hosp.admissions AS a GROUP BY a.subject_id "
               "ORDER BY COUNT(*) DESC, a.subject_id")  # fmt: skip
    candidates = [i for i in _seed_ids(source, richest) if i not in present]
    if not missing or not candidates:
        return items, 0
    return _seed_remap(source, items, missing, candidates, lambda i: i["question"] + " " + i["sql"])


def _seed_remap(
    source, items: list[dict], missing: list[int], candidates: list[int], text_of
) -> tuple[list[dict], int]:
    """Each missing patient id or year becomes the candidate for which most of the examples
    naming it (in `text_of(item)`) return rows, a different one each while they last; every
    question and SQL naming it is rewritten the same way, so templates stay whole."""
    mapping: dict[int, int] = {}
    for old in missing:
        naming = [i for i in items if re.search(rf"\b{old}\b", text_of(i))]
        free = [c for c in candidates if c not in mapping.values()] or candidates
        mapping[old] = _seed_best_patient(source, naming, old, free)
    out = []
    for item in items:
        for old, new in mapping.items():
            item = _seed_moved(item, old, new)
        out.append(item)
    return out, len(mapping)


_YEAR = re.compile(r"\b(2[01]\d\d)\b")  # MIMIC's shifted years: 2100-2199 in the seed


def _seed_years_present(source, items: list[dict]) -> tuple[list[dict], int]:
    """Rewrite the seed's years in which the loaded data has no admissions to years it has.

    The seed's questions name years of the MIMIC-IV release ("how many admissions were there in
    2150?"); the synthetic demo data spreads its patients over other years, so those examples
    would answer 0. Each such year becomes one of the data's busiest years (the same one in every
    question and SQL naming it, so templates stay whole), chosen as for patients: the one for which
    most of the examples naming it return rows."""
    named = sorted({int(y) for item in items for y in _YEAR.findall(item["sql"])})
    if not named:
        return items, 0
    busiest = ("SELECT EXTRACT(YEAR FROM a.admittime) AS y FROM mimiciv_hosp.admissions AS a "
               "GROUP BY EXTRACT(YEAR FROM a.admittime) ORDER BY COUNT(*) DESC, 1")  # fmt: skip
    years = _seed_ids(source, busiest)
    present = set(years)
    missing = [y for y in named if y not in present]
    if not missing or not years:
        return items, 0
    return _seed_remap(source, items, missing, years, lambda i: i["sql"])


SUGGESTIONS_CHECKED = 400  # as many as the home page chooses its suggestions from


def library_suggestions_check(*, source, limit: int = SUGGESTIONS_CHECKED) -> str:
    """Ask the library's questions on the source as they stand, and keep on each example whether
    it answers: rows that are not all withheld as small cells, and not a lone 0 or empty value.
    The home page then suggests only those (a suggestion that shows "0" or "<11" teaches a
    newcomer nothing). Run when the demo loads; returns one line for its log."""
    examples = (
        Example.objects.filter(source=source, kind=Example.Kind.ANSWERABLE, status=Example.Status.ACTIVE)
        .exclude(template={})
        .only("id", "sql")
        .order_by("id")[:limit]
    )
    # A researcher's view: rows allowed, small cells withheld.
    policy = privacy_policy(source=source, user=None, evaluation=True)
    good = bad = 0
    for example in examples:
        try:
            _, result = sql_check(source=source, sql=example.sql, row_cap=200, policy=policy,
                                  purpose="suggestion check")  # fmt: skip
        except ReviewError:
            usable = False
        else:
            usable = answer_is_usable(result.rows)
        good, bad = good + usable, bad + (not usable)
        Example.objects.filter(pk=example.pk).update(answers_as_is=usable)
    return (f"{good + bad} library questions asked on the data: {good} answer and may be suggested, "
            f"{bad} return nothing to read (0, no rows or only small cells) and are not")  # fmt: skip


def answer_is_usable(rows: list) -> bool:
    """Rows a person can read something from: not empty, not a lone 0 or empty value, and not a
    column of numbers all withheld as small cells ("<11")."""
    cells = [c for row in rows for c in row]
    if not cells:
        return False
    if len(cells) == 1 and (cells[0] in (0, None, "") or isinstance(cells[0], bool)):
        return False
    withheld = {j for row in rows for j, c in enumerate(row) if _withheld(c)}
    if any(all(_withheld(row[j]) or row[j] is None for row in rows) for j in withheld):
        return False  # the numbers asked for are all withheld: three "<11" and no chart
    return any(c is not None for c in cells)


def _withheld(cell) -> bool:
    return isinstance(cell, str) and bool(SUPPRESSED.fullmatch(cell.strip()))


def _seed_rows(source, sql: str) -> int:
    try:
        _, result = sql_check(source=source, sql=sql, row_cap=1, purpose="demo library seeding")
    except ReviewError:
        return 0
    return result.row_count


def _seed_ids(source, sql: str) -> list[int]:
    try:
        _, result = sql_check(source=source, sql=sql, purpose="demo library seeding")
    except ReviewError:
        return []
    return [int(row[0]) for row in result.rows]


def _seed_moved(item: dict, old: int, new: int) -> dict:
    pattern = re.compile(rf"\b{old}\b")
    return {
        **item,
        "question": pattern.sub(str(new), item["question"]),
        "sql": pattern.sub(str(new), item["sql"]),
    }


def _seed_best_patient(source, naming: list[dict], old: int, free: list[int]) -> int:
    """The present patient for which most examples naming `old` return rows (the first tried wins ties)."""
    best, best_hits = free[0], -1
    for new in free[:_CANDIDATES_TRIED]:
        hits = sum(_seed_rows(source, _seed_moved(i, old, new)["sql"]) > 0 for i in naming if i["sql"])
        if hits > best_hits:
            best, best_hits = new, hits
        if hits == sum(1 for i in naming if i["sql"]):
            break
    return best


CV_FOLDS = match.CV_FOLDS


PARALLEL_FROM = 1000  # questions held out from which worker processes pay for their start (seconds)


def library_cross_validate(
    *,
    source,
    items: list[dict] | None = None,
    progress=None,
    processes: int | None = None,
    reuse: bool = True,
) -> dict:
    """P(correct) for library answers, fitted by cross-validation over the library itself.

    Whole paraphrase groups (same SQL, or the same unanswerable question) are held out together, and
    unanswerable library examples are asked too (any answer to one is wrong). A held-out answer is
    correct when its bound SQL is the example's SQL or returns the same result ("now" as of the
    source). Labelled `items` (questions not in the library) add held-out samples. The report gives
    the threshold c / (c + 1) and the coverage and precision expected at it. The sibling pass
    (match.cross_validate) adds the wrong answers of sibling templates to what the risk learns from,
    not to the expected coverage and precision.

    Nothing is asked of the database twice in one process: the library's vectors and templates are
    the stored ones, and value lookups, probes and results are remembered across questions.
    `processes` (default ASKDB_CALIBRATION_PROCESSES; 1 under PARALLEL_FROM questions): this one and
    workers started with `spawn` (calibration_worker), each reading the library once and doing whole
    parts (folds, slices of the labelled questions); the samples are put back in order, so the report
    is the one a single process makes. Never `fork`: folds in forked processes once hung CI (a fork inherits the
    parent's connections and threads).

    `reuse`: the library's own folds' samples kept by the last calibration of the same library, source
    and engine are taken as they are (calibration_reuse), so only the labelled questions are asked;
    either way this calibration's are kept for the next one.
    """
    key = reuse_key(source)
    kept = kept_parts(source, key) if reuse else None
    if processes is None:  # a small library (the demo's seed) calibrates in seconds: no worker to start
        library = 0 if kept else Example.objects.filter(source=source).count()
        processes = 1 if library + len(items or []) < PARALLEL_FROM else settings.ASKDB_CALIBRATION_PROCESSES
    labelled = [(str(i["question"]), str(i.get("sql") or "")) for i in (items or [])]
    prepared = (
        Path(tempfile.mkdtemp(prefix="askdb-calibration-")) / "library.pickle" if processes > 1 else None
    )
    pool = _workers(source, processes - 1, prepared) if prepared is not None else None
    timeouts: collections.Counter = collections.Counter()  # this process's and its workers' (cv_context)
    try:
        embedding = _embed_in_worker(pool, source, labelled) if pool is not None and labelled else None
        # With workers, probes and compared results go through a file they all read (shared_answers).
        shared = shared_answers(prepared) if prepared is not None else None
        with calibration_worker.fewer_collections():  # the library it builds lives as long as this
            context = cv_context(source, timeouts=timeouts, shared=shared)
        # From here to the fit with the library frozen too (this second fewer_collections freezes what
        # the first built): the workers' file, the masking and the content hash (_reusing) once ran
        # between the two with the default collector, whose collections walked the whole library
        # (299 of a one-process train calibration's 521 collections, a full one among them).
        with calibration_worker.fewer_collections():
            if prepared is not None:  # the workers read it from there, not from the database (cv_prepare)
                cv_prepare(context, str(prepared))
            masked = []
            if labelled:
                masked = _embedded(embedding) or get_embedder().embed(
                    [match.mask_question(q, context["values"]) for q, _ in labelled]
                )
            count = [0]

            def one_more(_: int) -> None:
                count[0] += 1
                if progress:
                    progress(count[0])

            asked = [(q, gold, v) for (q, gold), v in zip(labelled, masked, strict=True)]
            run_parts = (
                _in_workers(pool, processes - 1, asked, one_more, timeouts) if pool is not None else None
            )
            run_parts = _reusing(source, key, kept if reuse else None, context, run_parts, one_more)
            found = match.calibrate_library(
                **context, progress=one_more, labelled=asked, run_parts=_settling(run_parts),
                wrong_answer_cost=settings.ASKDB_WRONG_ANSWER_COST,
            )  # fmt: skip
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if prepared is not None:
            shutil.rmtree(prepared.parent, ignore_errors=True)
    return _report(found, context["index"], bool(labelled), timeouts)


def _report(found: match.LibraryCalibration, index, labelled: bool, timeouts: collections.Counter) -> dict:
    """library_cross_validate's report of a calibration (`labelled`: with labelled questions)."""
    samples, siblings, risk, at = found.samples, found.siblings, found.risk, found.expected
    return {
        "risk": risk.to_dict(), "threshold": round(risk.threshold, 4),
        "wrong_answer_cost": settings.ASKDB_WRONG_ANSWER_COST,
        "held_out": found.asked, "matched": len(samples), "correct_matches": sum(ok for _, ok in samples),
        "sibling_matches": len(siblings), "sibling_correct": sum(ok for _, ok in siblings),
        "answered": at["answered"], "expected_coverage": at["coverage"], "precision": at["precision"],
        "templates": len(index.families), "examples": len(index.entries),
        "mode": "grouped cross-validation" + (" + file" if labelled else ""), "at": timezone.now().isoformat(),
        "timeouts": {kind: timeouts[kind] for kind in TIMEOUT_KINDS},
    }  # fmt: skip


def _reusing(source, key: str, kept, context: dict, run_parts, one_more):
    """run_parts taking the kept samples (kept_parts) when they were asked of this very library
    (calibration_reuse.content_hash), and keeping this calibration's for the next one.

    With nothing kept to compare it with (a first or `--fresh` calibration), the library is hashed in
    this process's first part, once the workers have theirs: hashed before run_parts, as it once was,
    it held every process back (~1 s of CPU on the EHRSQL train library, before any part began)."""
    content = functools.cache(lambda: content_hash(context))
    parts = kept[1] if kept is not None and kept[0] == content() else None
    asking = run_parts
    if kept is None:

        def asking(todo: list, local) -> list:
            def first(part):
                content()
                return local(part)

            return run_parts(todo, first) if run_parts is not None else [first(p) for p in todo]

    return reusing(asking, parts, one_more, lambda found: keep_parts(source, key, content(), found))


def _settling(run_parts):
    """run_parts with every part this process does followed by calibration_worker.settle (a worker
    settles after its own parts): what the part left behind for the next ones is frozen, its garbage
    freed first."""

    def run(parts: list, local) -> list:
        def settled(part):
            found = local(part)
            calibration_worker.settle()
            return found

        return run_parts(parts, settled)

    return run


def _embed_in_worker(pool: ProcessPoolExecutor, source, labelled: list[tuple[str, str]]):
    """The labelled questions' masked vectors, computed by a worker while this process builds the
    library (the worker would otherwise wait for it): the future of calibration_worker.embed, or None.
    Masked here with the values the library is built with (LIBRARY.values, read first)."""
    values = LIBRARY.values(source, source_executor(source))
    try:
        return pool.submit(calibration_worker.embed, [match.mask_question(q, values) for q, _ in labelled])
    except BrokenProcessPool:
        return None


def _embedded(embedding) -> list | None:
    """The worker's vectors (_embed_in_worker), or None for this process to embed them (no worker
    started, or it failed)."""
    if embedding is None:
        return None
    try:
        return embedding.result()
    except Exception:  # any failure of the worker: this process embeds them itself
        logger.warning("calibration: a worker could not embed the labelled questions; embedded here")
        return None


def _workers(source, n: int, prepared: Path) -> ProcessPoolExecutor:
    """`n` worker processes, started now (spawn) so that they start Python and Django while this one
    reads the library; on this process's database (a test database in tests). They read the
    library from `prepared`, which this process writes before it hands them any part."""
    pool = ProcessPoolExecutor(
        max_workers=n, mp_context=multiprocessing.get_context("spawn"), initializer=calibration_worker.start,
        initargs=(source.pk, connection.settings_dict["NAME"], str(prepared)),
    )  # fmt: skip
    for _ in range(n):  # ProcessPoolExecutor starts its processes on the first submit
        pool.submit(int)
    return pool


def _in_workers(
    pool: ProcessPoolExecutor, workers: int, labelled: list, one_more, timeouts: collections.Counter
):
    """match.calibrate_library's `run_parts`: fold by fold (and then the labelled questions), this
    process takes the fold's parts from its first one on, and a thread hands the workers its parts
    from the last one back, one each at a time (no part waits in a worker's queue while this process
    could do it). Samples come back in the parts' order.

    Why fold by fold, from both ends: a fold's parts are cut in family order (core.match.calibrate.by_family), so
    this process asks the families at one end of every fold and the workers those at the other, and
    each composes, parses and reads for its own families' templates; taken from both ends of the
    whole calibration, each process asked every family (by_family has the figures). `timeouts`
    gets the workers' parts' statements that ran out of time."""

    def run(parts: list, local) -> list:
        lock = threading.Lock()
        folds: dict = collections.defaultdict(collections.deque)
        for part in parts:
            folds[(part.kind, part.fold)].append(part)
        todo = collections.deque(folds.values())
        futures: dict = {}

        def take(back: bool):
            with lock:
                while todo and not todo[0]:
                    todo.popleft()
                return (todo[0].pop() if back else todo[0].popleft()) if todo else None

        def feed() -> None:
            running: set = set()
            while True:
                while len(running) < workers and (part := take(back=True)) is not None:
                    rows = (
                        [tuple(x) for x in labelled[part.start : part.stop]]
                        if part.kind == "labelled"
                        else []
                    )
                    try:
                        future = pool.submit(calibration_worker.part, part, rows)
                    except BrokenProcessPool:  # no worker left: this process does the rest
                        with lock:
                            todo.append(collections.deque([part]))
                        return
                    with lock:
                        futures[part] = future
                    running.add(future)
                if not running:
                    return
                _, running = wait(running, return_when=FIRST_COMPLETED)

        found: dict = {}
        reported: set = set()

        def report() -> None:  # the workers' questions, as their parts finish
            with lock:
                finished = [(p, f) for p, f in futures.items() if p not in reported and f.done()]
            for p, future in finished:
                reported.add(p)
                if future.exception() is None:
                    for _ in range(future.result()[1]):
                        one_more(0)

        feeder = threading.Thread(target=feed, name="calibration-feeder", daemon=True)
        feeder.start()
        while (part := take(back=False)) is not None:
            found[part] = local(part)
            report()
        feeder.join()
        while (part := take(back=False)) is not None:  # handed back by a feeder that lost its workers
            found[part] = local(part)
        report()
        for part in parts:
            if part not in found:
                try:
                    found[part], _, timed_out = futures[part].result()
                    timeouts.update(timed_out)
                except BrokenProcessPool:  # a worker died (or could not start): this process does it
                    logger.warning("calibration: a worker process failed; part %s done here", part)
                    found[part] = local(part)
        return [found[part] for part in parts]

    return run
