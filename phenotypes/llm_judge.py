"""The LLM map and reduce steps: ask about one snippet; decide a patient from the answers.

The prompt sends one sentence and the section it came from -- never the note, never the
patient's identifiers -- and asks for one of the ConText categories as JSON. An answer the
judge cannot read is an error for that snippet, not for the run.
"""

from __future__ import annotations

import json
import re

from phenotypes.assertion import ASSERTIONS

PROMPT_VERSION = "phenotype-map-1"

_SYSTEM = (
    "You read one sentence from a clinical note and say what it asserts about the patient and one "
    'condition. Answer with JSON only: {"assertion": A} where A is one of '
    + ", ".join(ASSERTIONS)
    + ". affirmed: the patient has it now; historical: the patient had it in the past; negated: it is "
    "denied or ruled out; family: it is about a relative; hypothetical: it may happen or is to be "
    "ruled out; uncertain: it is possible but not established."
)


class JudgeAnswerError(ValueError):
    pass


def map_messages(*, phenotype: str, description: str, section: str, text: str) -> list[dict]:
    user = (
        f"Condition: {phenotype}\nDefinition: {description}\nSection: {section or '(none)'}\nSentence: {text}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def parse_assertion(content: str) -> str:
    """The assertion in the LLM's answer, tolerating a code fence or prose around the JSON."""
    match = re.search(r"\{.*\}", content or "", re.DOTALL)
    if match:
        try:
            value = str(json.loads(match.group(0)).get("assertion", "")).strip().lower()
        except (json.JSONDecodeError, AttributeError):
            value = ""
        if value in ASSERTIONS:
            return value
    raise JudgeAnswerError(f"the LLM did not answer one of {', '.join(ASSERTIONS)}: {content[:120]!r}")
