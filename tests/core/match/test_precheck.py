"""The composition precheck (core/match/precheck.py) must not change a result: a composition the
operators rule refuses is matched with its operator family alone (and its first paraphrase alone:
composing.try_plan), and every result of every corpus question (refused ones too: their reasons,
features and masked question) is the one the whole family, each paraphrase matched, gives. Attack: a composition whose operator words agree must be judged by its whole family (the
meaning guard reads its words), never waved through or refused by the reduced one."""

from __future__ import annotations

import pytest

from core.match import LibraryIndex, build_template, composing, entry_for, precheck
from core.match.library import match_library
from core.match.operators import question_operators
from core.match.reading import mask_question
from tests.core.match import corpus


def _results(index, values, lookup, cases, vectors) -> list:
    return [
        match_library(q, v, index, lookup=lookup, values=values, risk=corpus.RISK).results
        for (_, q), v in zip(cases, vectors, strict=True)
    ]


def test_every_corpus_result_is_the_one_the_whole_family_gives(monkeypatch):
    built = corpus.build()
    lookup = corpus.lookup_in(corpus._values_by_column(built))
    cases = corpus.questions()
    vectors = corpus.vectors_for([mask_question(q, built.values) for _, q in cases])
    used, several = [], []

    def counted(ops, entries):
        family = precheck.refused_family(ops, entries)
        used.append(family is not None)
        several.append(family is not None and len(entries) > 1)
        return family

    monkeypatch.setattr(composing, "refused_family", counted)
    prechecked = _results(built.index, built.values, lookup, cases, vectors)
    monkeypatch.setattr(composing, "refused_family", lambda ops, entries: None)
    whole = _results(built.index, built.values, lookup, cases, vectors)
    assert sum(used) >= 20, "the corpus must exercise the precheck"
    assert any(not u for u in used), "…and compositions it leaves to the whole family"
    # Attack on try_plan's first paraphrase alone: a refused composition of several paraphrases must
    # give the result matching each of them gives (the whole family's path matches each).
    assert sum(several) >= 10, "the corpus must refuse compositions of several paraphrases"
    changed = [(q, a, b) for (_, q), a, b in zip(cases, prechecked, whole, strict=True) if a != b]
    assert not changed, f"{len(changed)} questions' results changed, e.g. {changed[0][0]!r}"


def _entries(pairs):
    out = []
    for n, (question, sql) in enumerate(pairs, start=1):
        entry = entry_for(n, question, sql, build_template(question, sql))
        assert entry is not None
        out.append(entry)
    return out


SINCE = [
    ("how many patients were admitted since 2100?",
     "SELECT COUNT(*) FROM mimiciv_hosp.admissions AS a WHERE EXTRACT(YEAR FROM a.admittime) >= 2100"),
    ("count the patients admitted since 2101.",
     "SELECT COUNT(*) FROM mimiciv_hosp.admissions AS a WHERE EXTRACT(YEAR FROM a.admittime) >= 2101"),
]  # fmt: skip


def test_the_operator_family_is_the_whole_familys_operators():
    entries = _entries(SINCE)
    assert len({e.key for e in entries}) == 1
    whole = LibraryIndex(entries, [[1.0]] * len(entries)).families[entries[0].key]
    reduced = precheck.operator_family(entries)
    assert reduced.operators == whole.operators
    assert reduced.signatures == whole.signatures


@pytest.mark.parametrize(
    ("question", "reduced"),
    [
        ("how many patients were admitted in 2100?", True),  # "in" where every wording says "since"
        ("what is the first admission time of patient 10004235?", True),
        # Attack: the operator words agree; "who died" is no wording of the family, so only the whole
        # family (its words) can refuse it: the reduced one must never stand in for it.
        ("how many patients who died were admitted since 2100?", False),
        ("how many patients were admitted since 2100?", False),
    ],
)
def test_the_reduced_family_stands_in_only_where_the_operators_refuse(question, reduced):
    entries = _entries(SINCE)
    found = precheck.refused_family(question_operators(question), entries)
    assert (found is not None) is reduced


def test_the_operator_family_is_the_whole_familys_operators_for_every_corpus_template():
    """precheck.operator_family reads each paraphrase's operators alone (index.library_operators), not
    its words: for every template of the corpus library, the same operators and signatures as the
    family LibraryIndex reads with the words."""
    built = corpus.build()
    compared = 0
    for key, members in built.index.members.items():
        entries = [built.index.entries[i] for i in members]
        if entries[0].template is None:
            continue
        reduced = precheck.operator_family(entries)
        whole = built.index.families[key]
        assert (reduced.operators, reduced.signatures) == (whole.operators, whole.signatures), key
        compared += 1
    assert compared >= 100
