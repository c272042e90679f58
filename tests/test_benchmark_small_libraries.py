"""The train-side proxy of issue #26's small-library target (benchmarks/ehrsql.py --small --asked 0):
the questions a small library is asked are the rest of the split, none of them a question it holds,
no answerable one of a template it holds, and the unanswerable questions it did not sample."""

from __future__ import annotations

import numpy as np
import pytest

from core.match import UNANSWERABLE, LibraryIndex, build_template, entry_for
from tests.benchmark_modules import load_benchmark

PAIRS = [
    (f"what is the gender of patient {n}?", f"SELECT gender FROM patients WHERE subject_id = {n}") for n in (1, 2)
] + [
    (f"how old is patient {n}?", f"SELECT anchor_age FROM patients WHERE subject_id = {n}") for n in (3, 4)
] + [
    (f"when was patient {n} born?", f"SELECT dob FROM patients WHERE subject_id = {n}") for n in (5, 6)
] + [
    (f"how many admissions has patient {n} had?", f"SELECT COUNT(*) FROM admissions WHERE subject_id = {n}")
    for n in (7, 8)
] + [(q, "") for q in ("what is the patient's favourite colour?", "who is the nurse on duty?",
                      "what will the weather be tomorrow?", "which doctor is the kindest?")]  # fmt: skip


@pytest.fixture
def bench(monkeypatch):
    return load_benchmark(monkeypatch, "ehrsql.py", "bench_ehrsql_small")


def library(bench):
    entries = [
        entry_for(n, q, sql, build_template(q, sql, dialect="sqlite") if sql else None)
        for n, (q, sql) in enumerate(PAIRS)
    ]
    index = LibraryIndex(entries, np.eye(len(entries), dtype=np.float32))
    return bench.Library(index, None, None, None, 0, 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_rest_holds_no_question_and_no_template_of_the_small_library(bench, seed):
    lib = library(bench)
    sub = bench.sample_library(lib, 0.25, seed)
    rest = bench.library_rest(lib, sub, asked=0, seed=seed)
    held = {e.question for e in sub.index.entries}
    held_keys = set(sub.index.families)
    assert len(sub.index.families) == 1 and len(rest) + len(held) == len(PAIRS)
    assert not {q for _, q, _ in rest} & held
    answerable = [(q, sql) for _, q, sql in rest if sql]
    assert len(answerable) == 6  # the three templates left out, both paraphrases each
    for q, sql in answerable:  # the gold SQL is bound back to each question's own values
        assert entry_for(None, q, sql, build_template(q, sql, dialect="sqlite")).key not in held_keys
    unanswerable = [q for _, q, sql in rest if not sql]
    assert len(unanswerable) == 3 and len(sub.index.members[UNANSWERABLE]) == 1


def test_asked_samples_that_many_of_the_rest_and_the_same_ones_for_a_seed(bench):
    lib = library(bench)
    sub = bench.sample_library(lib, 0.25, 0)
    some = bench.library_rest(lib, sub, asked=4, seed=7)
    assert len(some) == 4 and some == bench.library_rest(lib, sub, asked=4, seed=7)
    assert {x[0] for x in some} <= {x[0] for x in bench.library_rest(lib, sub, asked=0)}
