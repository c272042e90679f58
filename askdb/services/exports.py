"""The library in and out of files: import verified pairs in bulk, export them."""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from askdb.adapters.library_cache import LIBRARY, template_of
from askdb.models import Example
from askdb.services.examples import _merge_fields, _normalized, library_generation_bump
from core import match
from core.match import Template
from core.validation import SqlValidationError, validate_sql
from infra.adapters.clinical import ExecutionError
from infra.audit.services import audit_event, audit_record, audit_record_many
from infra.audit.sql import sql_audit_event
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_catalog_schema, source_executor

logger = logging.getLogger(__name__)


@dataclass
class ImportReport:
    """What an example import did: nothing is imported silently, and nothing fails silently."""

    created: list[int] = field(default_factory=list)
    merged: list[int] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)  # {"id", "question", "error"}

    @property
    def total(self) -> int:
        return len(self.created) + len(self.merged) + len(self.failed)

    def summary(self) -> str:
        return f"{len(self.created)} added, {len(self.merged)} merged into existing examples, {len(self.failed)} failed"


IMPORT_CHUNK = 500  # examples written per transaction (with their audit events)
EMBED_CHUNK = 256  # texts embedded per model call (questions and their masked forms)
# An import of at least this many pairs encodes in ENCODER_PROCESSES worker processes with the local
# model (see _Texts.work_in); a smaller one in this process, where starting them would not pay.
PROCESSES_FROM = 1000
ENCODER_PROCESSES = 1  # beside this process, which encodes too once its checks are done
IN_FLIGHT = 2  # chunks sent to the processes at a time (one computing, one waiting to start)


@dataclass
class _Pair:
    """One item of an import on its way in: checked, embedded, then created or merged."""

    n: int
    ident: str
    question: str
    sql: str  # "" for an unanswerable question; the validated SQL once checked
    note: str
    paraphrases: list[str]
    error: str = ""
    tables: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    template: Template | None = None
    key: str = ""  # its template_key ("" when it cannot answer from a template)
    masked: str = ""
    vector: list[float] | None = None
    masked_vector: list[float] | None = None

    @property
    def kind(self) -> str:
        return Example.Kind.ANSWERABLE if self.sql else Example.Kind.UNANSWERABLE


def examples_import(
    *,
    source,
    items: list[dict],
    approved_by=None,
    execute: bool = True,
    origin: str = "import",
    progress=None,
) -> ImportReport:
    """Add verified pairs in bulk (a file, the EHRSQL format, the demo seed).

    Each item is {"id"?, "question", "sql"} with sql "" or None for an unanswerable question.
    Every SQL is validated against the catalog and, with `execute`, run read-only (one row), so a
    pair that does not work is reported with its error instead of entering the library.

    The same outcome as adding the pairs one by one with example_upsert (near-duplicates merged,
    also into pairs earlier in the same file), done in bulk so that thousands of pairs take about
    a minute, not ten: the questions and their masked forms are embedded in batches while the SQL
    is validated and templated (from PROCESSES_FROM pairs on, by a worker process, which shares no
    interpreter with the checks; then by this thread too), each distinct SQL is
    validated once and run once in another thread, and the examples
    and their audit events are written IMPORT_CHUNK to a transaction, ready for the matcher
    (template key and masked vector included). `progress(n)` is told how many pairs are done.
    """
    report = ImportReport()
    pairs = [_pair(n, item) for n, item in enumerate(items, start=1)]
    catalog, executor = source_catalog_schema(source), source_executor(source)
    embedder = get_embedder()
    checked = [0]
    audits: list = []
    texts = _Texts()
    texts.add([p.question or "-" for p in pairs])  # the questions first, while the values that mask them load
    masked_known = threading.Event()  # set once every pair's masked form is (or cannot be) known

    def tell() -> None:
        if progress:
            progress(min(checked[0], len(pairs) * texts.done // max(texts.total, 1)))

    def embed_all() -> None:
        if processes is not None:
            texts.work_in(processes, masked_known, embedder.embed)
            return
        texts.work(embedder.embed)
        masked_known.wait()
        texts.work(embedder.embed)

    def run(pair: _Pair) -> None:
        try:
            result = executor.execute(pair.sql, timeout_s=settings.CLINICAL_STATEMENT_TIMEOUT_S, row_cap=1)
        except ExecutionError as exc:
            pair.error = f"The SQL failed when run: {exc.message}"
            audits.append(sql_audit_event(actor=approved_by, source=source, sql=pair.sql, purpose="import",
                                          rows=None, duration_ms=None, outcome=exc.code, error=exc.message))  # fmt: skip
        else:
            audits.append(sql_audit_event(actor=approved_by, source=source, sql=pair.sql, purpose="import",
                                          rows=result.row_count, duration_ms=result.elapsed_ms, outcome="ok"))  # fmt: skip

    processes = _encoder_processes(embedder, len(pairs))
    with (
        _prompt_gil_handoffs(),
        processes or nullcontext(),
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="import") as pool,
    ):
        embedding = pool.submit(embed_all)  # numpy lets go of the GIL: this runs beside the checks
        try:
            values = LIBRARY.values(source, executor)
            for pair in pairs:
                pair.masked = match.mask_question(pair.question, values) if pair.question else ""
        finally:
            texts.add([p.masked or "-" for p in pairs])
            masked_known.set()  # also when loading failed: the encoder must not wait forever
        runs: dict[str, tuple[_Pair, Future]] = {}  # validated SQL -> the pair that runs it
        again: list[tuple[_Pair, _Pair]] = []  # (pair, the pair whose run of the same SQL it shares)
        checks = _Checks(catalog, source.dialect)
        for pair in pairs:
            checks.check(pair)
            if pair.sql and not pair.error and execute:
                if pair.sql in runs:  # the same read-only query gives the same answer: run once
                    again.append((pair, runs[pair.sql][0]))
                else:  # the other thread: one query at a time, in order
                    runs[pair.sql] = (pair, pool.submit(run, pair))
            checked[0] += 1
            tell()
        # The checks are done: this thread encodes too, beside the embedding thread (the model's
        # sibling, outside the model lock), so both cores embed instead of one waiting.
        texts.work(getattr(embedder, "embed_beside", embedder.embed), after=tell)
        for future in [*(f for _, f in runs.values()), embedding]:
            while True:
                try:
                    future.result(timeout=1.0)
                    break
                except FuturesTimeout:
                    tell()
    for pair, first in again:
        pair.error = first.error
    for pair in pairs:
        pair.vector, pair.masked_vector = texts.found[pair.question or "-"], texts.found[pair.masked or "-"]
    _store(pairs, source=source, approved_by=approved_by, origin=origin, model=embedder.model,
           report=report, audits=audits)  # fmt: skip
    if progress:
        progress(len(pairs))
    audit_record(action="examples.imported", actor=approved_by, target=source, message=report.summary(),
                 detail={"failed": report.failed[:50]})  # fmt: skip
    return report


def _encoder_processes(embedder, pairs: int):
    """Worker processes for a large import with the local model, or None (this process encodes)."""
    if pairs < PROCESSES_FROM or not hasattr(embedder, "processes"):
        return None
    try:
        return embedder.processes(ENCODER_PROCESSES)
    except (OSError, ValueError) as exc:
        logger.warning("encoding in this process: no worker processes (%s)", exc)
        return None


class _Texts:
    """The distinct texts an import embeds, handed out EMBED_CHUNK at a time to whichever thread
    asks next: the embedding thread from the start, the checking thread once its checks are done.
    Each distinct text once, shortest first within each `add`: a batch costs its longest text's
    length times its size, so batches of texts of about one length waste no work on padding."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: deque[list[str]] = deque()
        self._queued: set[str] = set()
        self.found: dict[str, list[float]] = {}
        self.total = 0  # texts queued so far
        self.done = 0  # texts embedded so far

    def add(self, texts: list[str]) -> None:
        with self._lock:
            new = sorted(set(texts) - self._queued, key=len)
            self._queued.update(new)
            self.total += len(new)
            self._chunks.extend(new[i : i + EMBED_CHUNK] for i in range(0, len(new), EMBED_CHUNK))

    def work_in(self, processes, ready: threading.Event, embed) -> None:
        """Texts encoded by the worker `processes` (minilm.process_encode), IN_FLIGHT chunks at a
        time, until none is left once `ready` is set: the chunks not yet sent stay in the queue,
        for the checking thread to take too once its checks are done (work). A chunk the pool
        cannot take (it could not start, or a worker died: a daemonic Celery worker may not have
        children) is encoded here with `embed`, so the import never depends on the pool."""
        from infra.providers.minilm import process_encode

        sent: deque[tuple[list[str], Future | None]] = deque()
        while True:
            while len(sent) < IN_FLIGHT:
                with self._lock:
                    chunk = self._chunks.popleft() if self._chunks else None
                if chunk is None:
                    break
                try:
                    sent.append((chunk, processes.submit(process_encode, chunk)))
                except Exception as exc:  # any refusal of the pool: encode here
                    logger.warning("encoding in this process: %s", exc)
                    sent.append((chunk, None))
            if not sent:
                if ready.is_set():
                    return
                ready.wait()  # the masked forms are queued next
                continue
            chunk, future = sent.popleft()
            try:
                vectors = future.result().tolist() if future is not None else embed(chunk)
            except Exception as exc:  # a worker that died: encode here
                logger.warning("encoding in this process: %s", exc)
                vectors = embed(chunk)
            with self._lock:
                self.found.update(zip(chunk, vectors, strict=True))
                self.done += len(chunk)

    def work(self, embed, after=None) -> None:
        """Embed chunks with `embed` until none is left (another thread may still finish one)."""
        while True:
            with self._lock:
                if not self._chunks:
                    return
                chunk = self._chunks.popleft()
            vectors = embed(chunk)
            with self._lock:
                self.found.update(zip(chunk, vectors, strict=True))
                self.done += len(chunk)
            if after:
                after()


GIL_SWITCH_S = 0.0001  # the GIL switch interval while an import's threads run (Python's default: 5 ms)


@contextmanager
def _prompt_gil_handoffs():
    """A short GIL switch interval for the block. The encoder's thread lets go of the GIL for each
    numpy operation and needs it back to start the next; while the SQL checks run Python in the
    main thread, each of those waits lasted up to the 5 ms default, so the encoder mostly stood
    still until the checks were done, and the two ran one after the other instead of side by side."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, GIL_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _pair(n: int, item: dict) -> _Pair:
    sql = item.get("sql")
    sql = "" if sql is None or str(sql).strip().lower() in ("", "null") else str(sql)
    question = " ".join(str(item.get("question") or "").split())
    extra = [p for p in item.get("paraphrases") or [] if isinstance(p, str)]
    pair = _Pair(n, str(item.get("id") or n), question, sql, str(item.get("note") or ""), extra)
    if len(question) < 3:
        pair.error = "the question is empty"
    return pair


class _Checks:
    """Each pair's SQL validated (the validated text is what the library keeps) and templated.
    A SQL text is validated once: an EHRSQL train file says the same SQL for about one pair in eight."""

    def __init__(self, catalog, dialect: str) -> None:
        self.catalog, self.dialect = catalog, dialect
        self._validated: dict[str, object] = {}  # SQL text -> its validation, or the SqlValidationError

    def _validate(self, sql: str):
        if sql not in self._validated:
            try:
                self._validated[sql] = validate_sql(sql, self.catalog)
            except SqlValidationError as exc:
                self._validated[sql] = exc
        return self._validated[sql]

    def check(self, pair: _Pair) -> None:
        if pair.error or not pair.sql:
            return
        validated = self._validate(pair.sql)
        if isinstance(validated, SqlValidationError):
            pair.error = f"The SQL is not valid: {validated.message}"
            return
        pair.sql, pair.tables, pair.columns = validated.sql, list(validated.tables), list(validated.columns)
        # The validated text is sqlglot's own in the catalog's dialect: its parse is its normal form.
        generated = self.catalog.dialect == self.dialect
        pair.template = template_of(pair.question, pair.sql, dialect=self.dialect, generated=generated)
        # parses: done here, beside the embedding
        entry = match.entry_for(None, pair.question, pair.sql, pair.template)
        pair.key = entry.key if entry is not None else ""


def _store(pairs: list[_Pair], *, source, approved_by, origin: str, model: str, report: ImportReport,
           audits: list) -> None:  # fmt: skip
    """Create or merge each checked pair in order, as example_upsert would one at a time, then write."""
    by_question, near = _library_now(source, model)
    now = timezone.now()
    created: list[Example] = []
    merged: dict[int, Example] = {}  # id(example) -> a library example changed by a merge
    outcomes: list[tuple[str, Example]] = []  # ("created" | "merged", example), in file order
    events: list[tuple[str, Example, str, dict | None]] = []
    for pair in pairs:
        if pair.error:
            report.failed.append({"id": pair.ident, "question": pair.question[:300], "error": pair.error})
            continue
        duplicate = by_question.get((pair.kind, pair.question.upper()))
        if duplicate is None:
            duplicate = near[pair.kind].duplicate(pair.vector, _normalized(pair.sql))
        if duplicate is not None:
            example = _merge_pair(duplicate, pair, approved_by=approved_by, model=model, near=near)
            merged[id(example)] = example
            events.append(("example.merged", example, pair.question[:500], None))
            outcomes.append(("merged", example))
        else:
            example = _new_example(
                pair, source=source, model=model, origin=origin, approved_by=approved_by, now=now
            )
            created.append(example)
            by_question[(pair.kind, pair.question.upper())] = example
            near[pair.kind].add(example, pair.vector)
            events.append(("example.created", example, pair.question[:500],
                           {"kind": pair.kind, "origin": origin, "tables": pair.tables}))  # fmt: skip
            outcomes.append(("created", example))
        extra = [p for p in pair.paraphrases if p not in example.paraphrases]
        if extra:  # an export carries them; an import must not lose them
            example.paraphrases = [*example.paraphrases, *extra]
    _write(source, approved_by, created=created, merged=merged, events=events, audits=audits)
    seen: set[int] = set()
    for kind, example in outcomes:
        (report.merged if kind == "merged" or example.pk in seen else report.created).append(example.pk)
        seen.add(example.pk)


def _library_now(source, model: str) -> tuple[dict[tuple[str, str], Example], dict[str, _Nearest]]:
    """The library's examples by (kind, question) and, per kind, the active ones' vectors."""
    live = list(Example.objects.filter(source=source).exclude(status=Example.Status.RETIRED))
    # The exact duplicate example_upsert finds first: the most recently approved (the default order).
    live.sort(key=lambda e: (e.approved_at is not None, e.approved_at or 0, e.pk), reverse=True)
    by_question: dict[tuple[str, str], Example] = {}
    for example in live:
        by_question.setdefault((example.kind, example.question.upper()), example)
    near = {kind: _Nearest() for kind in Example.Kind.values}
    for example in sorted(live, key=lambda e: e.pk):
        if (
            example.status == Example.Status.ACTIVE
            and example.embedding_model == model
            and example.embedding is not None
        ):
            near[example.kind].add(example, example.embedding)
    return by_question, near


def _merge_pair(duplicate: Example, pair: _Pair, *, approved_by, model: str, near: dict) -> Example:
    """The pair merged into its duplicate (unsaved), as example_upsert merges one."""
    was_active = duplicate.status == Example.Status.ACTIVE
    _merge_fields(duplicate, question=pair.question, sql=pair.sql, tables=pair.tables,
                  columns=pair.columns, approved_by=approved_by, note=pair.note)  # fmt: skip
    if duplicate.template_key:  # the merged SQL may be another template
        template = Template.from_dict(duplicate.template) if duplicate.template else None
        entry = match.entry_for(None, duplicate.question, duplicate.sql, template)
        duplicate.template_key = match.key_hash(entry.key) if entry is not None else ""
        if entry is not None and duplicate.template:
            duplicate.template["key"] = entry.key
    if not was_active and duplicate.embedding_model == model and duplicate.embedding is not None:
        near[pair.kind].add(duplicate, duplicate.embedding)
    return duplicate


def _new_example(pair: _Pair, *, source, model: str, origin: str, approved_by, now) -> Example:
    """A new (unsaved) example of the pair, with what the matcher's index needs."""
    example = Example(
        source=source, question=pair.question, sql=pair.sql, kind=pair.kind, tables=pair.tables,
        columns=pair.columns, embedding=pair.vector, embedding_model=model, origin=origin,
        approved_by=approved_by, approved_at=now, note=pair.note, validated_at=now,
        template=pair.template.to_dict() if pair.template is not None else {},
    )  # fmt: skip
    key = pair.key if pair.sql else match.UNANSWERABLE
    if key:  # what the matcher's index needs, so its first use computes nothing
        example.template_key = match.key_hash(key)
        example.masked_embedding = pair.masked_vector
        if example.template:
            example.template["key"] = key  # kept with the template, as the library build does
    return example


def _write(source, approved_by, *, created: list, merged: dict, events: list, audits: list) -> None:
    """Written IMPORT_CHUNK new examples to a transaction, each with its audit events; the merges
    into examples the library held before, and the audit of the SQL that was run, go first."""
    earlier = [e for e in merged.values() if e.pk is not None]
    chunk_of = {id(e): i // IMPORT_CHUNK + 1 for i, e in enumerate(created)}
    for chunk in range(len(created) // IMPORT_CHUNK + 2):
        with transaction.atomic():
            if chunk == 0:
                for example in earlier:
                    example.save()
                audit_record_many(audits)
            else:
                Example.objects.bulk_create(created[(chunk - 1) * IMPORT_CHUNK : chunk * IMPORT_CHUNK])
                library_generation_bump(source_id=source.pk, examples=True)  # bulk_create sends no signal
            audit_record_many([
                audit_event(action=action, actor=approved_by, target=example, message=message, detail=detail)
                for action, example, message, detail in events
                if chunk_of.get(id(example), 0) == chunk
            ])  # fmt: skip


class _Nearest:
    """The active examples of one kind and their vectors, searched like examples_nearest (exact)."""

    def __init__(self) -> None:
        self.examples: list[Example] = []
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.count = 0

    def add(self, example: Example, vector) -> None:
        v = np.asarray(vector, dtype=np.float32)
        v = v / (np.linalg.norm(v) or 1.0)
        if self.count == len(self.matrix):
            grown = np.zeros((max(64, 2 * self.count), len(v)), dtype=np.float32)
            if self.count:
                grown[: self.count] = self.matrix[: self.count]
            self.matrix = grown
        self.matrix[self.count] = v
        self.examples.append(example)
        self.count += 1

    def duplicate(self, vector, sql: str, k: int = 4):
        """The example example_upsert would merge into by similarity: among the k nearest, the
        first at least ASKDB_EXAMPLE_MERGE_SIMILARITY close with the same SQL."""
        if not self.count or vector is None:
            return None
        v = np.asarray(vector, dtype=np.float32)
        sims = self.matrix[: self.count] @ (v / (np.linalg.norm(v) or 1.0))
        top = np.argsort(-sims, kind="stable")[:k]
        for i in top:
            if sims[i] < settings.ASKDB_EXAMPLE_MERGE_SIMILARITY:
                break
            if _normalized(self.examples[i].sql) == sql:
                return self.examples[i]
        return None


def examples_export(*, source, include_retired: bool = False, actor=None) -> list[dict]:
    """The library as plain data (the same shape examples_import reads), oldest first; audited."""
    audit_record(action="examples.exported", actor=actor, target=source,
                 message="retired included" if include_retired else "")  # fmt: skip
    qs = Example.objects.filter(source=source).select_related("approved_by").order_by("id")
    if not include_retired:
        qs = qs.exclude(status=Example.Status.RETIRED)
    return [
        {
            "id": e.pk, "question": e.question, "sql": e.sql, "kind": e.kind, "status": e.status,
            "tables": e.tables, "paraphrases": e.paraphrases, "note": e.note,
            "approved_by": e.approved_by.username if e.approved_by else "",
            "approved_at": e.approved_at.isoformat() if e.approved_at else "",
        }
        for e in qs
    ]  # fmt: skip
