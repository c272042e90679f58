"""The MIMIC-IV loader against the real embedded PostgreSQL and the real open demo release.

The demo (100 patients, MIMIC-IV v2.2, no chartevents) is loaded once per module into a
database of its own; tests that break files on purpose copy a few demo files into tmp_path
and load them into the per-test scratch database from conftest.
"""

from __future__ import annotations

import gzip
import shutil
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from infra import embedded
from metadata_admin.clinical import schema
from metadata_admin.clinical.loader import LoadError, LoadReport, grant_read, load_release, loaded_tables

DEMO = Path(__file__).resolve().parents[4] / "shared" / "mimic-iv-demo-2.2"

needs_demo = pytest.mark.skipif(not (DEMO / "hosp").is_dir(), reason=f"MIMIC-IV demo not found at {DEMO}")


def _data_lines(path: Path) -> int:
    """Lines after the header (the demo has no quoted newlines, so lines == rows)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for _ in f) - 1


def _count(dsn: str, qualified: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {qualified}").fetchone()[0]


def _exists(dsn: str, qualified: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone()[0] is not None


def _read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", newline="") as f:
        return f.read().splitlines(keepends=True)


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", newline="") as f:
            f.writelines(lines)
    else:
        path.write_text("".join(lines), newline="")
    return path


def _copy_demo(dest: Path, *relpaths: str) -> Path:
    for rel in relpaths:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO / rel, dest / rel)
    return dest


# --------------------------------------------------------------------------- the full demo


@dataclass
class Demo:
    name: str
    dsn: str
    report: LoadReport
    lines: list[str]


@pytest.fixture(scope="module")
def demo():
    if not (DEMO / "hosp").is_dir():
        pytest.skip(f"MIMIC-IV demo not found at {DEMO}")
    name = f"loader_demo_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = embedded.pg_dsn(name)
        lines: list[str] = []
        report = load_release(DEMO, dsn=dsn, progress=False, out=lines.append)
        yield Demo(name, dsn, report, lines)
    finally:
        with psycopg.connect(embedded.pg_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_every_demo_file_loads_with_its_line_count(demo):
    assert demo.report.ok, demo.report.failed
    files = sorted(DEMO.glob("*/*.csv.gz"))
    assert len(files) == 30
    loaded = {r.name: r for r in demo.report.loaded}
    assert len(loaded) == 30
    for f in files:
        t = schema.table(f"{f.parent.name}.{f.name.removesuffix('.csv.gz')}")
        assert loaded[t.qualified_name].rows == _data_lines(f), t.qualified_name
    # The report's numbers are the database's numbers.
    assert _count(demo.dsn, "mimiciv_hosp.patients") == 100
    assert _count(demo.dsn, "mimiciv_hosp.admissions") == 275
    assert _count(demo.dsn, "mimiciv_hosp.labevents") == 107_727
    assert _count(demo.dsn, "mimiciv_icu.icustays") == 140
    # One summary line per table when progress bars are off, then the totals.
    assert any(line.startswith("loaded  mimiciv_hosp.patients: 100 rows") for line in demo.lines)
    assert demo.lines[-1].startswith("30 loaded (")


def test_missing_chartevents_is_skipped_with_a_warning(demo):
    result = demo.report.result("chartevents")
    assert result.status == "missing"
    assert "icu/chartevents.csv.gz" in result.message
    # The demo has no note/ module at all: its tables are missing quietly, in one line.
    assert [r.name for r in demo.report.missing] == [
        "mimiciv_icu.chartevents",
        "mimiciv_note.discharge",
        "mimiciv_note.radiology",
    ]
    assert any(line.startswith("note: no note/") for line in demo.lines)
    assert any(line.startswith("warning: mimiciv_icu.chartevents") for line in demo.lines)
    assert not _exists(demo.dsn, "mimiciv_icu.chartevents")


def test_keys_and_indexes_exist_after_a_full_load(demo):
    with psycopg.connect(demo.dsn) as conn:
        constraints = {
            (t, c, kind)
            for t, c, kind in conn.execute(
                "SELECT table_schema || '.' || table_name, constraint_name, constraint_type "
                "FROM information_schema.table_constraints "
                "WHERE table_schema IN ('mimiciv_hosp', 'mimiciv_icu') "
                "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY')"
            )
        }
        indexes = {
            r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname LIKE 'mimiciv_%'")
        }
    expected_fks = {
        (owner.qualified_name, fk.name, "FOREIGN KEY")
        for owner, fk in schema.foreign_keys()
        if owner.name != "chartevents"
    }
    assert len(expected_fks) == 47
    assert expected_fks <= constraints
    assert ("mimiciv_hosp.admissions", "admissions_patients_fk", "FOREIGN KEY") in constraints
    assert ("mimiciv_icu.outputevents", "outputevents_icustays_fk", "FOREIGN KEY") in constraints
    assert ("mimiciv_hosp.admissions", "admissions_pk", "PRIMARY KEY") in constraints
    assert ("mimiciv_hosp.diagnoses_icd", "diagnoses_icd_pk", "PRIMARY KEY") in constraints
    assert {"labevents_idx01", "labevents_idx02", "d_icd_diag_idx02", "emar_det_idx04"} <= indexes
    by_status = {c.name: c.status for c in demo.report.constraints}
    assert by_status["chartevents_icustays_fk"] == "skipped"
    assert not [c for c in demo.report.constraints if c.status == "failed"]


def test_loaded_tables_lists_what_exists(demo):
    tables = loaded_tables(demo.dsn)
    assert len(tables) == 30
    assert tables["mimiciv_hosp.patients"] == 100
    assert tables["mimiciv_icu.d_items"] == 4014
    assert "mimiciv_icu.chartevents" not in tables


def test_rerun_skips_tables_that_hold_rows(demo):
    lines: list[str] = []
    report = load_release(DEMO, dsn=demo.dsn, progress=False, out=lines.append)
    assert not report.loaded and not report.failed
    assert len(report.skipped) == 30
    assert report.result("admissions").rows == 275
    assert "replace=True" in report.result("admissions").message
    assert {c.status for c in report.constraints} == {"exists", "skipped"}
    assert _count(demo.dsn, "mimiciv_hosp.admissions") == 275


def test_replace_reloads_and_restores_foreign_keys(demo):
    report = load_release(
        DEMO,
        dsn=demo.dsn,
        replace=True,
        progress=False,
        tables=["hosp.patients", "admissions"],
        out=lambda _: None,
    )
    assert [(r.name, r.status, r.rows) for r in report.tables] == [
        ("mimiciv_hosp.admissions", "loaded", 275),
        ("mimiciv_hosp.patients", "loaded", 100),
    ]
    # Reloading dropped the foreign keys pointing at both tables; the end of the load re-adds them.
    added = {c.name for c in report.constraints if c.status == "added"}
    assert {"admissions_patients_fk", "diagnoses_icd_admissions_fk", "icustays_patients_fk"} <= added
    assert _count(demo.dsn, "mimiciv_hosp.patients") == 100
    assert _count(demo.dsn, "mimiciv_hosp.admissions") == 275


def test_grant_read_gives_select_and_nothing_else(demo):
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(demo.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        grant_read(demo.dsn, role, hidden=("mimiciv_hosp.patients.dod",))
        # A table created after the grant (e.g. by a later reload) is closed until the next grant,
        # which every load runs: nobody reads a column before the catalog has had its say.
        with psycopg.connect(demo.dsn, autocommit=True) as admin:
            admin.execute("CREATE TABLE mimiciv_hosp.later (x int)")
        with psycopg.connect(embedded.pg_dsn(demo.name, user=role), autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM mimiciv_hosp.patients").fetchone()[0] == 100
            assert conn.execute("SELECT count(*) FROM mimiciv_icu.icustays").fetchone()[0] == 140
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM mimiciv_hosp.later")
            for hidden in ("SELECT dod FROM mimiciv_hosp.patients", "SELECT p::text FROM mimiciv_hosp.patients p",
                           "SELECT ctid FROM mimiciv_hosp.patients", "SELECT rolname FROM pg_roles"):  # fmt: skip
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(hidden)
        grant_read(demo.dsn, role)
        with psycopg.connect(embedded.pg_dsn(demo.name, user=role), autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM mimiciv_hosp.later").fetchone()[0] == 0
            assert conn.execute("SELECT count(dod) FROM mimiciv_hosp.patients").fetchone()[0] >= 0
            for statement in (
                "INSERT INTO mimiciv_hosp.patients VALUES (1, 'F', 50, 2150, '2017 - 2019', NULL)",
                "UPDATE mimiciv_hosp.patients SET anchor_age = 0",
                "DELETE FROM mimiciv_hosp.admissions",
                "TRUNCATE mimiciv_icu.icustays",
                "CREATE TABLE mimiciv_hosp.evil (x int)",
                "CREATE TABLE mimiciv_icu.evil (x int)",
                "DROP TABLE mimiciv_hosp.patients",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
        assert _count(demo.dsn, "mimiciv_hosp.patients") == 100
    finally:
        with psycopg.connect(demo.dsn, autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS mimiciv_hosp.later")
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


# --------------------------------------------------------------------------- small releases


@needs_demo
def test_zip_with_a_top_level_folder_loads(tmp_path, clinical_admin_dsn):
    archive = tmp_path / "mimic-iv-demo.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for rel in ("hosp/patients.csv.gz", "hosp/admissions.csv.gz", "icu/icustays.csv.gz"):
            zf.write(DEMO / rel, f"mimic-iv-2.2/{rel}")
    report = load_release(archive, dsn=clinical_admin_dsn, out=lambda _: None)  # progress bars on
    assert {(r.name, r.rows) for r in report.loaded} == {
        ("mimiciv_hosp.patients", 100),
        ("mimiciv_hosp.admissions", 275),
        ("mimiciv_icu.icustays", 140),
    }
    assert len(report.missing) == 30 and report.ok  # 28 hosp/icu tables, and no note/ at all
    statuses = {c.name: c.status for c in report.constraints}
    assert statuses["admissions_patients_fk"] == "added"
    assert statuses["icustays_admissions_fk"] == "added"
    assert statuses["diagnoses_icd_patients_fk"] == "skipped"
    assert _count(clinical_admin_dsn, "mimiciv_icu.icustays") == 140


@needs_demo
def test_malformed_row_fails_only_its_table_with_file_and_line(tmp_path, clinical_admin_dsn):
    release = _copy_demo(tmp_path / "release", "hosp/patients.csv.gz")
    lines = _read_lines(DEMO / "hosp/admissions.csv.gz")
    fields = lines[56].split(",")  # file line 57 = data record 56
    fields[2] = "not-a-date"  # admittime
    lines[56] = ",".join(fields)
    _write(release / "hosp/admissions.csv.gz", lines)

    printed: list[str] = []
    report = load_release(release, dsn=clinical_admin_dsn, progress=False, out=printed.append)

    failed = report.result("admissions")
    assert failed.status == "failed"
    assert failed.message == (
        "hosp/admissions.csv.gz line 57: "
        'invalid input syntax for type timestamp: "not-a-date" (column admittime)'
    )
    assert "not-a-date" in _read_lines(release / "hosp/admissions.csv.gz")[57 - 1]
    assert any(
        line.startswith("FAILED  mimiciv_hosp.admissions: hosp/admissions.csv.gz line 57") for line in printed
    )
    assert report.result("patients").status == "loaded"
    assert _count(clinical_admin_dsn, "mimiciv_hosp.patients") == 100
    assert not _exists(clinical_admin_dsn, "mimiciv_hosp.admissions")
    assert "mimiciv_hosp.admissions" not in loaded_tables(clinical_admin_dsn)


@needs_demo
def test_failed_reload_keeps_the_previous_data(tmp_path, clinical_admin_dsn):
    release = _copy_demo(tmp_path / "release", "hosp/admissions.csv.gz")
    load_release(release, dsn=clinical_admin_dsn, progress=False, out=lambda _: None)
    lines = _read_lines(DEMO / "hosp/admissions.csv.gz")
    fields = lines[-1].split(",")
    fields[1] = "not-a-number"  # hadm_id of the last row, file line 276
    lines[-1] = ",".join(fields)
    _write(release / "hosp/admissions.csv.gz", lines)

    report = load_release(release, dsn=clinical_admin_dsn, replace=True, progress=False, out=lambda _: None)

    assert report.result("admissions").message.startswith(
        'hosp/admissions.csv.gz line 276: invalid input syntax for type integer: "not-a-number"'
    )
    assert _count(clinical_admin_dsn, "mimiciv_hosp.admissions") == 275


def test_line_numbers_count_physical_lines_across_quoted_newlines(tmp_path, clinical_admin_dsn):
    header = "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod\n"
    rows = [
        '1,F,50,2150,"2017 -\n2019",\n',  # one record over two physical lines (2 and 3)
        "2,M,60,2150,2017 - 2019,\n",  # line 4
        "3,M,70,2150,2017 - 2019,someday\n",  # line 5: bad date ("yesterday" would parse)
    ]
    release = tmp_path / "release"
    _write(release / "hosp/patients.csv", [header, *rows])
    report = load_release(release, dsn=clinical_admin_dsn, progress=False, out=lambda _: None)
    assert report.result("patients").message == (
        'hosp/patients.csv line 5: invalid input syntax for type date: "someday" (column dod)'
    )


def test_unknown_header_column_is_a_clear_error(tmp_path, clinical_admin_dsn):
    release = tmp_path / "release"
    _write(
        release / "hosp/patients.csv.gz",
        [
            "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod,favourite_colour\n",
            "1,F,50,2150,2017 - 2019,,blue\n",
        ],
    )
    report = load_release(release, dsn=clinical_admin_dsn, progress=False, out=lambda _: None)
    result = report.result("patients")
    assert result.status == "failed"
    assert result.message.startswith(
        "hosp/patients.csv.gz line 1: unknown column 'favourite_colour' in the header"
    )
    assert "subject_id, gender, anchor_age" in result.message
    assert not _exists(clinical_admin_dsn, "mimiciv_hosp.patients")


def test_header_order_is_followed_and_only_nullable_columns_may_be_absent(tmp_path, clinical_admin_dsn):
    release = tmp_path / "release"
    # Columns shuffled, dod (nullable) absent, names in upper case like procedureevents' ORIGINALRATE.
    _write(
        release / "hosp/patients.csv",
        ["GENDER,subject_id,anchor_year_group,anchor_year,anchor_age\n", "F,7,2017 - 2019,2150,42\n"],
    )
    # drg_code is NOT NULL: its absence must stop the table.
    _write(
        release / "hosp/drgcodes.csv",
        ["subject_id,hadm_id,drg_type,description\n", "7,1,APR,something\n"],
    )
    report = load_release(release, dsn=clinical_admin_dsn, progress=False, out=lambda _: None)

    patients = report.result("patients")
    assert (patients.status, patients.rows) == ("loaded", 1)
    assert "dod" in patients.message
    with psycopg.connect(clinical_admin_dsn) as conn:
        assert conn.execute(
            "SELECT subject_id, gender, anchor_age, dod FROM mimiciv_hosp.patients"
        ).fetchall() == [(7, "F", 42, None)]
    drgcodes = report.result("drgcodes")
    assert drgcodes.status == "failed"
    assert "'drg_code'" in drgcodes.message and "NOT NULL" in drgcodes.message


def test_duplicate_primary_key_fails_the_table(tmp_path, clinical_admin_dsn):
    release = tmp_path / "release"
    header = "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod\n"
    row = "1,F,50,2150,2017 - 2019,\n"
    _write(release / "hosp/patients.csv", [header, row, row])
    report = load_release(release, dsn=clinical_admin_dsn, progress=False, out=lambda _: None)
    result = report.result("patients")
    assert result.status == "failed"
    assert result.message.startswith('hosp/patients.csv: could not create unique index "patients_pk"')
    assert "Key (subject_id)=(1) is duplicated" in result.message
    assert not _exists(clinical_admin_dsn, "mimiciv_hosp.patients")


def test_unusable_release_or_table_name_raises(tmp_path, clinical_admin_dsn):
    with pytest.raises(LoadError, match="no such file"):
        load_release(tmp_path / "nope", dsn=clinical_admin_dsn, out=lambda _: None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="no hosp/, icu/ or note/"):
        load_release(tmp_path / "empty", dsn=clinical_admin_dsn, out=lambda _: None)
    _write(tmp_path / "release/hosp/patients.csv", ["subject_id\n"])
    with pytest.raises(LoadError, match="unknown MIMIC-IV table"):
        load_release(tmp_path / "release", dsn=clinical_admin_dsn, tables=["noteevents"], out=lambda _: None)


# --------------------------------------------------------------------------- the layout


def test_layout_has_every_v2_2_table():
    assert {t.name for t in schema.TABLES if t.schema == "mimiciv_hosp"} == {
        "admissions", "d_hcpcs", "d_icd_diagnoses", "d_icd_procedures", "d_labitems", "diagnoses_icd",
        "drgcodes", "emar", "emar_detail", "hcpcsevents", "labevents", "microbiologyevents", "omr",
        "patients", "pharmacy", "poe", "poe_detail", "prescriptions", "procedures_icd", "provider",
        "services", "transfers",
    }  # fmt: skip
    assert {t.name for t in schema.TABLES if t.schema == "mimiciv_icu"} == {
        "caregiver", "chartevents", "d_items", "datetimeevents", "icustays", "ingredientevents",
        "inputevents", "outputevents", "procedureevents",
    }  # fmt: skip
    assert (
        schema.table("hosp.admissions")
        is schema.table("mimiciv_hosp.admissions")
        is schema.table("admissions")
    )
    assert schema.table("admissions").column("admittime").nullable is False
    for owner, fk in schema.foreign_keys():
        referenced = schema.table(fk.references)
        assert referenced.primary_key == fk.ref_columns, fk.name
        assert set(fk.columns) <= set(owner.column_names)


# --------------------------------------------------------------------------- researchers' indexes


def _index_names(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {
            r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname LIKE 'mimiciv_%'")
        }


def test_the_keys_researchers_filter_on_are_indexed_after_a_load(demo):
    indexes = _index_names(demo.dsn)
    # Single-patient, single-admission and single-item questions read these, not a full scan.
    assert {"labevents_subject_id_ix", "labevents_hadm_id_ix", "labevents_itemid_ix"} <= indexes
    assert {"prescriptions_subject_id_ix", "emar_subject_id_ix", "inputevents_stay_id_ix"} <= indexes
    assert {
        "microbiologyevents_hadm_id_ix",
        "diagnoses_icd_subject_id_ix",
        "outputevents_itemid_ix",
    } <= indexes
    # Every index of the layout exists on every loaded table (chartevents is absent from the demo).
    expected = {ix.name for t in schema.TABLES if t.schema != schema.NOTE and t.name != "chartevents"
                for ix in t.indexes}  # fmt: skip
    assert expected <= indexes
    # A key some index already leads with gets no second index (the primary key of diagnoses_icd
    # starts with hadm_id; the community transfers_idx01 is on hadm_id).
    assert "diagnoses_icd_hadm_id_ix" not in indexes and "transfers_hadm_id_ix" not in indexes
    with psycopg.connect(demo.dsn) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT valuenum FROM mimiciv_hosp.labevents WHERE subject_id = 10000032"))  # fmt: skip
    assert "labevents_subject_id_ix" in plan


def test_indexes_only_creates_the_missing_ones_and_is_idempotent(demo):
    from io import StringIO

    from django.core.management import call_command

    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX mimiciv_hosp.labevents_itemid_ix")
        conn.execute("DROP INDEX mimiciv_hosp.labevents_idx01")  # a community one too
        # A database loaded by other means may hold a view where a table is expected: not indexable.
        conn.execute("CREATE SCHEMA IF NOT EXISTS mimiciv_note")
        conn.execute("CREATE VIEW mimiciv_note.discharge AS SELECT 1 AS subject_id")
    try:
        out = StringIO()
        call_command("load_mimic", "--indexes-only", dsn=demo.dsn, stdout=out)
        text = out.getvalue()
        assert "created index mimiciv_hosp.labevents_itemid_ix" in text
        assert "created index mimiciv_hosp.labevents_idx01" in text
        assert text.strip().splitlines()[-1].startswith("indexes: 2 created, ")
        assert text.strip().endswith("0 failed")
        assert {"labevents_itemid_ix", "labevents_idx01"} <= _index_names(demo.dsn)

        again = StringIO()
        call_command("load_mimic", "--indexes-only", dsn=demo.dsn, stdout=again)
        assert again.getvalue().strip().splitlines() == [again.getvalue().strip().splitlines()[-1]]
        assert again.getvalue().strip().startswith("indexes: 0 created, ")

        # A plain re-run of the load (tables skipped: they hold rows) adds what an older load lacked.
        with psycopg.connect(demo.dsn, autocommit=True) as conn:
            conn.execute("DROP INDEX mimiciv_hosp.labevents_subject_id_ix")
        lines: list[str] = []
        report = load_release(DEMO, dsn=demo.dsn, progress=False, tables=["labevents"], out=lines.append)
        assert report.result("labevents").status == "skipped"
        assert "created index mimiciv_hosp.labevents_subject_id_ix" in "\n".join(lines)
        assert "labevents_subject_id_ix" in _index_names(demo.dsn)
    finally:
        with psycopg.connect(demo.dsn, autocommit=True) as conn:
            conn.execute("DROP VIEW IF EXISTS mimiciv_note.discharge")


# The library's whole-table questions at scale (issue 31): "the average urea nitrogen in 2150",
# "patients prescribed heparin in 2150", "the top 3 drugs of patients with atrial fibrillation".
# Each as the library writes it (EXTRACT(YEAR …) stays: the year slot binds a number there).
_SCALE_QUERIES = {
    "labevents_itemid_charttime_year_ix": (
        "SELECT AVG(l.valuenum) FROM mimiciv_hosp.labevents AS l JOIN mimiciv_hosp.d_labitems AS d "
        "ON d.itemid = l.itemid WHERE d.label = 'Urea Nitrogen' AND EXTRACT(YEAR FROM l.charttime) = {year}"
    ),
    "prescriptions_drug_starttime_year_ix": (
        "SELECT COUNT(DISTINCT p.subject_id) FROM mimiciv_hosp.prescriptions AS p "
        "WHERE p.drug = 'Heparin' AND EXTRACT(YEAR FROM p.starttime) = {year}"
    ),
    "diagnoses_icd_icd_code_icd_version_subject_id_hadm_id_ix": (
        "SELECT COUNT(DISTINCT di.subject_id) FROM mimiciv_hosp.diagnoses_icd AS di "
        "JOIN mimiciv_hosp.d_icd_diagnoses AS d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version "
        "WHERE LOWER(d.long_title) LIKE '%atrial fibrillation%'"
    ),
    "prescriptions_hadm_id_drug_ix": (
        "SELECT p.drug, COUNT(*) AS n FROM mimiciv_hosp.prescriptions AS p WHERE p.hadm_id IN ("
        "SELECT di.hadm_id FROM mimiciv_hosp.diagnoses_icd AS di JOIN mimiciv_hosp.d_icd_diagnoses AS d "
        "ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version "
        "WHERE LOWER(d.long_title) LIKE '%atrial fibrillation%') GROUP BY p.drug ORDER BY n DESC, p.drug LIMIT 3"
    ),
}


def _busiest_year(conn, table: str, column: str, where: str) -> int:
    return int(conn.execute(
        f"SELECT EXTRACT(YEAR FROM {column}) AS y FROM {table} WHERE {where} GROUP BY y ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()[0])  # fmt: skip


def test_the_whole_table_templates_read_their_index_alone_with_the_same_answers(demo):
    with psycopg.connect(demo.dsn) as conn:
        years = {
            "labevents_itemid_charttime_year_ix": _busiest_year(
                conn, "mimiciv_hosp.labevents", "charttime",
                "itemid IN (SELECT itemid FROM mimiciv_hosp.d_labitems WHERE label = 'Urea Nitrogen')"),
            "prescriptions_drug_starttime_year_ix": _busiest_year(
                conn, "mimiciv_hosp.prescriptions", "starttime", "drug = 'Heparin'"),
        }  # fmt: skip
        for index, template in _SCALE_QUERIES.items():
            query = template.format(year=years.get(index, 0))
            # The planner prefers a scan of a table this small: forbid it to see that the index serves.
            conn.execute("SET enable_seqscan = off")
            conn.execute("SET enable_bitmapscan = off")
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + query))
            with_index = conn.execute(query).fetchall()
            assert f"Index Only Scan using {index}" in plan, plan
            # COPY FREEZE marked the loaded pages all-visible: the index alone answers, no heap reads.
            after = plan[plan.index(f"Index Only Scan using {index}") :]
            assert after[after.index("Heap Fetches:") :].startswith("Heap Fetches: 0\n"), plan
            conn.execute("RESET enable_seqscan")
            conn.execute("RESET enable_bitmapscan")
            # The same answer as without the index (dropped inside a transaction rolled back).
            with conn.transaction(force_rollback=True):
                conn.execute(f"DROP INDEX mimiciv_hosp.{index}")
                without = conn.execute(query).fetchall()
            assert with_index == without and with_index and with_index[0][0] is not None, (index, with_index)


_TOP_LABS_SCAN = (
    "SELECT d.label, COUNT(*) AS n_tests FROM mimiciv_hosp.labevents AS l "
    "JOIN mimiciv_hosp.d_labitems AS d ON d.itemid = l.itemid GROUP BY d.label ORDER BY n_tests DESC, d.label ASC"
)


def _library_sql(item_id: str) -> str:
    import json

    train = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "mimiciv" / "train.json"
    return next(i["sql"] for i in json.loads(train.read_text()) if i["id"] == item_id)


def test_the_loader_keeps_the_lab_test_counts_and_the_library_reads_them_with_the_same_answer(demo):
    summary = _library_sql("tr-048")
    assert "labevents_item_counts" in summary and "labevents AS" not in summary
    with psycopg.connect(demo.dsn) as conn:
        # The library's SQL over the summary and the scan it replaces give the same answer, every
        # test of it (not only the top 5), ties ordered alike.
        whole = summary.replace("LIMIT 5", "")
        assert conn.execute(whole).fetchall() == conn.execute(_TOP_LABS_SCAN).fetchall()
        assert len(conn.execute(summary).fetchall()) == 5
        counted = conn.execute("SELECT sum(n_events) FROM mimiciv_hosp.labevents_item_counts").fetchone()[0]
        assert counted == conn.execute("SELECT count(*) FROM mimiciv_hosp.labevents").fetchone()[0] > 0


def test_the_lab_test_counts_follow_a_reload_and_indexes_only_restores_them(demo):
    from io import StringIO

    from django.core.management import call_command

    def counted() -> int:
        with psycopg.connect(demo.dsn) as conn:
            return conn.execute("SELECT sum(n_events) FROM mimiciv_hosp.labevents_item_counts").fetchone()[0]

    rows = _count(demo.dsn, "mimiciv_hosp.labevents")
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM mimiciv_hosp.labevents WHERE labevent_id IN "
                     "(SELECT labevent_id FROM mimiciv_hosp.labevents LIMIT 10)")  # fmt: skip
    assert counted() == rows  # stale until the loader refreshes it
    lines: list[str] = []
    report = load_release(
        DEMO, dsn=demo.dsn, replace=True, progress=False, tables=["labevents"], out=lines.append
    )
    assert report.result("labevents").status == "loaded"
    assert "refreshed summary mimiciv_hosp.labevents_item_counts" in "\n".join(lines)
    assert counted() == _count(demo.dsn, "mimiciv_hosp.labevents") == rows

    # A database loaded by other means: --indexes-only builds the summary it lacks.
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute("DROP MATERIALIZED VIEW mimiciv_hosp.labevents_item_counts")
    out = StringIO()
    call_command("load_mimic", "--indexes-only", dsn=demo.dsn, stdout=out)
    assert "created summary mimiciv_hosp.labevents_item_counts" in out.getvalue()
    assert counted() == rows
