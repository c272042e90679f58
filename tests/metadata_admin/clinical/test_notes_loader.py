"""MIMIC-IV-Note through load_mimic: any subset of modules, search indexes built at load time,
and a notes-only folder that leaves the loaded hosp/icu tables exactly as they were."""

from __future__ import annotations

import zipfile

import psycopg
import pytest

from metadata_admin.clinical import schema, synthetic, synthetic_notes
from metadata_admin.clinical.loader import load_release, loaded_tables


def _count(dsn: str, qualified: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {qualified}").fetchone()[0]


@pytest.fixture(scope="module")
def small_release(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    result = synthetic.generate(out, patients=12, seed=3)
    return out, result


def test_the_generator_writes_notes_and_their_truth_beside_the_modules(small_release):
    out, result = small_release
    assert result.notes is not None and result.notes.discharge >= 12
    truth = synthetic_notes.read_truth(out / synthetic_notes.TRUTH_FILE)
    assert set(truth["phenotypes"]) >= {
        "pulmonary hypertension",
        "heart failure",
        "sepsis",
        "atrial fibrillation",
    }
    # The truth lives outside every module folder: the loader never puts it in the database.
    assert not list(out.glob("*/note_truth*"))


def test_notes_only_folder_adds_notes_and_leaves_hosp_and_icu_alone(
    small_release, tmp_path, clinical_admin_dsn
):
    out, _ = small_release
    lines: list[str] = []
    first = load_release(
        out, dsn=clinical_admin_dsn, progress=False, tables=["patients", "admissions"], out=lines.append
    )
    assert first.ok and _count(clinical_admin_dsn, "mimiciv_hosp.patients") == 12
    with psycopg.connect(clinical_admin_dsn, autocommit=True) as conn:
        # A mark that a reload of patients would wipe: the notes-only load must not touch it.
        conn.execute(
            "UPDATE mimiciv_hosp.patients SET anchor_age = 99 WHERE subject_id = (SELECT min(subject_id) FROM mimiciv_hosp.patients)"
        )
    notes_only = tmp_path / "mimic-iv-note" / "2.2"
    (notes_only / "note").mkdir(parents=True)
    for f in (out / "note").iterdir():
        (notes_only / "note" / f.name).write_bytes(f.read_bytes())
    lines.clear()
    report = load_release(
        tmp_path / "mimic-iv-note", dsn=clinical_admin_dsn, progress=False, out=lines.append
    )
    assert report.ok
    assert {r.name for r in report.loaded} == {"mimiciv_note.discharge", "mimiciv_note.radiology"}
    assert {r.name for r in report.missing} == {
        t.qualified_name for t in schema.TABLES if t.schema != schema.NOTE
    }
    assert any(line.startswith("note: no hosp/") for line in lines)
    assert not any(line.startswith("warning:") for line in lines)  # one line per absent module
    with psycopg.connect(clinical_admin_dsn) as conn:
        ages = conn.execute("SELECT count(*) FROM mimiciv_hosp.patients WHERE anchor_age = 99").fetchone()[0]
    assert ages == 1 and _count(clinical_admin_dsn, "mimiciv_hosp.patients") == 12
    tables = loaded_tables(clinical_admin_dsn)
    assert tables["mimiciv_note.discharge"] == _count(clinical_admin_dsn, "mimiciv_note.discharge") > 0


def test_search_indexes_exist_and_the_planner_uses_them(small_release, clinical_admin_dsn):
    out, _ = small_release
    assert load_release(
        out, dsn=clinical_admin_dsn, progress=False, tables=["discharge"], out=lambda s: None
    ).ok
    with psycopg.connect(clinical_admin_dsn) as conn:
        indexes = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'mimiciv_note' AND tablename = 'discharge'"
            ).fetchall()
        )
        assert "gin (to_tsvector('english'::regconfig, text))" in indexes["discharge_fts"]
        assert "gin (text gin_trgm_ops)" in indexes["discharge_trgm"]
        conn.execute("SET enable_seqscan = off")  # a dozen notes: make the planner show it can
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                f"EXPLAIN SELECT note_id FROM mimiciv_note.discharge WHERE {schema.NOTE_TEXT_SEARCH} @@ "
                "phraseto_tsquery('english', 'heart failure')"
            )
        )
        assert "discharge_fts" in plan
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT note_id FROM mimiciv_note.discharge WHERE text ILIKE '%afib%'"
            )
        )
        assert "discharge_trgm" in plan


def test_a_second_load_skips_loaded_notes_and_a_zip_with_note_loads(
    small_release, tmp_path, clinical_admin_dsn
):
    out, _ = small_release
    archive = tmp_path / "note.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in (out / "note").iterdir():
            zf.write(f, f"mimic-iv-note-2.2/note/{f.name}")
    first = load_release(archive, dsn=clinical_admin_dsn, progress=False, out=lambda s: None)
    assert {r.name for r in first.loaded} == {"mimiciv_note.discharge", "mimiciv_note.radiology"}
    again = load_release(archive, dsn=clinical_admin_dsn, progress=False, out=lambda s: None)
    assert {r.name for r in again.skipped} == {"mimiciv_note.discharge", "mimiciv_note.radiology"}
    assert not again.loaded


def test_the_reader_roles_are_not_granted_the_notes():
    # Note text reaches people only through the phenotype app's rules, never through generated SQL.
    assert schema.NOTE not in schema.SCHEMAS and schema.NOTE in schema.ALL_SCHEMAS
