"""The gate's reading of "any additional X" (askdb/answerability/rules.py `unstated_reference`): a
question asking for tests, drugs or procedures beyond ones it never names cannot be answered
(which count as additional?), while the wordings that look like it and name what they ask are
left alone. Found on EHRSQL train's grouped CV (round 11: let through 28 → 22 question×dealings,
none answerable blocked)."""

from __future__ import annotations

import pytest

from askdb.answerability import rules


def _fires(question: str) -> rules.Finding | None:
    return next((f for f in rules.findings(question) if f.rule == "unstated_reference"), None)


@pytest.mark.parametrize(
    "question",
    [
        "Has patient 5828 had any additional catheter tip-iv test performed on him?",
        "has patient 10004235 received any further blood culture tests since 2150?",
        "did patient 7 get some extra stool tests in the icu?",
    ],
)
def test_additional_to_nothing_named_is_declined_with_what_to_ask_instead(question):
    found = _fires(question)
    assert found is not None and found.decisive and found.kind == "not_in_schema"
    assert "without naming what they are additional to" in found.reason
    assert "Ask for the test, drug or procedure itself" in found.reason


@pytest.mark.parametrize(
    "question",
    [
        # Attacks: the same words where the question names what it asks for.
        "Has patient 10038081 received any other endoscopy of small intestine treatment since 1 year ago?",
        "has patient 10004235 been given any extra strength acetaminophen?",
        "has patient 7 had any additional stool tests besides the one on 03/21/2150?",
        "how many additional days did patient 7 stay in the icu after the first transfer?",
    ],
)
def test_wordings_that_name_what_they_ask_for_are_left_alone(question):
    assert _fires(question) is None
