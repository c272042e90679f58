"""Read SQL text the way the database's own lexer does, before sqlglot sees it.

sqlglot and the database disagree on some lexical corners: sqlglot reads PostgreSQL's
`U&"\\0070g_sleep"` as `U & "\\0070g_sleep"` while PostgreSQL calls pg_sleep; it nests block
comments where SQLite does not. Validation therefore parses a *canonical* text: comments become
spaces, every string literal becomes a plain '…' literal and every quoted identifier a plain "…"
one, with escapes decoded as the database decodes them. The text that runs is generated from the
tree parsed from this canonical text (never the caller's own), so the lexer decides what runs; it
still reads as the database would, so that what runs is what the writer meant, and anything it
cannot read exactly (nested or unterminated comments, bad escapes, a line end the engines read
differently, characters outside the SQL alphabet) is refused rather than guessed.
"""

from __future__ import annotations

import re

# PostgreSQL's NAMEDATALEN - 1: longer names are silently truncated, so they are refused instead.
MAX_IDENTIFIER_BYTES = 63

# Unquoted names are ASCII here: a non-ASCII letter outside quotes (which PostgreSQL would take as
# part of a name and sqlglot may take as a space) is refused instead of guessed.
_IDENT_CHARS = re.compile(r"[A-Za-z0-9_$]")
_WHITESPACE = " \t\n\r\f"
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")
_UESCAPE = re.compile(r"UESCAPE\b", re.IGNORECASE)
_E_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# Where a `--` comment ends. PostgreSQL's scanner: `newline [\n\r]`, `comment ("--"{non_newline}*)`,
# so a carriage return ends it; SQLite's tokenizer ends it at '\n' only. A CR that is not part of
# a CRLF therefore means two different queries to the two engines (and to a reviewer's editor),
# and so do characters that editors and browsers draw as line breaks although neither engine does
# (form feed, vertical tab, NEL, LINE and PARAGRAPH SEPARATOR): all are refused inside a comment.
_COMMENT_ENDS = {"postgres": "\n\r"}
_AMBIGUOUS_IN_COMMENT = re.compile("\r(?!\n)|[\f\v\x85\u2028\u2029]")


class SqlTextError(ValueError):
    """The text cannot be read exactly as the database would read it."""


def canonical_sql(text: str, dialect: str) -> str:
    """`text` with comments removed and literals and quoted names in one plain spelling."""
    return _Lexer(text, dialect).run()


def _quote_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _quote_identifier(value: str, dialect: str) -> str:
    if not value:
        raise SqlTextError('an empty quoted name ("") is not allowed')
    if dialect == "postgres" and len(value.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise SqlTextError(f"the name `{value[:40]}…` is longer than {MAX_IDENTIFIER_BYTES} bytes")
    return '"' + value.replace('"', '""') + '"'


class _Lexer:
    def __init__(self, text: str, dialect: str) -> None:
        self.text = text
        self.dialect = dialect
        self.postgres = dialect == "postgres"
        self.pos = 0
        self.out: list[str] = []

    def run(self) -> str:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            nxt = text[self.pos + 1 : self.pos + 2]
            if char == "-" and nxt == "-":
                self._line_comment()
            elif char == "/" and nxt == "*":
                self._block_comment()
            elif char == "'":
                self.out.append(_quote_string(self._plain_string()))
            elif char == '"':
                self.out.append(_quote_identifier(self._quoted('"'), self.dialect))
            elif self.dialect == "sqlite" and char == "`":
                self.out.append(_quote_identifier(self._quoted("`"), self.dialect))
            elif self.dialect == "sqlite" and char == "[":
                self._bracketed()
            elif self.postgres and char == "$" and not self._after_word():
                self._dollar()
            elif char.isascii() and (char.isalpha() or char == "_"):
                self._word()
            elif char.isascii() and (char.isprintable() or char in _WHITESPACE):
                self.out.append(char)
                self.pos += 1
            else:
                raise SqlTextError(
                    f"the character {char!r} at position {self.pos} is not allowed outside a string or quoted name"
                )
        return "".join(self.out)

    # --- pieces ------------------------------------------------------------------------------

    def _after_word(self) -> bool:
        return self.pos > 0 and bool(_IDENT_CHARS.match(self.text[self.pos - 1]))

    def _line_comment(self) -> None:
        self.pos = _line_comment_end(self.text, self.pos, self.dialect)
        self.out.append(" ")

    def _block_comment(self) -> None:
        # PostgreSQL nests block comments, SQLite does not: a comment inside a comment is refused.
        end = self.text.find("*/", self.pos + 2)
        if end < 0:
            raise SqlTextError("a /* comment is not closed")
        if "/*" in self.text[self.pos + 2 : end]:
            raise SqlTextError("a comment inside a comment (/* /* */) is not allowed")
        self.pos = end + 2
        self.out.append(" ")

    def _quoted(self, quote: str) -> str:
        """A quoted run from self.pos (at the opening quote); a doubled quote is one quote."""
        parts: list[str] = []
        i = self.pos + 1
        while True:
            end = self.text.find(quote, i)
            if end < 0:
                kind = "string" if quote == "'" else "quoted name"
                raise SqlTextError(f"a {kind} starting at position {self.pos} is not closed")
            parts.append(self.text[i:end])
            if self.text[end + 1 : end + 2] == quote:
                parts.append(quote)
                i = end + 2
                continue
            self.pos = end + 1
            return "".join(parts)

    def _plain_string(self) -> str:
        # standard_conforming_strings is on (the default, and set for every session): '\' is plain.
        return self._quoted("'")

    def _bracketed(self) -> None:
        end = self.text.find("]", self.pos)
        if end < 0:
            raise SqlTextError(f"a [name] starting at position {self.pos} is not closed")
        self.out.append(_quote_identifier(self.text[self.pos + 1 : end], self.dialect))
        self.pos = end + 1

    def _dollar(self) -> None:
        match = _DOLLAR_TAG.match(self.text, self.pos)
        if match is None:
            # $1 and the like: a parameter, which validation refuses; keep it as written.
            self.out.append("$")
            self.pos += 1
            return
        tag = match.group(0)
        end = self.text.find(tag, match.end())
        if end < 0:
            raise SqlTextError(f"a {tag} string starting at position {self.pos} is not closed")
        self.out.append(_quote_string(self.text[match.end() : end]))
        self.pos = end + len(tag)

    def _word(self) -> None:
        start = self.pos
        text = self.text
        end = start
        while end < len(text) and _IDENT_CHARS.match(text[end]) and (self.postgres or text[end] != "$"):
            end += 1
        word = text[start:end]
        following = text[end : end + 1]
        if self.postgres and word.lower() == "e" and following == "'":
            self.pos = end
            self.out.append(_quote_string(self._escape_string()))
            return
        if self.postgres and word.lower() == "u" and text[end : end + 2] in ("&'", '&"'):
            self.pos = end + 1
            quote = text[self.pos]
            raw = self._quoted(quote)
            value = _decode_unicode(raw, self._uescape())
            self.out.append(_quote_string(value) if quote == "'" else _quote_identifier(value, self.dialect))
            return
        self.out.append(word)
        self.pos = end

    def _escape_string(self) -> str:
        """An E'…' string from self.pos (at the quote): backslash escapes, as PostgreSQL reads them."""
        text = self.text
        i = self.pos + 1
        parts: list[str] = []
        while i < len(text):
            char = text[i]
            if char == "\\":
                i, decoded = _decode_backslash(text, i)
                parts.append(decoded)
            elif char == "'":
                if text[i + 1 : i + 2] == "'":
                    parts.append("'")
                    i += 2
                    continue
                self.pos = i + 1
                return "".join(parts)
            else:
                parts.append(char)
                i += 1
        raise SqlTextError(f"an E'…' string starting at position {self.pos} is not closed")

    def _uescape(self) -> str:
        """The escape character of a U& literal: `UESCAPE 'c'` after it, or a backslash."""
        i = self._skip_space(self.pos)
        match = _UESCAPE.match(self.text, i)
        if match is None:
            return "\\"
        j = self._skip_space(match.end())
        if self.text[j : j + 1] != "'":
            raise SqlTextError("UESCAPE must be followed by a one-character string")
        self.pos = j
        escape = self._quoted("'")
        if len(escape) != 1 or escape in "0123456789abcdefABCDEF+'\"" or escape in _WHITESPACE:
            raise SqlTextError(f"invalid UESCAPE character {escape!r}")
        return escape

    def _skip_space(self, i: int) -> int:
        text = self.text
        while i < len(text):
            if text[i] in _WHITESPACE:
                i += 1
            elif text.startswith("--", i):
                i = _line_comment_end(text, i, self.dialect)
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0 or "/*" in text[i + 2 : end]:
                    raise SqlTextError("a comment after a U& literal is not closed or is nested")
                i = end + 2
            else:
                break
        return i


def _line_comment_end(text: str, start: int, dialect: str) -> int:
    """The index where the `--` comment at text[start] ends (its line end, kept as whitespace)."""
    ends = _COMMENT_ENDS.get(dialect, "\n")
    end = start + 2
    while end < len(text) and text[end] not in ends:
        end += 1
    # The comment and its line end, with one character more so that a CRLF is seen whole.
    window = text[start : end + 2]
    ambiguous = next((m for m in _AMBIGUOUS_IN_COMMENT.finditer(window) if m.start() <= end - start), None)
    if ambiguous is not None:
        raise SqlTextError(
            f"a -- comment at position {start} holds the line-break character {ambiguous.group(0)!r} "
            "that PostgreSQL, SQLite and editors read differently; end comments with a plain newline"
        )
    return end


def _decode_backslash(text: str, i: int) -> tuple[int, str]:
    """One backslash escape of an E'…' string at text[i]; the index after it and its value."""
    nxt = text[i + 1 : i + 2]
    if not nxt:
        raise SqlTextError("an E'…' string ends with a lone backslash")
    if nxt in _E_ESCAPES:
        return i + 2, _E_ESCAPES[nxt]
    if nxt in "01234567":
        digits = re.match(r"[0-7]{1,3}", text[i + 1 :]).group(0)
        return i + 1 + len(digits), _code_point(int(digits, 8) & 0xFF)
    if nxt == "x":
        match = re.match(r"[0-9A-Fa-f]{1,2}", text[i + 2 :])
        if match:
            return i + 2 + len(match.group(0)), _code_point(int(match.group(0), 16))
        return i + 2, "x"
    if nxt in "uU":
        width = 4 if nxt == "u" else 8
        digits = text[i + 2 : i + 2 + width]
        if len(digits) != width or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
            raise SqlTextError(f"invalid Unicode escape \\{nxt}{digits} in an E'…' string")
        return i + 2 + width, _code_point(int(digits, 16))
    return i + 2, nxt


def _decode_unicode(raw: str, escape: str) -> str:
    """The value of a U&'…' or U&"…" body: escape+XXXX, escape++XXXXXX, and a doubled escape."""
    parts: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char != escape:
            parts.append(char)
            i += 1
            continue
        rest = raw[i + 1 :]
        if rest.startswith(escape):
            parts.append(escape)
            i += 2
        elif re.match(r"[0-9A-Fa-f]{4}", rest):
            parts.append(_code_point(int(rest[:4], 16)))
            i += 5
        elif re.match(r"\+[0-9A-Fa-f]{6}", rest):
            parts.append(_code_point(int(rest[1:7], 16)))
            i += 8
        else:
            raise SqlTextError(f"invalid Unicode escape {escape}{rest[:7]} in a U& literal")
    value = "".join(parts)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise SqlTextError("surrogate code points are not allowed in a U& literal")
    return value


def _code_point(value: int) -> str:
    if value == 0 or value > 0x10FFFF:
        raise SqlTextError(f"the escape for code point {value:#x} is not allowed")
    return chr(value)
