"""Tests for the synthetic MIMIC-IV generator: layout, determinism, integrity, vocabularies.

No database: the generated CSVs are read back with the csv module. The real open demo release
(../shared/mimic-iv-demo-2.2) is only used, when present, as the reference for headers and
dictionary contents.
"""

from __future__ import annotations

import csv
import gzip
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path

import pytest

from metadata_admin.clinical.synthetic import (
    AS_OF,
    TABLES,
    GenerationResult,
    _fmt,
    _num,
    generate,
    load_vocab,
)

DEMO = Path(__file__).resolve().parents[3].parent / "shared" / "mimic-iv-demo-2.2"
PATIENTS = 20
SEED = 42

# chartevents is not in the demo; this is its v2.2 header.
CHARTEVENTS_HEADER = (
    "subject_id,hadm_id,stay_id,caregiver_id,charttime,storetime,itemid,value,valuenum,valueuom,warning"
)

# Primary keys of the community build scripts (and of the loader) for the generated tables.
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "hosp/patients": ("subject_id",),
    "hosp/admissions": ("hadm_id",),
    "hosp/transfers": ("transfer_id",),
    "hosp/diagnoses_icd": ("hadm_id", "seq_num", "icd_code", "icd_version"),
    "hosp/d_icd_diagnoses": ("icd_code", "icd_version"),
    "hosp/procedures_icd": ("hadm_id", "seq_num", "icd_code", "icd_version"),
    "hosp/d_icd_procedures": ("icd_code", "icd_version"),
    "hosp/labevents": ("labevent_id",),
    "hosp/d_labitems": ("itemid",),
    "hosp/prescriptions": ("pharmacy_id", "drug_type", "drug"),
    "hosp/emar": ("emar_id",),
    "hosp/microbiologyevents": ("microevent_id",),
    "hosp/services": ("hadm_id", "transfertime", "curr_service"),
    "icu/icustays": ("stay_id",),
    "icu/d_items": ("itemid",),
    "icu/inputevents": ("orderid", "itemid"),
    "icu/outputevents": ("stay_id", "charttime", "itemid"),
}

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\Z")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerationResult]:
    out = tmp_path_factory.mktemp("synthetic")
    return out, generate(out, patients=PATIENTS, seed=SEED)


@pytest.fixture(scope="module")
def tables(release: tuple[Path, GenerationResult]) -> dict[str, list[dict[str, str]]]:
    out, _ = release
    data = {}
    for name in TABLES:
        with gzip.open(out / f"{name}.csv.gz", "rt", encoding="utf-8", newline="") as f:
            data[name] = list(csv.DictReader(f))
    return data


def _ts(value: str) -> datetime:
    assert TIMESTAMP.match(value), value
    return datetime.fromisoformat(value)


def _header(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.readline().rstrip("\n")


# --------------------------------------------------------------------------- layout


def test_result_counts_rows_and_carries_as_of(
    release: tuple[Path, GenerationResult], tables: dict[str, list[dict[str, str]]]
) -> None:
    _, result = release
    assert isinstance(result, Mapping)
    assert set(result) == set(TABLES)
    assert dict(result) == {name: len(rows) for name, rows in tables.items()}
    assert result.as_of == AS_OF
    assert result.latest_event < AS_OF
    assert result["hosp/patients"] == PATIENTS


def test_files_have_the_v22_headers(release: tuple[Path, GenerationResult]) -> None:
    out, _ = release
    for name, columns in TABLES.items():
        assert _header(out / f"{name}.csv.gz") == ",".join(columns), name
    assert ",".join(TABLES["icu/chartevents"]) == CHARTEVENTS_HEADER


@pytest.mark.skipif(not DEMO.is_dir(), reason="MIMIC-IV demo release not available")
def test_headers_equal_the_real_demo_release(release: tuple[Path, GenerationResult]) -> None:
    out, _ = release
    compared = 0
    for name in TABLES:
        demo_file = DEMO / f"{name}.csv.gz"
        if demo_file.exists():
            assert _header(out / f"{name}.csv.gz") == _header(demo_file), name
            compared += 1
    assert compared == len(TABLES) - 1  # all but chartevents


def test_values_fit_the_loader_schema(tables: dict[str, list[dict[str, str]]]) -> None:
    """Types, lengths and NOT NULL of the community DDL the loader uses (mimic-code create.sql)."""
    pytest.importorskip("psycopg")
    schema = pytest.importorskip("metadata_admin.clinical.schema")
    for name, rows in tables.items():
        table = schema.table(name.replace("/", "."))
        assert table.column_names == TABLES[name], name
        for column in table.columns:
            col_type = column.type.upper()
            limit = re.search(r"CHAR\((\d+)\)", col_type)
            for row in rows:
                value = row[column.name]
                if value == "":
                    assert column.nullable, f"{name}.{column.name} is NOT NULL"
                    continue
                where = f"{name}.{column.name}={value!r}"
                if col_type in ("INTEGER", "SMALLINT", "BIGINT"):
                    assert re.fullmatch(r"-?\d+", value), where
                elif col_type.startswith(("FLOAT", "DOUBLE", "REAL", "NUMERIC")):
                    float(value)
                elif col_type.startswith("TIMESTAMP"):
                    assert TIMESTAMP.match(value), where
                elif col_type == "DATE":
                    assert DATE.match(value), where
                elif limit:
                    assert len(value) <= int(limit.group(1)), where


# --------------------------------------------------------------------------- determinism


def test_same_seed_gives_identical_bytes_and_other_seed_differs(
    release: tuple[Path, GenerationResult], tmp_path: Path
) -> None:
    out, _ = release
    again = generate(tmp_path / "again", patients=PATIENTS, seed=SEED)
    assert dict(again) == dict(release[1])
    for name in TABLES:
        a = (out / f"{name}.csv.gz").read_bytes()
        b = (tmp_path / "again" / f"{name}.csv.gz").read_bytes()
        assert a == b, name
        assert a[4:8] == b"\0\0\0\0"  # gzip mtime is zero
    generate(tmp_path / "other", patients=5, seed=SEED + 1)
    generate(tmp_path / "same5", patients=5, seed=SEED)
    for name in ("hosp/patients", "hosp/admissions", "hosp/labevents"):
        assert (tmp_path / "other" / f"{name}.csv.gz").read_bytes() != (
            tmp_path / "same5" / f"{name}.csv.gz"
        ).read_bytes()
    assert not list(tmp_path.rglob("*.part"))


def test_number_formatting() -> None:
    assert [_num(x) for x in (1000, 40.0, 2.5, 0.12500, -0.00001, 0.1 + 0.2)] == [
        "1000",
        "40",
        "2.5",
        "0.125",
        "0",
        "0.3",
    ]
    assert [_fmt(x, d) for x, d in ((7.349, 2), (139.6, 0), (1.0, 1))] == ["7.35", "140", "1.0"]


def test_rejects_an_empty_cohort(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        generate(tmp_path, patients=0)


# --------------------------------------------------------------------------- keys and integrity


def test_primary_keys_are_present_and_unique(tables: dict[str, list[dict[str, str]]]) -> None:
    for name, key in PRIMARY_KEYS.items():
        seen = set()
        for row in tables[name]:
            value = tuple(row[c] for c in key)
            assert all(value), f"NULL in primary key of {name}: {row}"
            assert value not in seen, f"duplicate key {value} in {name}"
            seen.add(value)
    stay_ids = [r["stay_id"] for r in tables["icu/icustays"]]
    assert len(stay_ids) == len(set(stay_ids))


def test_loader_foreign_keys_hold(tables: dict[str, list[dict[str, str]]]) -> None:
    """Every foreign key the loader will add, between two generated tables, is satisfied."""
    pytest.importorskip("psycopg")
    schema = pytest.importorskip("metadata_admin.clinical.schema")
    by_qualified = {schema.table(n.replace("/", ".")).qualified_name: n for n in TABLES}
    checked = 0
    for table, fk in schema.foreign_keys():
        child, parent = by_qualified.get(table.qualified_name), by_qualified.get(fk.references)
        if child is None or parent is None:
            continue
        keys = {tuple(r[c] for c in fk.ref_columns) for r in tables[parent]}
        for row in tables[child]:
            value = tuple(row[c] for c in fk.columns)
            if all(value):
                assert value in keys, f"{fk.name}: {value} missing in {parent}"
        checked += 1
    assert checked >= 20


def test_admissions_stays_and_events_are_consistent(tables: dict[str, list[dict[str, str]]]) -> None:
    subjects = {r["subject_id"] for r in tables["hosp/patients"]}
    adm = {r["hadm_id"]: r for r in tables["hosp/admissions"]}
    assert all(r["subject_id"] in subjects for r in adm.values())
    span = {h: (_ts(r["admittime"]), _ts(r["dischtime"])) for h, r in adm.items()}
    for h, (a, d) in span.items():
        assert a < d, h
        r = adm[h]
        if r["edregtime"]:
            assert _ts(r["edregtime"]) <= a <= _ts(r["edouttime"])

    stays = {}
    for s in tables["icu/icustays"]:
        a, d = span[s["hadm_id"]]
        i, o = _ts(s["intime"]), _ts(s["outtime"])
        assert a <= i < o <= d, s
        assert adm[s["hadm_id"]]["subject_id"] == s["subject_id"]
        assert abs(float(s["los"]) - (o - i).total_seconds() / 86400) < 1e-6
        stays[s["stay_id"]] = (s["subject_id"], s["hadm_id"], i, o)
    # stay_id is the transfer_id of the stay's first ICU transfer, as in MIMIC.
    transfer_ids = {r["transfer_id"] for r in tables["hosp/transfers"]}
    assert set(stays) <= transfer_ids

    for name, time_col in (("icu/chartevents", "charttime"), ("icu/outputevents", "charttime")):
        for r in tables[name]:
            subject, hadm, i, o = stays[r["stay_id"]]
            assert (r["subject_id"], r["hadm_id"]) == (subject, hadm)
            assert i <= _ts(r[time_col]) <= o, (name, r)
    for r in tables["icu/inputevents"]:
        subject, hadm, i, o = stays[r["stay_id"]]
        assert (r["subject_id"], r["hadm_id"]) == (subject, hadm)
        assert i <= _ts(r["starttime"]) < _ts(r["endtime"]) <= o, r

    for name, col in (
        ("hosp/labevents", "charttime"),
        ("hosp/microbiologyevents", "charttime"),
        ("hosp/emar", "charttime"),
        ("hosp/services", "transfertime"),
    ):
        for r in tables[name]:
            if r["hadm_id"]:
                a, d = span[r["hadm_id"]]
                assert a <= _ts(r[col]) <= d, (name, r)
                assert adm[r["hadm_id"]]["subject_id"] == r["subject_id"]
    for r in tables["hosp/prescriptions"]:
        a, d = span[r["hadm_id"]]
        assert a <= _ts(r["starttime"]) < _ts(r["stoptime"]) <= d, r
    for name in ("hosp/diagnoses_icd", "hosp/procedures_icd"):
        for r in tables[name]:
            assert adm[r["hadm_id"]]["subject_id"] == r["subject_id"]
    for r in tables["hosp/procedures_icd"]:
        a, d = span[r["hadm_id"]]
        assert a.date() <= date.fromisoformat(r["chartdate"]) <= d.date()
    for r in tables["hosp/transfers"]:
        if r["hadm_id"] and r["eventtype"] != "ED":
            a, d = span[r["hadm_id"]]
            assert a <= _ts(r["intime"]) <= d
    labevent_ids = [r["labevent_id"] for r in tables["hosp/labevents"]]
    assert len(labevent_ids) == len(set(labevent_ids))


def test_emar_follows_its_prescriptions(tables: dict[str, list[dict[str, str]]]) -> None:
    orders = {}
    for r in tables["hosp/prescriptions"]:
        if r["drug_type"] == "MAIN":
            orders[r["pharmacy_id"]] = r
    assert tables["hosp/emar"]
    for e in tables["hosp/emar"]:
        rx = orders[e["pharmacy_id"]]
        assert (e["poe_id"], e["hadm_id"], e["subject_id"]) == (rx["poe_id"], rx["hadm_id"], rx["subject_id"])
        assert e["medication"] == rx["drug"]
        assert _ts(rx["starttime"]) <= _ts(e["charttime"]) <= _ts(rx["stoptime"])
        assert e["emar_id"] == f"{e['subject_id']}-{e['emar_seq']}"
        assert _ts(e["storetime"]) >= _ts(e["charttime"])
    # BASE solutions share the pharmacy_id of their MAIN order.
    for r in tables["hosp/prescriptions"]:
        if r["drug_type"] == "BASE":
            assert r["pharmacy_id"] in orders


def test_codes_and_items_exist_in_their_dictionaries(tables: dict[str, list[dict[str, str]]]) -> None:
    dx = {(r["icd_code"], r["icd_version"]) for r in tables["hosp/d_icd_diagnoses"]}
    px = {(r["icd_code"], r["icd_version"]) for r in tables["hosp/d_icd_procedures"]}
    assert all((r["icd_code"], r["icd_version"]) in dx for r in tables["hosp/diagnoses_icd"])
    assert all((r["icd_code"], r["icd_version"]) in px for r in tables["hosp/procedures_icd"])
    assert all("." not in code for code, _ in dx | px)
    labs = {r["itemid"] for r in tables["hosp/d_labitems"]}
    assert all(r["itemid"] in labs for r in tables["hosp/labevents"])
    linksto = {r["itemid"]: r["linksto"] for r in tables["icu/d_items"]}
    for name in ("chartevents", "inputevents", "outputevents"):
        rows = tables[f"icu/{name}"]
        assert rows, name
        assert all(linksto.get(r["itemid"]) == name for r in rows), name


def test_diagnosis_versions_follow_the_admission(tables: dict[str, list[dict[str, str]]]) -> None:
    versions = defaultdict(set)
    for r in tables["hosp/diagnoses_icd"]:
        versions[r["hadm_id"]].add(r["icd_version"])
    assert all(len(v) == 1 for v in versions.values())  # one coding system per admission
    seq = defaultdict(list)
    for r in tables["hosp/diagnoses_icd"]:
        seq[r["hadm_id"]].append(int(r["seq_num"]))
    assert all(sorted(s) == list(range(1, len(s) + 1)) for s in seq.values())


# --------------------------------------------------------------------------- time and people


def test_all_times_parse_and_precede_as_of(tables: dict[str, list[dict[str, str]]]) -> None:
    time_cols = {
        "admittime", "dischtime", "deathtime", "edregtime", "edouttime", "intime", "outtime",
        "charttime", "storetime", "starttime", "stoptime", "endtime", "scheduletime",
        "transfertime", "storedate",
    }  # fmt: skip
    date_cols = {"dod", "chartdate"}
    checked = 0
    for name, rows in tables.items():
        for row in rows:
            for col, value in row.items():
                if not value:
                    continue
                if col in time_cols or (col == "chartdate" and name == "hosp/microbiologyevents"):
                    assert _ts(value) < AS_OF, (name, col, value)
                    checked += 1
                elif col in date_cols:
                    assert DATE.match(value), (name, col, value)
                    assert date.fromisoformat(value) < AS_OF.date(), (name, col, value)
    assert checked > 1000


def test_patients_and_deaths_look_like_mimic(tables: dict[str, list[dict[str, str]]]) -> None:
    groups = {"2008 - 2010", "2011 - 2013", "2014 - 2016", "2017 - 2019"}
    for p in tables["hosp/patients"]:
        assert p["gender"] in ("M", "F")
        assert 18 <= int(p["anchor_age"]) <= 91
        assert 2110 <= int(p["anchor_year"]) <= 2210
        assert p["anchor_year_group"] in groups
    dod = {p["subject_id"]: p["dod"] for p in tables["hosp/patients"]}
    by_subject = defaultdict(list)
    for a in tables["hosp/admissions"]:
        by_subject[a["subject_id"]].append(a)
    for subject, adms in by_subject.items():
        adms.sort(key=lambda a: a["admittime"])
        for a in adms[:-1]:
            assert a["hospital_expire_flag"] == "0" and not a["deathtime"]
        last = adms[-1]
        if last["hospital_expire_flag"] == "1":
            assert last["deathtime"] and last["discharge_location"] == "DIED"
            assert dod[subject] == last["deathtime"][:10]
        else:
            assert not last["deathtime"]
            if dod[subject]:
                assert dod[subject] >= last["dischtime"][:10]
        assert all(a["admittime"] >= b["dischtime"] for a, b in zip(adms[1:], adms, strict=False))


# --------------------------------------------------------------------------- vocabularies


def test_vocabularies_are_large_and_realistic() -> None:
    v = load_vocab()
    dx = {(c.code, c.version) for c in v.diagnoses}
    assert len(dx) >= 300
    assert sum(1 for _, ver in dx if ver == 9) >= 100 and sum(1 for _, ver in dx if ver == 10) >= 100
    for code in (("A419", 10), ("99591", 9), ("J189", 10), ("4280", 9), ("N179", 10), ("E119", 10)):
        assert code in dx
    for group in ("sepsis", "pneumonia", "hf_acute", "aki", "diabetes", "htn", "copd", "ami", "stroke"):
        assert {9, 10} <= {c.version for c in v.diagnoses if c.group == group}, group
    assert len({(c.code, c.version) for c in v.procedures}) >= 100
    assert len(v.labs) >= 100
    for itemid, label in (
        (50912, "Creatinine"),
        (51222, "Hemoglobin"),
        (50931, "Glucose"),
        (51003, "Troponin T"),
    ):
        assert v.labs[itemid].label == label
    assert {50971, 50983, 51301, 51265, 50813} <= set(v.labs)
    drugs = {d.drug for d in v.drugs.values()}
    assert len(drugs) >= 200
    assert {
        "Heparin",
        "Vancomycin",
        "Piperacillin-Tazobactam",
        "Furosemide",
        "Insulin",
        "Acetaminophen",
    } <= drugs
    assert {"Fentanyl Citrate", "Fenofibrate", "Metoprolol Tartrate"} <= drugs
    items = v.items_by_id
    expected = {
        220045: "chartevents", 220179: "chartevents", 220180: "chartevents", 220181: "chartevents",
        220210: "chartevents", 220277: "chartevents", 223761: "chartevents", 220739: "chartevents",
        223900: "chartevents", 223901: "chartevents", 225158: "inputevents", 220949: "inputevents",
        222168: "inputevents", 221906: "inputevents", 226559: "outputevents", 226560: "outputevents",
    }  # fmt: skip
    assert {i: items[i]["linksto"] for i in expected} == expected
    assert "Medical Intensive Care Unit (MICU)" in v.careunits
    assert {"MED", "SURG", "CMED", "NMED", "CSURG", "OMED"} <= set(v.services)
    assert {o.org_name for o in v.organisms} >= {"ESCHERICHIA COLI", "STAPH AUREUS COAG +"}


@pytest.mark.skipif(not DEMO.is_dir(), reason="MIMIC-IV demo release not available")
def test_vocabularies_agree_with_the_official_dictionaries() -> None:
    """Hand-written codes, titles and item ids are the real ones (checked, not copied)."""

    def rows(name: str) -> list[dict[str, str]]:
        with gzip.open(DEMO / f"{name}.csv.gz", "rt", encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))

    v = load_vocab()
    dx = {(r["icd_code"], r["icd_version"]): r["long_title"] for r in rows("hosp/d_icd_diagnoses")}
    for c in v.diagnoses:
        assert dx.get((c.code, str(c.version))) == c.title, c
    px = {(r["icd_code"], r["icd_version"]): r["long_title"] for r in rows("hosp/d_icd_procedures")}
    for c in v.procedures:
        assert px.get((c.code, str(c.version))) == c.title, c
    labs = {r["itemid"]: (r["label"], r["fluid"], r["category"]) for r in rows("hosp/d_labitems")}
    for item in v.labs.values():
        assert labs.get(str(item.itemid)) == (item.label, item.fluid, item.category), item
    d_items = {r["itemid"]: (r["label"], r["linksto"]) for r in rows("icu/d_items")}
    for itemid, row in v.items_by_id.items():
        assert d_items.get(str(itemid)) == (row["label"], row["linksto"]), row


# --------------------------------------------------------------------------- clinical signal


def test_clinical_signal_and_volume(tables: dict[str, list[dict[str, str]]]) -> None:
    n_adm = len(tables["hosp/admissions"])
    assert n_adm >= PATIENTS
    assert len(tables["hosp/labevents"]) > 30 * n_adm
    assert tables["icu/icustays"] and len(tables["icu/chartevents"]) > 100 * len(tables["icu/icustays"])
    versions = Counter(r["icd_version"] for r in tables["hosp/diagnoses_icd"])
    assert set(versions) == {"9", "10"}
    # Lab values are plausible and vary; abnormal values are flagged.
    values = defaultdict(list)
    for r in tables["hosp/labevents"]:
        if r["valuenum"]:
            values[r["itemid"]].append(float(r["valuenum"]))
    creat, hgb, sodium = values["50912"], values["51222"], values["50983"]
    assert 0.6 < sorted(creat)[len(creat) // 2] < 2.0
    assert 9 < sorted(hgb)[len(hgb) // 2] < 15
    assert 133 < sorted(sodium)[len(sodium) // 2] < 145 and len(set(sodium)) > 10
    flagged = [r for r in tables["hosp/labevents"] if r["flag"]]
    assert flagged and all(r["flag"] == "abnormal" for r in flagged)
    # Diabetics have higher glucose than the others.
    diabetic_adm = {
        r["hadm_id"] for r in tables["hosp/diagnoses_icd"] if r["icd_code"].startswith(("250", "E10", "E11"))
    }
    glucose = defaultdict(list)
    for r in tables["hosp/labevents"]:
        if r["itemid"] == "50931" and r["hadm_id"]:
            glucose[r["hadm_id"] in diabetic_adm].append(float(r["valuenum"]))
    if glucose[True] and glucose[False]:
        mean = {k: sum(v) / len(v) for k, v in glucose.items()}
        assert mean[True] > mean[False]
