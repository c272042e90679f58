"""Curated table documentation as versioned YAML: parsing with precise errors, and writing back.

The bundled files in metadata_admin/docs/mimiciv/ document every MIMIC-IV hosp and icu table.
Parsing is strict about shape (a doc that is silently half-read is worse than an error) and
reports the file and, where YAML knows it, the line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

BUNDLED_DOCS = Path(__file__).resolve().parent / "docs" / "mimiciv"
DOCS_VERSION = 1

# Dictionary and label columns whose distinct values questions mention by name ("sepsis",
# "hemoglobin", "vancomycin", "MICU"): these go into the value index even when they have many
# distinct values. Columns not listed here are indexed when introspection finds few distinct values.
VALUE_COLUMNS = {
    "d_icd_diagnoses": ("long_title", "icd_code"),
    "d_icd_procedures": ("long_title", "icd_code"),
    "d_labitems": ("label", "itemid"),
    "d_items": ("label", "itemid"),
    "d_hcpcs": ("short_description", "code"),
    "prescriptions": ("drug", ""),
    "pharmacy": ("medication", ""),
    "emar": ("medication", ""),
    "microbiologyevents": ("org_name", ""),
}


class DocsError(ValueError):
    """Broken documentation: `where` names the file (and line), `message` what is wrong."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass
class DocColumn:
    name: str
    type: str = ""
    meaning: str = ""
    example_values: str = ""
    key: str = ""  # "primary", "foreign", "primary, foreign" or ""
    sensitive: bool = False
    value_index: bool = False


@dataclass
class DocRelationship:
    to: str  # "schema.table"
    on: list[list[str]]
    kind: str = "foreign_key"
    note: str = ""


@dataclass
class DocTable:
    schema: str
    name: str
    description: str = ""
    purpose: str = ""
    grain: str = ""
    considerations: list[str] = field(default_factory=list)
    synonyms: list[str] = field(default_factory=list)
    example_questions: list[str] = field(default_factory=list)
    columns: list[DocColumn] = field(default_factory=list)
    relationships: list[DocRelationship] = field(default_factory=list)
    # Reference data (a code dictionary) that aggregate-only users may list; None: not stated, so
    # the catalog keeps what an admin set (or decides by the table's kind).
    reference: bool | None = None

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def _text(value, where: str, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str | int | float):
        raise DocsError(where, f"{name} must be text, not {type(value).__name__}")
    return str(value).strip()


def _texts(value, where: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value.strip()]
    if not isinstance(value, list):
        raise DocsError(where, f"{name} must be a list of text")
    return [_text(v, where, name) for v in value if v is not None]


def parse_docs(text: str, where: str = "<docs>") -> list[DocTable]:
    """Parse one YAML document of the form written by `export_docs`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DocsError(f"{where}{line}", f"invalid YAML: {problem}") from exc
    if not isinstance(data, dict) or "tables" not in data:
        raise DocsError(where, "expected a mapping with 'version', 'schema' and 'tables'")
    if data.get("version", DOCS_VERSION) != DOCS_VERSION:
        raise DocsError(where, f"unsupported docs version {data.get('version')!r}; expected {DOCS_VERSION}")
    schema = _text(data.get("schema", ""), where, "schema")
    if not isinstance(data["tables"], list):
        raise DocsError(where, "'tables' must be a list")
    tables = []
    seen = set()
    for i, raw in enumerate(data["tables"]):
        if not isinstance(raw, dict) or not raw.get("name"):
            raise DocsError(f"{where} tables[{i}]", "each table needs a 'name'")
        name = _text(raw["name"], f"{where} tables[{i}]", "name")
        if name in seen:
            raise DocsError(f"{where} table {name}", "documented twice")
        seen.add(name)
        tables.append(_parse_table(raw, name, schema, where))
    return tables


def _parse_table(raw: dict, name: str, schema: str, where: str) -> DocTable:
    at = f"{where} table {name}"
    reference = raw.get("reference")
    if reference is not None and not isinstance(reference, bool):
        raise DocsError(at, f"reference must be true or false, not {reference!r}")
    return DocTable(
        schema=_text(raw.get("schema", schema), at, "schema"),
        name=name,
        description=_text(raw.get("description"), at, "description"),
        purpose=_text(raw.get("purpose"), at, "purpose"),
        grain=_text(raw.get("grain"), at, "grain"),
        considerations=_texts(raw.get("considerations"), at, "considerations"),
        synonyms=_texts(raw.get("synonyms"), at, "synonyms"),
        example_questions=_texts(raw.get("example_questions"), at, "example_questions"),
        columns=[_parse_column(col, j, name, at) for j, col in enumerate(raw.get("columns") or [])],
        relationships=[
            _parse_relationship(rel, j, schema, at) for j, rel in enumerate(raw.get("relationships") or [])
        ],
        reference=reference,
    )


def _parse_column(col, j: int, table: str, at: str) -> DocColumn:
    if not isinstance(col, dict) or not col.get("name"):
        raise DocsError(f"{at} columns[{j}]", "each column needs a 'name'")
    key = _text(col.get("key"), at, "key")
    if not set(key.replace(",", " ").split()) <= {"primary", "foreign"}:
        raise DocsError(f"{at} column {col['name']}", f"key must be primary or foreign, not {key!r}")
    return DocColumn(
        name=_text(col["name"], at, "column name").lower(),
        type=_text(col.get("type"), at, "type"),
        meaning=_text(col.get("meaning"), at, "meaning"),
        example_values=_text(col.get("example_values"), at, "example_values"),
        key=key,
        sensitive=bool(col.get("sensitive", False)),
        value_index=bool(col.get("value_index", False))
        or col["name"].lower() == VALUE_COLUMNS.get(table, ("",))[0],
    )


def _parse_relationship(rel, j: int, schema: str, at: str) -> DocRelationship:
    # PyYAML reads a bare `on:` key as the boolean True; accept both spellings.
    on = rel.get("on", rel.get(True)) if isinstance(rel, dict) else None
    if not isinstance(rel, dict) or not rel.get("to") or not on:
        raise DocsError(f"{at} relationships[{j}]", "each relationship needs 'to' and 'on'")
    pairs = [list(p) for p in on if isinstance(p, list | tuple) and len(p) == 2]
    if len(pairs) != len(on):
        raise DocsError(f"{at} relationships[{j}]", "'on' must be a list of [this_column, that_column]")
    kind = _text(rel.get("kind", "foreign_key"), at, "kind")
    if kind not in ("foreign_key", "common_join"):
        raise DocsError(f"{at} relationships[{j}]", f"kind must be foreign_key or common_join, not {kind!r}")
    to = _text(rel["to"], at, "to")
    if "." not in to and schema:
        to = f"{schema}.{to}"
    return DocRelationship(to=to, on=pairs, kind=kind, note=_text(rel.get("note"), at, "note"))


def read_docs(paths: list[Path]) -> list[DocTable]:
    """Every table documented in the given files or folders (folders: their *.yaml, sorted)."""
    files: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            files.extend(sorted(path.glob("*.y*ml")))
        elif path.exists():
            files.append(path)
        else:
            raise DocsError(str(path), "no such file or folder")
    if not files:
        raise DocsError(", ".join(map(str, paths)), "no YAML documentation files found")
    tables: list[DocTable] = []
    for f in files:
        tables.extend(parse_docs(f.read_text(encoding="utf-8"), where=str(f)))
    return tables


def dump_docs(tables: list[DocTable]) -> str:
    """YAML for one schema's tables, in the same shape `parse_docs` reads."""
    schema = tables[0].schema if tables else ""
    out = {"version": DOCS_VERSION, "schema": schema, "tables": []}
    for t in tables:
        entry = asdict(t)
        entry.pop("schema")
        if entry["reference"] is None:
            entry.pop("reference")
        for col in entry["columns"]:
            for k in ("key", "example_values", "meaning"):
                if not col[k]:
                    col.pop(k)
            for k in ("sensitive", "value_index"):
                if not col[k]:
                    col.pop(k)
        out["tables"].append(entry)
    return yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=110)


def table_embedding_text(
    *, name: str, qualified: str, synonyms, description: str, purpose: str, grain: str,
    example_questions, column_names,
) -> str:  # fmt: skip
    """The text a table is found by, from a stored doc or a parsed YAML one (the gate's benchmark
    must see the texts the catalog gives). Most telling first: the local model reads ~256 word pieces."""
    parts = [
        f"Table {name} ({qualified}).",
        f"Also called: {', '.join(synonyms)}." if synonyms else "",
        description,
        purpose,
        f"Grain: {grain}." if grain else "",
        "Example questions: " + " ".join(example_questions) if example_questions else "",
        "Columns: " + ", ".join(column_names),
    ]
    return "\n".join(p for p in parts if p)


def table_doc_embedding_text(doc) -> str:
    """The text a stored table doc (a TableDoc) is found by: table_embedding_text of its fields.
    Here, not in services, because the selectors' freshness check and the services' re-embedding
    must compute the same text, and a selector may not import a service."""
    return table_embedding_text(
        name=doc.name, qualified=doc.qualified_name, synonyms=doc.synonyms, description=doc.description,
        purpose=doc.purpose, grain=doc.grain, example_questions=doc.example_questions,
        column_names=[c.name for c in doc.columns.all()],
    )  # fmt: skip
