"""Validate LLM-written SQL on its parsed tree: one read-only query over catalogued tables and columns.
Each refusal has a stable code and a message written to be fed back to the LLM verbatim.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.scope import Scope, ScopeType, traverse_scope

from core.sql_functions import allowed_functions
from core.sql_text import SqlTextError, canonical_sql
from core.types import CatalogSchema, TableSchema, ValidatedSql

ERROR_CODES = frozenset(
    {
        "empty",
        "too_long",
        "parse_error",
        "multiple_statements",
        "not_a_query",
        "select_into",
        "locking_clause",
        "denied_function",
        "denied_type",
        "denied_syntax",
        "denied_relation",
        "unknown_table",
        "ambiguous_table",
        "unknown_alias",
        "unknown_column",
        "ambiguous_column",
    }
)

# Functions known to reach outside the query's own rows: server files and programs, sleeps and
# locks, other sessions and databases, server settings, writes, and SQL passed in as a string.
# Only functions on the allow-list (sql_functions.py) are ever accepted; this list names the
# dangerous ones in refusals and guards `alias.name` (PostgreSQL reads it as name(alias)).
# An entry ending in "*" is a prefix.
DENIED_FUNCTIONS = frozenset(
    {
        # PostgreSQL: every pg_* function is server or session machinery
        "pg_*",
        "ts_stat",
        "ts_rewrite",
        "version",
        "inet_*",
        # PostgreSQL: server files and large objects
        "pg_read_file",
        "pg_read_binary_file",
        "pg_stat_file",
        "pg_ls_*",
        "pg_file_*",
        "pg_logdir_ls",
        "lo_*",
        # PostgreSQL: sleeping and advisory locks
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_advisory_*",
        "pg_try_advisory_*",
        # PostgreSQL: other databases, sessions and server state
        "dblink*",
        "set_config",
        "current_setting",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_promote",
        "pg_switch_wal",
        "pg_create_restore_point",
        "pg_backup_start",
        "pg_backup_stop",
        "pg_start_backup",
        "pg_stop_backup",
        "pg_create_physical_replication_slot",
        "pg_create_logical_replication_slot",
        "pg_drop_replication_slot",
        "pg_replication_origin_*",
        "pg_logical_*",
        "pg_log_backend_memory_contexts",
        "pg_import_system_collations",
        # PostgreSQL: writes
        "nextval",
        "setval",
        "pg_notify",
        # PostgreSQL: run a SQL string given as an argument
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "query_to_json*",
        "table_to_xml*",
        "cursor_to_xml*",
        "database_to_xml*",
        "schema_to_xml*",
        # SQLite
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "pragma_*",
        # DuckDB: files, network, other databases, settings
        "read_csv*",
        "read_parquet",
        "parquet_*",
        "read_json*",
        "read_ndjson*",
        "read_text",
        "read_blob",
        "read_xlsx",
        "sniff_csv",
        "glob",
        "st_read",
        "iceberg_*",
        "delta_scan",
        "sqlite_scan",
        "sqlite_attach",
        "postgres_*",
        "mysql_*",
        "query",
        "query_table",
        "getenv",
        "duckdb_*",
    }
)

_DENIED_EXACT = frozenset(n for n in DENIED_FUNCTIONS if not n.endswith("*"))
_DENIED_PREFIXES = tuple(sorted(n[:-1] for n in DENIED_FUNCTIONS if n.endswith("*")))

_SYSTEM_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
_SQLITE_SYSTEM_TABLES = frozenset(
    {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}
)

# Statements sqlglot can nest inside a query (data-modifying CTEs) or fall back to as a Command.
_STATEMENT_TYPES: tuple[type[exp.Expr], ...] = tuple(
    getattr(exp, name)
    for name in (
        "DDL",
        "DML",
        "Drop",
        "Alter",
        "TruncateTable",
        "Command",
        "Set",
        "Grant",
        "Revoke",
        "Transaction",
        "Commit",
        "Rollback",
        "Analyze",
        "Comment",
        "Pragma",
        "Attach",
        "Detach",
        "Install",
        "Use",
        "Describe",
        "Refresh",
        "Cache",
        "Uncache",
        "LoadData",
        "Kill",
        "Show",
        "Execute",
        "Declare",
        "Summarize",
        "Export",
    )
    if hasattr(exp, name)
)
_STATEMENT_WORDS = {"TruncateTable": "TRUNCATE", "Transaction": "BEGIN", "LoadData": "LOAD DATA"}

# Bare PostgreSQL keywords that sqlglot parses as columns although they are values.
_NILADIC_KEYWORDS = frozenset(
    {"user", "current_user", "current_role", "session_user", "current_catalog", "current_schema"}
)

# Clauses of a SELECT that may name its output aliases; PostgreSQL refuses them in WHERE and ON,
# SQLite and DuckDB accept them there.
_ALIAS_CLAUSES = frozenset({"order", "group", "having", "qualify", "distinct"})
_LENIENT_ALIAS_CLAUSES = frozenset({"where", "joins"})

_CTE_SCOPES = (ScopeType.CTE, ScopeType.DERIVED_TABLE)
_MAX_LISTED = 40


class SqlValidationError(ValueError):
    """Generated SQL was refused; `message` is written for the user and for the LLM's next attempt."""

    def __init__(self, code: str, message: str) -> None:
        # Both go to args so the error survives pickling (e.g. as a Celery task result).
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message


def validate_sql(sql: str, catalog: CatalogSchema, *, max_length: int = 20000) -> ValidatedSql:
    """Check that `sql` is one read-only query over `catalog`; return it with what it reads."""
    if len(sql) > max_length:
        raise SqlValidationError(
            "too_long", f"the SQL is {len(sql)} characters long; the limit is {max_length}"
        )
    text = _strip_statement(sql)
    tree = _parse_single(text, catalog.dialect)
    # The node types the query holds, in one walk: each check below looks for types a query
    # rarely has, and a walk per type was most of the validation's time.
    kinds = frozenset(type(node) for node in tree.walk())
    _check_is_query(tree, kinds)
    _check_syntax(tree, kinds)
    _check_field_selection(tree, catalog, kinds)
    _check_functions(tree, catalog.dialect)
    analysis = _analyse(tree)
    resolved = _resolve_tables(analysis.relations, catalog)
    lenient = _LENIENT_ALIAS_CLAUSES if catalog.dialect != "postgres" else frozenset()
    columns = _check_columns(_Columns(analysis, resolved, _ALIAS_CLAUSES | lenient))
    tables = sorted({table.qualified for table in resolved.values()})
    return ValidatedSql(
        sql=executable_sql(tree, catalog.dialect),
        tables=tuple(tables),
        columns=tuple(sorted(columns)),
        tree=tree,
    )


def executable_sql(tree: exp.Expr, dialect: str) -> str:
    """The SQL to send to the database, generated from the validated tree: no comments and none of
    the writer's spelling (escapes, quoting, line ends), so no lexical trick in the text the LLM,
    a reviewer or an import wrote can reach the database; it reads exactly what the checks read."""
    return tree.sql(dialect=dialect, comments=False)


def parse_query(sql: str, dialect: str) -> exp.Expr:
    """The tree validation reads for `sql` (canonical text, lower-case identifiers), unchecked:
    for readers of SQL that was validated before (privacy analysis of a stored run's SQL), so
    that they read it as validation did. Raises SqlValidationError when it cannot be read."""
    return _parse_single(_strip_statement(sql), dialect)


def referenced_tables(sql: str, dialect: str = "postgres") -> tuple[str, ...]:
    """Names of the tables `sql` reads, as written (lower-cased), without CTE names or table functions."""
    tree = _parse_single(_strip_statement(sql), dialect)
    names = {".".join(part for part in (t.catalog, t.db, t.name) if part) for t in _analyse(tree).relations}
    return tuple(sorted(names))


# --- parsing -------------------------------------------------------------------------------------


def _strip_statement(sql: str) -> str:
    text = sql.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def _parse_single(text: str, dialect: str) -> exp.Expr:
    if not text:
        raise SqlValidationError("empty", "the SQL is empty; write one SELECT query")
    # Resolve the dialect outside the try: an unknown name is a configuration bug, not bad SQL.
    dialect_obj = Dialect.get_or_raise(dialect)
    try:
        canonical = canonical_sql(text, dialect)
    except SqlTextError as error:
        raise SqlValidationError("parse_error", f"the SQL could not be read as {dialect}: {error}") from error
    try:
        statements = sqlglot.parse(canonical, dialect=dialect_obj)
    except ParseError as error:
        raise SqlValidationError("parse_error", _parse_error_message(error, dialect)) from error
    except RecursionError as error:
        raise SqlValidationError("parse_error", "the SQL is nested too deeply to be checked") from error
    except Exception as error:  # fail closed: whatever sqlglot cannot read is not run
        raise SqlValidationError(
            "parse_error", f"the SQL could not be parsed as {dialect}: {_one_line(str(error))}"
        ) from error
    # sqlglot yields None for an empty statement (";;") and Semicolon for a comment-only one.
    real = [s for s in statements if s is not None and not isinstance(s, exp.Semicolon)]
    if not real:
        raise SqlValidationError("empty", "the SQL contains no statement; write one SELECT query")
    if len(real) > 1:
        raise SqlValidationError(
            "multiple_statements",
            f"the SQL contains {len(real)} statements; send exactly one SELECT query, without semicolons",
        )
    tree = real[0]
    # Function names are read from the canonical text the parser saw (see _written_name).
    tree.meta["canonical_sql"] = canonical
    # Identifiers are compared case-insensitively, quoted or not; the caller's text is never rewritten.
    for identifier in tree.find_all(exp.Identifier):
        identifier.set("this", identifier.this.lower())
    return tree


def _parse_error_message(error: ParseError, dialect: str) -> str:
    if not error.errors:
        return f"the SQL could not be parsed as {dialect}: {_one_line(str(error))}"
    first = error.errors[0]
    description = re.sub(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", r"`\1`", first["description"])
    near = _one_line(f"{first.get('start_context') or ''}{first.get('highlight') or ''}")[-60:]
    where = f" at line {first.get('line')}, column {first.get('col')}"
    return f"the SQL could not be parsed as {dialect}: {_one_line(description)}{where}, near `{near}`"


def _one_line(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return re.sub(r"\s+", " ", text).strip()[:300]


# --- statement shape -----------------------------------------------------------------------------


def _holds(kinds: frozenset[type], *node_types: type[exp.Expr]) -> bool:
    """Whether a tree whose node types are `kinds` has a node of one of `node_types` (or of a
    subclass: what tree.find finds)."""
    return any(issubclass(kind, node_types) for kind in kinds)


def _check_is_query(tree: exp.Expr, kinds: frozenset[type]) -> None:
    root = tree
    while isinstance(root, exp.Subquery):
        root = root.this
    if isinstance(root, exp.With):
        root = root.this
    if not isinstance(root, (exp.Select, exp.SetOperation)):
        raise SqlValidationError(
            "not_a_query",
            f"only a single read-only SELECT query is allowed, but this is {_describe(root, tree)}",
        )
    if _holds(kinds, exp.Into):
        raise SqlValidationError(
            "select_into", "SELECT … INTO creates a table; remove the INTO clause and only SELECT the rows"
        )
    if _holds(kinds, exp.Lock):
        raise SqlValidationError(
            "locking_clause",
            "FOR UPDATE / FOR SHARE lock rows, which a read-only query must not do; "
            "remove the locking clause",
        )
    nested = tree.find(*_STATEMENT_TYPES) if _holds(kinds, *_STATEMENT_TYPES) else None
    if nested is not None:
        raise SqlValidationError(
            "not_a_query",
            f"the query contains {_describe(nested, nested)} (for example in a WITH clause); "
            "only read-only SELECT queries are allowed",
        )


def _describe(node: exp.Expr, tree: exp.Expr) -> str:
    if isinstance(node, exp.Command):
        word = str(node.this).upper()
    elif isinstance(node, (*_STATEMENT_TYPES, exp.Values)):
        word = _STATEMENT_WORDS.get(type(node).__name__, node.key.upper())
    else:
        # Not a statement sqlglot knows (e.g. LISTEN parses as an alias): name it by its first word.
        word = (tree.sql().split() or ["?"])[0].upper()
    return f"{'an' if word[:1] in 'AEIOU' else 'a'} {word} statement"


# --- functions, types and other syntax --------------------------------------------------------

# Parsed nodes that carry no position of a written name, so they are allowed by type: SQL syntax
# (AND, ~, ARRAY[…], CASE, CAST and ::, EXTRACT(… FROM …), EXISTS, niladic keywords) and the few
# functions sqlglot reads with a parser of their own (ceil, floor, initcap, string_agg, chr, …).
SYNTAX_FUNCTIONS: frozenset[type[exp.Expr]] = frozenset(
    getattr(exp, name)
    for name in (
        "And",
        "Or",
        "Xor",
        "Array",
        "Case",
        "If",
        "Cast",
        "TryCast",
        "Extract",
        "Substring",
        "Trim",
        "StrPosition",
        "Overlay",
        "RegexpLike",
        "RegexpILike",
        "CurrentDate",
        "CurrentTime",
        "CurrentTimestamp",
        "Localtime",
        "Localtimestamp",
        "CurrentUser",
        "TsOrDsToTimestamp",
        "TsOrDsToDate",
        "Collate",
        "Exists",
        "Unnest",
        "Explode",
        "Any",
        "All",
        "Some",
        "Struct",
        "ArrayContains",
        "ArrayContainsAll",
        "ArrayOverlaps",
        "Nvl2",
        "AtTimeZone",
        "ConvertTimezone",
        "Ceil",
        "Floor",
        "Initcap",
        "GroupConcat",
        "Chr",
        "Decode",
        "Normalize",
        "JSONArrayAgg",
    )
    if hasattr(exp, name)
)

# Syntax that names something outside the query or stands for text the validator never sees:
# (sqlglot node type, refusal code, message).
_PARAMETERS = "query parameters ($1, ?, :name) are not allowed; write the values into the query"
_DENIED_SYNTAX: tuple[tuple[type[exp.Expr], str, str], ...] = tuple(
    (getattr(exp, name), code, message)
    for name, code, message in (
        ("Placeholder", "denied_syntax", _PARAMETERS),
        ("Parameter", "denied_syntax", _PARAMETERS),
        ("SessionParameter", "denied_syntax", "session variables are not allowed"),
        ("Operator", "denied_syntax", "OPERATOR(…) syntax is not allowed; use the plain operator"),
        (
            "ObjectIdentifier",
            "denied_type",
            "object-identifier types (regclass, regproc, oid, …) are not allowed",
        ),
    )
    if hasattr(exp, name)
)


def _check_syntax(tree: exp.Expr, kinds: frozenset[type]) -> None:
    for node_type, code, message in _DENIED_SYNTAX:
        if _holds(kinds, node_type):
            raise SqlValidationError(code, message)
    for data_type in tree.find_all(exp.DataType) if _holds(kinds, exp.DataType) else ():
        kind = data_type.this
        if kind == exp.DataType.Type.USERDEFINED or str(getattr(kind, "value", kind)).upper().startswith(
            "REG"
        ):
            raise SqlValidationError(
                "denied_type",
                f"the type `{data_type.sql()}` is not allowed: cast only to standard types "
                "(integer, numeric, text, date, timestamp, interval, boolean, …)",
            )


def _check_field_selection(tree: exp.Expr, catalog: CatalogSchema, kinds: frozenset[type]) -> None:
    """`(expr).name` must name a column: PostgreSQL reads `(alias).f` as the call f(alias)."""
    if not _holds(kinds, exp.Dot):
        return
    known = {column.lower() for table in catalog.tables for column in table.columns}
    for dot in tree.find_all(exp.Dot):
        field_name = dot.expression
        if isinstance(field_name, exp.Identifier) and field_name.name.lower() not in known:
            raise SqlValidationError(
                "denied_syntax",
                f"`.{field_name.name}` selects a field that no table has (PostgreSQL would read it as "
                f"a call of function `{field_name.name}`); select columns by `alias.column`",
            )


def _check_functions(tree: exp.Expr, dialect: str) -> None:
    allowed = allowed_functions(dialect)
    canonical = tree.meta.get("canonical_sql", "")
    for node in tree.find_all(exp.Func):
        name = _written_name(node, canonical)
        if name is None:
            if type(node) in SYNTAX_FUNCTIONS:
                continue
            raise SqlValidationError(
                "denied_function",
                f"the expression `{_one_line(node.sql(dialect))[:80]}` could not be checked "
                "(its function is not known); rewrite it with ordinary SQL functions",
            )
        qualifier = _qualifier(node)
        if qualifier:
            raise SqlValidationError(
                "denied_function",
                f"function `{qualifier}.{name}` is not allowed: call functions by their plain name, "
                "without a schema",
            )
        if name in allowed:
            continue
        if _is_denied_name(name):
            raise SqlValidationError(
                "denied_function",
                f"function `{name}` is not allowed: generated queries may not touch files, settings, "
                "sessions, locks, sequences or other databases, or run SQL given as a string; "
                "use ordinary SQL functions",
            )
        raise SqlValidationError(
            "denied_function",
            f"function `{name}` is not allowed: it is not on the list of {dialect} functions "
            "generated queries may use (aggregates, window, math, string, date/time, conditional "
            "and cast functions); rewrite the query with those",
        )


def _written_name(node: exp.Func, canonical: str) -> str | None:
    """The function name as the database will read it, or None for syntax that names no function.

    Typed nodes say what sqlglot understood, not what was written (`now()` becomes
    CurrentTimestamp), so their name is read back from the canonical text at the node's position.
    """
    if isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc)):
        return node.name.lower() or None
    start, end = node.meta.get("start"), node.meta.get("end")
    if start is None or end is None or not canonical:
        return None
    written = canonical[start : end + 1]
    if written.startswith('"') and written.endswith('"') and len(written) >= 2:
        return written[1:-1].replace('""', '"').lower()
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", written):
        return written.lower()
    return None


def _qualifier(node: exp.Func) -> str:
    """The schema a function call is qualified with (`pg_catalog.f(…)`, `FROM s.f(…)`), if any."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and node.arg_key == "expression":
        return parent.this.sql() if isinstance(parent.this, exp.Expr) else str(parent.this)
    if isinstance(parent, exp.Table) and node.arg_key == "this":
        return ".".join(part for part in (parent.catalog, parent.db) if part)
    return ""


def _is_denied_name(name: str) -> bool:
    return name in _DENIED_EXACT or name.startswith(_DENIED_PREFIXES)


# --- tables --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Analysis:
    scopes: tuple[Scope, ...]
    cte_refs: dict[int, Scope]  # id(Table node) -> the CTE it names
    relations: tuple[exp.Table, ...]  # Table nodes that read a real table


def _analyse(tree: exp.Expr) -> _Analysis:
    try:
        scopes = tuple(traverse_scope(tree))
    except SqlglotError as error:
        raise SqlValidationError(
            "parse_error", f"the query's structure could not be analysed: {_one_line(str(error))}"
        ) from error
    cte_refs: dict[int, Scope] = {}
    real: set[int] = set()
    for scope in scopes:
        for table in scope.tables:
            # Same rule as sqlglot's own scoping: only an unqualified name can mean a visible CTE.
            # cte_sources (never `sources`) so a subquery alias can't hide a real table like pg_shadow.
            cte = scope.cte_sources.get(table.name) if not table.db else None
            if isinstance(cte, Scope):
                cte_refs[id(table)] = cte
            else:
                real.add(id(table))
    for table_id in real:
        cte_refs.pop(table_id, None)
    # Tables no scope claims are still treated as real, so anything unusual fails closed.
    relations = tuple(
        t for t in tree.find_all(exp.Table) if isinstance(t.this, exp.Identifier) and id(t) not in cte_refs
    )
    return _Analysis(scopes=scopes, cte_refs=cte_refs, relations=relations)


def _resolve_tables(relations: tuple[exp.Table, ...], catalog: CatalogSchema) -> dict[int, TableSchema]:
    resolved: dict[int, TableSchema] = {}
    for table in relations:
        schema, name = table.db, table.name
        written = ".".join(part for part in (table.catalog, schema, name) if part)
        if _is_system_relation(schema, name):
            raise SqlValidationError(
                "denied_relation",
                f"`{written}` is a system catalog; query only the clinical tables listed in the schema",
            )
        if table.catalog:
            raise SqlValidationError(
                "unknown_table",
                f"table `{written}` names another database; use `schema.table` names from the schema",
            )
        matches = catalog.find(name, schema or None)
        alias = table.args.get("alias")
        if matches and alias is not None and alias.columns:
            # `patients AS p(a, b, c, d, e, gender)` renames dod to gender: every check that reads
            # a column by its name would read the wrong one.
            raise SqlValidationError(
                "denied_syntax",
                f"a column list after the alias of table `{written}` renames its columns; "
                "rename columns in the SELECT list instead (`column AS name`)",
            )
        if len(matches) == 1:
            resolved[id(table)] = matches[0]
        elif not matches:
            raise SqlValidationError("unknown_table", _unknown_table_message(written, name, catalog))
        else:
            options = " and ".join(f"`{t.qualified}`" for t in matches)
            raise SqlValidationError(
                "ambiguous_table",
                f"table `{written}` is ambiguous: it exists as {options}; qualify it with its schema",
            )
    return resolved


def _is_system_relation(schema: str, name: str) -> bool:
    return (
        schema in _SYSTEM_SCHEMAS
        or schema.startswith("pg_")
        or name.startswith("pg_")
        or name in _SQLITE_SYSTEM_TABLES
    )


def _unknown_table_message(written: str, name: str, catalog: CatalogSchema) -> str:
    qualified = sorted({t.qualified for t in catalog.tables})
    same_name = [t.qualified for t in catalog.find(name)]
    if same_name:
        suggestions = same_name
    elif "." in written:
        suggestions = difflib.get_close_matches(written, qualified, n=1)
    else:
        suggestions = []
    if not suggestions:
        bare = difflib.get_close_matches(name, sorted({t.name.lower() for t in catalog.tables}), n=1)
        suggestions = [t.qualified for b in bare for t in catalog.find(b)]
    if suggestions:
        return f"table `{written}` does not exist; did you mean {_or_list(suggestions)}?"
    return f"table `{written}` does not exist; the tables are: {_listing(qualified)}"


# --- columns -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """One FROM item as columns see it."""

    label: str  # how messages name it: "`mimiciv_hosp.labevents`" or "`c`"
    table: TableSchema | None  # set for catalogued tables
    outputs: frozenset[str] | None  # its column names; None when they can't be known


@dataclass(frozen=True)
class _Columns:
    """What the column checks read, and the catalogued columns they found."""

    analysis: _Analysis
    resolved: dict[int, TableSchema]  # id(Table node) -> its catalog table
    alias_clauses: frozenset[str]  # clauses of a SELECT that may name its output aliases
    sources_cache: dict[int, dict[str, _Source]] = field(default_factory=dict)
    found: set[str] = field(default_factory=set)


def _check_columns(ctx: _Columns) -> set[str]:
    for scope in ctx.analysis.scopes:
        for column in scope.find_all(exp.Column):
            if isinstance(column.this, exp.Identifier):
                if column.table:
                    _check_qualified(ctx, column, scope)
                else:
                    _check_unqualified(ctx, column, scope)
    return ctx.found


def _sources(ctx: _Columns, scope: Scope) -> dict[str, _Source]:
    cached = ctx.sources_cache.get(id(scope))
    if cached is not None:
        return cached
    result: dict[str, _Source] = {}
    for name, node in scope.references:
        if name in result:
            continue
        if isinstance(node, exp.Table):
            result[name] = _table_source(ctx, name, node)
        else:
            sub = scope.sources.get(name)
            outputs = _scope_outputs(sub) if isinstance(sub, Scope) else None
            result[name] = _Source(label=f"`{name}`", table=None, outputs=outputs)
    ctx.sources_cache[id(scope)] = result
    return result


def _table_source(ctx: _Columns, name: str, node: exp.Table) -> _Source:
    table = ctx.resolved.get(id(node))
    if table is not None:
        return _Source(label=f"`{table.qualified}`", table=table, outputs=frozenset(table.columns))
    cte = ctx.analysis.cte_refs.get(id(node))
    if cte is not None:
        return _Source(label=f"`{name}`", table=None, outputs=_scope_outputs(cte))
    # A table function: its alias list is its columns; unnamed outputs can't be known here.
    aliases = node.alias_column_names
    return _Source(label=f"`{name}`", table=None, outputs=frozenset(aliases) if aliases else None)


def _check_qualified(ctx: _Columns, column: exp.Column, scope: Scope) -> None:
    name, qualifier = column.name, column.table
    source = next(
        (s[qualifier] for s in (_sources(ctx, level) for level in _visible_scopes(scope)) if qualifier in s),
        None,
    )
    if source is None:
        raise SqlValidationError("unknown_alias", _unknown_alias_message(ctx, column, scope))
    if source.outputs is None and _is_denied_name(name):
        # With unknown columns PostgreSQL may read `alias.pg_sleep` as pg_sleep(alias).
        raise SqlValidationError(
            "denied_function", f"`{qualifier}.{name}` is not allowed: `{name}` is a server function"
        )
    if source.outputs is None or name in source.outputs:
        if source.table is not None:
            ctx.found.add(f"{source.table.qualified}.{name}")
        return
    shown = source.table.name if source.table is not None else qualifier
    raise SqlValidationError(
        "unknown_column",
        f"column `{shown}.{name}` does not exist; "
        f"{_suggest(name, source.outputs, f'{source.label} has columns')}",
    )


def _unknown_alias_message(ctx: _Columns, column: exp.Column, scope: Scope) -> str:
    qualifier = column.table
    visible = {k: v for s in _visible_scopes(scope) for k, v in _sources(ctx, s).items()}
    for alias, source in visible.items():
        if source.table is not None and source.table.name.lower() == qualifier and alias != qualifier:
            return (
                f"`{qualifier}.{column.name}` refers to `{qualifier}`, but that table is aliased as "
                f"`{alias}` in this query; write `{alias}.{column.name}`"
            )
    hidden = (s for s in _ancestors(scope) if qualifier in _sources(ctx, s))
    if next(hidden, None) is not None:
        return (
            f"`{qualifier}.{column.name}` refers to `{qualifier}`, which a CTE or a subquery in FROM "
            f"cannot see; join `{qualifier}` inside it, or make the subquery LATERAL"
        )
    names = _listing([f"`{k}`" for k in visible if k]) if visible else "none"
    return (
        f"`{qualifier}.{column.name}` refers to `{qualifier}`, which is not a table or alias in the "
        f"FROM clause here; the tables and aliases in scope are: {names}"
    )


def _check_unqualified(ctx: _Columns, column: exp.Column, scope: Scope) -> None:
    name = column.name
    query = scope.expression
    if isinstance(query, (exp.SetOperation, exp.Subquery)):
        # ORDER BY of a UNION, or of a parenthesised query, sees only the output columns.
        outputs = _query_outputs(query)
        if outputs is None or name in outputs:
            return
        raise SqlValidationError(
            "unknown_column",
            f"column `{name}` is not an output column of the query; "
            f"{_suggest(name, outputs, 'its output columns are')}",
        )
    clause = _clause_of(column, query)
    own_aliases = _select_aliases(query) if clause in ctx.alias_clauses else frozenset()
    # ORDER BY prefers output columns, so `ORDER BY subject_id` is fine after a join.
    if clause == "order" and name in _select_output_names(query):
        return
    for level in _visible_scopes(scope):
        sources = _sources(ctx, level)
        matches = {a: s for a, s in sources.items() if s.outputs is not None and name in s.outputs}
        if len(matches) > 1 and _is_ambiguous(level.expression, name):
            labels = [_labelled(a, s) for a, s in matches.items()]
            raise SqlValidationError(
                "ambiguous_column",
                f"column `{name}` is ambiguous: it exists in {_or_list(labels, 'and')}; "
                "qualify it with a table alias",
            )
        if matches:
            ctx.found.update(f"{s.table.qualified}.{name}" for s in matches.values() if s.table)
            return
        if level is scope and name in own_aliases:
            return
        # A source whose columns are unknown might provide it; a bare alias is a whole-row value.
        if any(s.outputs is None for s in sources.values()) or name in sources:
            return
    if name in _NILADIC_KEYWORDS and not column.this.quoted:
        return
    raise SqlValidationError("unknown_column", _unknown_column_message(ctx, column, scope))


def _unknown_column_message(ctx: _Columns, column: exp.Column, scope: Scope) -> str:
    name = column.name
    sources = [s for level in _visible_scopes(scope) for s in _sources(ctx, level).values()]
    if not sources:
        return f"column `{name}` does not exist: there is no table in the FROM clause to read it from"
    pool = frozenset(c for s in sources for c in (s.outputs or ()))
    labels = list(dict.fromkeys(s.label for s in sources))
    where = f"in {labels[0]}" if len(labels) == 1 else f"in any of {', '.join(labels)}"
    aliases = _select_aliases(scope.expression)
    if name in aliases:
        return (
            f"column `{name}` does not exist {where}; `{name}` is an output alias of the SELECT list, "
            "which this clause cannot use; repeat the expression instead"
        )
    listing = f"{labels[0]} has columns" if len(labels) == 1 else "the columns in scope are"
    return f"column `{name}` does not exist {where}; {_suggest(name, pool, listing)}"


def _visible_scopes(scope: Scope) -> Iterator[Scope]:
    """The scope, then the enclosing ones whose FROM items its columns may reference."""
    yield scope
    current = scope
    while current.parent is not None:
        # A CTE or a derived table can't see its siblings, only the queries further out.
        hides_parent = current.scope_type in _CTE_SCOPES
        current = current.parent
        if not hides_parent:
            yield current


def _labelled(alias: str, source: _Source) -> str:
    plain = source.table.name.lower() if source.table is not None else source.label.strip("`")
    return source.label if alias == plain else f"{source.label} (`{alias}`)"


def _ancestors(scope: Scope) -> Iterator[Scope]:
    while scope.parent is not None:
        scope = scope.parent
        yield scope


def _scope_outputs(scope: Scope) -> frozenset[str] | None:
    expression = scope.expression
    if isinstance(expression, exp.Lateral):
        expression = expression.this
    if isinstance(expression, exp.Subquery):
        expression = expression.unnest()
    outer: list[str | None] = list(scope.outer_columns)
    if not isinstance(expression, exp.Query):
        # UNNEST, VALUES and the like are known only through an alias list: `AS u(x)`.
        return frozenset(n for n in outer if n) if outer else None
    names = _query_output_list(expression)
    if names is None:
        return None
    return _known(outer + names[len(outer) :])


def _query_outputs(query: exp.Expr) -> frozenset[str] | None:
    names = _query_output_list(query)
    return None if names is None else _known(names)


def _known(names: list[str | None]) -> frozenset[str] | None:
    return None if None in names else frozenset(n for n in names if n is not None)


def _query_output_list(query: exp.Expr) -> list[str | None] | None:
    """Output column names of a query; None for an unnamed one, or None overall if it selects `*`."""
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.this
    if not isinstance(query, exp.Select) or query.is_star:
        return None
    names: list[str | None] = []
    for expression in query.expressions:
        if isinstance(expression, exp.Alias):
            names.append(expression.alias)
        elif isinstance(expression, exp.Column):
            names.append(expression.name)
        else:
            # Its default name (`count`, `?column?`) depends on the engine, so it stays unknown.
            names.append(None)
    return names


def _select_aliases(query: exp.Expr) -> frozenset[str]:
    if not isinstance(query, exp.Select):
        return frozenset()
    return frozenset(e.alias for e in query.expressions if isinstance(e, exp.Alias))


def _select_output_names(query: exp.Expr) -> frozenset[str]:
    names = _query_output_list(query) if isinstance(query, exp.Select) else None
    return frozenset(n for n in names or () if n)


def _clause_of(column: exp.Column, query: exp.Expr) -> str | None:
    node: exp.Expr = column
    while node.parent is not None and node.parent is not query:
        node = node.parent
    return node.arg_key if node.parent is query else None


def _is_ambiguous(query: exp.Expr, name: str) -> bool:
    for join in query.args.get("joins") or []:
        if str(join.args.get("method") or "").upper() == "NATURAL":
            return False
        if any(u.name.lower() == name for u in join.args.get("using") or []):
            return False
    return True


def _suggest(name: str, options: frozenset[str] | None, listing: str) -> str:
    candidates = sorted(options or ())
    close = difflib.get_close_matches(name, candidates, n=1)
    if close:
        return f"did you mean `{close[0]}`?"
    return f"{listing}: {_listing(candidates)}"


def _or_list(items: list[str], word: str = "or") -> str:
    items = [i if i.startswith("`") else f"`{i}`" for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (", …" if len(items) > _MAX_LISTED else "")
