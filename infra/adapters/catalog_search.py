"""pgvector and pg_trgm searches over the catalog: table-doc similarity and value linking.

Scores are computed in PostgreSQL. Vectors have no fixed dimension in the schema, so every
query casts to the embedder's dimension and filters on it, matching the partial HNSW indexes.
"""

from __future__ import annotations

from django.db import connection

from core.types import LinkedValue


def _vec(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7f}" for x in vector) + "]"


def table_similarities(*, source_id: int, vector: list[float], model: str) -> dict[str, float]:
    """Cosine similarity of every embedded, present table doc of a source to the question."""
    dims = len(vector)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT CASE WHEN schema_name = '' THEN name ELSE schema_name || '.' || name END,
                   1 - ((embedding::vector({dims})) <=> %s::vector({dims}))
            FROM metadata_admin_tabledoc
            WHERE source_id = %s AND exists_in_source AND embedding_model = %s
              AND vector_dims(embedding) = {dims}
            """,
            [_vec(vector), source_id, model],
        )
        return {name: float(score) for name, score in cur.fetchall()}


# A value of a column the catalog marks sensitive is never linked, even if it was indexed before
# the column was marked.
SENSITIVE = (
    "EXISTS (SELECT 1 FROM metadata_admin_columndoc c "
    'WHERE c.table_id = e.table_id AND c.name = e."column" AND c.sensitive)'
)


def values_fuzzy(
    *, source_id: int, terms: list[str], per_term: int = 3, threshold: float = 0.75
) -> list[LinkedValue]:
    """Values that contain a question phrase (pg_trgm word similarity; GIN-indexed)."""
    if not terms:
        return []
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('pg_trgm.word_similarity_threshold', %s, true)", [str(threshold)])
        cur.execute(
            f"""
            SELECT t.term, v.qualified, v.column, v.value, v.code, v.score
            FROM unnest(%s::text[]) AS t(term)
            CROSS JOIN LATERAL (
                SELECT CASE WHEN d.schema_name = '' THEN d.name ELSE d.schema_name || '.' || d.name END AS qualified,
                       e."column", e.value, e.code,
                       word_similarity(t.term, e.value) AS score
                FROM metadata_admin_valueentry e
                JOIN metadata_admin_tabledoc d ON d.id = e.table_id
                WHERE e.source_id = %s AND e.value %%> t.term AND NOT {SENSITIVE}
                ORDER BY word_similarity(t.term, e.value) DESC, e.frequency DESC, length(e.value)
                LIMIT %s
            ) v
            """,
            [terms, source_id, per_term],
        )
        rows = cur.fetchall()
    out = []
    for term, table, column, value, code, score in rows:
        # A short phrase inside a long title is weaker evidence than a phrase that is the value.
        coverage = min(1.0, len(term) / max(len(value), 1))
        out.append(
            LinkedValue(
                table, column, value, code, round(float(score) * (0.6 + 0.4 * coverage), 4), term, "fuzzy"
            )
        )
    return out


def values_semantic(
    *,
    source_id: int,
    terms: list[str],
    vectors: list[list[float]],
    model: str,
    per_term: int = 2,
    floor: float = 0.6,
) -> list[LinkedValue]:
    """Values whose embedding is near a question phrase ("hgb" → "Hemoglobin")."""
    out: list[LinkedValue] = []
    if not vectors:
        return out
    dims = len(vectors[0])
    # One statement for all the terms (a question has a few): each term's nearest values, by a
    # LATERAL search per term, in the order of the terms. The terms' vectors are parsed from text
    # once, in the unnest: cast inside the search, a small value table (scanned, not searched by its
    # index) parsed the question's vector again for every row, about 50 ms per term for 1,300 values.
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT q.ord, x.qualified, x."column", x.value, x.code, x.score
            FROM unnest(%s::text[]::vector({dims})[]) WITH ORDINALITY AS q(vec, ord)
            CROSS JOIN LATERAL (
                SELECT CASE WHEN d.schema_name = '' THEN d.name ELSE d.schema_name || '.' || d.name END
                         AS qualified,
                       e."column", e.value, e.code,
                       1 - ((e.embedding::vector({dims})) <=> q.vec::vector({dims})) AS score
                FROM metadata_admin_valueentry e
                JOIN metadata_admin_tabledoc d ON d.id = e.table_id
                WHERE e.source_id = %s AND e.embedding_model = %s AND vector_dims(e.embedding) = {dims}
                  AND NOT {SENSITIVE}
                ORDER BY (e.embedding::vector({dims})) <=> q.vec::vector({dims})
                LIMIT %s
            ) x
            ORDER BY q.ord, x.score DESC
            """,
            [[_vec(v) for v in vectors], source_id, model, per_term],
        )
        for ordinal, table, column, value, code, score in cur.fetchall():
            if score >= floor:
                term = terms[ordinal - 1]
                out.append(LinkedValue(table, column, value, code, round(float(score), 4), term, "semantic"))
    return out


def examples_nearest(
    *, source_id: int, vector: list[float], model: str, k: int, kinds: tuple[str, ...] = ("answerable",)
) -> list[tuple[int, float]]:
    """(example id, cosine similarity) of the k active library examples closest to a question.

    An exact scan: a library holds hundreds to a few thousand verified pairs, where an exact
    nearest-neighbour search is both fast and better than an approximate index.
    """
    dims = len(vector)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT id, 1 - ((embedding::vector({dims})) <=> %s::vector({dims})) AS score
            FROM askdb_example
            WHERE source_id = %s AND status = 'active' AND kind = ANY(%s)
              AND embedding_model = %s AND vector_dims(embedding) = {dims}
            ORDER BY score DESC, id
            LIMIT %s
            """,
            [_vec(vector), source_id, list(kinds), model, k],
        )
        return [(int(i), float(s)) for i, s in cur.fetchall()]
