"""The answerability scorer the pipeline gate calls before any LLM call.

`get_scorer(source)` returns the source's current model, loaded once per process and reloaded
when `current` names another version; None when no model was trained (the gate then falls back
to the similarity floor and its rules). Table, column and library-question vectors are computed
at load (the training library's come from the version folder) and refreshed when the catalog
or the library changes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from askdb.answerability import store
from askdb.answerability.data import (
    Progress,
    TrainingError,
    as_of_year,
    column_texts,
    library_items,
    read_labelled_file,
    score_items,
    table_texts,
    value_texts,
)
from askdb.answerability.model import (
    AnswerabilityModel,
    AnswerabilityScore,
    Encoder,
    LocalEncoder,
    MeaningGrounding,
    schema_texts,
    vocabulary_texts,
)
from askdb.answerability.rules import Finding

__all__ = [
    "AnswerabilityScore",
    "Scorer",
    "clear_cache",
    "column_doc_vectors_compute",
    "get_scorer",
    "load_scorer",
]

logger = logging.getLogger(__name__)

RECHECK_S = 60.0  # how often a scorer looks for library and catalog changes (one query)

_lock = threading.Lock()
_cache: dict[str, Scorer] = {}
_encoder: Encoder | None = None


def shared_encoder() -> Encoder:
    """The encoder every source's model scores with, loaded once per process: the local embedding
    provider's numpy MiniLM (no torch in a question; the question's vector is the one the embed
    stage computed), or a numpy MiniLM of its own when embeddings come from elsewhere."""
    global _encoder
    if _encoder is None:
        from infra.providers.embeddings import LocalEmbedder, get_embedder

        embedder = get_embedder()
        _encoder = LocalEncoder(embedder if isinstance(embedder, LocalEmbedder) else LocalEmbedder())
    return _encoder


def _source(source) -> Any:
    if isinstance(source, str):
        from metadata_admin.models import ClinicalSource

        return ClinicalSource.objects.filter(name=source).first()
    return source


def _signature(source) -> tuple:
    """Changes whenever an example or a table doc is added, edited, retired or removed."""
    from django.db.models import Count, Max, OuterRef, Subquery

    from askdb.models import Example
    from metadata_admin.models import ClinicalSource, TableDoc

    # One statement (it runs for every question the rules alone judge): each table's count and last
    # update as a subquery of the source's row.
    def of(model, field: str, aggregate):
        rows = model.objects.filter(source_id=OuterRef("pk")).order_by().values("source_id")
        return Subquery(rows.annotate(x=aggregate(field)).values("x"))

    row = (
        ClinicalSource.objects.filter(pk=source.pk)
        .annotate(
            ex_n=of(Example, "id", Count),
            ex_last=of(Example, "updated_at", Max),
            doc_n=of(TableDoc, "id", Count),
            doc_last=of(TableDoc, "updated_at", Max),
        )
        .values_list("ex_n", "ex_last", "doc_n", "doc_last")
        .first()
    )
    ex_n, ex_last, doc_n, doc_last = row or (0, None, 0, None)
    return ex_n or 0, ex_last, doc_n or 0, doc_last


class Scorer:
    """One loaded model version for one source."""

    def __init__(self, source, model: AnswerabilityModel, manifest: dict[str, Any], signature: tuple) -> None:
        self.source = source
        self.model = model
        self.manifest = manifest
        self._signature = signature
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return self.model.version

    @property
    def threshold(self) -> float:
        return self.model.threshold

    @property
    def absent_concepts(self) -> frozenset[str]:
        return self.model.absent

    def score(self, question: str, *, vector=None, facts: Sequence[Finding] = ()) -> AnswerabilityScore:
        """The verdict: P(answerable), the rules that fired, and the reason in plain words;
        `vector` is the question's embedding when the pipeline computed it already; `facts` what
        the caller found in the data (`people`)."""
        self._refresh_if_stale()
        return self.model.score(question, vector=vector, facts=facts)

    def _refresh_if_stale(self) -> None:
        if time.monotonic() - self._checked < RECHECK_S:
            return
        with self._lock:
            if time.monotonic() - self._checked < RECHECK_S:
                return
            self._checked = time.monotonic()
            signature = _signature(self.source)
            if signature != self._signature:
                self.model.set_catalog(table_texts(self.source), column_texts(self.source))
                self.model.set_library(library_items(self.source))
                self._signature = signature


def load_scorer(source, *, version: str | None = None, encoder: Encoder | None = None) -> Scorer | None:
    """A fresh scorer for `version` (default: the current one), or None when untrained."""
    source = _source(source)
    if source is None:
        return None
    version = version or store.current_version(source.name)
    if version is None:
        return None
    combiner, threshold, manifest, vectors = store.load_version(source.name, version)
    signature = _signature(source)
    model = AnswerabilityModel(
        encoder or shared_encoder(), combiner, threshold, table_texts(source), column_texts(source),
        library_items(source), version=version, as_of_year=as_of_year(source), vector_cache=vectors,
        values=value_texts(source),
    )  # fmt: skip
    return Scorer(source, model, manifest, signature)


def get_scorer(source) -> Scorer | None:
    """The source's current scorer, cached per process; None when no model is trained.

    Reading `current` costs one small file read, so a newly activated version is picked up by
    the next question without restarting workers.
    """
    source = _source(source)
    if source is None:
        return None
    version = store.current_version(source.name)
    if version is None:
        return None
    key = str(store.source_dir(source.name))
    cached = _cache.get(key)
    if cached is not None and cached.version == version:
        return cached
    with _lock:
        cached = _cache.get(key)
        if cached is None or cached.version != version:
            try:
                cached = load_scorer(source, version=version)
            except (store.StoreError, OSError) as exc:
                # A broken model must not stop questions: the gate falls back to the floor.
                logger.error("answerability model %s of %s unusable: %s", version, source.name, exc)
                cached = None
            if cached is None:
                _cache.pop(key, None)
                return None
            _cache[key] = cached
    return cached


def clear_cache() -> None:
    with _lock:
        _cache.clear()
        _meaning.clear()
        _docs_path.clear()


_absent: dict[int, tuple[float, frozenset[str]]] = {}


def _absent_concepts(source) -> frozenset[str]:
    """Concepts the source's columns do not document, re-read every RECHECK_S seconds."""
    from askdb.answerability import rules

    cached = _absent.get(source.pk)
    if cached is None or time.monotonic() - cached[0] > RECHECK_S:
        cached = (time.monotonic(), rules.absent_concepts(c.text for c in column_texts(source)))
        _absent[source.pk] = cached
    return cached[1]


_vocabulary: dict[int, tuple[Any, ...]] = {}


def _grounding_finding(source, question: str, version: Hashable | None = None):
    """The grounding decline without a trained model: the catalog, its linked values and the
    approved library questions are the vocabulary; with no encoder the sentence names no column.
    Rebuilt when an example or a doc changes, so a newly approved question grounds the next one:
    `version` is the catalog's and the library's version as the caller read them for this
    question (the pipeline reads both anyway), so no query is spent on it; without one, two."""
    from askdb.answerability import grounding, rules, specified

    signature = version if version is not None else _signature(source)
    cached = _vocabulary.get(source.pk)
    if cached is None or cached[0] != signature:
        tables, columns = table_texts(source), column_texts(source)
        holding, context = vocabulary_texts(tables, columns)
        values = value_texts(source)
        approved = [q for _, q, answerable in library_items(source) if answerable]
        schema, people, categories = schema_texts(tables, columns)
        vocabulary = grounding.Vocabulary(
            [*holding, *approved], context=context, schema=schema, people=people, categories=categories,
            events={grounding.event_key(q) for q in approved} - {""}, values=values,
        )  # fmt: skip
        cached = (signature, vocabulary, specified.Specifics(tables, columns, values), columns)
        _vocabulary[source.pk] = cached
    unsaid = cached[2].findings(question)
    if unsaid:
        return unsaid[0]
    g = grounding.ground(question, cached[1])
    if g is None or g.grounded:
        return None
    meaning = _meaning_grounding(source, cached[3])
    if meaning is not None and meaning.column(g):
        return None
    reason = (grounding.event_reason(g) if g.event
              else grounding.no_column_reason(g.attribute))  # fmt: skip
    return rules.Finding("not_in_schema", "ungrounded_attribute", g.attribute, reason, True)


def _column_docs_path(encoder: Encoder, columns: list) -> Path:
    """Where the column docs' vectors of this catalog text are kept: named by the encoder and every
    column's text, so an edited doc names another file (and the old one is never read again)."""
    from django.conf import settings

    key = hashlib.sha256(
        "\n".join([getattr(encoder, "name", ""), *(c.text for c in columns)]).encode()
    ).hexdigest()
    return Path(settings.ASKDB_HOME) / "cache" / "answerability" / f"column-docs-{key[:24]}.npy"


def _local_encoder() -> Encoder | None:
    """The shared encoder when embeddings are the local MiniLM's, else None: a question must not
    load a second model, and docs embedded by another provider give this grounding nothing."""
    from infra.providers.embeddings import LocalEmbedder, get_embedder

    return shared_encoder() if isinstance(get_embedder(), LocalEmbedder) else None


def column_doc_vectors_compute(source) -> Path | None:
    """A write: embed the source's column docs for the rules-only gate's grounding by meaning and
    keep them on disk (ASKDB_HOME/cache/answerability), when the docs are embedded (askdb.signals,
    on metadata_admin's `docs_embedded`) and when a worker starts; never while answering, since a
    question only reads (`_meaning_grounding`). Returns the file, or None when there is nothing to
    embed or embeddings are not the local MiniLM's. Already kept: nothing is encoded again."""
    source = _source(source)
    encoder = _local_encoder()
    columns = column_texts(source) if source is not None and encoder is not None else []
    if not columns:
        return None
    path = _column_docs_path(encoder, columns)
    if path.exists():
        return path
    vectors = encoder.encode_docs([c.text for c in columns])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    with partial.open("wb") as f:
        np.save(f, vectors)
    partial.replace(path)  # atomic: two workers starting at once write the same bytes
    return path


_meaning: dict[int, tuple[Path, MeaningGrounding]] = {}
# The column-doc vectors' file name of each source, with the encoder and the column list it was
# hashed from: naming it hashes every column's text, so a question reuses it while the vocabulary
# keeps the same column list (a new list is read only when the catalog's signature changes).
_docs_path: dict[int, tuple[Encoder, list, Path]] = {}


def _remembered_docs_path(source, encoder: Encoder, columns: list) -> Path:
    """`_column_docs_path` of these columns, hashed once per column list (held in memory only: a
    question writes nothing)."""
    cached = _docs_path.get(source.pk)
    if cached is not None and cached[0] is encoder and cached[1] is columns:
        return cached[2]
    path = _column_docs_path(encoder, columns)
    _docs_path[source.pk] = (encoder, columns, path)
    return path


def _meaning_grounding(source, columns: list) -> MeaningGrounding | None:
    """Grounding by meaning for the rules-only gate, as the trained one grounds ("civil status" is
    admissions.marital_status), with the MiniLM retrieval already runs. A read: the column docs'
    vectors are the ones `column_doc_vectors_compute` kept when the docs were embedded; until then
    (or with another embedding provider) None, and the words alone decide. Each question encodes
    only its phrase."""
    encoder = _local_encoder() if columns else None
    if encoder is None:
        return None
    path = _remembered_docs_path(source, encoder, columns)
    cached = _meaning.get(source.pk)
    if cached is not None and cached[0] == path:
        return cached[1]
    try:
        vectors = np.load(path)
    except (OSError, ValueError):
        logger.info(
            "column doc vectors of %s not computed yet (%s): grounding by words alone", source, path.name
        )
        return None
    if len(vectors) != len(columns):  # a file not written by column_doc_vectors_compute
        return None
    meaning = MeaningGrounding(encoder, columns, vectors)
    _meaning[source.pk] = (path, meaning)
    return meaning


def gate_verdict(
    source, question: str, *, vector=None, version: Hashable | None = None, facts: Sequence[Finding] = ()
) -> dict:
    """What the gate decides about one question, as JSON for the run: the trained model with
    its rules when there is one, else the rules alone (no training needed, never blocks on a
    missing model). `vector`: the question's embedding by the local MiniLM when the pipeline has
    it (not encoded again); `version`: the catalog's and library's version when the caller has
    read them (the vocabulary is not checked with queries of its own); `facts`: decisive findings
    the caller made in the data itself (a named patient it does not hold, `people`)."""
    from askdb.answerability import rules

    scorer = get_scorer(source)
    if scorer is not None:
        return scorer.score(question, vector=vector, facts=facts).to_json()
    found = rules.findings(question, absent=_absent_concepts(source), as_of_year=as_of_year(source))
    ungrounded = _grounding_finding(source, question, version)
    if ungrounded is not None:
        found = rules.ordered([*found, ungrounded])
    found = [*found, *facts]  # after the question's own words: their reason comes first
    decisive = [f for f in found if f.decisive]
    kind = decisive[0].kind if decisive else ""
    return {
        "answerable": not decisive,
        "kind": kind,
        "kind_label": rules.KIND_LABELS.get(kind, ""),
        "category": rules.CATEGORY.get(kind, "answerable"),
        "reason": decisive[0].reason if decisive else "",
        "findings": [f.to_json() for f in found],
        "version": "",
        "rules_only": True,
    }


def answerability_evaluate(
    *,
    source,
    path: str | Path,
    labels: str | Path | None = None,
    version: str | None = None,
    progress: Progress = None,
) -> dict:
    """Measure a stored model on a labelled file it was not trained on (an outside benchmark,
    so no split is involved): precision/recall/F1/AUC, answerable blocked, reasons per kind."""
    scorer = load_scorer(source, version=version)
    if scorer is None:
        raise TrainingError(f"no answerability model for {source.name}; run train_answerability first")
    items = read_labelled_file(path, labels)
    if not items:
        raise TrainingError(f"{path} holds no questions")
    known = set(scorer.model.table_names)
    absent = [i for i in items if i["answerable"] and i["tables"] and not set(i["tables"]) <= known]
    metrics = score_items(scorer.model, items, progress)
    metrics["version"] = scorer.version
    metrics["needs_absent_tables"] = len(absent)
    return metrics
