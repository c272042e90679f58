"""A calibration cut into parts (core/match/calibrate.py: folds cut into slices of FOLD_PART questions,
done in any order by any process) fits exactly what whole folds fit, and builds each fold's library
once per process."""

from __future__ import annotations

from core import match as L
from core.match import calibrate
from tests.core.match.test_library import (
    ADMISSION_TYPE_SQL,
    AGE_AT_VISIT_SQL,
    AGE_SQL,
    VALUES,
    build_index,
    no_lookup,
)

PAIRS = [
    *[(f"what was the admission type of patient {p} on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=p))
      for p in range(10001, 10007)],
    *[(f"how was patient {p} admitted on the first hospital visit?", ADMISSION_TYPE_SQL.format(p=p))
      for p in range(10011, 10015)],
    *[(f"what age was patient {p} on the first hospital visit?", AGE_AT_VISIT_SQL.format(p=p)) for p in range(10021, 10026)],
    *[(f"how many patients are older than {n}?", AGE_SQL.format(n=n)) for n in (50, 60, 65, 70, 80)],
    *[(f"count the number of patients older than {n}.", AGE_SQL.format(n=n)) for n in (55, 75)],
    ("how tall is the moon?", ""),
    ("who will win the next election?", ""),
]  # fmt: skip


def _calibrate(index, run_parts=None, details=None, observe=None):
    return L.calibrate_library(
        index, lambda held: index.matrix[held], is_correct=lambda e, best: best.sql == e.template.sql,
        lookup=no_lookup, values=VALUES, wrong_answer_cost=4.0, run_parts=run_parts, details=details,
        observe=observe,
    )  # fmt: skip


def test_folds_cut_into_parts_fit_what_whole_folds_fit(monkeypatch):
    index = build_index(PAIRS)
    whole = _calibrate(index)
    monkeypatch.setattr(calibrate, "FOLD_PART", 2)
    monkeypatch.setattr(calibrate, "TAIL_PART", 1)  # the last fold's parts: smaller still
    built, subset = [], L.LibraryIndex.subset

    def counted(self, keep):
        built.append(len(keep))
        return subset(self, keep)

    monkeypatch.setattr(L.LibraryIndex, "subset", counted)
    seen: list[list] = []

    def backwards(parts, local):  # another process's order: the last part first
        seen.append(parts)
        return list(reversed([local(p) for p in reversed(parts)]))

    cut = _calibrate(index, backwards)
    parts = seen[0]
    sizes = calibrate.fold_sizes(index)
    assert len(parts) > 2 * calibrate.CV_FOLDS  # some fold was cut
    assert all(p.stop - p.start <= 2 for p in parts if p.stop)
    # every question of every fold asked once, in its fold's order
    for (kind, fold), n in sizes.items():
        slices = sorted((p.start, p.stop) for p in parts if (p.kind, p.fold) == (kind, fold) and p.stop)
        assert [i for a, b in slices for i in range(a, b)] == list(range(n))
    assert cut.samples == whole.samples and cut.siblings == whole.siblings
    assert cut.sample_folds == whole.sample_folds and cut.expected == whole.expected
    assert cut.risk.to_dict() == whole.risk.to_dict()
    # one library per fold, not one per part; none left on the index afterwards
    assert len(built) == len(sizes)
    assert "_cv_train" not in index.__dict__


def test_without_sizes_or_questions_a_fold_is_one_part():
    """No sizes (or a fold with no question): one part per fold, stop 0 (the whole fold)."""
    whole = [(k, f, 0, 0) for k in ("fold", "siblings") for f in range(calibrate.CV_FOLDS)]
    assert [(p.kind, p.fold, p.start, p.stop) for p in calibrate.calibration_parts(0)] == whole
    assert [(p.kind, p.fold, p.start, p.stop) for p in calibrate.calibration_parts(0, {})] == whole
    labelled = calibrate.calibration_parts(450, {("fold", 0): 600})
    assert [(p.start, p.stop) for p in labelled if p.kind == "fold" and p.fold == 0] == [
        (0, 250),
        (250, 500),
        (500, 600),
    ]
    # the labelled questions come last: cut as the calibration's tail (TAIL_PART)
    assert [(p.start, p.stop) for p in labelled if p.kind == "labelled"] == [
        (a, min(a + calibrate.TAIL_PART, 450)) for a in range(0, 450, calibrate.TAIL_PART)
    ]


def test_the_last_fold_is_cut_small_so_that_the_processes_end_together():
    """Processes share each fold from both ends and meet in it; in the last fold the one that ends
    first waits for the other's part: there, and only there, parts of TAIL_PART questions (the
    labelled questions' when they come last; a last fold with no question leaves it to the one before)."""
    sizes = {(k, f): 600 for k in ("fold", "siblings") for f in range(calibrate.CV_FOLDS)}
    last = ("siblings", calibrate.CV_FOLDS - 1)

    def cut(parts, kind, fold):
        return [(p.start, p.stop) for p in parts if (p.kind, p.fold) == (kind, fold)]

    parts = calibrate.calibration_parts(0, sizes)
    small = [(a, a + calibrate.TAIL_PART) for a in range(0, 600, calibrate.TAIL_PART)]
    assert calibrate.TAIL_PART < calibrate.FOLD_PART and cut(parts, *last) == small
    assert cut(parts, "siblings", calibrate.CV_FOLDS - 2) == [(0, 250), (250, 500), (500, 600)]
    assert cut(parts, "fold", 0) == [(0, 250), (250, 500), (500, 600)]
    with_labelled = calibrate.calibration_parts(300, sizes)
    assert cut(with_labelled, *last) == [(0, 250), (250, 500), (500, 600)]
    assert cut(with_labelled, "labelled", 0) == small[:6]
    parts = calibrate.calibration_parts(0, {**sizes, last: 0})
    assert cut(parts, *last) == [(0, 0)] and cut(parts, "siblings", calibrate.CV_FOLDS - 2) == small


def test_a_fold_is_cut_by_family_and_its_parts_put_back_in_its_order(monkeypatch):
    """A fold's parts are cut in template-key order (by_family: each process composes for the
    families it asks), yet their samples go back in the fold's own order: done in any order, one
    question per part, the parts fit exactly what whole folds fit."""
    import random

    index = build_index(PAIRS)
    details: tuple[list, list] = ([], [])
    observed: tuple[list, list] = ([], [])
    whole = _calibrate(index, details=details[0], observe=lambda e, f, i: observed[0].append(e.question))
    monkeypatch.setattr(calibrate, "FOLD_PART", 1)
    seen: list[list] = []

    def shuffled(parts, local):
        seen.append(parts)
        order = list(range(len(parts)))
        random.Random(7).shuffle(order)
        done = {n: local(parts[n]) for n in order}
        return [done[n] for n in range(len(parts))]

    cut = _calibrate(
        index, shuffled, details=details[1], observe=lambda e, f, i: observed[1].append(e.question)
    )
    assert cut.samples == whole.samples and cut.siblings == whole.siblings
    # the benchmark pairs details with the samples one by one: handed on in the folds' order too
    assert [(e.question, ok) for e, _, ok in details[1]] == [(e.question, ok) for e, _, ok in details[0]]
    assert [ok for _, _, ok in details[1]] == [ok for _, ok in cut.samples] and details[1]
    assert observed[1] == observed[0] and len(observed[0]) == len(index.entries)
    assert cut.sample_folds == whole.sample_folds and cut.sibling_folds == whole.sibling_folds
    assert cut.risk.to_dict() == whole.risk.to_dict() and cut.expected == whole.expected
    # the parts of a fold, in order, ask its questions by template key: a family is never split
    # between parts that other families' parts stand between
    for held in calibrate.grouped_folds(index.entries):
        keys = [index.entries[held[n]].key for n in calibrate.by_family(index, held)]
        assert keys == sorted(keys)
        assert len({k for k in keys}) == len([k for n, k in enumerate(keys) if n == 0 or keys[n - 1] != k])
