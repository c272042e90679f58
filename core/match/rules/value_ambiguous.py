"""One word read as values of two columns: "anion gap" is a lab item and a chart item.

These rules compare the results of all the templates tried for one question, so they run after
every template was tried (library.match_library), not per template like the rules of `RULES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from core.match import reasons as R
from core.match.binding import column_words
from core.match.candidate import MatchResult
from core.match.index import LibraryIndex, column_readings
from core.match.spans import VALUE
from core.match.values import ValueIndex, bare_column, columns_naming


def refuse_ambiguous_values(results: Sequence[MatchResult]) -> list[MatchResult]:
    """Results that bind one of the question's words to a value of another column than a competitor does
    are refused, both of them: "anion gap" is a lab item and a chart item, and a question that does not
    say which is not answered. A template whose paraphrases say which ("lab", "chart") refuses the other
    one's reading through the meaning guard, so only the readings the question leaves open remain here.
    """
    columns: dict[str, set[str]] = {}
    for r in results:
        if r.hard_ok:
            for b in r.bindings:
                if b.type == VALUE:
                    columns.setdefault(b.new.lower(), set()).add(b.column)
    open_words = {w: sorted(c) for w, c in columns.items() if len(c) > 1}
    if not open_words:
        return list(results)
    out = []
    for r in results:
        word = next((b.new for b in r.bindings if b.type == VALUE and b.new.lower() in open_words), None)
        if not r.hard_ok or word is None:
            out.append(r)
            continue
        where = " and ".join(f"a {column_words(c)} in {c.split('.')[0]}" for c in open_words[word.lower()])
        text = f"'{word}' is {where}, and this question does not say which one it means."
        out.append(
            dataclasses.replace(
                r,
                sql=None,
                confidence=0.0,
                features={**r.features, "hard_ok": 0.0},
                reasons=(*r.reasons, text),
                reason_codes=(*r.reason_codes, R.VALUE_AMBIGUOUS),
            )
        )
    return out


def refuse_unlike_library(
    results: Sequence[MatchResult], index: LibraryIndex, values: ValueIndex
) -> list[MatchResult]:
    """Results that bind a value naming items of two columns to the column the library never reads it as.

    "Is the anion gap value … less than …" matched to a chart template binds 'anion gap' as a chart
    item; every library question that names a value of both columns means the lab one, so a chart
    reading would answer another question than the one the library's wording asks. The reading the
    library does use (or a pair of columns it has no example of) is left alone; refuse_ambiguous_values
    still refuses two readings competing for one question.
    """
    readings = column_readings(index, values)
    if not readings:
        return list(results)
    out = []
    for r in results:
        reason = None
        for b in r.bindings if r.hard_ok else ():
            if b.type != VALUE or not b.column:
                continue
            column = bare_column(b.column)
            for other in columns_naming(values, b.value) - {column}:
                seen = readings.get(frozenset((column, other)))
                if seen and seen[other] and not seen[column]:
                    reason = (
                        f"'{b.new}' is a {other.split('.')[-1]} in {other.split('.')[0]} too, and the library's "
                        f"questions that name such values always mean that one, not the {column.split('.')[0]} one."
                    )
        if reason is None:
            out.append(r)
        else:
            out.append(dataclasses.replace(
                r, sql=None, confidence=0.0, features={**r.features, "hard_ok": 0.0},
                reasons=(*r.reasons, reason), reason_codes=(*r.reason_codes, R.VALUE_AMBIGUOUS),
            ))  # fmt: skip
    return out
