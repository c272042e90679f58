"""EHRSQL-2024 with the verified library alone (no LLM): `python benchmarks/ehrsql.py` (`make bench-ehrsql`).

Builds a library from ../shared/ehrsql-2024-dev/train (templates, masked-question vectors in one
batch), calibrates P(correct) by grouped cross-validation over that library (whole paraphrase
groups held out, unanswerable examples included), then asks every question of the valid split
through the match stage the app uses (core.match: match_library, calibrate_library and
decide_answer, as the app calls them; the as-of rewrite, execution on the SQLite file) and scores it the benchmark's way
(core.compare.results_match, evaluation.metrics). Prints one table.

Tuning happens on train only (the cross-validation); valid is only measured. Importable: `run()`
returns the numbers, so other benchmarks can share the library it builds (`build()`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import targets

os.environ.setdefault("ASKDB_TORCH_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "ehrsql-2024-dev"
AS_OF = "2100-12-31 23:59:00"  # EHRSQL's "now"
sys.path.insert(0, str(ROOT))


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()  # settings and the embedder only: no database is used


@dataclass
class Library:
    index: object  # LibraryIndex
    values: object  # ValueIndex
    executor: object  # SqliteExecutor
    embedder: object
    entries_skipped: int
    build_s: float


def load_split(name: str, data: Path | None = None) -> list[tuple[str, str, str]]:
    """(id, question, gold SQL or "") of one split of `data` (EHRSQL's layout: SPLIT/data.json,
    SPLIT/label.json and mimic_iv.sqlite beside them; default ../shared/ehrsql-2024-dev)."""
    folder = (data or DATA) / name
    data = json.loads((folder / "data.json").read_text())["data"]
    labels = json.loads((folder / "label.json").read_text())
    return [
        (d["id"], d["question"], "" if labels[d["id"]] in ("null", None) else labels[d["id"]]) for d in data
    ]


def value_index(executor) -> object:
    from core.match import load_values

    # The executor's authorizer refuses sqlite_master to generated SQL; tables() introspects.
    tables = {t.name.lower(): t.name for t in executor.tables()}
    return load_values(executor, tables, "sqlite")


def build(train: list[tuple[str, str, str]], *, progress: bool = True, data: Path | None = None) -> Library:
    """The library of `train`: templates, value index, masked-question vectors (one batch)."""
    from core.match import LibraryIndex, build_template, entry_for, mask_question
    from infra.adapters.clinical import SqliteExecutor
    from infra.providers.embeddings import get_embedder

    start = time.perf_counter()
    executor = SqliteExecutor(str((data or DATA) / "mimic_iv.sqlite"))
    values = value_index(executor)
    entries, skipped = [], 0
    for n, (_ident, question, sql) in enumerate(train):
        template = build_template(question, sql, dialect="sqlite") if sql else None
        entry = entry_for(n, question, sql, template)
        if entry is None:
            skipped += 1
            continue
        entries.append(entry)
    embedder = get_embedder()
    masked = [mask_question(e.question, values) for e in entries]
    vectors = embedder.embed(masked)
    if progress:
        print(f"library: {len(entries)} examples, {skipped} not templated, {len(values)} values, "
              f"{time.perf_counter() - start:.0f}s", file=sys.stderr)  # fmt: skip
    return Library(
        LibraryIndex(entries, vectors), values, executor, embedder, skipped, time.perf_counter() - start
    )


class BenchmarkSqlError(Exception):
    """SQL that failed on the benchmark database."""


class Runner:
    """Executes SQL on the benchmark database with "now" as of 2100-12-31 23:59, results cached."""

    def __init__(self, executor):
        self.executor = executor
        self._cache: dict[str, object] = {}

    def rows(self, sql: str):
        from core.asof import apply_as_of

        if sql not in self._cache:
            try:
                self._cache[sql] = self.executor.execute(
                    apply_as_of(sql, "sqlite", AS_OF), timeout_s=30, row_cap=1000
                ).rows
            except Exception as exc:
                self._cache[sql] = exc
        return self._cache[sql]

    def run(self, sql: str):
        """The rows, or BenchmarkSqlError (as the app's executor raises ExecutionFailure)."""
        rows = self.rows(sql)
        if isinstance(rows, Exception):
            raise BenchmarkSqlError(str(rows))
        return rows

    def probe(self, sql: str) -> bool:
        rows = self.rows(sql)
        return not isinstance(rows, Exception) and len(rows) > 0

    def same(self, sql: str, gold: str) -> bool:
        from core.compare import results_match

        if " ".join(sql.lower().split()) == " ".join(gold.lower().split()):
            return True
        a, b = self.rows(sql), self.rows(gold)
        if isinstance(a, Exception) or isinstance(b, Exception):
            return False
        return results_match(a, b)


def calibrate(lib: Library, runner: Runner, *, cost: float, progress: bool = True, observe=None):
    """Grouped cross-validation over the library (core.match.calibrate_library, as the app's
    calibrate_library runs it) -> the fitted risk model and held-out numbers."""
    from risk_stability import spread

    from core.match import bind_sql, calibrate_library, fit_risk

    def lookup(column: str, text: str):
        from askdb.adapters.ports import column_values_like

        return column_values_like(lib.executor, column, text, dialect="sqlite")

    def is_correct(entry, best) -> bool:
        gold = bind_sql(entry.template, {s.name: s.value for s in entry.template.slots})
        return runner.same(best.sql, gold)

    start = time.perf_counter()
    step = max(1, len(lib.index.entries) // 10)
    details: list = []
    asked = [0]

    def one_more(_: int) -> None:
        asked[0] += 1
        if progress and asked[0] % step == 0:
            print(f"  cv {asked[0]}", file=sys.stderr)

    found = calibrate_library(
        lib.index, lambda idx: lib.index.matrix[idx], is_correct=is_correct, lookup=lookup, values=lib.values,
        probe=runner.probe, wrong_answer_cost=cost, progress=one_more, observe=observe, details=details,
    )  # fmt: skip
    risk, samples, siblings = found.risk, found.samples, found.siblings
    report = dict(found.expected)
    report["fold_risks"] = found.fold_risks
    report.update(
        samples=len(samples), correct=sum(ok for _, ok in samples), seconds=round(time.perf_counter() - start),
        sibling_samples=len(siblings), sibling_correct=sum(ok for _, ok in siblings),
    )  # fmt: skip
    scored = [
        (found.fold_risks[f].predict(x), ok) for (x, ok), f in zip(samples, found.sample_folds, strict=True)
    ]
    # How far the nested CV's count moves when its samples do (bootstrap seeds, a wrong sample less).
    report["spread"] = spread(found, lambda s: fit_risk(s, wrong_answer_cost=cost), risk.threshold)
    report["wrong_answers"] = [  # train only: what to tune on
        {"question": e.question, "answered_from": b.example_question, "p": round(p, 4),
         "gold": e.template.sql if e.template else "", "sql": b.sql}
        for (e, b, ok), (p, _) in zip(details, scored, strict=True) if not ok and p >= risk.threshold
    ]  # fmt: skip
    return risk, report, lookup


def evaluate(lib: Library, runner: Runner, risk, lookup, items, *, progress: bool = True):
    """Every question through the match stage; ItemScores and per-question details."""
    from core.match import correct_spelling, decide_answer, mask_question, match_library
    from evaluation import metrics

    scores, details, latency = [], [], []
    lib.embedder.embed(["warm up"])
    for n, (ident, question, gold) in enumerate(items, start=1):
        t0 = time.perf_counter()
        question = correct_spelling(question, lib.index, values=lib.values)  # as the app reads it
        masked = mask_question(question, lib.values)
        vector = lib.embedder.embed([masked])[0]
        found = match_library(question, vector, lib.index, lookup=lookup, values=lib.values, risk=risk,
                                masked_question=masked, probe=runner.probe)  # fmt: skip
        latency.append((time.perf_counter() - t0) * 1000)
        # The engine's decision: the best confident result, if it runs and its competitors agree.
        answer = decide_answer(found.results, risk.threshold, runner.run, failure=BenchmarkSqlError)
        answered_sql = answer.best.sql if answer.best is not None else None
        correct = bool(answered_sql and gold and runner.same(answered_sql, gold))
        top = found.best
        top_correct = bool(top and top.sql and gold and runner.same(top.sql, gold))
        scores.append(metrics.ItemScore(
            id=ident, answerable=bool(gold), abstained=answered_sql is None, correct=correct,
            answered_by="library" if answered_sql else "", library_confidence=top.confidence if top else None,
            library_correct=top_correct if top and top.sql else None, stages_ms={"match": latency[-1]},
        ))  # fmt: skip
        details.append({"id": ident, "question": question, "gold": gold, "answered": answered_sql,
                        "correct": correct, "top": top, "top_correct": top_correct, "votes": found.votes,
                        "results": found.results,
                        "composed": bool(answer.best is not None and answer.best.composed_from)})  # fmt: skip
        if progress and n % 200 == 0:
            print(f"  valid {n}/{len(items)}", file=sys.stderr)
    return scores, details, latency


def miss_cause(
    index, d: dict, threshold: float, runner: Runner, key_of: dict | None = None, score=None
) -> str:
    """Why an answerable question was not answered (correctly), judged by its gold SQL's template."""
    gold_key = template_key(d["question"], d["gold"])
    if gold_key is None or gold_key not in index.families:
        return "its template is not in the library"
    key_of = key_of if key_of is not None else {e.example_id: e.key for e in index.entries}
    right = next((r for r in d["results"] if key_of.get(r.example_id) == gold_key), None)
    if right is None:
        return "its template was not among the best voted"
    if right.hard_ok:
        if not runner.same(right.sql, d["gold"]):
            return "its template, a value bound wrongly"
        return (
            "right SQL, P(correct) under the threshold"
            if (score(right) if score else right.confidence) < threshold
            else "another answer won"
        )
    label = refusal_label(right)
    return f"its template refused: {label}" if label else "its template refused: other"


def refusal_label(result) -> str:
    """The miss cause's words for a refused result's first reason ("" for one the causes do not name)."""
    from core.match import reasons as R

    labels = {R.WORDS_UNEXPLAINED: "a word no paraphrase says", R.WORDS_MISSING: "a word all paraphrases say is missing",
              R.CONTRARY_WORDS: "operator words combined otherwise", R.OPERATOR_COMBINATION: "operator words combined otherwise",
              R.OPERATOR: "an operator word differs",
              R.VALUE_NOT_FOUND: "a value not found / not bound", R.VALUE_PLACEMENT: "a value not found / not bound",
              R.VALUE_NOT_TOGETHER: "a value not found / not bound", R.VALUE_AMBIGUOUS: "a value in two places",
              R.VALUE_MISSING: "a value missing", R.EXTRA_VALUE: "an extra value", R.ANCHOR: "an anchor word missing",
              R.FIXED_VALUE: "a fixed value missing"}  # fmt: skip
    return labels.get(result.reason_codes[0], "") if result.reason_codes else ""


def nearest_cause(d: dict, threshold: float, score=None) -> str:
    """Why a question whose template the library lacks got no answer, judged by what the match stage
    tried (its best result): nothing tried, a candidate (verified or composed) that passed the rules
    under the threshold, or the best one's first refusal. The causes a small library's misses need,
    where "its template is not in the library" is every one of them."""
    best = d["results"][0] if d["results"] else None
    if best is None:
        return "nothing tried"
    kind = "composed" if best.composed_from else "a verified template"
    if best.hard_ok and best.sql:
        return f"{kind} passed the rules, P(correct) under the threshold"
    return (
        f"{kind} refused: {refusal_label(best) or (best.reason_codes[0] if best.reason_codes else 'other')}"
    )


def _cv_row(entry, found, idx, key_of: dict, fold_risk, threshold: float, runner: Runner, fold: int) -> dict:
    """One held-out library question's outcome in the cross-validation, and why it was missed."""
    from core.match import bind_sql

    best = found.best
    answered = bool(best and best.hard_ok and best.sql and fold_risk.predict(best.features) >= threshold)
    gold = bind_sql(entry.template, {x.name: x.value for x in entry.template.slots}) if entry.template else ""
    correct = bool(answered and gold and runner.same(best.sql, gold))
    outcome = "right" if correct else ("wrong" if answered else "abstained")
    cause = ""
    if gold and not correct:
        d = {"question": entry.question, "gold": gold, "results": found.results}
        cause = miss_cause(idx, d, threshold, runner, key_of, score=lambda r: fold_risk.predict(r.features))
    right = next((r for r in found.results if key_of.get(r.example_id) == entry.key), None)
    return {
        "question": entry.question, "key": entry.key, "gold": gold, "outcome": outcome, "cause": cause,
        "sql": best.sql if best else None, "from": best.example_question if best else None,
        "p": round(fold_risk.predict(best.features), 4) if best and best.hard_ok else 0.0,
        "reasons": [list(r.reasons) for r in found.results[:3]],
        "features": best.features if best and best.hard_ok else None,
        "fold": fold,
        "tried": [r.example_question for r in found.results[:3]],
        "right_key_in_library": entry.key in idx.families,
        "right_reasons": list(right.reasons) if right else None,
        "right_from": right.example_question if right else None,
    }  # fmt: skip


def cross_validated(
    *,
    cost: float = 10.0,
    progress: bool = True,
    dump: Path | None = None,
    data: Path | None = None,
    library: str = "train",
) -> dict:
    """Error analysis on the library itself (train): grouped CV, every held-out question's outcome and
    miss cause, each answer judged by a risk model fitted without its fold. The only place to tune
    the matcher on; valid is measured, never read."""
    from core.match import grouped_folds

    _setup_django()
    started = time.perf_counter()
    lib = build(load_split(library, data), progress=progress, data=data)
    runner = Runner(lib.executor)
    observed: list = []
    risk, cv, _lookup = calibrate(
        lib, runner, cost=cost, progress=progress, observe=lambda e, f, idx: observed.append((e, f, idx))
    )
    fold_of = {
        lib.index.entries[i].example_id: f
        for f, held in enumerate(grouped_folds(lib.index.entries))
        for i in held
    }
    keys: dict[int, dict] = {}
    causes: Counter = Counter()
    rows = []
    for entry, found, idx in observed:
        key_of = keys.setdefault(id(idx), {e.example_id: e.key for e in idx.entries})
        fold_risk = cv["fold_risks"].get(fold_of[entry.example_id], risk)  # never saw this question's fold
        row = _cv_row(entry, found, idx, key_of, fold_risk, risk.threshold, runner, fold_of[entry.example_id])
        if row["cause"]:
            causes[row["cause"]] += 1
        rows.append(row)
    answerable = sum(1 for r in rows if r["gold"])
    answered = [r for r in rows if r["outcome"] != "abstained"]
    right = sum(1 for r in answered if r["outcome"] == "right")
    unseen = [r for r in rows if r["gold"] and not r["right_key_in_library"]]  # its fold lacks its template
    result = {
        "questions": len(rows), "answerable": answerable, "answered": len(answered), "right": right,
        "coverage": round(len(answered) / len(rows), 4), "precision": round(right / len(answered), 4) if answered else None,
        "rs10": round(100 * (right - 10 * (len(answered) - right)) / len(rows), 2),
        "unseen": {"questions": len(unseen), "answered": sum(1 for r in unseen if r["outcome"] != "abstained"),
                   "right": sum(1 for r in unseen if r["outcome"] == "right")},
        "misses": dict(causes.most_common()), "threshold": round(risk.threshold, 4),
        "fold_risks": {f: r.to_dict() for f, r in cv["fold_risks"].items()}, "risk": risk.to_dict(),
        "seconds": round(time.perf_counter() - started),
    }  # fmt: skip
    if dump:
        dump.write_text(json.dumps({"summary": result, "rows": rows}, indent=1, default=str))
    return result


def _decision(found, p: float | None = None) -> dict:
    """One question's decision for --decisions: the best result's SQL or refusal codes, P(correct)."""
    best = found.best
    if best is None:
        return {"sql": None, "codes": [], "p": 0.0}
    return {
        "sql": best.sql if best.hard_ok else None,
        "codes": list(best.reason_codes),
        "p": round(p if p is not None else best.confidence, 4),
    }


def _misses(lib: Library, risk, runner: Runner, scores: list, details: list) -> tuple[Counter, list[dict]]:
    """Why answerable questions were not answered right (by cause), and the wrong answers."""
    causes = Counter(
        miss_cause(lib.index, d, risk.threshold, runner)
        for d, s in zip(details, scores, strict=True)
        if s.answerable and (s.abstained or not s.correct)
    )
    wrong = [
        d
        for d, s in zip(details, scores, strict=True)
        if not s.abstained and not (s.answerable and s.correct)
    ]
    return causes, wrong


def template_key(question: str, gold: str) -> str | None:
    """The key of a gold SQL's template (its values masked, as the library keys templates), or None
    where it makes no template. A measurement, computed after answering: never an input."""
    from core.match import build_template, entry_for

    entry = entry_for(None, question, gold, build_template(question, gold, dialect="sqlite"))
    return entry.key if entry is not None else None


def unseen_templates(lib: Library, scores: list, details: list) -> dict:
    """The answerable questions whose gold template the library does not hold (issue #26's target:
    at least 30 % of them answered right), how many were answered, and how many right."""
    unseen = [
        s
        for d, s in zip(details, scores, strict=True)
        if s.answerable and template_key(d["question"], d["gold"]) not in lib.index.families
    ]
    return {
        "questions": len(unseen),
        "answered": sum(1 for s in unseen if not s.abstained),
        "right": sum(1 for s in unseen if not s.abstained and s.correct),
    }


def _rates(scores: list) -> dict:
    """How many questions, answerable, answered; coverage, precision and execution accuracy."""
    answerable = [x for x in scores if x.answerable]
    answered = [x for x in scores if not x.abstained]
    correct = sum(1 for x in answered if x.answerable and x.correct)
    return {
        "questions": len(scores), "answerable": len(answerable), "answered": len(answered),
        "coverage": len(answered) / len(scores), "precision": correct / len(answered) if answered else None,
        "execution_accuracy": correct / len(answerable) if answerable else None,
    }  # fmt: skip


def run(
    *,
    cost: float = 10.0,
    limit: int | None = None,
    progress: bool = True,
    decisions: Path | None = None,
    data: Path | None = None,
    library: str = "train",
    questions: str = "valid",
    samples: tuple[float, ...] = (),
) -> dict:
    """The library of split `library` asked every question of split `questions`; with `samples`, also
    the same with libraries of those shares of the library's templates (sample_efficiency)."""
    from evaluation import metrics

    _setup_django()
    started = time.perf_counter()
    train, valid = load_split(library, data), load_split(questions, data)
    if limit:
        valid = valid[:limit]
    lib = build(train, progress=progress, data=data)
    runner = Runner(lib.executor)
    observed: list = []
    risk, cv, lookup = calibrate(
        lib, runner, cost=cost, progress=progress,
        observe=(lambda e, f, _idx: observed.append((e, f))) if decisions else None,
    )  # fmt: skip
    if progress:
        print(
            f"calibration: { {k: v for k, v in cv.items() if k not in ('wrong_answers', 'fold_risks')} }",
            file=sys.stderr,
        )
    scores, details, latency = evaluate(lib, runner, risk, lookup, valid, progress=progress)
    causes, wrong = _misses(lib, risk, runner, scores, details)
    if decisions:  # ids and decisions only: never the valid questions' text
        write_decisions(decisions, lib, risk, cv, observed, details)
    result = {
        **_rates(scores), "rs": metrics.reliability_scores(scores),
        "answerability": metrics.answerability(scores), "misses": dict(causes.most_common()),
        "wrong": [{"question": d["question"], "gold": d["gold"], "sql": d["answered"]} for d in wrong],
        # answers composed from verified parts (core/match/compose.py): how many, how many right
        "composed": {"answered": sum(1 for d in details if d["composed"]),
                     "right": sum(1 for d in details if d["composed"] and d["correct"])},
        # answerable questions whose template (gold SQL, values masked) the library lacks
        "unseen": unseen_templates(lib, scores, details),
        "p50_ms": metrics.percentile(latency, 50), "p95_ms": metrics.percentile(latency, 95),
        "threshold": risk.threshold, "cv": {k: v for k, v in cv.items() if k != "fold_risks"}, "risk": risk.to_dict(), "seconds": time.perf_counter() - started,
        "library": {"examples": len(lib.index.entries), "templates": len(lib.index.families),
                    "not_templated": lib.entries_skipped, "build_s": round(lib.build_s, 1)},
        "splits": {"library": library, "questions": questions},
    }  # fmt: skip
    if progress and samples:  # the main numbers before the longer sampled runs
        print(table(result), file=sys.stderr)
    result["samples"] = sample_efficiency(lib, runner, valid, shares=samples, cost=cost, progress=progress)
    return result


SEEDS = (0, 1, 2)  # libraries sampled per share


def sample_library(lib: Library, share: float, seed: int) -> Library:
    """A library of `share` of `lib`'s templates, whole (every paraphrase of a template sampled goes in),
    and the same share of its unanswerable examples: where a new hospital starts."""
    import random

    from core.match import UNANSWERABLE

    rng = random.Random(seed)
    keys = sorted(k for k in lib.index.members if k != UNANSWERABLE)
    chosen = set(rng.sample(keys, max(1, round(share * len(keys)))))
    unanswerable = list(lib.index.members.get(UNANSWERABLE, []))
    keep = [i for k in sorted(chosen) for i in lib.index.members[k]]
    keep += rng.sample(unanswerable, round(share * len(unanswerable)))
    return dataclasses.replace(lib, index=lib.index.subset(sorted(keep)))


def sample_efficiency(
    lib: Library,
    runner: Runner,
    items: list,
    *,
    shares: tuple[float, ...],
    cost: float,
    progress: bool = True,
) -> list[dict]:
    """Coverage, precision and RS(10) with libraries of `shares` of the templates (SEEDS each), each
    calibrated by its own grouped cross-validation: how askdb does from a small start."""
    from evaluation import metrics

    out = []
    for share in shares:
        for seed in SEEDS:
            sub = sample_library(lib, share, seed)
            risk, _cv, lookup = calibrate(sub, runner, cost=cost, progress=False)
            scores, _details, _latency = evaluate(sub, runner, risk, lookup, items, progress=False)
            answered = [s for s in scores if not s.abstained]
            right = sum(1 for s in answered if s.answerable and s.correct)
            row = {
                "share": share, "seed": seed, "examples": len(sub.index.entries), "templates": len(sub.index.families),
                "coverage": len(answered) / len(scores), "precision": right / len(answered) if answered else None,
                "rs10": metrics.reliability_scores(scores)["10"], "threshold": risk.threshold,
            }  # fmt: skip
            if progress:
                print(f"sample {share:.0%} seed {seed}: {row}", file=sys.stderr)
            out.append(row)
    return out


def small_libraries(
    *,
    shares: tuple[float, ...],
    seeds: tuple[int, ...] = SEEDS,
    asked: int = 400,
    cost: float = 10.0,
    data: Path | None = None,
    library: str = "train",
    progress: bool = True,
) -> list[dict]:
    """Train only, so that it may be tuned on: libraries of `shares` of `library`'s templates (whole),
    each calibrated by its own grouped CV (its in-library numbers), then asked `asked` questions of
    the rest of `library` (other templates, and unanswerable questions it does not hold). Those
    questions have no template in the small library by construction: what reaches them is
    composition from verified parts, and the misses by cause say what blocks the rest."""
    from evaluation import metrics

    _setup_django()
    lib = build(load_split(library, data), progress=progress, data=data)
    runner = Runner(lib.executor)
    out = []
    for share in shares:
        for seed in seeds:
            sub = sample_library(lib, share, seed)
            items = library_rest(lib, sub, asked=asked, seed=seed)
            risk, cv, lookup = calibrate(sub, runner, cost=cost, progress=False)
            scores, details, _latency = evaluate(sub, runner, risk, lookup, items, progress=False)
            causes, wrong = _misses(sub, risk, runner, scores, details)
            nearest = _nearest_misses(risk, scores, details)
            answered = [s for s in scores if not s.abstained]
            right = sum(1 for s in answered if s.answerable and s.correct)
            row = {
                "share": share, "seed": seed, "examples": len(sub.index.entries), "templates": len(sub.index.families),
                "in_library_cv": {k: v for k, v in cv.items() if k not in ("fold_risks", "wrong_answers")},
                "asked": len(items), "answerable": sum(1 for s in scores if s.answerable),
                "answered": len(answered), "right": right, "coverage": round(len(answered) / max(1, len(items)), 4),
                "precision": round(right / len(answered), 4) if answered else None,
                "unanswerable_answered": sum(1 for s in answered if not s.answerable),
                "composed_right": sum(1 for d in details if d["composed"] and d["correct"]),
                "rs10": metrics.reliability_scores(scores)["10"],  # as sample_efficiency scores valid
                "threshold": round(risk.threshold, 4),
                "misses": dict(causes.most_common()),
                "unanswered_nearest": nearest[0], "examples_by_cause": nearest[1],
                "wrong": [{"question": d["question"], "gold": d["gold"], "sql": d["answered"]} for d in wrong],
            }  # fmt: skip
            if progress:
                print(f"small {share:.0%} seed {seed}: {json.dumps(row)}", file=sys.stderr)
            out.append(row)
    return out


def library_rest(lib: Library, sub: Library, *, asked: int = 0, seed: int = 0) -> list[tuple[str, str, str]]:
    """The questions of `lib` that the small library `sub` does not hold, as (id, question, gold SQL
    or "") items: every paraphrase of the templates left out, and the unanswerable examples not
    sampled. `asked` > 0 samples that many (seeded); 0 asks them all (the train-side proxy of the
    valid measurement with a small library: its questions were never tuned on by that library)."""
    import random

    from core.match import bind_sql

    held = {e.example_id for e in sub.index.entries}
    rest = [e for e in lib.index.entries if e.example_id not in held]
    if asked and asked < len(rest):
        rest = random.Random(seed).sample(rest, asked)
    return [(str(e.example_id), e.question,
             bind_sql(e.template, {x.name: x.value for x in e.template.slots}) if e.template else "")
            for e in rest]  # fmt: skip


def _nearest_misses(risk, scores: list, details: list, per: int = 4) -> tuple[dict, dict]:
    """The unanswered answerable questions by nearest_cause, and a few questions of each cause."""
    causes: Counter = Counter()
    out: dict[str, list[str]] = {}
    for d, s in zip(details, scores, strict=True):
        if s.answerable and s.abstained:
            cause = nearest_cause(d, risk.threshold)
            causes[cause] += 1
            got = out.setdefault(cause, [])
            if len(got) < per:
                got.append(d["question"])
    return dict(causes.most_common()), out


def samples_table(rows: list[dict]) -> str:
    """Per share: the mean (and range) over seeds of coverage, precision and RS(10)."""
    lines = [
        "| library (share of templates) | examples | coverage | precision | RS(10) |",
        "|---|---|---|---|---|",
    ]
    for share in sorted({r["share"] for r in rows}):
        group = [r for r in rows if r["share"] == share]
        precisions = [r["precision"] for r in group if r["precision"] is not None]

        def mean(xs: list) -> float:
            return sum(xs) / len(xs) if xs else float("nan")

        lines.append(
            f"| {share:.0%} ({len(group)} seeds) | {mean([r['examples'] for r in group]):.0f} "
            f"| {100 * mean([r['coverage'] for r in group]):.1f} % "
            f"| {100 * mean(precisions):.2f} % | {mean([r['rs10'] for r in group]):.1f} "
            f"({min(r['rs10'] for r in group):.1f} … {max(r['rs10'] for r in group):.1f}) |"
        )
    return "\n".join(lines)


def write_decisions(path: Path, lib: Library, risk, cv: dict, observed: list, details: list) -> None:
    """Every question's decision, by id (valid) or example index (train CV): the SQL answered or the
    refusal codes, and P(correct) (for a CV question, from the risk model that never saw its fold)."""
    from core.match import grouped_folds

    fold_of = {
        lib.index.entries[i].example_id: f
        for f, held in enumerate(grouped_folds(lib.index.entries))
        for i in held
    }
    cv_decisions = {}
    for entry, found in observed:
        fold_risk = cv["fold_risks"].get(fold_of[entry.example_id], risk)
        best = found.best
        p = fold_risk.predict(best.features) if best is not None and best.hard_ok else 0.0
        cv_decisions[str(entry.example_id)] = {**_decision(found, p), "answered": p >= risk.threshold}
    valid_decisions = {
        d["id"]: {**_decision(_Found(d["results"])), "answered": d["answered"]} for d in details
    }
    path.write_text(json.dumps(
        {"threshold": risk.threshold, "risk": risk.to_dict(), "cv": cv_decisions, "valid": valid_decisions},
        indent=0, sort_keys=True,
    ))  # fmt: skip


@dataclass
class _Found:
    results: list

    @property
    def best(self):
        return self.results[0] if self.results else None


def table(result: dict) -> str:
    rs = result["rs"]
    ans = result["answerability"]
    rows = [
        (f"questions ({result['splits']['questions']})", result["questions"]),
        ("answerable", result["answerable"]),
        ("library: examples / templates", f"{result['library']['examples']} / {result['library']['templates']}"),
        ("threshold P(correct) ≥ c/(c+1)", f"{result['threshold']:.3f}"),
        (f"cross-validated on {result['splits']['library']}: coverage / precision", f"{result['cv']['coverage']} / {result['cv']['precision']}"),
        ("cross-validated: answered / range refitted (3 bootstraps, a wrong sample less)",
         f"{result['cv']['answered']} / {result['cv']['spread']['range']} (precision ≥ {result['cv']['spread']['worst_precision']})"),
        ("answered (coverage)", f"{result['answered']} ({100 * result['coverage']:.1f} %)"),
        ("composed answers: answered / right", f"{result['composed']['answered']} / {result['composed']['right']}"),
        ("template not in the library: questions / answered / right (share right)",
         f"{result['unseen']['questions']} / {result['unseen']['answered']} / {result['unseen']['right']} "
         f"({100 * result['unseen']['right'] / max(1, result['unseen']['questions']):.1f} %)"),
        ("precision of answers", f"{100 * result['precision']:.2f} %" if result["precision"] is not None else "-"),
        ("execution accuracy (answerable)", f"{100 * result['execution_accuracy']:.1f} %"),
        *[(f"RS({k})", f"{v:.1f}" if v is not None else "-") for k, v in rs.items()],
        ("answerability P / R / F1 (unanswerable = positive)",
         " / ".join(f"{ans.get(k):.3f}" if isinstance(ans.get(k), float) else "-" for k in ("precision", "recall", "f1"))),
        *[(f"not answered right: {k}", v) for k, v in result["misses"].items()],
        ("match stage p50 / p95 ms", f"{result['p50_ms']:.1f} / {result['p95_ms']:.1f}"),
        ("total time", f"{result['seconds']:.0f} s"),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    return "\n".join(["| metric | value |", "|---|---|"] + [f"| {k.ljust(width)} | {v} |" for k, v in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", type=float, default=float(os.environ.get("ASKDB_WRONG_ANSWER_COST", 10)))
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument(
        "--data",
        type=Path,
        default=DATA,
        help="a folder in EHRSQL's layout (SPLIT/data.json, SPLIT/label.json, mimic_iv.sqlite)",
    )
    parser.add_argument("--library", default="train", help="the split the library is made of")
    parser.add_argument("--questions", default="valid", help="the split whose questions are asked")
    parser.add_argument(
        "--samples", default=os.environ.get("ASKDB_BENCH_SAMPLES", "0.1,0.3"),
        help="also libraries of these shares of the templates (3 seeds each); '' for none",
    )  # fmt: skip
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the numbers (and wrong answers) here"
    )
    parser.add_argument(
        "--cv", action="store_true", help="only the grouped cross-validation on train, misses by cause"
    )
    parser.add_argument(
        "--template-holdout", type=float, default=None,
        help="share of templates the CV holds out whole (default core.match.calibrate.TEMPLATE_HOLDOUT)",
    )  # fmt: skip
    parser.add_argument(
        "--decisions", type=Path, default=None,
        help="write every question's decision (train CV by example index, valid by id: SQL or refusal codes, P)",
    )  # fmt: skip
    parser.add_argument(
        "--small", default="",
        help="train only: libraries of these shares of the templates asked other templates' questions "
        "(e.g. 0.1,0.3; seeds from ASKDB_BENCH_SEEDS, default 0,1,2)",
    )  # fmt: skip
    parser.add_argument(
        "--asked", type=int, default=400,
        help="with --small: how many of the rest of the library split to ask (seeded); 0 asks them all "
        "(every other template's question and every unanswerable one the small library lacks)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.template_holdout is not None:
        from core.match import calibrate

        calibrate.TEMPLATE_HOLDOUT = args.template_holdout
    if not (args.data / args.library / "label.json").is_file():
        print(f"EHRSQL data not found at {args.data / args.library}", file=sys.stderr)
        return 1
    if args.small:
        seeds = tuple(int(x) for x in os.environ.get("ASKDB_BENCH_SEEDS", "0,1,2").split(","))
        shares = tuple(float(x) for x in args.small.split(","))
        rows = small_libraries(
            shares=shares, seeds=seeds, asked=args.asked, cost=args.cost, data=args.data, library=args.library
        )
        print(json.dumps(rows, indent=1))
        return 0
    if args.cv:
        found = cross_validated(cost=args.cost, dump=args.json, data=args.data, library=args.library)
        print(json.dumps(found, indent=1))
        return 0
    samples = tuple(float(x) for x in args.samples.split(",") if x.strip())
    result = run(cost=args.cost, limit=args.limit, decisions=args.decisions, data=args.data,
                 library=args.library, questions=args.questions, samples=samples)  # fmt: skip
    print(f"running on: {targets.machine()}\n")
    print(table(result))
    if result["samples"]:
        print(
            f"\nsample efficiency (library: shares of {args.library}'s templates; questions: {args.questions})\n"
        )
        print(samples_table(result["samples"]))
    for w in result["wrong"][:20]:
        print(
            f"WRONG: {w['question']}\n  gold: {w['gold'][:300]}\n  sql:  {(w['sql'] or '')[:300]}",
            file=sys.stderr,
        )
    if args.json:
        args.json.write_text(json.dumps({k: v for k, v in result.items()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
