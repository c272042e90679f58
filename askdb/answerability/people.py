"""Patients a question names by their id, checked against the data itself.

"What was the last drug prescribed to patient 4711?" cannot be answered when no patient 4711 is
in the database: the SQL would run and return no rows, which a researcher could read as "no
drugs" (a wrong answer). The gate's rules read only words, so this check is the one that asks
the database (a primary-key lookup through askdb's own read-only reader), and the caller passes
its finding to the gate, where it declines like any decisive rule and names the column it looked
in. A lookup that fails is no finding: a patient askdb could not look up is never called absent.

Only a patient named by an id is checked ("patient 10021487", "patient id 4711", "subject
4711"); an age next to the word ("a patient 65 or older", "patient 18 years old") is not an id.
The caller skips the check for a user who may see only aggregates, for whom "no such patient"
would tell which ids exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from askdb.answerability.rules import Finding

PERSON_TABLE, PERSON_COLUMN = "patients", "subject_id"  # MIMIC-IV's patients and their id

# "patient 4711", "patient id 4711", "patient no. 4711", "patient #4711", "subject 4711"; never the
# plural ("patients 18 or older") nor a number that is an age or a share.
_NAMED = re.compile(
    r"\b(?:patient|subject)(?:\s+(?:id|number|no\.?|#))?\s*#?\s*(\d{1,12})\b"
    r"(?!\s*(?:-?\s*years?|-?\s*yrs?|y/?o\b|or\s+(?:older|over|younger|more|less)|and\s+(?:older|over|up)"
    r"|\+|%|\s*per\s*cent))",
    re.IGNORECASE,
)


def named_patients(question: str) -> tuple[int, ...]:
    """The patient ids a question names, in order, each once."""
    seen: dict[int, None] = {}
    for m in _NAMED.finditer(" ".join(str(question or "").split())):
        seen.setdefault(int(m.group(1)), None)
    return tuple(seen)


def unknown_patient(question: str, exists: Callable[[int], bool | None]) -> Finding | None:
    """A decisive "not in the database" for the first patient the question names that the data
    does not hold; `exists(id)` is True, False, or None when it could not be looked up."""
    for patient in named_patients(question):
        if exists(patient) is False:
            return Finding(
                "not_in_schema",
                "unknown_patient",
                f"patient {patient}",
                f"There is no patient {patient} in this database (no row of {PERSON_TABLE}.{PERSON_COLUMN} "
                f"has that id), so askdb cannot answer a question about them. Check the patient's id.",
                True,
            )
    return None
