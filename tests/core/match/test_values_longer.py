"""ValueIndex.longer finds a column's values containing the asked text with str.find over the column's
values joined (not a Python loop over every value): it must find exactly what that loop found."""

from __future__ import annotations

import random
import re

from core.match.values import ValueIndex

WORDS = [
    "potassium",
    "whole",
    "blood",
    "k+",
    "2.5",
    "mg",
    "sodium",
    "café",
    "au",
    "lait",
    "% hemoglobin",
    "a1c",
    "x",
]


def _scanned(index: ValueIndex, column: str, value: str, limit: int = 5) -> list[str]:
    """What `longer` found before the word index: every value of the index scanned."""
    text = " ".join(value.lower().split())
    word = re.compile(r"(?<![a-z0-9])" + re.escape(text) + r"(?![a-z0-9])")
    found = {
        hit[column]
        for t, hit in index._by_text.items()
        if column in hit and len(t) > len(text) and text in t and word.search(t)
    }
    return sorted(found, key=lambda v: (len(v), v))[:limit]


def test_longer_finds_what_a_scan_of_every_value_finds():
    rng = random.Random(3)

    def phrase(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, n)))

    index = ValueIndex(
        {"labevents.label": [phrase(4) for _ in range(2000)], "rx.drug": [phrase(3) for _ in range(500)]}
    )
    asked = [
        " ".join(rng.choice([*WORDS, "%", "+", "."]) for _ in range(rng.randint(1, 2))) for _ in range(1500)
    ]
    for column in ("labevents.label", "rx.drug"):
        for value in asked:
            assert index.longer(column, value) == _scanned(index, column, value), (column, value)
    assert index.longer("labevents.label", "potassium")  # the check above is not all empty lists


def test_longer_reads_words_as_the_whole_word_rule_does():
    index = ValueIndex({"d_items.label": ["Potassium, Whole Blood", "Potassium", "Potassiumx", "K+ level"]})
    assert index.longer("d_items.label", "potassium") == ["Potassium, Whole Blood"]
    assert index.longer("d_items.label", "k+") == ["K+ level"]
    assert index.longer("d_items.label", "whole blood") == ["Potassium, Whole Blood"]
