"""A calibration of an unchanged library takes the library's own cross-validation samples from the last
one and asks only the labelled questions, with the same report; a changed example, doc, source, engine
or library content asks them again (askdb.services.calibration_reuse)."""

from __future__ import annotations

import json
import pickle

import pytest

from askdb.adapters.library_cache import LIBRARY
from askdb.models import Example
from askdb.services import calibration, calibration_reuse
from askdb.services.calibration import library_cross_validate
from askdb.services.examples import example_upsert
from core import match
from core.match import calibrate
from metadata_admin.models import TableDoc
from metadata_admin.services import table_doc_update
from tests.askdb.test_calibration_progress import GENDER_SQL, calibration_library

pytestmark = pytest.mark.django_db


@pytest.fixture
def library(source, settings, tmp_path):
    """A small library and two labelled questions, with the kept samples in this test's own home."""
    settings.ASKDB_HOME = tmp_path
    ids = calibration_library(source, patients=5, examples=4)
    items = [
        {"question": f"tell me the gender of patient {ids[0]}", "sql": GENDER_SQL.format(id=ids[0])},
        {"question": "which patients will come back next year?", "sql": ""},
    ]
    return ids, items


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    """The kinds of the parts a calibration asks (fold, siblings, labelled), as it asks them."""
    kinds: list[str] = []
    run_part = calibrate.run_part

    def counted(part, *args, **kwargs):
        kinds.append(part.kind)
        return run_part(part, *args, **kwargs)

    monkeypatch.setattr(calibrate, "run_part", counted)
    return kinds


def _calibrated(source, items=None, **kwargs) -> tuple[dict, list[int]]:
    seen: list[int] = []
    report = library_cross_validate(source=source, items=items, progress=seen.append, **kwargs)
    return {k: v for k, v in report.items() if k != "at"}, seen


def test_an_unchanged_library_asks_only_the_labelled_questions_with_the_same_report(source, library, asked):
    _, items = library
    first, seen_first = _calibrated(source, items)
    assert {"fold", "siblings", "labelled"} <= set(asked) and first["matched"] > 0
    asked.clear()
    again, seen_again = _calibrated(source, items)
    assert set(asked) == {"labelled"}  # the library's folds were taken as kept
    assert again == first and seen_again == seen_first == list(range(1, first["held_out"] + 1))
    asked.clear()
    alone, _ = _calibrated(source)  # no labelled questions: nothing is asked at all
    assert asked == []
    assert alone == _calibrated(source, reuse=False)[0]
    assert set(asked) >= {"fold", "siblings"}  # reuse=False asks them all


def test_a_changed_example_doc_or_engine_asks_the_library_again(source, library, asked, monkeypatch):
    ids, items = library
    _calibrated(source, items)

    def asks_folds_again(change) -> None:
        change()
        asked.clear()
        _calibrated(source, items)
        assert "fold" in asked, change.__name__
        kept = calibration_reuse.kept_parts(source, calibration_reuse.reuse_key(source))
        assert kept is not None and kept[1]  # kept anew for the next one

    def new_paraphrase():
        example_upsert(source=source, question=f"which gender does patient {ids[4]} have?",
                       sql=GENDER_SQL.format(id=ids[4]))  # fmt: skip

    def edited_doc():  # a join changed: a catalog change, which moves the source's data generation
        doc = TableDoc.objects.get(source=source, name="admissions")
        to = TableDoc.objects.get(source=source, name="patients")
        table_doc_update(doc=doc, data={"relationships": [
            {"to_table": to, "column_pairs": [["subject_id", "subject_id"]], "note": "reuse test"}
        ]})  # fmt: skip

    def new_template_version():
        monkeypatch.setattr(match, "TEMPLATE_VERSION", match.TEMPLATE_VERSION + 100)
        calibration_reuse.engine_hash.cache_clear()

    for change in (new_paraphrase, edited_doc, new_template_version):
        asks_folds_again(change)
    calibration_reuse.engine_hash.cache_clear()


def test_a_question_changed_without_a_signal_is_not_read_from_the_kept_samples(source, library, asked):
    """The attack on the file's name: a queryset update sends no signal and leaves `updated_at`, so
    the name's key still matches; the kept content (every entry's question, as the library is built
    by the next calibrate_library, a new process) does not."""
    _, items = library
    _calibrated(source, items)
    example = Example.objects.filter(source=source, kind=Example.Kind.ANSWERABLE).order_by("id").first()
    Example.objects.filter(pk=example.pk).update(question=example.question + " please")
    LIBRARY.clear()  # a new process builds the library from the database
    asked.clear()
    _calibrated(source, items)
    assert "fold" in asked


def test_kept_samples_under_another_content_are_never_used(source, library, asked):
    """A file with the right name whose samples were asked of another library (here: forged, every
    sample wrong) is ignored and replaced; so is a damaged file."""
    _, items = library
    first, _ = _calibrated(source, items)
    path = calibration_reuse._path(source)
    kept = json.loads(path.read_text())
    forged = [[*part, [[x, not ok, f, n] for x, ok, f, n in samples]] for *part, samples in kept["parts"]]
    path.write_text(json.dumps({**kept, "content": "another library", "parts": forged}))
    asked.clear()
    assert _calibrated(source, items)[0] == first and "fold" in asked
    path.write_bytes(b"not json")
    asked.clear()
    assert _calibrated(source, items)[0] == first and "fold" in asked
    # Attack: a pickle in its place (reading it must never unpickle, which could run code).
    path.write_bytes(pickle.dumps({"key": kept["key"]}))
    asked.clear()
    assert _calibrated(source, items)[0] == first and "fold" in asked


def test_a_first_calibration_hashes_the_library_once_the_workers_have_their_parts(monkeypatch):
    """With nothing kept to compare with, the library's content hash (~1 s of CPU on the EHRSQL train
    library) is made in this process's first part, after run_parts has handed the workers theirs:
    made before, it held every process back. The samples are kept under that same hash."""
    events: list[str] = []
    kept: dict = {}
    monkeypatch.setattr(calibration, "content_hash", lambda context: events.append("hash") or "content")
    monkeypatch.setattr(calibration, "keep_parts", lambda source, key, content, found: kept.update(c=content))

    def run_parts(parts, local):
        events.append("handed out")
        return [local(p) for p in parts]

    def local(part):
        events.append(part.kind)
        return []

    parts = [calibrate.Part("fold", 0, 0, 1), calibrate.Part("siblings", 0, 0, 1)]
    run = calibration._reusing(None, "key", None, {}, run_parts, lambda _: None)
    assert run(parts, local) == [[], []]
    assert events == ["handed out", "hash", "fold", "siblings"] and kept == {"c": "content"}
    events.clear()  # in one process (no run_parts): hashed in the first part as well, once
    assert calibration._reusing(None, "key", None, {}, None, lambda _: None)(parts, local) == [[], []]
    assert events == ["hash", "fold", "siblings"]
