"""Reading benchmark question files into one shape: EHRSQL (data.json + label.json), a plain JSON
list (askdb's own benchmark in benchmarks/data/mimiciv/), or CSV.

Pure Python: no Django, so the formats are tested without a database. Every malformed file is
a FormatError naming the file and the line, item or key at fault.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.text import find_nul, nul_message

# Keys that may hold the gold SQL in a plain list, in order of preference.
SQL_KEYS = ("sql", "gold_sql", "query", "label")
ID_KEYS = ("id", "item_id", "qid")


class FormatError(ValueError):
    """A question file that cannot be read, with where and why."""


@dataclass(frozen=True)
class BenchmarkItem:
    """One benchmark question. `gold_sql` is "" when the question is unanswerable."""

    id: str
    question: str
    gold_sql: str
    category: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return bool(self.gold_sql)


def gold_from(value: Any) -> str:
    """A label as gold SQL: EHRSQL writes unanswerable as the string "null"; we also accept
    None and "" (askdb's own benchmark) for the same meaning."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected SQL text, got {type(value).__name__}")
    text = value.strip()
    return "" if text.lower() == "null" else text


def load_items(questions: str | Path, labels: str | Path | None = None) -> list[BenchmarkItem]:
    """Read a question file (and, for EHRSQL, its label file) into benchmark items; an item with a
    NUL character is refused with a sentence (PostgreSQL's text cannot hold one: it failed deep in
    a write)."""
    items = _load_items(questions, labels)
    for n, item in enumerate(items, start=1):
        where = find_nul([item.question, item.gold_sql], f"{Path(questions).name}: item {n} ({item.id!r})")
        if where:
            raise FormatError(nul_message(where))
    return items


def _load_items(questions: str | Path, labels: str | Path | None) -> list[BenchmarkItem]:
    path = Path(questions)
    if not path.is_file():
        raise FormatError(f"{path}: no such file")
    if labels is not None:
        return _load_ehrsql(path, Path(labels))
    if path.suffix.lower() == ".csv":
        return _load_csv(path)
    data = _read_json(path)
    if isinstance(data, dict) and "data" in data:
        rows = data["data"]
        if isinstance(rows, list) and rows and isinstance(rows[0], dict) and not _sql_key(rows[0]):
            raise FormatError(
                f"{path}: looks like an EHRSQL data.json (items have no SQL); pass its label.json with --labels"
            )
        data = rows
    if not isinstance(data, list):
        raise FormatError(f'{path}: expected a JSON list of questions or {{"data": [...]}}')
    return _check_unique(path, [_plain_item(path, n, row) for n, row in enumerate(data, start=1)])


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason})") from exc


def _sql_key(row: dict) -> str | None:
    return next((k for k in SQL_KEYS if k in row), None)


def _plain_item(path: Path, number: int, row: Any) -> BenchmarkItem:
    where = f"{path}: item {number}"
    if not isinstance(row, dict):
        raise FormatError(f"{where}: expected an object with 'question' and 'sql', got {type(row).__name__}")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise FormatError(f"{where}: missing or empty key 'question'")
    key = _sql_key(row)
    if key is None:
        raise FormatError(f"{where}: missing key 'sql' (use \"\" for an unanswerable question)")
    try:
        gold = gold_from(row[key])
    except TypeError as exc:
        raise FormatError(f"{where}: key {key!r}: {exc}") from exc
    item_id = next((row[k] for k in ID_KEYS if row.get(k) not in (None, "")), number)
    known = {"question", key, "category", *ID_KEYS}
    return BenchmarkItem(
        id=str(item_id),
        question=question.strip(),
        gold_sql=gold,
        category=str(row.get("category") or ""),
        metadata={k: v for k, v in row.items() if k not in known},
    )


def _load_csv(path: Path) -> list[BenchmarkItem]:
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in reader.fieldnames or []]
            if "question" not in header:
                raise FormatError(f"{path}: line 1: the header needs a 'question' column (found {header})")
            sql_key = next((k for k in SQL_KEYS if k in header), None)
            if sql_key is None:
                raise FormatError(f"{path}: line 1: the header needs a 'sql' column (empty = unanswerable)")
            reader.fieldnames = header
            items = []
            for row in reader:
                if None in row:
                    raise FormatError(f"{path}: line {reader.line_num}: more fields than the header has")
                if not any((v or "").strip() for v in row.values()):
                    continue  # a blank line
                question = (row.get("question") or "").strip()
                if not question:
                    raise FormatError(f"{path}: line {reader.line_num}: empty 'question'")
                item_id = next((row[k] for k in ID_KEYS if (row.get(k) or "").strip()), None)
                known = {"question", sql_key, "category", *ID_KEYS}
                items.append(
                    BenchmarkItem(
                        id=str(item_id or reader.line_num - 1).strip(),
                        question=question,
                        gold_sql=gold_from(row.get(sql_key) or ""),
                        category=(row.get("category") or "").strip(),
                        metadata={k: v for k, v in row.items() if k not in known and v not in (None, "")},
                    )
                )
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except csv.Error as exc:
        raise FormatError(f"{path}: not valid CSV: {exc}") from exc
    return _check_unique(path, items)


def _load_ehrsql(data_path: Path, label_path: Path) -> list[BenchmarkItem]:
    if not label_path.is_file():
        raise FormatError(f"{label_path}: no such file")
    data, labels = _read_json(data_path), _read_json(label_path)
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise FormatError(f"{data_path}: expected an EHRSQL data.json: an object with a 'data' list")
    if not isinstance(labels, dict):
        raise FormatError(
            f'{label_path}: expected an EHRSQL label.json: an object mapping id to SQL or "null"'
        )
    items = []
    for number, row in enumerate(rows, start=1):
        where = f"{data_path}: item {number}"
        if not isinstance(row, dict):
            raise FormatError(f"{where}: expected an object with 'id' and 'question'")
        if row.get("id") in (None, ""):
            raise FormatError(f"{where}: missing key 'id'")
        item_id = str(row["id"])
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise FormatError(f"{where} (id {item_id}): missing or empty key 'question'")
        if item_id not in labels:
            raise FormatError(
                f"{label_path}: no label for id {item_id!r} (item {number} of {data_path.name})"
            )
        try:
            gold = gold_from(labels[item_id])
        except TypeError as exc:
            raise FormatError(f"{label_path}: key {item_id!r}: {exc}") from exc
        extra = {k: v for k, v in row.items() if k not in {"id", "question", "category"}}
        items.append(BenchmarkItem(item_id, question.strip(), gold, str(row.get("category") or ""), extra))
    return _check_unique(data_path, items)


def _check_unique(path: Path, items: Iterable[BenchmarkItem]) -> list[BenchmarkItem]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item.id in seen:
            raise FormatError(f"{path}: duplicate id {item.id!r}")
        seen.add(item.id)
        out.append(item)
    if not out:
        raise FormatError(f"{path}: no questions in the file")
    return out
