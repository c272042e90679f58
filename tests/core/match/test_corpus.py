"""The match stage's fixture corpus (corpus.py): every case decides as recorded in fixtures/cases.jsonl.

A change to a rule, a word list, binding or the risk model that changes a decision fails here with
the cases it changed; if the change is meant, regenerate the file (see corpus.py) and commit its diff.
"""

from __future__ import annotations

import json

import pytest

from tests.core.match import corpus


@pytest.fixture(scope="module")
def decided() -> list[dict]:
    return corpus.decisions(corpus.build(), corpus.RISK)


def test_the_corpus_is_large_and_covers_every_kind_of_case():
    expected = [json.loads(line) for line in corpus.CASES.read_text().splitlines()]
    kinds = {c["kind"] for c in expected}
    assert len(expected) >= 300
    assert kinds == {"library", "paraphrase", "values", "condition", "operator", "adversarial", "reading"}
    assert (
        sum(1 for c in expected if "answer" in c) >= 100 and sum(1 for c in expected if "refused" in c) >= 100
    )


def test_every_case_decides_as_recorded(decided):
    expected = [json.loads(line) for line in corpus.CASES.read_text().splitlines()]
    assert [(c["kind"], c["question"]) for c in decided] == [(c["kind"], c["question"]) for c in expected], (
        "the corpus's questions changed: regenerate fixtures/cases.jsonl (corpus.py --update)"
    )
    changed = [
        f"{e['kind']} {e['question']!r}: expected {e.get('answer') or e.get('refused')} (p {e['p']}), "
        f"got {d.get('answer') or d.get('refused')} (p {d['p']})"
        for d, e in zip(decided, expected, strict=True)
        if d != e
    ]
    assert not changed, f"{len(changed)} decisions changed:\n" + "\n".join(changed[:40])


def test_the_adversarial_questions_are_never_answered_wrong(decided):
    """Abstain, or (a condition another verified question expresses, composed) answer right."""
    answered = {c["question"]: c["answer"] for c in decided if c["kind"] == "adversarial" and "answer" in c}
    wrong = {q: sql for q, sql in answered.items() if not corpus.answered_right(q, sql)}
    assert not wrong


def test_the_library_answers_its_own_questions_with_other_values(decided):
    """A library question with other ids and years is the same question: most must answer, with the
    new values in the SQL."""
    swapped = [c for c in decided if c["kind"] == "values"]
    answered = [c for c in swapped if "answer" in c]
    assert len(answered) >= 0.9 * len(swapped)
    for case in answered:
        for value in corpus.OTHER_IDS:
            if value in case["question"]:
                assert value in case["answer"], case
