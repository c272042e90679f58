"""A composition's refusal decided before its family is read: the operator words of the question are
none its composed paraphrases use.

Why: most compositions a calibration tries are refused by the first rule (rules.operators: in the
EHRSQL train cross-validation about half of the composed candidates matched, and nearly all of the
refused ones, by an operator word such as "since" where the composed wordings say "in"), and reading
the composed paraphrases as a family (index.paraphrase_family: all their words, not only their
operators) costs more than the matches themselves.

Why the same decisions, proven: matcher.match_one runs the operators rule first (rules.RULES, the one
QUESTION rule that runs whatever came before), and when it refuses, every later QUESTION rule is
skipped (`alone`) and match_one returns before the TEMPLATE stage; up to there it reads the family only
through the operators rule, which reads `Family.operators` and `Family.signatures` alone. Both are
the union, over the family's paraphrases, of what index.library_reading reads of each (the same
reading LibraryIndex._families makes). So when the rule refuses each composed paraphrase with the
family reduced to those two fields, it refuses each with the whole family too, with the same
reasons, and match_one returns the same result: the reduced family is used in its place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from core.match.index import Entry, Family, library_operators
from core.match.operators import operator_signature
from core.match.rules.operators import operator_reasons
from core.match.spans import VALUE


def operator_family(entries: Sequence[Entry]) -> Family:
    """The family of one template's paraphrases (`entries`, one key) with its operator values and
    signatures alone, read as LibraryIndex._families reads them (index.library_reading's operators,
    index.library_operators: without the words it reads too, which a refused family never needs)."""
    ops: dict[str, set] = defaultdict(set)
    signatures = set()
    for entry in entries:
        template = entry.template
        assert template is not None
        spans = tuple((s.start, s.end) for s in template.slots if s.type == VALUE)
        said = library_operators(template.question, spans)
        signatures.add(operator_signature(said))
        for name, value in said.items():
            ops[name].add(value)
    return Family(
        entries[0].key,
        {k: frozenset(v) for k, v in ops.items()},
        frozenset(),
        size=len(entries),
        signatures=frozenset(signatures),
    )


def refused_family(ops: dict[str, Any], entries: Sequence[Entry]) -> Family | None:
    """The operator family of the composed paraphrases when the operators rule refuses every one of
    them for a question with operator words `ops` (then it stands for their whole family: see the
    module's docstring), else None (the whole family is needed)."""
    if not entries:
        return None
    family = operator_family(entries)
    for entry in entries:
        assert entry.template is not None
        if not operator_reasons(ops, entry.template, family):
            return None
    return family
