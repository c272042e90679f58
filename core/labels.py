"""Display names and units for result columns: "avg_los_days" → "Average length of stay (days)".

A researcher reads labels, not column names. A result column takes the catalog's label of the
column it comes from; a column computed by an aggregate takes the aggregate's word and the source
column's label ("Average" + "ICU length of stay"); what the catalog does not name is drafted from the
name's words. Pure functions over sqlglot trees and plain values, so pages, charts, exports and
answer sentences name columns alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

# The formats a curator can choose for a column's values; "" formats by the value's type.
FORMATS = ("", "integer", "decimal", "percent", "date", "code")

# Words of column names, spelled out (MIMIC-IV's abbreviations first). Data beside the rule.
WORDS = {
    "los": "length of stay",
    "hadm": "admission",
    "subject": "patient",
    "icd": "ICD",
    "icu": "ICU",
    "id": "ID",
    "itemid": "item ID",
    "valuenum": "value",
    "valueuom": "unit",
    "dob": "date of birth",
    "dod": "date of death",
    "admittime": "admission time",
    "dischtime": "discharge time",
    "deathtime": "death time",
    "intime": "time in",
    "outtime": "time out",
    "charttime": "chart time",
    "storetime": "store time",
    "starttime": "start time",
    "endtime": "end time",
    "careunit": "care unit",
    "seq": "sequence",
    "num": "number",
    "pct": "percent",
    "avg": "average",
    "uom": "unit",
    "hosp": "hospital",
    "dx": "diagnosis",
    "gsn": "GSN",
    "ndc": "NDC",
}
# What some MIMIC-IV columns are called by researchers; the catalog's curated label wins.
COLUMN_NAMES = {
    "subject_id": "Patient",
    "hadm_id": "Admission",
    "stay_id": "ICU stay",
    "anchor_age": "Age",
    "gender": "Sex",
    "long_title": "Title",
    "icd_code": "ICD code",
    "icd_version": "ICD version",
    "hospital_expire_flag": "Died in hospital",
    "first_careunit": "First care unit",
    "last_careunit": "Last care unit",
    "los": "Length of stay",
}
# The same name means another thing in another table: a dictionary's title is a diagnosis there.
TABLE_COLUMN_NAMES = {
    ("d_icd_diagnoses", "long_title"): "Diagnosis",
    ("d_icd_procedures", "long_title"): "Procedure",
    ("d_labitems", "label"): "Lab test",
    ("d_items", "label"): "Item",
    ("prescriptions", "drug"): "Drug",
    ("icustays", "los"): "ICU length of stay",
    ("microbiologyevents", "org_name"): "Organism",
}
# What one row of a table is, for "Number of …" when a query counts rows.
TABLE_NOUNS = {
    "patients": "patients",
    "admissions": "admissions",
    "icustays": "ICU stays",
    "transfers": "transfers",
    "diagnoses_icd": "diagnoses",
    "procedures_icd": "procedures",
    "prescriptions": "prescriptions",
    "labevents": "lab results",
    "chartevents": "charted values",
    "microbiologyevents": "microbiology results",
    "emar": "administrations",
    "inputevents": "inputs",
    "outputevents": "outputs",
    "services": "services",
}
# What counting an identifier counts.
ID_NOUNS = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "ICU stays"}
# Units a name or a meaning may end with, as people write them.
UNITS = {
    "days": "days",
    "day": "days",
    "hours": "hours",
    "hrs": "hours",
    "hr": "hours",
    "minutes": "minutes",
    "mins": "minutes",
    "years": "years",
    "yrs": "years",
    "mg": "mg",
    "ml": "mL",
    "kg": "kg",
    "pct": "%",
    "percent": "%",
}
AGGREGATES = {
    "avg": "Average",
    "average": "Average",
    "mean": "Average",
    "sum": "Total",
    "total": "Total",
    "min": "Lowest",
    "max": "Highest",
    "median": "Median",
    "stddev": "Standard deviation of",
    "stddev_samp": "Standard deviation of",
}
_COUNT_PREFIX = {"n", "num", "count", "cnt", "number"}
_UNIT_IN_MEANING = re.compile(
    r"\b(?:in|as)\s+(?:fractional\s+|whole\s+)?(days|hours|minutes|years|mg|ml|kg)\b", re.I
)


@dataclass(frozen=True)
class ColumnLabel:
    """How one column is shown: a label, a unit ("days", "" for none) and a value format."""

    name: str
    label: str
    unit: str = ""
    format: str = ""

    @property
    def heading(self) -> str:
        """The label with its unit, for a table header or a chart axis (never starting like a
        spreadsheet formula: "=", "+", "-", "@")."""
        label = self.label.lstrip("=+-@ \t\r\n") or self.name
        if self.unit and f"({self.unit})" not in label:
            return f"{label} ({self.unit})"
        return label


def draft_label(name: str, meaning: str = "", *, table: str = "") -> ColumnLabel:
    """A first label, unit and format for a column from its name and documented meaning, with no
    LLM: known MIMIC-IV names (of this table, then of any), then the name's words spelled out; the
    unit from the name's last word or from "… in days" in the meaning."""
    raw = (name or "").strip()
    lowered = raw.lower()
    unit = ""
    match = _UNIT_IN_MEANING.search(meaning or "")
    if match:
        unit = UNITS.get(match.group(1).lower(), match.group(1))
    if (table.lower(), lowered) in TABLE_COLUMN_NAMES:
        label = TABLE_COLUMN_NAMES[(table.lower(), lowered)]
    elif lowered in COLUMN_NAMES:
        label = COLUMN_NAMES[lowered]
    else:
        words = [w for w in re.split(r"[_\s]+", lowered) if w]
        if len(words) > 1 and words[-1] in UNITS:
            unit = unit or UNITS[words[-1]]
            words = words[:-1]
        label = capfirst(" ".join(WORDS.get(w, w) for w in words)) or raw or "Value"
    fmt = "code" if lowered.endswith(("_id", "itemid", "_code")) or lowered == "itemid" else ""
    return ColumnLabel(raw, label, unit, fmt)


def result_labels(
    columns: Sequence[str],
    *,
    sql: str = "",
    dialect: str = "postgres",
    catalog: Mapping[str, ColumnLabel] | None = None,
) -> list[ColumnLabel]:
    """One label per result column. `catalog` maps a column name ("los") to its curated label;
    the SQL's select list says where each result column comes from (an aggregate of which
    column, a count of what); without SQL, labels come from the names alone."""
    catalog = catalog or {}
    projections = _projections(sql, dialect) if sql else {}
    tables = sql_tables(sql, dialect) if sql else []
    return [
        _label_for(name, projections.get(name.lower()), catalog=catalog, tables=tables) for name in columns
    ]


def _label_for(
    name: str, expression, *, catalog: Mapping[str, ColumnLabel], tables: list[str]
) -> ColumnLabel:
    if name.lower() in catalog:  # a plain column, or an alias the catalog names
        found = catalog[name.lower()]
        return ColumnLabel(name, found.label, found.unit, found.format)
    if expression is not None:
        labelled = _expression_label(name, expression, catalog=catalog, tables=tables)
        if labelled is not None:
            return labelled
    return _name_label(name, catalog)


def _expression_label(name: str, node, *, catalog, tables) -> ColumnLabel | None:
    while isinstance(node, exp.Round | exp.Cast | exp.Paren | exp.TryCast):
        node = node.this
    if isinstance(node, exp.Column):
        found = catalog.get(node.name.lower()) or _name_label(node.name, catalog)
        return ColumnLabel(name, found.label, found.unit, found.format)
    if isinstance(node, exp.Count):
        return ColumnLabel(name, _count_label(node, tables), "", "integer")
    word = _aggregate_word(node)
    if word is None:
        return None
    inner = [c for c in node.find_all(exp.Column)]
    if len(inner) != 1:
        return None
    source = catalog.get(inner[0].name.lower()) or _name_label(inner[0].name, catalog)
    return ColumnLabel(name, f"{word} {lowerfirst(source.label)}", source.unit, "decimal")


def _aggregate_word(node) -> str | None:
    if isinstance(node, exp.Avg):
        return "Average"
    if isinstance(node, exp.Sum):
        return "Total"
    if isinstance(node, exp.Min):
        return "Lowest"
    if isinstance(node, exp.Max):
        return "Highest"
    if isinstance(node, exp.Median | exp.PercentileCont):
        return "Median"
    if isinstance(node, exp.Stddev | exp.StddevSamp | exp.StddevPop):
        return "Standard deviation of"
    return None


def _count_label(node, tables: list[str]) -> str:
    counted = node.this
    if isinstance(counted, exp.Distinct):
        counted = counted.expressions[0] if counted.expressions else None
    if isinstance(counted, exp.Column) and counted.name.lower() in ID_NOUNS:
        return f"Number of {ID_NOUNS[counted.name.lower()]}"
    nouns = [TABLE_NOUNS[t] for t in tables if t in TABLE_NOUNS]
    if len(nouns) == 1 or (nouns and not isinstance(counted, exp.Column)):
        return f"Number of {nouns[0]}"
    return "Number"


def _name_label(name: str, catalog: Mapping[str, ColumnLabel]) -> ColumnLabel:
    """A label from a result column's own name: "avg_los_days" → Average length of stay (days),
    "n_admissions" → Number of admissions, "count" → Number."""
    words = [w for w in re.split(r"[_\s()*]+", (name or "").lower()) if w]
    if not words:
        return ColumnLabel(name, "Value")
    if words[0] in _COUNT_PREFIX:
        rest = " ".join(WORDS.get(w, w) for w in words[1:])
        return ColumnLabel(name, f"Number of {rest}" if rest else "Number", "", "integer")
    if words[0] in AGGREGATES and len(words) > 1:
        unit = ""
        if words[-1] in UNITS and len(words) > 2:
            unit, words = UNITS[words[-1]], words[:-1]
        stem = "_".join(words[1:])
        source = catalog.get(stem) or draft_label(stem)
        return ColumnLabel(
            name, f"{AGGREGATES[words[0]]} {lowerfirst(source.label)}", unit or source.unit, "decimal"
        )
    drafted = draft_label(name)
    return drafted


def _projections(sql: str, dialect: str) -> dict:
    """The outermost select list by output name: {"avg_los_days": AVG(los) tree, …}."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return {}
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return {}
    out = {}
    for projection in select.expressions:
        output = projection.alias_or_name
        if output:
            out.setdefault(output.lower(), projection.unalias())
    return out


def sql_tables(sql: str, dialect: str = "postgres") -> list[str]:
    """The bare names of the tables a statement reads, in order, lower case; [] if it does not parse."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return []
    names: list[str] = []
    for table in tree.find_all(exp.Table):
        if table.name.lower() not in names:
            names.append(table.name.lower())
    return names


def capfirst(text: str) -> str:
    """The text with its first letter a capital (a label starting a sentence)."""
    return text[:1].upper() + text[1:]


def lowerfirst(text: str) -> str:
    """ "Length of stay" → "length of stay", but "ICU length of stay" and "ICD code" keep their
    capitals (a label inside a sentence)."""
    if len(text) > 1 and text[1].isupper():
        return text
    return text[:1].lower() + text[1:]
