"""Which coded concepts a query filters on (diagnoses, procedures, items, drugs), read off its tree.

The request desk looks each one up in the source's dictionaries to show the codes a query matches
and the ones it probably misses (the other ICD version, near titles, other item ids of one label).
Pure: SQL in, filters out; the lookups are the service's."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

# column -> the kind of concept it names. Codes and titles of diagnoses/procedures, item ids and
# labels, drug names.
CODED_COLUMNS = {
    "icd_code": "code",
    "long_title": "title",
    "itemid": "itemid",
    "label": "label",
    "drug": "drug",
}
# Tables whose icd columns are procedures (everything else with icd_code is a diagnosis).
PROCEDURE_TABLES = {"procedures_icd", "d_icd_procedures"}


@dataclass(frozen=True)
class CodeFilter:
    """One filter on a coded column: `values` are literals compared with = or IN; `patterns` are
    LIKE/ILIKE patterns (lower-cased for ILIKE)."""

    kind: str  # code | title | itemid | label | drug
    concept: str  # diagnosis | procedure | item | drug
    table: str  # the table the column belongs to, as far as the query says ("" when unqualified)
    column: str
    values: tuple[str, ...] = ()
    patterns: tuple[str, ...] = field(default=())


def _table_of(column: exp.Column, aliases: dict[str, str]) -> str:
    qualifier = column.table
    if qualifier:
        return aliases.get(qualifier.lower(), qualifier.lower())
    return ""


def _concept(kind: str, table: str, tables: set[str]) -> str:
    if kind in ("itemid", "label"):
        return "item"
    if kind == "drug":
        return "drug"
    if table in PROCEDURE_TABLES or (not table and tables & PROCEDURE_TABLES and not tables & {
        "diagnoses_icd", "d_icd_diagnoses"
    }):  # fmt: skip
        return "procedure"
    return "diagnosis"


def code_filters(sql: str, dialect: str = "postgres") -> list[CodeFilter]:
    """The filters on coded columns in `sql` ([] when it does not parse)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return []
    aliases: dict[str, str] = {}
    tables: set[str] = set()
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        tables.add(name)
        aliases[(table.alias or table.name).lower()] = name
    found: dict[tuple, dict] = {}
    for node in tree.find_all(exp.EQ, exp.In, exp.Like, exp.ILike):
        column = node.this if isinstance(node.this, exp.Column) else None
        if (
            column is None
            and isinstance(node.this, exp.Lower | exp.Upper)
            and isinstance(node.this.this, exp.Column)
        ):
            column = node.this.this
        if column is None and isinstance(node, exp.EQ) and isinstance(node.expression, exp.Column):
            column, other = node.expression, node.this
        else:
            other = node.expression if not isinstance(node, exp.In) else None
        if column is None or column.name.lower() not in CODED_COLUMNS:
            continue
        kind = CODED_COLUMNS[column.name.lower()]
        table = _table_of(column, aliases)
        key = (kind, table, column.name.lower())
        entry = found.setdefault(key, {"values": [], "patterns": []})
        if isinstance(node, exp.In):
            entry["values"] += [str(e.this) for e in node.expressions if isinstance(e, exp.Literal)]
        elif isinstance(other, exp.Literal):
            if isinstance(node, exp.Like | exp.ILike):
                entry["patterns"].append(str(other.this))
            else:
                entry["values"].append(str(other.this))
    return [
        CodeFilter(kind=k, concept=_concept(k, t, tables), table=t, column=c,
                   values=tuple(dict.fromkeys(v["values"])), patterns=tuple(dict.fromkeys(v["patterns"])))
        for (k, t, c), v in found.items() if v["values"] or v["patterns"]
    ]  # fmt: skip
