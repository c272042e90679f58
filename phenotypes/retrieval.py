"""Candidate snippets: the notes' sentences that mention a phenotype's terms.

PostgreSQL finds the notes (the full-text index on to_tsvector('english', text), and the
trigram index for the terms as substrings, both built by the loader), streamed with a
server-side cursor so memory stays flat on the full module; Python cuts only those notes into
sentences and keeps the ones with a term (phenotypes/chunks.py). The subjects to consider are
everyone with a note, so a patient whose notes never name the condition is an "absent".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import psycopg
from psycopg import sql

from metadata_admin.clinical import schema
from phenotypes.chunks import Chunk, candidate_chunks, term_pattern

NOTE_TABLES = tuple(t.name for t in schema.NOTE_TABLES)


def _tsquery(terms: Iterable[str]) -> sql.Composed:
    parts = [sql.SQL("phraseto_tsquery('english', {})").format(sql.Literal(t)) for t in terms]
    return sql.SQL(" || ").join(parts)


def _like_any(terms: Iterable[str]) -> list[str]:
    escaped = (t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for t in terms)
    return [f"%{t}%" for t in escaped]


def candidate_notes_sql(terms: list[str], table: str) -> sql.Composed:
    """Notes of `table` matching any term: the full-text index OR the trigram index (ILIKE)."""
    return sql.SQL(
        "SELECT subject_id, note_id, text FROM {table} WHERE {fts} @@ ({q}) OR text ILIKE ANY(%(likes)s)"
    ).format(
        table=sql.Identifier(schema.NOTE, table),
        fts=sql.SQL(schema.NOTE_TEXT_SEARCH),
        q=_tsquery(terms),
    )


def note_tables(conn: psycopg.Connection) -> list[str]:
    present = []
    for name in NOTE_TABLES:
        if conn.execute("SELECT to_regclass(%s)", (f"{schema.NOTE}.{name}",)).fetchone()[0]:
            present.append(name)
    return present


def subjects_with_notes(dsn: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        tables = note_tables(conn)
        if not tables:
            return set()
        union = sql.SQL(" UNION ").join(
            sql.SQL("SELECT DISTINCT subject_id FROM {}").format(sql.Identifier(schema.NOTE, t))
            for t in tables
        )
        return {r[0] for r in conn.execute(union)}


def candidates(dsn: str, terms: list[str]) -> Iterator[tuple[int, Chunk]]:
    """(subject_id, chunk) for every sentence of every note that mentions a term."""
    pattern = term_pattern(terms)
    with psycopg.connect(dsn) as conn:
        for table in note_tables(conn):
            with conn.transaction(), conn.cursor(name=f"phenotype_{table}") as cur:
                cur.itersize = 2000
                cur.execute(candidate_notes_sql(terms, table), {"likes": _like_any(terms)})
                for subject_id, note_id, text in cur:
                    for chunk in candidate_chunks(note_id, text, pattern):
                        yield subject_id, chunk


def coded_subjects(dsn: str, patterns: list[str]) -> set[int] | None:
    """Subjects with a diagnosis matching an ICD pattern (% wildcard); None without diagnoses_icd."""
    if not patterns:
        return None
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('mimiciv_hosp.diagnoses_icd')").fetchone()[0] is None:
            return None
        rows = conn.execute(
            # icd_code is CHAR(7): padded, so an exact pattern ("42731") only matches it trimmed.
            "SELECT DISTINCT subject_id FROM mimiciv_hosp.diagnoses_icd WHERE rtrim(icd_code) LIKE ANY(%s)",
            (list(patterns),),
        )
        return {r[0] for r in rows}
