"""A composition's family (index.paraphrase_family) is the family a whole LibraryIndex of its
paraphrases reads, with the base library's wording, for every composition the corpus makes; and it
shares nothing a caller could change with the library's families."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.match import LibraryIndex, build_template, composing, entry_for
from core.match.index import Family, paraphrase_family
from core.match.library import match_library
from core.match.reading import mask_question
from tests.core.match import corpus


def _whole_index_family(entries, base: Family) -> Family:
    """What composing.composed_family was before: a LibraryIndex of the paraphrases alone, its family
    given the base library's wording."""
    own = LibraryIndex(entries, np.zeros((len(entries), 1), dtype=np.float32)).families[entries[0].key]
    return dataclasses.replace(
        own,
        neutral=base.neutral,
        synonyms=base.synonyms,
        subjects=base.subjects,
        core=own.core - base.neutral,
        paraphrases=tuple(dict.fromkeys((w - base.neutral, o) for w, o in own.paraphrases)),
    )


@pytest.fixture(scope="module")
def composed_calls():
    """Every (composed paraphrases, base family, family made) of matching every corpus question."""
    built = corpus.build()
    lookup = corpus.lookup_in(corpus._values_by_column(built))
    cases = corpus.questions()
    vectors = corpus.vectors_for([mask_question(q, built.values) for _, q in cases])
    calls = []
    made = composing.composed_family

    def recorded(entries, base):
        family = made(entries, base)
        calls.append((list(entries), base, family))
        return family

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(composing, "composed_family", recorded)
        for (_, question), vector in zip(cases, vectors, strict=True):
            match_library(question, vector, built.index, lookup=lookup, values=built.values, risk=corpus.RISK)
    return built, calls


def test_the_light_family_is_the_whole_index_family_for_every_corpus_composition(composed_calls):
    _, calls = composed_calls
    assert len(calls) >= 200, "the corpus must compose"
    assert sum(len(entries) > 1 for entries, _, _ in calls) >= 50, "…compositions of several paraphrases"
    differ = [e[0].question for e, base, family in calls if family != _whole_index_family(e, base)]
    assert not differ, f"{len(differ)} composed families differ, e.g. {differ[0]!r}"


COLUMNS = ("gender", "anchor_age", "dod", "anchor_year", "race")
WORDS = ("gender", "age", "death date", "anchor year", "race")


def _wording_library() -> LibraryIndex:
    """Four templates each said with and without "documented": library wording (left out in
    OPTIONAL_TEMPLATES templates), which the corpus library is too small to have; the fifth says it in
    every paraphrase (it would be its subject, were it not wording)."""
    entries = []
    for column, word in zip(COLUMNS, WORDS, strict=True):
        plain = (
            f"what is the {word} of patient"
            if column != "race"
            else f"what is the recorded documented {word} of patient"
        )
        for said in (plain, f"what is the documented {word} of patient"):
            patient = 10000 + len(entries)
            question, sql = (
                f"{said} {patient}?",
                f"SELECT p.{column} FROM mimiciv_hosp.patients AS p WHERE p.subject_id = {patient}",
            )
            entry = entry_for(len(entries), question, sql, build_template(question, sql))
            assert entry is not None
            entries.append(entry)
    return LibraryIndex(entries, np.ones((len(entries), 1), dtype=np.float32))


def test_with_library_wording_the_light_family_is_still_the_whole_index_family():
    # Attack: the corpus library has no wording of its own (neutral words), so there the light family
    # would pass without taking the library's wording out of its core and paraphrases; this one has.
    index = _wording_library()
    wording = next(iter(index.families.values()))
    assert wording.neutral, "the library must have wording of its own"
    assert len(index.families) == len(COLUMNS)
    for key, idx in index.members.items():
        entries = [index.entries[i] for i in idx]
        assert paraphrase_family(entries, wording) == _whole_index_family(entries, wording)
        assert paraphrase_family(entries, wording) == index.families[key]  # the library reads it alike


def test_a_composed_family_shares_nothing_changeable_with_the_librarys(composed_calls):
    built, calls = composed_calls
    entries, base, _ = next(c for c in calls if c[2].operators and c[2].signature_words)
    family = composing.composed_family(entries, base)
    library = [dataclasses.replace(f) for f in built.index.families.values()]  # shallow: same objects
    before = [(f.operators.copy(), f.signature_words.copy(), dict(f.synonyms)) for f in library]
    # Mutate the composed family's own state: no library family sees it.
    family.operators["attack"] = frozenset({"x"})
    family.signature_words[("attack",)] = frozenset({"x"})
    family.__dict__.setdefault("_operator_reasons", {})["attack"] = ("x",)
    with pytest.raises(TypeError):
        family.synonyms["attack"] = frozenset({"x"})  # the library-wide synonyms: read only here
    after = [(f.operators, f.signature_words, dict(f.synonyms)) for f in library]
    assert after == before
    assert all("attack" not in f.__dict__.get("_operator_reasons", {}) for f in built.index.families.values())
    # …and the other way round: the library's change never reaches a family made afterwards.
    again = composing.composed_family(entries, base)
    base.operators["attack2"] = frozenset({"y"})
    assert "attack2" not in again.operators
    assert "attack" not in composing.composed_family(entries, base).operators
    del base.operators["attack2"]
