"""A bound value with no rows, when a longer value of the same item has them: "potassium" is a lab
label with no measurements here while "potassium, whole blood" has them, so "the last potassium value"
bound to 'potassium' answers nothing, and that empty answer is wrong (issue 26's first wrong answer).

Asked of the source: only when the bound SQL returns nothing (no row, or only nulls) are the longer
values of the slot's column tried; if one of them returns something, the question is refused with the
values it may mean, so the researcher can say which.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match import reasons as R
from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.reading import Reading
from core.match.spans import VALUE
from core.match.template import BindError, bind_sql, read_back

LONGER_TRIED = 3  # longer values probed per slot, shortest first


def check(reading: Reading, candidate: TemplateCandidate, bound: Bound) -> list[R.Reason]:
    template = candidate.template
    longer_of = getattr(reading.values, "longer", None)
    if bound.probe is None or bound.sql is None or longer_of is None:
        return []
    longer = {
        s.name: longer_of(s.column, bound.bindings[s.name].value, LONGER_TRIED)
        for s in template.slots
        if s.type == VALUE and s.column and s.name in bound.bindings
    }
    if not any(longer.values()) or bound.probe(answers_something(bound.sql, template.dialect)):
        return []  # nothing longer to mean (no query asked), or the answer has something
    values = {n: b.value for n, b in bound.bindings.items()}
    for name, others in longer.items():
        value = bound.bindings[name].value
        for other in others:
            try:
                sql = bind_sql(template, values | {name: other})
            except BindError:
                continue
            if bound.probe(answers_something(sql, template.dialect)):
                text = (f"'{value}' has no rows for this question, but '{other}' has: "
                        "say which one you mean.")  # fmt: skip
                return [R.Reason(R.VALUE_LONGER, text)]
    return []


def answers_something(sql: str, dialect: str) -> str:
    """A query that returns a row only when `sql` returns a row whose first column is not null (a
    count of 0 is an answer; an empty result or a null maximum is not)."""
    try:
        tree = read_back(sql, dialect)[0]  # shared: .subquery() below copies it
    except (SqlglotError, IndexError):
        return sql
    first = tree.selects[0] if isinstance(tree, exp.Query) and tree.selects else None
    # Only a column or an alias has a name every engine gives the outer query; else any row will do.
    name = first.alias_or_name if isinstance(first, exp.Alias | exp.Column) else ""
    query = exp.select(exp.Literal.number(1)).from_(tree.subquery("answer"), copy=False)  # the one copy
    if name and name != "*":
        query = query.where(exp.column(name, table="answer").is_(exp.null()).not_(), copy=False)
    return query.limit(1, copy=False).sql(dialect=dialect, copy=False)
