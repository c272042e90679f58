"""Example-library files: reading JSON, YAML and the EHRSQL pair into plain items, and writing exports.

Pure (no Django, no database): every function takes bytes or lists and returns lists or bytes, so
the page, the API and the `import_examples` command read files the same way, and a malformed file
is refused with a sentence that says where it is wrong before anything touches the library.

An item is {"id": str, "question": str, "sql": str} (sql "" for an unanswerable question), plus
"note" when the file has one — the shape `askdb.services.exports.examples_import` takes.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

import yaml

from infra.text import find_nul, nul_message

MAX_UPLOAD_BYTES = 5 * 1024 * 1024  # a library of thousands of pairs is well under this
FORMATS = ("json", "yaml")
_NULL_SQL = ("", "null", "none")  # EHRSQL writes "null" for an unanswerable question


class LibraryFormatError(ValueError):
    """A file that cannot be read as examples, with a sentence naming what is wrong and where."""


# --------------------------------------------------------------------------- reading


def check_size(size: int, filename: str) -> None:
    """Refuse a file over MAX_UPLOAD_BYTES before reading it into memory."""
    if size > MAX_UPLOAD_BYTES:
        raise LibraryFormatError(
            f"{filename} is {size / 1024 / 1024:.1f} MB, over the {MAX_UPLOAD_BYTES // 1024 // 1024} MB limit."
        )


def parse_examples(data: bytes, filename: str) -> list[dict]:
    """Items from a JSON or YAML file: a list of examples, {"examples": [...]} (askdb's export),
    or an EHRSQL-like {"data": [...]} whose items carry their own SQL ("sql" or "query").

    Our benchmark files (a list of {"id", "question", "sql", "category", …}) are the first shape.
    The format is chosen by the file's extension, and sniffed when it has none we know.
    """
    text = _decode(data, filename)
    suffix = PurePath(filename).suffix.lower()
    if suffix in (".yaml", ".yml"):
        document = _load_yaml(text, filename)
    elif suffix == ".json" or text.lstrip()[:1] in ("[", "{"):
        document = _load_json(text, filename)
    else:
        document = _load_yaml(text, filename)

    if isinstance(document, list):
        raw, where = document, "item"
    elif isinstance(document, dict) and "examples" in document:
        raw, where = document["examples"], "examples item"
        if not isinstance(raw, list):
            raise LibraryFormatError(f'{filename}: "examples" must be a list, not {_kind(raw)}.')
    elif isinstance(document, dict) and "data" in document:
        raw, where = document["data"], "data item"
        if not isinstance(raw, list):
            raise LibraryFormatError(f'{filename}: "data" must be a list, not {_kind(raw)}.')
        if raw and not any(isinstance(i, dict) and ("sql" in i or "query" in i) for i in raw):
            raise LibraryFormatError(
                f"{filename} looks like an EHRSQL data.json: its items have no SQL. "
                "Upload its label.json with it (the labels file)."
            )
    elif isinstance(document, dict):
        if document and all(isinstance(v, str | None) for v in document.values()):
            raise LibraryFormatError(
                f"{filename} looks like an EHRSQL label.json (an object of id → SQL). "
                "Upload it as the labels file, with its data.json as the examples file."
            )
        keys = ", ".join(sorted(map(str, document))[:8]) or "none"
        raise LibraryFormatError(
            f'{filename}: expected a list of examples, or an object with an "examples" list; '
            f"found an object with the keys {keys}."
        )
    else:
        raise LibraryFormatError(f"{filename}: expected a list of examples, found {_kind(document)}.")
    return items_from_list(raw, filename, where)


def _refuse_nul(document: Any, origin: str) -> None:
    found = find_nul(document, origin)
    if found:
        raise LibraryFormatError(nul_message(found))


def items_from_list(raw: Any, origin: str, where: str = "item") -> list[dict]:
    """Items from an already-decoded list (the API's JSON body, or a parsed file), checked the same
    way: `origin` names where they came from in messages ("lib.json", "request")."""
    if not isinstance(raw, list):
        raise LibraryFormatError(f"{origin}: expected a list of examples, found {_kind(raw)}.")
    if not raw:
        raise LibraryFormatError(f"{origin} holds no examples.")
    _refuse_nul(raw, origin)
    items = [_item(entry, n, origin, where) for n, entry in enumerate(raw, start=1)]
    _refuse_duplicate_ids(items, origin)
    return items


def parse_ehrsql(data_json: bytes, label_json: bytes) -> list[dict]:
    """Items from the EHRSQL pair: data.json {"data": [{"id", "question"}, …]} and label.json
    {id: SQL, …} where "null" (or null) marks a question the database cannot answer.

    Every question needs a label and every label a question: a mismatch usually means the two
    files come from different splits, and importing half of them silently would hide that.
    """
    data = _load_json(_decode(data_json, "data.json"), "data.json")
    labels = _load_json(_decode(label_json, "label.json"), "label.json")
    _refuse_nul(data, "data.json")
    _refuse_nul(labels, "label.json")
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    if not isinstance(data, list):
        if isinstance(data, dict) and all(isinstance(v, str | None) for v in data.values()):
            raise LibraryFormatError(
                "data.json looks like a label file (an object of id → SQL); the two files are swapped."
            )
        raise LibraryFormatError(f'data.json: expected {{"data": [...]}} or a list, found {_kind(data)}.')
    if not data:
        raise LibraryFormatError("data.json holds no questions.")
    if not isinstance(labels, dict):
        raise LibraryFormatError(
            f'label.json: expected an object mapping each id to its SQL ("null" when unanswerable), '
            f"found {_kind(labels)}."
        )
    for key, value in labels.items():
        if not isinstance(value, str | None):
            raise LibraryFormatError(
                f'label.json: the label of id "{key}" must be SQL text or "null", not {_kind(value)}.'
            )

    items = []
    for n, entry in enumerate(data, start=1):
        if not isinstance(entry, dict):
            raise LibraryFormatError(f"data.json item {n} is {_kind(entry)}, not an object.")
        if entry.get("id") in (None, ""):
            raise LibraryFormatError(f'data.json item {n} has no "id" key.')
        ident = str(entry["id"])
        question = _question(entry, f'data.json item {n} (id "{ident}")')
        items.append({"id": ident, "question": question})
    _refuse_duplicate_ids(items, "data.json")

    ids = {item["id"] for item in items}
    unlabelled = [item["id"] for item in items if item["id"] not in labels]
    if unlabelled:
        raise LibraryFormatError(
            f"label.json has no label for {len(unlabelled)} data.json id(s): {_few(unlabelled)}."
        )
    strays = [str(key) for key in labels if str(key) not in ids]
    if strays:
        raise LibraryFormatError(f"label.json has {len(strays)} id(s) not in data.json: {_few(strays)}.")
    for item in items:
        item["sql"] = _sql(labels[item["id"]])
    return items


# --------------------------------------------------------------------------- writing


def dump_examples(examples: list[dict], *, fmt: str, source: str = "") -> bytes:
    """An export as {"source", "examples": [...]}, which parse_examples reads back unchanged."""
    if fmt not in FORMATS:
        raise LibraryFormatError(f"Unknown export format {fmt!r}; use one of: {', '.join(FORMATS)}.")
    document = {"source": source, "examples": examples}
    if fmt == "json":
        return (json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n").encode()
    return yaml.dump(document, Dumper=_LiteralDumper, sort_keys=False, allow_unicode=True, width=110).encode()


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line SQL as a YAML block: it reads (and diffs) far better than one escaped line."""


def _literal_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_LiteralDumper.add_representer(str, _literal_str)


# --------------------------------------------------------------------------- helpers


def _decode(data: bytes, filename: str) -> str:
    if not data or not data.strip():
        raise LibraryFormatError(f"{filename} is empty.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LibraryFormatError(f"{filename} is not UTF-8 text (bad byte at offset {exc.start}).") from None


def _load_json(text: str, filename: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LibraryFormatError(
            f"{filename}: bad JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
        ) from None


def _load_yaml(text: str, filename: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "unreadable"
        raise LibraryFormatError(f"{filename}: bad YAML{where}: {problem}.") from None
    except yaml.YAMLError as exc:
        raise LibraryFormatError(f"{filename}: bad YAML: {exc}.") from None


def _item(entry: Any, n: int, filename: str, where: str) -> dict:
    if not isinstance(entry, dict):
        raise LibraryFormatError(f"{filename}: {where} {n} is {_kind(entry)}, not an object.")
    ident = str(entry["id"]) if entry.get("id") not in (None, "") else str(n)
    label = f"{filename}: {where} {n}" + (f' (id "{ident}")' if entry.get("id") not in (None, "") else "")
    question = _question(entry, label)
    if "sql" in entry:
        sql = entry["sql"]
    elif "query" in entry:  # EHRSQL 2022 and some Spider-style files
        sql = entry["query"]
    elif entry.get("kind") == "unanswerable":
        sql = ""
    else:
        raise LibraryFormatError(
            f'{label} has no "sql" key (use "" or null for a question the database cannot answer).'
        )
    if not isinstance(sql, str | None):
        raise LibraryFormatError(f'{label}: "sql" must be text or null, not {_kind(sql)}.')
    if entry.get("kind") == "unanswerable" and sql and sql.strip().lower() not in _NULL_SQL:
        raise LibraryFormatError(f"{label} is marked unanswerable but has SQL; drop one of the two.")
    item = {"id": ident, "question": question, "sql": _sql(sql)}
    note = entry.get("note")
    if isinstance(note, str) and note.strip():
        item["note"] = note.strip()
    return item


def _question(entry: dict, label: str) -> str:
    if "question" not in entry:
        raise LibraryFormatError(f'{label} has no "question" key.')
    question = entry["question"]
    if not isinstance(question, str):
        raise LibraryFormatError(f'{label}: "question" must be text, not {_kind(question)}.')
    question = " ".join(question.split())
    if not question:
        raise LibraryFormatError(f'{label}: "question" is empty.')
    return question


def _sql(value: str | None) -> str:
    if value is None or value.strip().lower() in _NULL_SQL:
        return ""
    return value.strip()


def _refuse_duplicate_ids(items: list[dict], filename: str) -> None:
    seen: dict[str, int] = {}
    for n, item in enumerate(items, start=1):
        if item["id"] in seen:
            raise LibraryFormatError(
                f'{filename}: id "{item["id"]}" appears twice (items {seen[item["id"]]} and {n}); '
                "ids must be unique so the report can name each failure."
            )
        seen[item["id"]] = n


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _few(ids: list[str], limit: int = 5) -> str:
    shown = ", ".join(f'"{i}"' for i in ids[:limit])
    return shown + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")
