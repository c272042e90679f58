"""Calibration and decision: P(correct) fitted by grouped cross-validation over the library itself, and
the decision to answer with a match. One definition of each: the app (the engine, `calibrate_library`
through askdb's services) and the benchmark (benchmarks/ehrsql.py) call these, so they cannot drift."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.compare import results_match
from core.match import reasons as R
from core.match.candidate import MatchResult
from core.match.index import UNANSWERABLE, Entry, LibraryIndex
from core.match.library import LibraryMatch, match_library
from core.match.risk import Calibration, expected, fit_risk, fold_risks
from core.match.values import ValueIndex, ValueLookup
from core.types import CatalogSchema

CV_FOLDS = 5  # folds of the grouped cross-validation
TEMPLATE_HOLDOUT = 0.3  # share of templates held out whole in cross-validation (questions of unseen kinds)


def grouped_folds(
    entries: Sequence[Entry], folds: int = CV_FOLDS, *, siblings: bool = False
) -> list[list[int]]:
    """Entry indices split into folds so that a paraphrase group never straddles two folds.

    A group is the same SQL (the same template with the same values) or, for unanswerable examples,
    the same question: holding out single paraphrases would let their twins answer for them. For a
    share of templates (TEMPLATE_HOLDOUT) the group is the whole template, because real questions
    often have no template in the library at all, and the risk must be learnt on those too.
    `siblings`: the folds of the sibling pass (see cross_validate), every template held out whole.
    """
    out: list[list[int]] = [[] for _ in range(folds)]
    for i, entry in enumerate(entries):
        group = entry.group
        if entry.key != UNANSWERABLE and (siblings or whole_template(entry.key)):
            group = entry.key  # the whole template out: a question of a kind the library has never seen
        out[int(hashlib.sha1(group.encode()).hexdigest(), 16) % folds].append(i)
    return out


def whole_template(key: str) -> bool:
    """Whether the ordinary cross-validation holds this template out whole."""
    return _share(key) < TEMPLATE_HOLDOUT


def _share(text: str) -> float:
    return int(hashlib.sha1(("share:" + text).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def cross_validate(
    index: LibraryIndex,
    vectors_of: Callable[[list[int]], np.ndarray],
    *,
    is_correct: Callable[[Entry, MatchResult], bool],
    lookup: ValueLookup,
    values: ValueIndex | None = None,
    catalog: CatalogSchema | None = None,
    folds: int = CV_FOLDS,
    progress: Callable[[int], None] | None = None,
    details: list | None = None,
    probe: Callable[[str], bool] | None = None,
    only: Sequence[int] | None = None,
    observe: Callable[[Entry, LibraryMatch, LibraryIndex], None] | None = None,
    folds_out: list[int] | None = None,
    siblings: bool = False,
) -> list[tuple[dict[str, float], bool]]:
    """Held-out (features, correct) for the best hard-rule-passing match of every library question.

    Unanswerable library questions are asked too: any answer to one is a wrong answer. `only`:
    these folds alone (the caller runs the folds in parallel). `observe` sees every held-out
    question's whole match and the library it was matched against, for error analysis on the
    library (why a question was missed), never on the questions one reports. `folds_out` gets
    each sample's fold, for scoring it by a risk model fitted without that fold (`out_of_fold`).

    `siblings`: the sibling pass. A new question whose template the library lacks is often a sibling
    of one it has (the admission type for the age, procedures for diagnoses, discharged for still in
    hospital), and the few such questions the ordinary folds make leave the risk model almost no wrong
    answers to learn from. This pass asks every answerable question whose template the ordinary
    folds keep against the library without its whole template: what passes the guard is (nearly
    always) a sibling's wrong answer, and its samples go with the ordinary ones into fit_risk, never
    into the reported coverage or precision. Their folds are numbered after the ordinary ones.
    """
    samples: list[tuple[dict[str, float], bool]] = []
    done = 0
    for fold, held in enumerate(grouped_folds(index.entries, folds, siblings=siblings)):
        if only is not None and fold not in only:
            continue
        held_set = set(held)
        train = index.subset([i for i in range(len(index.entries)) if i not in held_set])
        if siblings:  # the ordinary folds already ask the rest without their template
            held = [i for i in held if index.entries[i].template and not whole_template(index.entries[i].key)]
        vectors = vectors_of(held)
        for i, vector in zip(held, vectors, strict=True):
            entry = index.entries[i]
            found = match_library(
                entry.question, vector, train, lookup=lookup, values=values, catalog=catalog, probe=probe
            )
            if observe is not None:
                observe(entry, found, train)
            best = found.best
            if best is not None and best.hard_ok and best.sql:
                ok = entry.template is not None and is_correct(entry, best)
                samples.append((best.features, ok))
                if folds_out is not None:
                    folds_out.append(fold + (folds if siblings else 0))
                if details is not None:  # for tuning on the library: what answered what
                    details.append((entry, best, ok))
            done += 1
            if progress:
                progress(done)
    return samples


@dataclass(frozen=True)
class LibraryCalibration:
    """What a calibration found: the risk model to answer with, the held-out samples it was fitted on
    (the ordinary folds and the sibling pass), the per-fold risk models, and the coverage and
    precision expected at the threshold (each sample scored by a model that never saw its fold)."""

    risk: Calibration
    samples: list[tuple[dict[str, float], bool]]
    siblings: list[tuple[dict[str, float], bool]]
    sample_folds: list[int]
    fold_risks: dict[int, Calibration]
    expected: dict[str, Any]
    asked: int  # questions held out: the library's and the labelled ones


@dataclass(frozen=True)
class Part:
    """One piece of a calibration's work, which any process holding the same library can do alone:
    an ordinary fold, a fold of the sibling pass, or a slice [start, stop) of the labelled questions.
    Its samples do not depend on which process does it or in what order, so the pieces can be shared
    between processes and put back together in order (calibrate_library's `run_parts`)."""

    kind: str  # "fold", "siblings" or "labelled"
    fold: int = 0
    start: int = 0
    stop: int = 0


LABELLED_PART = 200  # labelled questions per part: small enough that two processes finish together


def calibration_parts(labelled: int) -> list[Part]:
    """The parts of a calibration with `labelled` labelled questions, in the order their samples go."""
    parts = [Part("fold", f) for f in range(CV_FOLDS)] + [Part("siblings", f) for f in range(CV_FOLDS)]
    return parts + [
        Part("labelled", 0, a, min(a + LABELLED_PART, labelled)) for a in range(0, labelled, LABELLED_PART)
    ]


PartSamples = list[tuple[dict[str, float], bool, int]]  # (features, correct, fold)


def run_part(
    part: Part,
    index: LibraryIndex,
    vectors_of: Callable[[list[int]], np.ndarray],
    *,
    is_correct: Callable[[Entry, MatchResult], bool],
    lookup: ValueLookup,
    values: ValueIndex | None = None,
    catalog: CatalogSchema | None = None,
    probe: Callable[[str], bool] | None = None,
    labelled: Sequence[tuple[str, str, Sequence[float]]] = (),
    same: Callable[[str, str], bool] | None = None,
    progress: Callable[[int], None] | None = None,
    observe: Callable[[Entry, LibraryMatch, LibraryIndex], None] | None = None,
    details: list | None = None,
) -> PartSamples:
    """The held-out samples of one part, each with its fold (see calibrate_library); `progress`,
    `observe` and `details` see the ordinary folds' questions, `progress` the labelled ones too."""
    if part.kind == "labelled":
        samples: PartSamples = []
        for n in range(part.start, part.stop):
            question, gold, vector = labelled[n]
            best = match_library(
                question, vector, index, lookup=lookup, values=values, catalog=catalog, probe=probe
            ).best
            if best is not None and best.hard_ok and best.sql:
                ok = bool(gold) and same is not None and same(best.sql, gold)
                samples.append((best.features, ok, n % CV_FOLDS))  # in no fold of the library: spread
            if progress:
                progress(0)
        return samples
    ordinary = part.kind == "fold"
    found = cross_validate(
        index, vectors_of, is_correct=is_correct, lookup=lookup, values=values, catalog=catalog,
        only=[part.fold], probe=probe, siblings=not ordinary, progress=progress if ordinary else None,
        observe=observe if ordinary else None, details=details if ordinary else None,
    )  # fmt: skip
    return [(x, ok, part.fold) for x, ok in found]


def calibrate_library(
    index: LibraryIndex,
    vectors_of: Callable[[list[int]], np.ndarray],
    *,
    is_correct: Callable[[Entry, MatchResult], bool],
    lookup: ValueLookup,
    wrong_answer_cost: float,
    values: ValueIndex | None = None,
    catalog: CatalogSchema | None = None,
    probe: Callable[[str], bool] | None = None,
    labelled: Sequence[tuple[str, str, Sequence[float]]] = (),
    same: Callable[[str, str], bool] | None = None,
    progress: Callable[[int], None] | None = None,
    observe: Callable[[Entry, LibraryMatch, LibraryIndex], None] | None = None,
    details: list | None = None,
    run_parts: Callable[[list[Part], Callable[[Part], PartSamples]], list[PartSamples]] | None = None,
) -> LibraryCalibration:
    """P(correct) for library answers, fitted by grouped cross-validation over the library.

    The ordinary folds (whole paraphrase groups held out, a share of templates held out whole,
    unanswerable examples asked too), then the sibling pass (cross_validate: its samples train the
    risk, never count in the expected numbers). `labelled`: (question, gold SQL or "", vector of the
    masked question) not in the library, spread over the folds; `same(sql, gold)` judges their answers.
    `progress`, `observe` and `details` see the ordinary folds' questions (error analysis).

    `run_parts(parts, local)`: each part's samples, in the parts' order; by default `local(part)` for
    each in turn, in this process. A caller may have other processes do some (askdb's calibration
    service); the fit below sees the same samples in the same order either way.
    """
    parts = calibration_parts(len(labelled))

    def local(part: Part) -> PartSamples:
        return run_part(
            part, index, vectors_of, is_correct=is_correct, lookup=lookup, values=values, catalog=catalog,
            probe=probe, labelled=labelled, same=same, progress=progress, observe=observe, details=details,
        )  # fmt: skip

    found = run_parts(parts, local) if run_parts is not None else [local(part) for part in parts]
    samples, folds, siblings, sibling_folds = [], [], [], []
    for part, got in zip(parts, found, strict=True):
        if part.kind == "siblings":
            siblings += [(x, ok) for x, ok, _ in got]
            sibling_folds += [f for _, _, f in got]
        else:
            samples += [(x, ok) for x, ok, _ in got]
            folds += [f for _, _, f in got]
    risk = fit_risk(samples + siblings, wrong_answer_cost=wrong_answer_cost)
    risks = fold_risks(samples + siblings, folds + sibling_folds, wrong_answer_cost=wrong_answer_cost)
    scored = [(risks[f].predict(x), ok) for (x, ok), f in zip(samples, folds, strict=True)]
    asked = len(index.entries) + len(labelled)
    return LibraryCalibration(
        risk, samples, siblings, folds, risks, expected(scored, risk.threshold, asked), asked
    )


def decide(results: Sequence[MatchResult], threshold: float) -> tuple[MatchResult | None, list[MatchResult]]:
    """The result to answer with (or None to abstain) and the other confident results.

    Two confident templates that bind to different SQL may still mean the same thing: `decide_answer`
    runs the competitors and answers only when they agree.
    """
    confident = [r for r in results if r.answers(threshold)]
    if not confident:
        return None, []
    best = confident[0]
    return best, [r for r in confident[1:] if r.sql != best.sql]


@dataclass(frozen=True)
class Answer:
    """The decision on one question's matches: the result answered with and its rows, or why none."""

    best: MatchResult | None
    rows: Any = None
    refusal: str = ""  # R.DISAGREE or R.SQL_FAILED when a confident result was not answered
    detail: str = ""
    competitors: list[MatchResult] = field(default_factory=list)
    error: Exception | None = None  # what `run` raised, for R.SQL_FAILED (the engine tells a timeout apart)


def decide_answer(
    results: Sequence[MatchResult],
    threshold: float,
    run: Callable[[str], Any],
    *,
    failure: type[Exception] | tuple[type[Exception], ...] = Exception,
    rows_of: Callable[[Any], Any] = lambda result: result,
) -> Answer:
    """Answer with the best confident result when its SQL runs and every other confident result that
    binds to different SQL returns the same rows (compare.results_match); else no answer.

    `run(sql)` executes read-only and returns the rows (or a result whose rows `rows_of` gives: the
    engine keeps the whole result); `failure`: what it raises for SQL that fails (anything else, such
    as a privacy refusal, goes to the caller).
    """
    best, competitors = decide(results, threshold)
    if best is None:
        return Answer(None)
    try:
        rows = run(best.sql)
        for other in competitors:  # two confident readings must agree, or neither is trusted
            if not results_match(rows_of(rows), rows_of(run(other.sql))):
                return Answer(None, refusal=R.DISAGREE, detail=str(other.example_id), competitors=competitors)
    except failure as exc:
        return Answer(None, refusal=R.SQL_FAILED, detail=str(getattr(exc, "message", exc)),
                      competitors=competitors, error=exc)  # fmt: skip
    return Answer(best, rows, competitors=competitors)
