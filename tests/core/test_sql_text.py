"""The canonical text validation parses: the tokens the database itself would read."""

import pytest

from core.sql_text import SqlTextError, canonical_sql


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ('SELECT U&"\\0070g_sleep"(3)', 'SELECT "pg_sleep"(3)'),
        ("SELECT U&\"!0070g!!x\" UESCAPE '!'(3)", 'SELECT "pg!x"(3)'),
        ("SELECT U&'\\+01F600 \\\\'", "SELECT '\U0001f600 \\'"),
        ("SELECT E'it\\'s\\n', 'a\\'", "SELECT 'it''s\n', 'a\\'"),
        ("SELECT $$x'y$$, $t$ $$ $t$", "SELECT 'x''y', ' $$ '"),
        ("SELECT a$b$ FROM t", "SELECT a$b$ FROM t"),
        ("SELECT 1 -- c\n/* d */ + 2", "SELECT 1  \n  + 2"),
        ('SELECT "a""b"', 'SELECT "a""b"'),
    ],
)
def test_postgres_literals_and_names_are_decoded(text, canonical):
    assert canonical_sql(text, "postgres") == canonical


def test_sqlite_brackets_and_backticks_become_quoted_names():
    assert canonical_sql("SELECT [a b], `c` FROM t", "sqlite") == 'SELECT "a b", "c" FROM t'
    # No E-strings in SQLite: the backslash is a plain character there too.
    assert canonical_sql("SELECT e'\\'", "sqlite") == "SELECT e'\\'"


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1 /* /* */",
        "SELECT 'x",
        'SELECT "x',
        "SELECT $a$ x",
        "SELECT U&'\\0000'",
        "SELECT é",
        "SELECT\x00 1",
    ],
)
def test_what_cannot_be_read_exactly_is_refused(text):
    with pytest.raises(SqlTextError):
        canonical_sql(text, "postgres")


# --- line ends of `--` comments (issue 24) ------------------------------------------------------
# PostgreSQL's scanner ends a `--` comment at `newline [\n\r]`; SQLite's tokenizer at '\n' only.


def test_a_crlf_ends_a_comment_for_both_engines():
    # PostgreSQL ends it at the CR (the LF is then whitespace), SQLite at the LF: the same tokens.
    assert canonical_sql("SELECT 1 -- note\r\n+ 2", "postgres") == "SELECT 1  \r\n+ 2"
    assert canonical_sql("SELECT 1 -- note\r\n+ 2", "sqlite") == "SELECT 1  \n+ 2"


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
@pytest.mark.parametrize("char", ["\r", "\f", "\v", "\x85", "\u2028", "\u2029"])
def test_a_line_end_the_engines_or_editors_read_differently_is_refused_in_a_comment(dialect, char):
    text = f"SELECT count(*) FROM t -- note{char}UNION SELECT rolname FROM pg_roles"
    with pytest.raises(SqlTextError, match="line-break character"):
        canonical_sql(text, dialect)


def test_a_cr_right_before_the_comments_end_is_refused_too():
    # "--x\r\r\n": PostgreSQL ends the comment at the first CR, SQLite at the LF.
    with pytest.raises(SqlTextError):
        canonical_sql("SELECT 1 --x\r\r\nFROM t", "sqlite")
    with pytest.raises(SqlTextError):
        canonical_sql("SELECT 1 --x\r\r\nFROM t", "postgres")


def test_a_comment_after_a_u_and_literal_follows_the_same_rule():
    with pytest.raises(SqlTextError):
        canonical_sql("SELECT U&\"!0070\" -- x\rUESCAPE '!'", "postgres")
