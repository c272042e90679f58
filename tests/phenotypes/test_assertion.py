"""The ConText judge (medspaCy) on 300 annotated sentences, and that it needs no network."""

from __future__ import annotations

import socket
from collections import defaultdict
from pathlib import Path

import pytest

from phenotypes import assertion
from phenotypes.assertion import ASSERTIONS, AssertionClassifier

DATA = Path(__file__).with_name("data") / "assertions.psv"


def annotated() -> list[tuple[str, str, str, str]]:
    """(assertion, term, section, sentence) rows of the annotated set."""
    rows = []
    for line in DATA.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(tuple(part.strip() for part in line.split("|", 3)))
    return rows


def predict(rows) -> list[str]:
    """Each sentence judged by a classifier built for its own term, as a phenotype run does."""
    by_term: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_term[row[1]].append(i)
    predicted = [""] * len(rows)
    for term, indexes in by_term.items():
        judged = AssertionClassifier([term]).judge([(rows[i][3], rows[i][2]) for i in indexes])
        for i, j in zip(indexes, judged, strict=True):
            predicted[i] = j.assertion
    return predicted


def test_the_annotated_set_has_every_category_and_at_least_300_sentences():
    rows = annotated()
    assert len(rows) >= 300
    assert {r[0] for r in rows} == set(ASSERTIONS)
    assert all(r[1].lower() in r[3].lower() for r in rows), "each sentence names its term"


def test_accuracy_floor_on_the_annotated_sentences():
    rows = annotated()
    predicted = predict(rows)
    accuracy = sum(p == r[0] for p, r in zip(predicted, rows, strict=True)) / len(rows)
    assert accuracy >= 0.90
    negated = [(p == "negated", r[0] == "negated") for p, r in zip(predicted, rows, strict=True)]
    tp = sum(p and a for p, a in negated)
    assert tp / sum(p for p, _ in negated) >= 0.9  # precision of "negated"
    assert tp / sum(a for _, a in negated) >= 0.9  # recall of "negated"


@pytest.mark.parametrize(
    "sentence, section, expected",
    [
        # The guard is the section: a mention in Family History is a relative's, with no cue word.
        ("Heart failure.", "Family History", "family"),
        # A negation cue far before the term, across a "but", does not reach it.
        ("No chest pain but she was treated for heart failure.", "Brief Hospital Course", "affirmed"),
        # medspaCy's default reads "evaluate for" as a negation; a radiology indication asks.
        ("Evaluate for heart failure.", "INDICATION", "hypothetical"),
        ("Return if you develop heart failure symptoms.", "Discharge Instructions", "hypothetical"),
    ],
)
def test_sections_and_terminators_change_the_assertion(sentence, section, expected):
    (judged,) = AssertionClassifier(["heart failure"]).judge([(sentence, section)])
    assert judged.assertion == expected


def test_building_and_judging_needs_no_network(monkeypatch):
    """medspaCy works on a blank tokenizer: nothing is downloaded, no socket is opened."""
    assertion._base_nlp.cache_clear()

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    (judged,) = AssertionClassifier(["sepsis"]).judge([("No evidence of sepsis.", "")])
    assert judged.assertion == "negated"
