"""One cache of what questions read from a source's verified library: the linkable values, the
library index (templates, families, masked vectors) and the library's question vectors.

Under the threads pool 32 questions share a process, and a deployment runs several processes. So
the cache is locked (one build at a time, readers never see half a build), and every question
checks the source's generation row (askdb.models.LibraryGeneration, bumped by askdb.signals when
examples, docs or the source's data change) together with the library's own fingerprint; anything
built for an older generation is rebuilt, in whichever process asks next. Reading the library never
writes: examples whose stored template, key or masked vector is stale are completed in memory
here, and stored by the library refresh service (askdb.services.examples.library_refresh).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np
import sqlglot.expressions as sx
from django.conf import settings
from django.db import connection

from askdb.models import Example, LibraryGeneration
from core import match
from core.match import Template, build_template, template_is_current
from core.match.template import DEFAULT_VALUE_COLUMNS
from infra.adapters.clinical import ExecutionError
from metadata_admin.models import TableDoc
from metadata_admin.selectors import linkable_values_all

# An example's vectors: not loaded where a run only reads its text (parsing one costs ~0.1 ms).
VECTOR_FIELDS = ("embedding", "masked_embedding")


@dataclass(frozen=True)
class LibraryVersion:
    """What a cached build was made from: the generation row and the active library's fingerprint
    (which also catches a write that sent no signal, such as a queryset update)."""

    examples: int
    data: int
    active: tuple

    @property
    def values_key(self) -> int:
        return self.data


def library_version(source) -> LibraryVersion:
    """One small statement, read once per question: the generation row and (count, last update) of
    the active examples. Written as SQL, not as the ORM's four subqueries: compiling those cost
    more CPU than running them, on every question (under the threads pool, one interpreter's)."""
    q = connection.ops.quote_name
    gen, ex = q(LibraryGeneration._meta.db_table), q(Example._meta.db_table)
    gen_source = q(LibraryGeneration._meta.get_field("source").column)
    ex_source = q(Example._meta.get_field("source").column)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT (SELECT {q('examples')} FROM {gen} WHERE {gen_source} = %s),"
            f" (SELECT {q('data')} FROM {gen} WHERE {gen_source} = %s),"
            f" count(*), max({q('updated_at')}) FROM {ex} WHERE {ex_source} = %s AND {q('status')} = %s",
            [source.pk, source.pk, source.pk, Example.Status.ACTIVE.value],
        )
        g_examples, g_data, n, last = cur.fetchone()
    return LibraryVersion(g_examples or 0, g_data or 0, (n or 0, last))


def template_of(
    question: str, sql: str, *, dialect: str, label: object = None, generated: bool = False
) -> Template | None:
    """The template of a question and its SQL; None when building it failed unexpectedly.
    `generated`: sqlglot wrote `sql` in this dialect (validate_sql's text), so one parse may do
    (build_template: the same template either way)."""
    try:
        return build_template(question, sql, dialect=dialect, generated=generated)
    except Exception:  # a template is an optimisation: an example without one is still an example
        logging.getLogger(__name__).warning("no template for example %s", label, exc_info=True)
        return None


def example_template(example) -> dict:
    """The offline-answering template of an answerable example ({} when there is none yet)."""
    if example.kind != "answerable" or not example.sql:
        return {}
    template = template_of(example.question, example.sql, dialect=example.source.dialect, label=example.pk)
    return template.to_dict() if template is not None else {}


def library_build(source, values, embedder) -> tuple[match.LibraryIndex, list]:
    """The source's active library as templates with paraphrases, and the examples whose stored
    template, key or masked vector this build had to complete (changed in memory, not saved).

    Masked-question vectors are stored on the examples, so a build costs one query, and an example
    the refresh service has not stored yet one embedding.
    """
    entries, vectors, changed = library_entries(source, values, embedder)
    index = match.LibraryIndex(entries, [list(v) for v in vectors])
    index.names  # noqa: B018 -- made with the build (under the cache's lock), not by the first question
    match.compose_ready(index)  # likewise what composing reads from the whole library
    return index, changed


def library_entries(source, values, embedder) -> tuple[list, list, list]:
    """The active examples as matcher entries with their masked vectors, and the examples whose
    stored template, key or masked vector had to be completed (in memory): what a build indexes,
    without the index (the refresh service needs only the last)."""
    # Not the question vectors (the nearest search holds those): parsing them is a third of a build.
    active = Example.objects.filter(source=source, status=Example.Status.ACTIVE).defer("embedding")
    entries, vectors, missing, changed = [], [], [], []
    for example in active.select_related("source").order_by("id"):
        if example.kind == Example.Kind.ANSWERABLE and not template_is_current(example.template):
            example.template = example_template(example)
            example.masked_embedding = None  # what is masked goes with the templates' version too
            changed.append(example)
        template = Template.from_dict(example.template) if example.template else None
        stored = example.template.get("key") if example.template else None
        entry = match.entry_for(example.pk, example.question, example.sql, template, key=stored)
        if entry is None:
            continue
        key = match.key_hash(entry.key)
        if example.template_key != key or (template is not None and stored != entry.key):
            # The key is kept with the template (it goes with TEMPLATE_VERSION): computing it parses
            # the SQL, which for thousands of examples is most of a build.
            example.template_key = key
            if template is not None:
                example.template = {**example.template, "key": entry.key}
            changed.append(example)
        if example.masked_embedding is None:
            missing.append((len(entries), example))
        entries.append(entry)
        vectors.append(example.masked_embedding)
    if missing:
        masked = [match.mask_question(e.question, values) for _, e in missing]
        for (i, example), vector in zip(missing, embedder.embed(masked), strict=True):
            vectors[i] = example.masked_embedding = vector
            changed.append(example)
    return entries, vectors, list({e.pk: e for e in changed}.values())


def values_load(source, executor) -> tuple[match.ValueIndex, tuple[str, ...]]:
    """Every value of the source's linkable columns, from the distinct-value table the loader keeps
    (one query, whatever the size of the event tables), and what could not be loaded. A column it
    keeps nothing of is read from the clinical table (one DISTINCT), and named among the problems."""
    docs = TableDoc.objects.filter(source=source, exists_in_source=True).defer("embedding")
    tables = {d.name.lower(): d.qualified_name for d in docs}
    kept = linkable_values_all(source=source)
    found: dict[str, list[str]] = {}
    problems: list[str] = []
    limit_s = settings.ASKDB_VALUE_SCAN_TIMEOUT_S
    for table, column in sorted(DEFAULT_VALUE_COLUMNS):
        if table not in tables:
            continue
        name = f"{tables[table]}.{column}"
        if name in kept:
            found[name] = kept[name]
            continue
        query = sx.select(sx.column(column, quoted=True)).distinct().from_(sx.to_table(tables[table]))
        try:
            rows = executor.execute(
                query.sql(dialect=source.dialect), timeout_s=limit_s, row_cap=500_000
            ).rows
        except ExecutionError as exc:
            problems.append(f"values of {name} could not be loaded, so questions naming one are not linked: "
                            f"{exc.message} (ASKDB_VALUE_SCAN_TIMEOUT_S = {limit_s:g} s)")  # fmt: skip
            continue
        found[name] = [r[0] for r in rows if isinstance(r[0], str)]
        if found[name]:
            problems.append(
                f"{name}: no values kept by the loader (run load_mimic or reembed); scanned the table"
            )
    for problem in problems:
        logging.getLogger(__name__).warning("value index of source %s: %s", source.pk, problem)
    index = match.ValueIndex(found)
    index.prepare()  # made with the build (under the cache's lock), not by the first question naming a value
    return index, tuple(problems)


class LibraryCache:
    """The process's one cache of values, library indexes and question vectors, per source.

    A lookup whose version is current takes no lock; a stale or missing entry is built under the
    lock (re-checked there, so 32 threads asking at once build it once)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._values: dict[int, tuple[int, match.ValueIndex, tuple[str, ...]]] = {}
        self._indexes: dict[int, tuple[LibraryVersion, match.LibraryIndex]] = {}
        self._vectors: dict[tuple[int, str], tuple[LibraryVersion, list[int], np.ndarray]] = {}

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._indexes.clear()
            self._vectors.clear()

    def values(self, source, executor, version: LibraryVersion | None = None) -> match.ValueIndex:
        """The source's linkable values, reloaded when its data generation moves."""
        key = (version or library_version(source)).values_key
        cached = self._values.get(source.pk)
        if cached is None or cached[0] != key:
            with self._lock:
                cached = self._values.get(source.pk)
                if cached is None or cached[0] != key:
                    cached = (key, *values_load(source, executor))
                    self._values[source.pk] = cached
        return cached[1]

    def value_problems(self, source) -> tuple[str, ...]:
        """What the last load of the source's values could not load (empty when all loaded)."""
        cached = self._values.get(source.pk)
        return cached[2] if cached is not None else ()

    def index(
        self, source, executor, embedder, version: LibraryVersion | None = None
    ) -> tuple[match.LibraryIndex, match.ValueIndex]:
        """The source's library index and values, rebuilt when either changed."""
        version = version or library_version(source)
        values = self.values(source, executor, version)
        cached = self._indexes.get(source.pk)
        if cached is None or cached[0] != version:
            with self._lock:
                cached = self._indexes.get(source.pk)
                if cached is None or cached[0] != version:
                    cached = (version, library_build(source, values, embedder)[0])
                    self._indexes[source.pk] = cached
        return cached[1], values

    def nearest(
        self, source, vector: list[float], model: str, k: int, version: LibraryVersion | None = None
    ) -> list[tuple[int, float]]:
        """The k active answerable examples closest to a question, best first, ties by id (what
        catalog_search.examples_nearest returns), from the library's question vectors held in memory:
        a product with a matrix instead of a scan of thousands of rows for every question."""
        version = version or library_version(source)
        cached = self._vectors.get((source.pk, model))
        if cached is None or cached[0] != version:
            with self._lock:
                cached = self._vectors.get((source.pk, model))
                if cached is None or cached[0] != version:
                    cached = (version, *_question_vectors(source, model, len(vector)))
                    self._vectors[(source.pk, model)] = cached
        _, ids, matrix = cached
        if not ids or k <= 0:
            return []
        v = np.asarray(vector, dtype=np.float32)
        sims = matrix @ (v / (np.linalg.norm(v) or 1.0))
        top = np.lexsort((np.asarray(ids), -sims))[:k]  # score descending, then id, as the SQL orders
        return [(ids[i], float(sims[i])) for i in top]


def _question_vectors(source, model: str, dims: int) -> tuple[list[int], np.ndarray]:
    rows = Example.objects.filter(
        source=source, status=Example.Status.ACTIVE, kind=Example.Kind.ANSWERABLE, embedding_model=model,
        embedding__isnull=False,
    ).order_by("id").values_list("id", "embedding")  # fmt: skip
    ids = [i for i, v in rows if len(v) == dims]
    matrix = np.asarray([v for _, v in rows if len(v) == dims], dtype=np.float32).reshape(len(ids), dims)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return ids, matrix / np.where(norms == 0, 1.0, norms)


LIBRARY = LibraryCache()
