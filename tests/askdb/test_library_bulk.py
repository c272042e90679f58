"""The bulk import (askdb.services.exports.examples_import) against the one-at-a-time path it
replaced (example_upsert per pair): the same examples, templates, vectors, merges and failures,
plus the matcher's template keys and masked vectors, and progress lines when not a terminal."""

from __future__ import annotations

import io
import json
from io import StringIO

import pytest
from django.core.management import call_command

from askdb.adapters.library_cache import LIBRARY
from askdb.models import Example
from askdb.services.examples import example_upsert
from askdb.services.exports import examples_import
from askdb.services.sql import ReviewError, sql_check
from core import match
from core.match import Template, template_is_current
from infra.audit.models import AuditEvent
from infra.progress import Progress
from infra.providers.embeddings import get_embedder
from metadata_admin.services import source_executor

pytestmark = pytest.mark.django_db

COUNT_SQL = "SELECT COUNT(*) AS patients FROM mimiciv_hosp.patients"
FEMALE_SQL = "SELECT COUNT(*) AS women FROM mimiciv_hosp.patients WHERE gender = 'F'"
ITEMS = [
    {"id": "1", "question": "How many patients are there?", "sql": COUNT_SQL},
    {"id": "2", "question": "How many female patients are there?", "sql": FEMALE_SQL},
    {"id": "3", "question": "how many patients are there", "sql": COUNT_SQL},  # exact duplicate of 1
    {"id": "4", "question": "How many patients are there in total?", "sql": COUNT_SQL},  # near-duplicate
    {"id": "5", "question": "How many female patients are there?", "sql": COUNT_SQL},  # same words, other SQL
    {"id": "6", "question": "What does each patient weigh?", "sql": "SELECT weight_kg FROM mimiciv_hosp.patients"},
    {"id": "7", "question": "Gender as a number", "sql": "SELECT CAST(gender AS INTEGER) AS g FROM mimiciv_hosp.patients"},
    {"id": "8", "question": "Will it rain tomorrow?", "sql": ""},
    {"id": "9", "question": "will it rain tomorrow", "sql": None},
    {"id": "10", "question": "", "sql": COUNT_SQL},
    {"id": "11", "question": "Female patient count", "sql": FEMALE_SQL, "paraphrases": ["Number of women"]},
]  # fmt: skip


def _one_by_one(source, items):
    """What examples_import did before it was bulk: sql_check, then example_upsert, per pair."""
    outcome = {"created": [], "merged": [], "failed": []}
    seen = set(Example.objects.values_list("pk", flat=True))
    for n, item in enumerate(items, start=1):
        question = " ".join(str(item.get("question") or "").split())
        sql = item.get("sql") or ""
        try:
            if len(question) < 3:
                raise ReviewError("the question is empty")
            if sql:
                sql_check(source=source, sql=sql, row_cap=1, purpose="import")
            example = example_upsert(source=source, question=question, sql=sql, origin="import",
                                     kind="answerable" if sql else "unanswerable")  # fmt: skip
            extra = [p for p in item.get("paraphrases") or [] if p not in example.paraphrases]
            if extra:
                example.paraphrases = [*example.paraphrases, *extra]
                example.save(update_fields=["paraphrases"])
        except ReviewError as exc:
            outcome["failed"].append((str(item.get("id") or n), str(exc)))
        else:
            outcome["merged" if example.pk in seen else "created"].append(example.pk)
            seen.add(example.pk)
    return outcome


def _library(source):
    return sorted(
        (e.question, e.sql, e.kind, e.status, tuple(e.paraphrases), json.dumps({k: v for k, v in e.template.items() if k != "key"}, sort_keys=True),
         tuple(e.tables), tuple(e.columns), e.embedding_model)
        for e in Example.objects.filter(source=source)
    )  # fmt: skip


def _vectors(source):
    return {e.question: list(e.embedding) for e in Example.objects.filter(source=source)}


def test_the_bulk_import_gives_what_one_at_a_time_gave(source):
    old = _one_by_one(source, ITEMS)
    expected, vectors = _library(source), _vectors(source)
    old_ids = sorted(Example.objects.values_list("pk", flat=True))
    Example.objects.all().delete()

    report = examples_import(source=source, items=ITEMS)
    assert _library(source) == expected
    for question, vector in _vectors(source).items():
        assert vector == pytest.approx(vectors[question], abs=1e-5)
    assert [(f["id"], f["error"]) for f in report.failed] == old["failed"]
    rank = lambda ids, order: [order.index(i) for i in ids]  # noqa: E731 - ids differ, creation order does not
    new_ids = sorted(Example.objects.values_list("pk", flat=True))
    assert rank(report.created, new_ids) == rank(old["created"], old_ids)
    assert rank(report.merged, new_ids) == rank(old["merged"], old_ids)
    assert len(report.created) == 4 and len(report.merged) == 4 and len(report.failed) == 3

    # The matcher's index needs nothing more: template keys and masked vectors are stored.
    values = LIBRARY.values(source, source_executor(source))
    for example in Example.objects.filter(source=source):
        template = Template.from_dict(example.template) if example.template else None
        entry = match.entry_for(example.pk, example.question, example.sql, template)
        assert example.template_key == match.key_hash(entry.key)
        assert example.kind == "unanswerable" or example.template["key"] == entry.key
        masked = get_embedder().embed([match.mask_question(example.question, values)])[0]
        assert list(example.masked_embedding) == pytest.approx(masked, abs=1e-6)
    # Every pair and every SQL run is audited, as before.
    assert AuditEvent.objects.filter(action="example.created").count() >= 4
    assert AuditEvent.objects.filter(action="example.merged").count() >= 4
    assert AuditEvent.objects.filter(action="sql.executed", detail__purpose="import").count() >= 8


def test_an_import_merges_into_what_the_library_already_holds(source):
    first = examples_import(source=source, items=ITEMS[:2])
    example = Example.objects.get(pk=first.created[0])
    Example.objects.filter(pk=example.pk).update(status="needs_review", validation_error="broken")
    again = examples_import(
        source=source, items=[{"question": "HOW MANY PATIENTS ARE THERE?", "sql": COUNT_SQL}]
    )
    assert again.merged == [example.pk] and not again.created
    example.refresh_from_db()
    assert example.status == "active" and example.validation_error == ""
    assert example.paraphrases == []  # the same words, only in capitals: no new paraphrase


def test_the_import_command_prints_progress_lines_when_not_a_terminal(source, tmp_path):
    path = tmp_path / "lib.json"
    path.write_text(json.dumps([i for i in ITEMS if i["question"]]))
    err = StringIO()  # not a terminal, like cron, CI or a log file
    call_command("import_examples", str(path), source=source.name, stdout=StringIO(), stderr=err)
    assert "importing: 10 of 10 pairs in " in err.getvalue()


def test_progress_lines_say_count_rate_and_time_left():
    out = io.StringIO()
    progress = Progress(200, "importing", unit="pairs", stream=out, every_s=0)
    progress.update(50)
    progress.update(120)
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("importing: 50 of 200 pairs (") and "/s, " in lines[0] and " left)" in lines[0]
    assert lines[1].startswith("importing: 120 of 200 pairs (")
    assert lines[-1].startswith("importing: 120 of 200 pairs in ")
    silent = io.StringIO()
    Progress(5, "x", stream=silent, enabled=False).update(3)
    assert silent.getvalue() == ""


def test_the_few_shot_search_in_memory_finds_what_the_database_search_finds(source):
    from askdb.services.examples import example_set_status
    from infra.adapters import catalog_search

    examples_import(source=source, items=ITEMS)
    embedder = get_embedder()
    vector = embedder.embed(["how many women are in the database?"])[0]

    def both():
        found = catalog_search.examples_nearest(source_id=source.pk, vector=vector, model=embedder.model, k=3)
        cached = LIBRARY.nearest(source, vector, embedder.model, 3)
        assert [i for i, _ in cached] == [i for i, _ in found]
        assert [s for _, s in cached] == pytest.approx([s for _, s in found], abs=1e-4)
        return found

    first = both()
    example_set_status(example=Example.objects.get(pk=first[0][0]), actor=None, status="retired")
    assert first[0][0] not in [i for i, _ in both()]  # a library change is seen at once


def test_a_stale_template_is_rebuilt_with_its_masked_vector(source):
    """Templates and masking change together (TEMPLATE_VERSION): a template built by an older
    version is rebuilt in memory when the library is loaded (a question reads, never writes), and
    stored with its masked vector embedded again by the library refresh (the worker's warm-up)."""
    from askdb.services.examples import library_refresh

    examples_import(source=source, items=ITEMS[:2])
    example = Example.objects.get(question="How many female patients are there?")
    Example.objects.filter(pk=example.pk).update(
        template={**example.template, "version": 0}, masked_embedding=[0.0] * len(example.masked_embedding)
    )
    index, _ = LIBRARY.index(source, source_executor(source), get_embedder())
    assert any(e.template is not None and e.example_id == example.pk for e in index.entries)
    example.refresh_from_db()
    assert not template_is_current(example.template)  # loading the library wrote nothing
    assert library_refresh(source=source) == 1
    example.refresh_from_db()
    assert template_is_current(example.template)
    values = LIBRARY.values(source, source_executor(source))
    masked = get_embedder().embed([match.mask_question(example.question, values)])[0]
    assert list(example.masked_embedding) == pytest.approx(masked, abs=1e-6)


def test_a_repeated_sql_is_validated_and_run_once_and_every_pair_gets_its_outcome(source, monkeypatch):
    from askdb.services import exports

    validated = []
    real_validate = exports.validate_sql
    monkeypatch.setattr(
        exports, "validate_sql", lambda sql, catalog: validated.append(sql) or real_validate(sql, catalog)
    )
    cast = "SELECT CAST(gender AS INTEGER) AS g FROM mimiciv_hosp.patients"  # valid, fails when run
    items = [
        {"id": "a", "question": "How many patients are there?", "sql": COUNT_SQL},
        {"id": "b", "question": "Gender as a number", "sql": cast},
        {"id": "c", "question": "Count every admitted person", "sql": COUNT_SQL},
        {"id": "d", "question": "Each sex coded as an integer", "sql": cast},
        {"id": "e", "question": "What does each patient weigh?", "sql": "SELECT weight_kg FROM mimiciv_hosp.patients"},
        {"id": "f", "question": "Body weight of every patient", "sql": "SELECT weight_kg FROM mimiciv_hosp.patients"},
    ]  # fmt: skip
    report = examples_import(source=source, items=items)
    assert sorted(validated) == sorted({i["sql"] for i in items})  # each distinct SQL once
    failed = {f["id"]: f["error"] for f in report.failed}
    assert sorted(failed) == ["b", "d", "e", "f"]
    assert failed["b"] == failed["d"] and failed["b"].startswith("The SQL failed when run")
    assert failed["e"] == failed["f"] and failed["e"].startswith("The SQL is not valid")
    assert len(report.created) + len(report.merged) == 2
    runs = AuditEvent.objects.filter(action="sql.executed", detail__purpose="import")
    assert runs.count() == 2  # COUNT_SQL once (ok), the cast once (its error)
    assert sorted(e.detail.get("outcome", "") == "ok" for e in runs) == [False, True]


def test_texts_are_shared_between_threads_and_each_embedded_once():
    """The import's embedding thread and, once its checks are done, the checking thread take the
    distinct texts a chunk at a time: both work at once, and no text is embedded twice."""
    import threading

    from askdb.services import exports

    texts = exports._Texts()
    texts.add(["ccc", "a", "bb", "a", "-"])
    texts.add(["bb", "dddd", *[f"q{i}" * 3 for i in range(exports.EMBED_CHUNK * 3)]])
    assert texts.total == 5 + exports.EMBED_CHUNK * 3
    both = threading.Barrier(2, timeout=10)
    seen: dict[str, list[str]] = {"one": [], "two": []}

    def embedder(name):
        def embed(chunk):
            if not seen[name]:
                both.wait()  # each thread holds a chunk at the same time
            seen[name].extend(chunk)
            return [[float(len(t))] for t in chunk]

        return embed

    other = threading.Thread(target=texts.work, args=(embedder("two"),))
    other.start()
    texts.work(embedder("one"))
    other.join()
    assert seen["one"] and seen["two"]
    everything = seen["one"] + seen["two"]
    assert len(everything) == len(set(everything)) == texts.total == texts.done
    assert texts.found["ccc"] == [3.0] and texts.found["-"] == [1.0]
    assert exports._Texts().work(embedder("one")) is None  # nothing queued: returns at once


def test_encoding_in_worker_processes_gives_the_library_the_threads_gave(source, monkeypatch):
    """A large import encodes in worker processes (no shared interpreter with the SQL checks): the
    same examples, templates, keys and vectors as this process's encoder gives, and the processes
    really did the work (a text none of the threads embedded)."""
    from askdb.services import exports
    from infra.providers import minilm

    examples_import(source=source, items=ITEMS)
    expected, vectors = _library(source), _vectors(source)
    keys = sorted((e.question, e.template_key) for e in Example.objects.filter(source=source))
    masked = {e.question: list(e.masked_embedding or []) for e in Example.objects.filter(source=source)}
    Example.objects.all().delete()
    here = []
    real_embed = get_embedder().embed
    monkeypatch.setattr(get_embedder(), "embed", lambda texts: here.extend(texts) or real_embed(texts))
    monkeypatch.setattr(exports, "PROCESSES_FROM", 1)
    used = []
    real_processes = get_embedder().processes
    monkeypatch.setattr(get_embedder(), "processes", lambda n: used.append(n) or real_processes(n))

    report = exports.examples_import(source=source, items=ITEMS)
    assert used == [exports.ENCODER_PROCESSES] and here == []  # every text went to the processes
    assert len(report.created) == 4 and len(report.merged) == 4 and len(report.failed) == 3
    assert _library(source) == expected
    assert sorted((e.question, e.template_key) for e in Example.objects.filter(source=source)) == keys
    for example in Example.objects.filter(source=source):
        assert list(example.embedding) == pytest.approx(vectors[example.question], abs=1e-5)
        assert list(example.masked_embedding or []) == pytest.approx(masked[example.question], abs=1e-5)
    assert minilm._PROCESS_MODEL is None  # this process never loaded a worker's model


def test_an_import_whose_worker_processes_fail_encodes_in_this_process(source, monkeypatch):
    """A pool that refuses work (a daemonic Celery worker may not have children) costs speed, never the import."""
    from concurrent.futures.process import BrokenProcessPool

    from askdb.services import exports

    class Refusing:
        def submit(self, *args):
            raise BrokenProcessPool("no children here")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(exports, "PROCESSES_FROM", 1)
    monkeypatch.setattr(get_embedder(), "processes", lambda n: Refusing(), raising=False)
    report = exports.examples_import(source=source, items=ITEMS)
    assert len(report.created) == 4 and len(report.merged) == 4 and len(report.failed) == 3
    assert all(e.embedding is not None for e in Example.objects.filter(source=source))
