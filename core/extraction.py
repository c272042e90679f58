"""Pull the SQL statement or the JSON object out of an LLM's free-form reply.
Extraction only finds the text; whether the SQL is acceptable is validation's job.
"""

from __future__ import annotations

import json
import re
from typing import Any

_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
# An unterminated fence (a reply cut off mid-block) runs to the end of the text.
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SQL_TAGS = frozenset({"sql", "postgres", "postgresql", "psql", "pgsql", "sqlite", "duckdb", "plpgsql"})
_JSON_TAGS = frozenset({"json", "jsonc", "json5"})
_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_LABEL = re.compile(r"^\s*(?:(?:postgre)?sql(?:\s+query)?|query|answer)\s*:\s*", re.IGNORECASE)
# Prose says "select" and "with" too, so bare text starts at a line-initial SELECT (code is laid out
# in lines) or a WITH shaped like a CTE, and only failing those at an upper-case SELECT anywhere.
_LINE_START = re.compile(
    r"^[ \t]*(?:(?:(?:postgre)?sql(?:[ \t]+query)?|query|answer)[ \t]*:[ \t]*)?(?=select\b)",
    re.IGNORECASE | re.MULTILINE,
)
_UPPER_SELECT = re.compile(r"\bSELECT\b")
_CTE_WITH = re.compile(
    r"\bwith\s+(?:recursive\s+)?\w+\s*(?:\([^)]*\)\s*)?as\s*(?:not\s+)?(?:materialized\s*)?\(", re.IGNORECASE
)
_SQL_START = re.compile(r"\b(?:select|with)\b", re.IGNORECASE)
# A paragraph after a blank line still belongs to the SQL if it starts like SQL does. Keywords must be
# upper- or lower-case: prose sentences start Title-case ("From this we see…").
_CONTINUATION_WORDS = (
    "select",
    "from",
    "where",
    "join",
    "left",
    "right",
    "inner",
    "full",
    "cross",
    "natural",
    "group",
    "order",
    "having",
    "limit",
    "offset",
    "fetch",
    "union",
    "intersect",
    "except",
    "window",
    "lateral",
    "using",
    "qualify",
    "returning",
)
_SQL_CONTINUATION = re.compile(
    r"^\s*(?:[(),*\-/'\"0-9]|(?:"
    + "|".join(w for word in _CONTINUATION_WORDS for w in (word, word.upper()))
    + r")\b|\w+\s+(?:as|AS)\s*\()",
    re.MULTILINE,
)


class SqlExtractionError(ValueError):
    """The reply held no SQL statement."""


class JsonExtractionError(ValueError):
    """The reply held no JSON object."""


def extract_sql(text: str | None) -> str:
    """The SQL statement in an LLM reply: a fenced block's content, else the text from SELECT/WITH.

    `text` may be None because chat APIs return no content for some replies.
    """
    reply = strip_reasoning(text or "")
    sql = _from_fences(reply)
    if sql is None:
        sql = _from_bare_text(reply)
    sql = _LABEL.sub("", sql or "", count=1)
    sql = _strip_trailing(sql)
    if not sql:
        raise SqlExtractionError("the model's reply contained no SQL")
    return sql


def extract_json_object(text: str | None) -> dict[str, Any]:
    """The single JSON object in an LLM reply, fenced or bare, possibly surrounded by prose."""
    reply = strip_reasoning(text or "").strip()
    if not reply:
        raise JsonExtractionError("the model's reply was empty; expected one JSON object")
    fences = _FENCE.findall(reply)
    candidates = [body for tag, body in fences if tag.lower() in _JSON_TAGS]
    candidates += [body for tag, body in fences if tag.lower() not in _JSON_TAGS]
    candidates.append(reply)
    first_error: str | None = None
    for candidate in candidates:
        value, error = _first_json_value(candidate)
        if isinstance(value, dict):
            return value
        if first_error is None:
            first_error = error
    raise JsonExtractionError(first_error or "the model's reply contained no JSON object")


def strip_reasoning(text: str) -> str:
    """Remove <think>…</think> blocks that reasoning models put before their answer."""
    text = _THINK_BLOCK.sub("", text)
    # Some servers drop the opening tag and keep only "</think>": the answer follows the last one.
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    # An unclosed <think> means the reply stopped mid-reasoning; nothing after it is an answer.
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text


def _from_fences(reply: str) -> str | None:
    fences = _FENCE.findall(reply)
    for tag, body in fences:
        if tag.lower() in _SQL_TAGS and body.strip():
            return body
    # An untagged (or oddly tagged) block counts only if it holds a query, not e.g. sample output.
    for _tag, body in fences:
        if _SQL_START.search(body):
            return _from_bare_text(body) or body
    return None


def _from_bare_text(reply: str) -> str | None:
    starts = [m.start() for m in (_LINE_START.search(reply), _CTE_WITH.search(reply)) if m is not None]
    if not starts:
        anywhere = _UPPER_SELECT.search(reply)
        if anywhere is None:
            return None
        starts = [anywhere.start()]
    sql = reply[min(starts) :]
    end = _statement_end(sql)
    if end is not None:
        return sql[:end]
    return _drop_trailing_prose(sql)


def _statement_end(sql: str) -> int | None:
    """Index of the first semicolon outside quotes and comments, if any."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            close = sql.find(ch, i + 1)
            while close != -1 and sql[close + 1 : close + 2] == ch:
                close = sql.find(ch, close + 2)
            if close == -1:
                return None
            i = close + 1
            continue
        if sql.startswith("--", i):
            newline = sql.find("\n", i)
            if newline == -1:
                return None
            i = newline + 1
            continue
        if sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            if close == -1:
                return None
            i = close + 2
            continue
        if ch == ";":
            return i
        i += 1
    return None


def _drop_trailing_prose(sql: str) -> str:
    for gap in re.finditer(r"\n[ \t]*\n", sql):
        if not _SQL_CONTINUATION.match(sql, gap.end()):
            return sql[: gap.start()]
    return sql


def _strip_trailing(sql: str) -> str:
    # Stray backticks remain when a model writes a one-line fence: ```SELECT 1```.
    sql = sql.strip().strip("`").strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return sql


def _first_json_value(text: str) -> tuple[Any, str | None]:
    """The JSON object `text` is, or the first one inside it, or why there is none."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as error:
        parse_error = (
            f"the model's reply was not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        )
    else:
        if isinstance(value, dict):
            return value, None
        kind = _JSON_KINDS.get(type(value), "value")
        return None, f"expected one JSON object, but the reply is a JSON {kind}"
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    if start == -1:
        return None, "the model's reply contained no JSON object"
    while start != -1:
        try:
            value, _ = decoder.raw_decode(stripped, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, dict):
                return value, None
        start = stripped.find("{", start + 1)
    return None, parse_error
