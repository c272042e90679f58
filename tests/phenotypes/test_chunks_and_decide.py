"""Pure parts of a phenotype run: notes into section-labelled sentences, and the reduce step."""

from __future__ import annotations

import pytest

from phenotypes.chunks import candidate_chunks, term_pattern
from phenotypes.decide import agreement, decide, wilson_interval

NOTE = """Name:  ___   Unit No:   ___

Past Medical History:
- Hypertension.
- Paroxysmal atrial fibrillation.

Family History:
Mother had afib.

Brief Hospital Course:
She was admitted with pneumonia. Telemetry without afib. Started apixaban for a-fib.

Discharge Diagnosis:
Primary: ___
Pneumonia.
"""


def test_chunks_are_sentences_with_their_section_and_the_term_span():
    chunks = candidate_chunks("n1", NOTE, term_pattern(["atrial fibrillation", "afib", "a-fib"]))
    assert [(c.section, c.text) for c in chunks] == [
        ("Past Medical History", "Paroxysmal atrial fibrillation."),
        ("Family History", "Mother had afib."),
        ("Brief Hospital Course", "Telemetry without afib."),
        ("Brief Hospital Course", "Started apixaban for a-fib."),
    ]
    assert all(
        c.text[c.term_start : c.term_end].lower() in ("atrial fibrillation", "afib", "a-fib") for c in chunks
    )


def test_terms_match_whole_words_only():
    pattern = term_pattern(["AF"])
    assert not candidate_chunks("n", "Brief Hospital Course:\nAFB smear negative. Afebrile.", pattern)
    assert candidate_chunks("n", "Brief Hospital Course:\nNew AF with RVR.", pattern)
    with pytest.raises(ValueError):
        term_pattern(["  "])


@pytest.mark.parametrize(
    "assertions, decision",
    [
        (["negated", "affirmed", "family"], "present"),
        (["historical"], "present"),
        (["uncertain", "negated"], "uncertain"),
        (["family", "hypothetical"], "absent"),
        (["negated"], "absent"),
        ([], "absent"),
    ],
)
def test_reduce_step(assertions, decision):
    assert decide(assertions).decision == decision


def test_the_deciding_snippets_are_the_ones_that_decided():
    assert decide(["negated", "affirmed", "uncertain", "historical"]).deciding == (1, 3)
    assert decide(["negated", "family"]).deciding == (0,)


def test_agreement_table_and_wilson_interval():
    table = agreement({1: "present", 2: "present", 3: "absent", 4: "uncertain"}, {2, 3})
    assert table == {"notes_only": 1, "codes_only": 1, "both": 1, "neither": 1}
    low, high = wilson_interval(18, 20)
    assert 0.68 < low < 0.70 and 0.97 < high < 0.98
    assert wilson_interval(0, 0) == (0.0, 1.0)
