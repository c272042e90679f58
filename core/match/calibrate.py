"""Calibration and decision: P(correct) fitted by grouped cross-validation over the library itself, and
the decision to answer with a match. One definition of each: the app (the engine, `calibrate_library`
through askdb's services) and the benchmark (benchmarks/ehrsql.py) call these, so they cannot drift."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.compare import results_match
from core.match import reasons as R
from core.match.candidate import MatchResult
from core.match.compose import conditions_of
from core.match.index import UNANSWERABLE, Entry, LibraryIndex, library_reading
from core.match.items import shape_of
from core.match.library import LibraryMatch, Vote, match_library
from core.match.risk import Calibration, expected, fit_risk, fold_risks
from core.match.spans import VALUE
from core.match.template import Template
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
    within: tuple[int, int] | None = None,
    positions_out: list[int] | None = None,
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

    `within`: a part of a fold (run_part): its held-out questions [start, stop) in family order
    (by_family), asked in the fold's order; the fold's library is built once per process and kept
    while its parts are asked (_train). `positions_out` gets each sample's place in the fold's
    questions, to put the parts' samples back in the fold's order (calibrate_library).
    """
    samples: list[tuple[dict[str, float], bool]] = []
    done = 0
    for fold, held in enumerate(grouped_folds(index.entries, folds, siblings=siblings)):
        if only is not None and fold not in only:
            continue
        train = _train(index, held, (folds, fold, siblings), keep=within is not None)
        held = _asked(index, held, siblings)
        at = list(range(len(held)))
        if within is not None:
            at = sorted(by_family(index, held)[within[0] : within[1]])
            held = [held[n] for n in at]
        vectors = vectors_of(held)
        votes = Vote.each(vectors, train)  # the fold library's matrix read once for the part
        for n, i, vector, vote in zip(at, held, vectors, votes, strict=True):
            entry = index.entries[i]
            found = match_library(
                entry.question, vector, train, lookup=lookup, values=values, catalog=catalog, probe=probe,
                vote=vote,
            )  # fmt: skip
            if observe is not None:
                observe(entry, found, train)
            best = found.best
            if best is not None and best.hard_ok and best.sql:
                ok = entry.template is not None and is_correct(entry, best)
                samples.append((best.features, ok))
                if folds_out is not None:
                    folds_out.append(fold + (folds if siblings else 0))
                if positions_out is not None:
                    positions_out.append(n)
                if details is not None:  # for tuning on the library: what answered what
                    details.append((entry, best, ok))
            done += 1
            if progress:
                progress(done)
    return samples


def _asked(index: LibraryIndex, held: list[int], siblings: bool) -> list[int]:
    """The held-out questions a fold asks: the sibling pass only those whose template the ordinary
    folds keep (the ordinary folds already ask the rest without their template)."""
    if not siblings:
        return held
    return [i for i in held if index.entries[i].template and not whole_template(index.entries[i].key)]


def by_family(index: LibraryIndex, held: list[int]) -> list[int]:
    """The places of a fold's questions (indices into `held`) ordered by template key: what the
    parts of a fold are cut from (calibration_parts), so that each part asks a few neighbouring
    families. Why: a question's compositions, parses and readings are made from the library
    templates it matches, mostly its own family's neighbours, and each process keeps them (keyed
    by content): two processes that ask different families of a fold make fewer of them twice
    (EHRSQL train, 2 processes: compositions made twice 3,291 -> 1,015 of 17,791, SQL parsed twice
    8,211 -> 3,687 of 26,111, readings 7,466 -> 5,279 of 21,109, against parts cut in the fold's
    order). Each process then builds every fold's library (a fraction of a second each)."""
    return sorted(range(len(held)), key=lambda n: (index.entries[held[n]].key, n))


def _train(index: LibraryIndex, held: list[int], fold: tuple, *, keep: bool) -> LibraryIndex:
    """The library without one fold's questions. `keep`: built once for all that fold's parts (a
    subset builds its families, a second at 5,000 examples), on the index; only the latest fold's is
    kept: a process does a fold's parts one after another (calibrate_library drops it at the end)."""
    memo = index.__dict__.setdefault("_cv_train", {}) if keep else {}
    if fold not in memo:
        memo.clear()
        held_set = set(held)
        memo[fold] = index.subset([i for i in range(len(index.entries)) if i not in held_set])
    return memo[fold]


def fold_sizes(index: LibraryIndex, folds: int = CV_FOLDS) -> dict[tuple[str, int], int]:
    """How many questions each fold of the ordinary folds and of the sibling pass asks, by
    (Part.kind, fold): what calibration_parts cuts into parts."""
    sizes = {}
    for kind, siblings in (("fold", False), ("siblings", True)):
        for fold, held in enumerate(grouped_folds(index.entries, folds, siblings=siblings)):
            sizes[(kind, fold)] = len(_asked(index, held, siblings))
    return sizes


def warm_up(templates: Iterable[tuple[int | None, Template, str]]) -> None:
    """Read what every fold's library reads of each template (its guard reading, its conditions, its
    shape) into the per-template caches, which are keyed by content: a worker process does it while
    the calling process builds the library it will hand over (a template that differs there is
    read again, never wrongly). `templates`: (example id, template, its stored key or "") of the
    library's examples; the shape is read once per key (items.shape_of), as the folds read it."""
    for example_id, template, key in templates:
        if not template.usable:
            continue
        spans = tuple((x.start, x.end) for x in template.slots if x.type == VALUE)
        library_reading(template.masked_question, template.question, spans)  # as LibraryIndex._families
        conditions_of(example_id, template)
        shape_of(template, key)


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
    sibling_folds: list[int] = field(default_factory=list)  # for refitting the fold risks (benchmarks)


@dataclass(frozen=True)
class Part:
    """One piece of a calibration's work, which any process holding the same library can do alone:
    a slice [start, stop) of an ordinary fold's questions or of a sibling-pass fold's, in family
    order (by_family; stop 0: the whole fold), or of the labelled questions.
    Its samples do not depend on which process does it or in what order, so the pieces can be shared
    between processes and put back together in order (calibrate_library's `run_parts`)."""

    kind: str  # "fold", "siblings" or "labelled"
    fold: int = 0
    start: int = 0
    stop: int = 0


LABELLED_PART = 200  # labelled questions per part: small enough that two processes finish together
# A fold's questions per part: a fold is a fifth of the library (1,000 questions, 10 s at 5,000
# examples), and the process that finishes first waits for the other's last part, on average half of
# one: small parts keep both cores busy to the end (each process builds a fold's library once).
FOLD_PART = 250
# The questions per part of the calibration's last fold (or of the labelled questions, when they come
# last): processes share a fold from both ends and meet in it, and the last one to end its part is
# the calibration's tail, the others idle meanwhile (EHRSQL train, 2 processes: a part of FOLD_PART
# questions is ~3 s, a tail of ~1.5 s on average). Small parts there, and only there: each part costs
# a worker a round trip and a collection (calibration_worker.settle).
TAIL_PART = 50


def calibration_parts(labelled: int, sizes: dict[tuple[str, int], int] | None = None) -> list[Part]:
    """The parts of a calibration with `labelled` labelled questions, in the order their samples go;
    `sizes` (fold_sizes): each fold cut into parts of FOLD_PART questions, else one part per fold;
    the last fold with questions (the labelled ones when there are) in parts of TAIL_PART."""
    counts = [((kind, f), sizes.get((kind, f), 0) if sizes is not None else 0)
              for kind in ("fold", "siblings") for f in range(CV_FOLDS)]  # fmt: skip
    counts.append((("labelled", 0), labelled))
    last = max((n for n, (_, size) in enumerate(counts) if size), default=-1)
    parts = []
    for n, ((kind, f), size) in enumerate(counts):
        step = TAIL_PART if n == last else LABELLED_PART if kind == "labelled" else FOLD_PART
        parts += [Part(kind, f, a, min(a + step, size)) for a in range(0, size, step)]
        if not size and kind != "labelled":
            parts.append(Part(kind, f))
    return parts


PartSamples = list[tuple[dict[str, float], bool, int, int]]  # (features, correct, fold, place)


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
    """The held-out samples of one part, each with its fold and its place among the fold's (or the
    labelled) questions (see calibrate_library); `progress`, `observe` and `details` see the
    ordinary folds' questions, `progress` the labelled ones too."""
    if part.kind == "labelled":
        samples: PartSamples = []
        votes = Vote.each([labelled[n][2] for n in range(part.start, part.stop)], index)
        for n, vote in zip(range(part.start, part.stop), votes, strict=True):
            question, gold, vector = labelled[n]
            best = match_library(
                question, vector, index, lookup=lookup, values=values, catalog=catalog, probe=probe, vote=vote
            ).best
            if best is not None and best.hard_ok and best.sql:
                ok = bool(gold) and same is not None and same(best.sql, gold)
                samples.append((best.features, ok, n % CV_FOLDS, n))  # in no fold of the library: spread
            if progress:
                progress(0)
        return samples
    ordinary = part.kind == "fold"
    places: list[int] = []
    found = cross_validate(
        index, vectors_of, is_correct=is_correct, lookup=lookup, values=values, catalog=catalog,
        only=[part.fold], probe=probe, siblings=not ordinary, progress=progress if ordinary else None,
        observe=observe if ordinary else None, details=details if ordinary else None,
        within=(part.start, part.stop) if part.stop else None, positions_out=places,
    )  # fmt: skip
    return [(x, ok, part.fold, n) for (x, ok), n in zip(found, places, strict=True)]


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
    parts = calibration_parts(len(labelled), fold_sizes(index))
    seen: list[tuple[str, tuple]] = []  # what observe and details get, handed on in the folds' order

    def local(part: Part) -> PartSamples:
        return run_part(
            part, index, vectors_of, is_correct=is_correct, lookup=lookup, values=values, catalog=catalog,
            probe=probe, labelled=labelled, same=same, progress=progress,
            observe=(lambda *x: seen.append(("observe", x))) if observe is not None else None,
            details=_Noted(seen) if details is not None else None,
        )  # fmt: skip

    try:
        found = run_parts(parts, local) if run_parts is not None else [local(part) for part in parts]
    finally:
        index.__dict__.pop("_cv_train", None)  # the last fold's library (_train): not kept with the index
    _hand_on(index, seen, observe, details)
    samples, folds, siblings, sibling_folds = [], [], [], []
    for kind, got in _in_order(parts, found):
        if kind == "siblings":
            siblings += [(x, ok) for x, ok, _, _ in got]
            sibling_folds += [f for _, _, f, _ in got]
        else:
            samples += [(x, ok) for x, ok, _, _ in got]
            folds += [f for _, _, f, _ in got]
    risk = fit_risk(samples + siblings, wrong_answer_cost=wrong_answer_cost)
    risks = fold_risks(samples + siblings, folds + sibling_folds, wrong_answer_cost=wrong_answer_cost)
    scored = [(risks[f].predict(x), ok) for (x, ok), f in zip(samples, folds, strict=True)]
    asked = len(index.entries) + len(labelled)
    return LibraryCalibration(
        risk, samples, siblings, folds, risks, expected(scored, risk.threshold, asked), asked, sibling_folds
    )


class _Noted(list):
    """calibrate_library's `details` while parts run: each item noted with observe's, in one list."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.seen = seen

    def append(self, item) -> None:
        self.seen.append(("details", item))


def _hand_on(index: LibraryIndex, seen: list, observe, details: list | None) -> None:
    """Hand what the ordinary folds' questions made to `observe` and `details` in the order one pass
    over each fold makes it (a fold's parts are cut in family order, by_family): the benchmark pairs
    `details` with the samples one by one, and compares `observe`'s rows between versions."""
    place = {
        id(index.entries[i]): (fold, n)
        for fold, held in enumerate(grouped_folds(index.entries))
        for n, i in enumerate(held)
    }
    for what, item in sorted(seen, key=lambda s: place[id(s[1][0])]):  # stable: a question's own order
        if what == "observe" and observe is not None:
            observe(*item)
        elif details is not None:
            details.append(item)


def _in_order(parts: list[Part], found: list[PartSamples]) -> list[tuple[str, PartSamples]]:
    """Each fold's (and the labelled questions') samples, from all its parts, in the order one pass
    over its questions makes them: a fold's parts are cut in family order (by_family), so their
    samples interleave; every sample's place puts it back, so the fit sees the same samples in the
    same order however the fold was cut."""
    by_fold: dict[tuple[str, int], PartSamples] = {}
    for part, got in zip(parts, found, strict=True):
        by_fold.setdefault((part.kind, part.fold), []).extend(got)
    return [(kind, sorted(got, key=lambda s: s[3])) for (kind, _), got in by_fold.items()]


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
