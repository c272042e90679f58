"""Deterministic, MIMIC-IV-shaped synthetic clinical data.

Why this exists: askdb must be demonstrable on a machine with no network and without the
credentialed MIMIC-IV files. The loader (``loader.py``) reads a MIMIC-IV v2.2 release folder
(``hosp/*.csv.gz``, ``icu/*.csv.gz``); this module *writes* such a folder, with the exact v2.2
file names and CSV headers, so one code path loads real and synthetic data alike.

What it produces (``generate``): 18 tables (hosp: patients, admissions, transfers,
diagnoses_icd, d_icd_diagnoses, procedures_icd, d_icd_procedures, labevents, d_labitems,
prescriptions, emar, microbiologyevents, services; icu: icustays, chartevents, d_items,
inputevents, outputevents) in MIMIC's formats: timestamps ``YYYY-MM-DD HH:MM:SS``, dates
``YYYY-MM-DD``, NULL as an empty field, 0/1 flags, integers in integer columns. Values follow
the column types of the community build script (mimic-code ``buildmimic/postgres``) and the
primary keys the loader creates (e.g. inputevents ``(orderid, itemid)``, outputevents
``(stay_id, charttime, itemid)``, prescriptions ``(pharmacy_id, drug_type, drug)``).

Clinical content: every admission follows a *scenario* (sepsis, pneumonia, heart failure,
NSTEMI/STEMI, stroke, GI bleed, DKA, elective CABG, hip fracture, ...) on top of the patient's
chronic conditions (hypertension, diabetes, CKD, COPD, ...). The scenario and conditions drive
coded diagnoses/procedures, lab values (septic patients have high lactate and WBC, diabetics
high glucose and HbA1c, AKI raises creatinine, MI raises troponin, ...), vital signs,
medications, cultures, ICU use and mortality (in-hospital death ~10 % of admissions). Lengths
of stay are log-normal (long tail). Dates are shifted per patient into 2110-2210 like MIMIC,
with ``anchor_year``/``anchor_year_group``/``anchor_age``; the ICD version (9 or 10) follows
the *real* date implied by the anchor year group (ICD-10 from October 2015), as in MIMIC.

Vocabularies (``vocab/*.csv``) were written by hand for this project from public code sets and
general clinical knowledge: ICD-9-CM / ICD-10-CM diagnoses and ICD-9 / ICD-10-PCS procedures
with their official long titles (stored without the dot, like MIMIC), MIMIC's own item ids for
labs, ICU charting/inputs/outputs and microbiology with their labels, real generic drug names
with usual doses, care units, services, organisms and antibiotics. Codes, titles and item ids
were checked against the official dictionaries (the tests repeat that check against the open
demo release when it is present). No row of the MIMIC demo is shipped or read at run time.

Determinism: the same ``(patients, seed)`` gives byte-identical files. Randomness comes only
from ``random.Random`` instances seeded from ``seed`` (one per patient plus one for shared
pools), gzip is written with ``mtime=0`` and no file name, rows are streamed patient by patient
(memory stays flat, time grows linearly with ``patients``), and the wall clock is never read.

"As of" choice: the data has a fixed horizon, ``AS_OF`` = 2210-12-31 00:00:00. Every generated
timestamp and date (admissions, events, store times, dates of death) is strictly earlier;
patients whose simulated history would run past it are shifted back in time. ``generate``
returns a ``GenerationResult``, which is a read-only mapping ``"module/table" -> row count``
(so it can be used like the plain ``dict[str, int]``) that also carries ``as_of`` (``AS_OF``)
and ``latest_event`` (the latest timestamp actually written).

Manual use::

    python -m metadata_admin.clinical.synthetic OUT_DIR --patients 100 --seed 42
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import random
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from .synthetic_notes import NotesResult, generate_notes

VOCAB_DIR = Path(__file__).with_name("vocab")

AS_OF = datetime(2210, 12, 31, 0, 0, 0)
"""Horizon of the generated data: every timestamp and date is strictly before it."""

# Latest allowed end of a patient's simulated history (store times, post-discharge deaths).
_HISTORY_LIMIT = AS_OF - timedelta(days=3)

# --------------------------------------------------------------------------- table layout

# Headers exactly as in the MIMIC-IV v2.2 release files (the first line of each .csv.gz).
_HEADERS: dict[str, str] = {
    "hosp/patients": "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod",
    "hosp/admissions": (
        "subject_id,hadm_id,admittime,dischtime,deathtime,admission_type,admit_provider_id,"
        "admission_location,discharge_location,insurance,language,marital_status,race,edregtime,"
        "edouttime,hospital_expire_flag"
    ),
    "hosp/transfers": "subject_id,hadm_id,transfer_id,eventtype,careunit,intime,outtime",
    "hosp/diagnoses_icd": "subject_id,hadm_id,seq_num,icd_code,icd_version",
    "hosp/d_icd_diagnoses": "icd_code,icd_version,long_title",
    "hosp/procedures_icd": "subject_id,hadm_id,seq_num,chartdate,icd_code,icd_version",
    "hosp/d_icd_procedures": "icd_code,icd_version,long_title",
    "hosp/labevents": (
        "labevent_id,subject_id,hadm_id,specimen_id,itemid,order_provider_id,charttime,storetime,value,"
        "valuenum,valueuom,ref_range_lower,ref_range_upper,flag,priority,comments"
    ),
    "hosp/d_labitems": "itemid,label,fluid,category",
    "hosp/prescriptions": (
        "subject_id,hadm_id,pharmacy_id,poe_id,poe_seq,order_provider_id,starttime,stoptime,drug_type,"
        "drug,formulary_drug_cd,gsn,ndc,prod_strength,form_rx,dose_val_rx,dose_unit_rx,form_val_disp,"
        "form_unit_disp,doses_per_24_hrs,route"
    ),
    "hosp/emar": (
        "subject_id,hadm_id,emar_id,emar_seq,poe_id,pharmacy_id,enter_provider_id,charttime,medication,"
        "event_txt,scheduletime,storetime"
    ),
    "hosp/microbiologyevents": (
        "microevent_id,subject_id,hadm_id,micro_specimen_id,order_provider_id,chartdate,charttime,"
        "spec_itemid,spec_type_desc,test_seq,storedate,storetime,test_itemid,test_name,org_itemid,"
        "org_name,isolate_num,quantity,ab_itemid,ab_name,dilution_text,dilution_comparison,"
        "dilution_value,interpretation,comments"
    ),
    "hosp/services": "subject_id,hadm_id,transfertime,prev_service,curr_service",
    "icu/icustays": "subject_id,hadm_id,stay_id,first_careunit,last_careunit,intime,outtime,los",
    "icu/chartevents": (
        "subject_id,hadm_id,stay_id,caregiver_id,charttime,storetime,itemid,value,valuenum,valueuom,warning"
    ),
    "icu/d_items": (
        "itemid,label,abbreviation,linksto,category,unitname,param_type,lownormalvalue,highnormalvalue"
    ),
    "icu/inputevents": (
        "subject_id,hadm_id,stay_id,caregiver_id,starttime,endtime,storetime,itemid,amount,amountuom,"
        "rate,rateuom,orderid,linkorderid,ordercategoryname,secondaryordercategoryname,"
        "ordercomponenttypedescription,ordercategorydescription,patientweight,totalamount,totalamountuom,"
        "isopenbag,continueinnextdept,statusdescription,originalamount,originalrate"
    ),
    "icu/outputevents": "subject_id,hadm_id,stay_id,caregiver_id,charttime,storetime,itemid,value,valueuom",
}
TABLES: dict[str, tuple[str, ...]] = {name: tuple(h.split(",")) for name, h in _HEADERS.items()}

# --------------------------------------------------------------------------- vocabularies


@dataclass(frozen=True)
class IcdCode:
    code: str
    version: int
    title: str
    group: str


@dataclass(frozen=True)
class LabItem:
    itemid: int
    label: str
    fluid: str
    category: str
    uom: str | None
    ref_lower: str | None
    ref_upper: str | None
    center: float
    spread: float
    lo: float
    hi: float
    decimals: int
    dist: str  # "normal", "lognormal" or "text"
    panel: str
    text_values: tuple[str, ...]
    text_weights: tuple[float, ...]

    @property
    def ref_range(self) -> tuple[float | None, float | None]:
        return (
            float(self.ref_lower) if self.ref_lower else None,
            float(self.ref_upper) if self.ref_upper else None,
        )


@dataclass(frozen=True)
class Drug:
    key: str
    drug: str
    tags: tuple[str, ...]
    route: str
    dose_val_rx: str
    dose_unit_rx: str
    form_val_disp: str
    form_unit_disp: str
    prod_strength: str
    doses_per_24_hrs: float | None
    drug_type: str
    prn: bool


@dataclass(frozen=True)
class MicroTest:
    kind: str
    spec_itemid: int
    spec_type_desc: str
    test_itemid: int
    test_name: str
    negative_comment: str


@dataclass(frozen=True)
class Organism:
    org_itemid: int
    org_name: str
    panel: str
    source_weights: dict[str, float]


@dataclass(frozen=True)
class Antibiotic:
    ab_itemid: int
    ab_name: str
    panels: tuple[str, ...]
    s_mic: float
    r_mic: float
    resistance_rate: float


@dataclass(frozen=True)
class Weighted:
    """Values with cumulative weights, ready for ``Random.choices``."""

    values: tuple[Any, ...]
    cum_weights: tuple[float, ...]

    def pick(self, rng: random.Random) -> Any:
        return rng.choices(self.values, cum_weights=self.cum_weights)[0]

    @classmethod
    def of(cls, pairs: Iterable[tuple[Any, float]]) -> Weighted:
        values, cum, total = [], [], 0.0
        for value, weight in pairs:
            total += weight
            values.append(value)
            cum.append(total)
        return cls(tuple(values), tuple(cum))


@dataclass(frozen=True)
class Vocab:
    diagnoses: tuple[IcdCode, ...]
    procedures: tuple[IcdCode, ...]
    labs: dict[int, LabItem]
    d_items: tuple[dict[str, str], ...]
    drugs: dict[str, Drug]
    micro_tests: dict[str, MicroTest]
    organisms: tuple[Organism, ...]
    antibiotics: tuple[Antibiotic, ...]
    categoricals: dict[str, Weighted]
    careunits: dict[str, str]  # careunit -> kind (icu, ward, ed, other)
    services: dict[str, str]
    dx_by_group: dict[tuple[str, int], tuple[IcdCode, ...]] = field(default_factory=dict)
    px_by_group: dict[tuple[str, int], tuple[IcdCode, ...]] = field(default_factory=dict)
    px_by_code: dict[tuple[str, int], IcdCode] = field(default_factory=dict)
    items_by_id: dict[int, dict[str, str]] = field(default_factory=dict)


def _read_csv(name: str) -> list[dict[str, str]]:
    with (VOCAB_DIR / name).open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _opt(value: str) -> str | None:
    return value if value != "" else None


def _float(value: str, default: float = 0.0) -> float:
    return float(value) if value != "" else default


def _grouped(codes: Iterable[IcdCode]) -> dict[tuple[str, int], tuple[IcdCode, ...]]:
    out: dict[tuple[str, int], list[IcdCode]] = {}
    for c in codes:
        out.setdefault((c.group, c.version), []).append(c)
    return {k: tuple(v) for k, v in out.items()}


@lru_cache(maxsize=1)
def load_vocab() -> Vocab:
    """Read the hand-written vocabularies in ``vocab/`` (cached)."""
    dx = tuple(
        IcdCode(r["icd_code"], int(r["icd_version"]), r["long_title"], r["group"])
        for r in _read_csv("icd_diagnoses.csv")
    )
    px = tuple(
        IcdCode(r["icd_code"], int(r["icd_version"]), r["long_title"], r["group"])
        for r in _read_csv("icd_procedures.csv")
    )
    labs: dict[int, LabItem] = {}
    for r in _read_csv("labitems.csv"):
        texts = [t.rsplit(":", 1) for t in r["text_values"].split(";") if t]
        labs[int(r["itemid"])] = LabItem(
            itemid=int(r["itemid"]),
            label=r["label"],
            fluid=r["fluid"],
            category=r["category"],
            uom=_opt(r["valueuom"]),
            ref_lower=_opt(r["ref_range_lower"]),
            ref_upper=_opt(r["ref_range_upper"]),
            center=_float(r["center"]),
            spread=_float(r["spread"]),
            lo=_float(r["min"]),
            hi=_float(r["max"]),
            decimals=int(r["decimals"] or 0),
            dist=r["dist"],
            panel=r["panel"],
            text_values=tuple(t[0] for t in texts),
            text_weights=tuple(float(t[1]) for t in texts),
        )
    drugs = {
        r["key"]: Drug(
            key=r["key"],
            drug=r["drug"],
            tags=tuple(r["tags"].split()),
            route=r["route"],
            dose_val_rx=r["dose_val_rx"],
            dose_unit_rx=r["dose_unit_rx"],
            form_val_disp=r["form_val_disp"],
            form_unit_disp=r["form_unit_disp"],
            prod_strength=r["prod_strength"],
            doses_per_24_hrs=float(r["doses_per_24_hrs"]) if r["doses_per_24_hrs"] else None,
            drug_type=r["drug_type"],
            prn=r["prn"] == "1",
        )
        for r in _read_csv("drugs.csv")
    }
    micro_tests = {
        r["kind"]: MicroTest(
            r["kind"],
            int(r["spec_itemid"]),
            r["spec_type_desc"],
            int(r["test_itemid"]),
            r["test_name"],
            r["negative_comment"],
        )
        for r in _read_csv("micro_specimens.csv")
    }
    organisms = tuple(
        Organism(
            int(r["org_itemid"]),
            r["org_name"],
            r["panel"],
            {k: float(v) for k, v in (kv.split(":") for kv in r["source_weights"].split())},
        )
        for r in _read_csv("micro_organisms.csv")
    )
    antibiotics = tuple(
        Antibiotic(
            int(r["ab_itemid"]),
            r["ab_name"],
            tuple(r["panels"].split()),
            float(r["s_mic"]),
            float(r["r_mic"]),
            float(r["resistance_rate"]),
        )
        for r in _read_csv("micro_antibiotics.csv")
    )
    pairs: dict[str, list[tuple[str | None, float]]] = {}
    for r in _read_csv("categoricals.csv"):
        pairs.setdefault(r["field"], []).append((_opt(r["value"]), float(r["weight"])))
    d_items = tuple(_read_csv("d_items.csv"))
    return Vocab(
        diagnoses=dx,
        procedures=px,
        labs=labs,
        d_items=d_items,
        drugs=drugs,
        micro_tests=micro_tests,
        organisms=organisms,
        antibiotics=antibiotics,
        categoricals={k: Weighted.of(v) for k, v in pairs.items()},
        careunits={r["careunit"]: r["kind"] for r in _read_csv("careunits.csv")},
        services={r["service"]: r["description"] for r in _read_csv("services.csv")},
        dx_by_group=_grouped(dx),
        px_by_group=_grouped(px),
        px_by_code={(c.code, c.version): c for c in px},
        items_by_id={int(r["itemid"]): r for r in d_items},
    )


# --------------------------------------------------------------------------- clinical model

MICU = "Medical Intensive Care Unit (MICU)"
MSICU = "Medical/Surgical Intensive Care Unit (MICU/SICU)"
SICU = "Surgical Intensive Care Unit (SICU)"
CVICU = "Cardiac Vascular Intensive Care Unit (CVICU)"
CCU = "Coronary Care Unit (CCU)"
TSICU = "Trauma SICU (TSICU)"
NSICU = "Neuro Surgical Intensive Care Unit (Neuro SICU)"
NINT = "Neuro Intermediate"
NSTEP = "Neuro Stepdown"
ED_UNIT = "Emergency Department"


@dataclass(frozen=True)
class Scenario:
    """The reason for one admission, and what it implies."""

    name: str
    weight: float
    dx: tuple[str, ...]  # diagnosis groups always coded; "a|b" = one of them; the first is principal
    dx_optional: tuple[tuple[str, float], ...] = ()
    states: tuple[tuple[str, float, float], ...] = ()  # (state, probability, severity)
    kind: str = "emergency"  # emergency | elective | observation
    service: str = "MED"
    wards: tuple[str, ...] = ("Medicine", "Med/Surg")
    icu_p: float = 0.0
    icu_units: tuple[str, ...] = (MICU, MSICU)
    icu_los: float = 2.0  # median ICU days
    vent_p: float = 0.0  # given ICU
    los: float = 4.0  # median hospital days
    death_p: float = 0.02
    surgery: str | None = None  # procedure group(s) of the main operation, "a|b" = one of them
    procedures: tuple[tuple[str, float], ...] = ()
    drugs: tuple[tuple[str, float], ...] = ()
    micro: tuple[tuple[str, float, float], ...] = ()  # (test kind, probability, P(positive))
    labs: tuple[str, ...] = ()  # extra lab panels drawn at admission
    requires: str | None = None
    boost: tuple[tuple[str, float], ...] = ()
    shock_dx: str = "shock"


_ABX_SEPSIS = (("vancomycin", 0.9), ("pip_tazo", 0.6), ("cefepime", 0.3), ("meropenem", 0.12))
_CARDIAC_SURGERY_DRUGS = (
    ("cefazolin", 1.0),
    ("aspirin", 1.0),
    ("atorvastatin", 0.9),
    ("metoprolol_t", 0.9),
    ("furosemide", 0.7),
    ("insulin_ss", 0.6),
    ("kcl_iv", 0.8),
    ("magnesium_iv", 0.7),
    ("oxycodone", 0.9),
    ("acetaminophen", 1.0),
    ("amiodarone", 0.25),
    ("fentanyl_push", 0.8),
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "sepsis",
        11,
        dx=("sepsis",),
        dx_optional=(("severe_sepsis", 0.6), ("bacteremia", 0.1), ("uti", 0.4), ("pneumonia", 0.35)),
        states=(("infection", 1.0, 1.0), ("shock", 0.35, 1.0), ("aki", 0.45, 0.8)),
        icu_p=0.55,
        vent_p=0.3,
        icu_los=2.5,
        los=6.5,
        death_p=0.12,
        procedures=(("central_line", 0.15),),
        drugs=(*_ABX_SEPSIS, ("metronidazole", 0.2), ("ns_bolus", 0.9), ("lr_bolus", 0.3)),
        micro=(("blood", 1.0, 0.35), ("urine", 0.8, 0.45), ("sputum", 0.3, 0.4), ("cdiff", 0.1, 0.15)),
        labs=("lactate", "coag", "lft", "ua", "inflammation"),
        shock_dx="septic_shock",
    ),
    Scenario(
        "pneumonia",
        9,
        dx=("pneumonia",),
        dx_optional=(("influenza", 0.08), ("hypoxemia", 0.25), ("dyspnea", 0.1)),
        states=(("infection", 1.0, 0.7), ("resp", 0.6, 0.8), ("shock", 0.06, 0.8)),
        icu_p=0.2,
        vent_p=0.4,
        los=5,
        death_p=0.06,
        procedures=(("thoracentesis", 0.08), ("bronchoscopy", 0.03)),
        drugs=(
            ("ceftriaxone", 0.7),
            ("azithromycin", 0.6),
            ("levofloxacin", 0.25),
            ("vancomycin", 0.3),
            ("pip_tazo", 0.25),
            ("guaifenesin", 0.4),
            ("albuterol_neb", 0.5),
            ("oseltamivir", 0.08),
        ),
        micro=(
            ("blood", 0.8, 0.12),
            ("sputum", 0.7, 0.45),
            ("sputum_gram", 0.5, 0.0),
            ("viral", 0.35, 0.15),
        ),
        labs=("lactate", "inflammation"),
        boost=(("copd", 1.5),),
    ),
    Scenario(
        "heart_failure",
        9,
        dx=("hf_acute",),
        dx_optional=(("fluid_overload", 0.2), ("hyponatremia", 0.15), ("dyspnea", 0.1)),
        states=(("hf", 1.0, 1.0), ("aki", 0.3, 0.5), ("resp", 0.3, 0.5)),
        service="CMED",
        wards=("Medicine/Cardiology", "Medicine/Cardiology Intermediate"),
        icu_p=0.18,
        icu_units=(CCU, CCU, MICU),
        vent_p=0.15,
        los=5,
        death_p=0.05,
        procedures=(("echo", 0.5), ("cardiac_cath", 0.1)),
        drugs=(
            ("furosemide", 0.95),
            ("bumetanide", 0.15),
            ("metolazone", 0.1),
            ("metoprolol_s", 0.5),
            ("carvedilol", 0.3),
            ("lisinopril", 0.4),
            ("spironolactone", 0.35),
            ("kcl_po", 0.6),
        ),
        labs=("bnp", "cardiac"),
        boost=(("hf", 4.0),),
    ),
    Scenario(
        "myocardial_infarction",
        6,
        dx=("ami", "cad"),
        dx_optional=(("arrhythmia", 0.1),),
        states=(("mi", 1.0, 1.0), ("hf", 0.2, 0.6), ("shock", 0.06, 1.0)),
        service="CMED",
        wards=("Medicine/Cardiology", "Medicine/Cardiology Intermediate"),
        icu_p=0.45,
        icu_units=(CCU, CCU, CCU, CVICU),
        vent_p=0.1,
        los=4,
        death_p=0.06,
        procedures=(("cardiac_cath", 0.9), ("pci", 0.65), ("echo", 0.5)),
        drugs=(
            ("aspirin325", 0.9),
            ("aspirin", 1.0),
            ("clopidogrel", 0.5),
            ("ticagrelor", 0.35),
            ("atorvastatin80", 0.9),
            ("heparin_drip", 0.7),
            ("metoprolol_t", 0.85),
            ("ntg_sl", 0.4),
            ("ntg_drip", 0.2),
            ("eptifibatide", 0.1),
            ("lisinopril", 0.5),
        ),
        labs=("cardiac", "lipids", "a1c", "coag"),
        boost=(("cad", 2.0),),
        shock_dx="shock",
    ),
    Scenario(
        "chest_pain",
        6,
        dx=("chest_pain",),
        dx_optional=(("unstable_angina", 0.1),),
        kind="observation",
        service="CMED",
        wards=("Observation", "Medicine/Cardiology", "Emergency Department Observation"),
        los=1.0,
        death_p=0.001,
        procedures=(("echo", 0.1),),
        drugs=(("aspirin", 0.8), ("ntg_sl", 0.3), ("atorvastatin", 0.3)),
        labs=("cardiac",),
    ),
    Scenario(
        "syncope",
        3,
        dx=("syncope",),
        dx_optional=(("dehydration", 0.3), ("dizziness", 0.2), ("hypotension", 0.15)),
        kind="observation",
        wards=("Observation", "Medicine"),
        los=1.5,
        death_p=0.002,
        procedures=(("echo", 0.2),),
        drugs=(("ns_bolus", 0.5),),
        labs=("cardiac",),
    ),
    Scenario(
        "ischemic_stroke",
        5,
        dx=("stroke",),
        dx_optional=(("aphasia", 0.35), ("hemiplegia", 0.4)),
        states=(("stroke", 1.0, 1.0),),
        service="NMED",
        wards=("Neurology",),
        icu_p=0.3,
        icu_units=(NSICU, NINT, NSTEP),
        vent_p=0.1,
        los=5,
        death_p=0.08,
        procedures=(("ct_head", 0.6), ("thrombolysis", 0.08), ("thrombectomy", 0.1), ("echo", 0.3)),
        drugs=(
            ("aspirin", 0.9),
            ("atorvastatin80", 0.8),
            ("labetalol", 0.3),
            ("alteplase", 0.08),
            ("clopidogrel", 0.2),
        ),
        labs=("lipids", "a1c", "coag"),
        boost=(("afib", 1.5), ("htn", 1.3)),
    ),
    Scenario(
        "intracranial_hemorrhage",
        1.5,
        dx=("ich",),
        dx_optional=(("cerebral_edema", 0.3), ("hemiplegia", 0.3), ("seizure", 0.1)),
        states=(("stroke", 1.0, 1.3),),
        service="NMED",
        wards=("Neurology",),
        icu_p=0.85,
        icu_units=(NSICU,),
        icu_los=3.0,
        vent_p=0.3,
        los=7,
        death_p=0.2,
        procedures=(("ct_head", 0.7), ("evd", 0.2), ("craniotomy", 0.1)),
        drugs=(
            ("nicardipine", 0.6),
            ("labetalol", 0.5),
            ("levetiracetam", 0.5),
            ("nimodipine", 0.15),
            ("mannitol", 0.1),
        ),
        labs=("coag",),
    ),
    Scenario(
        "acute_kidney_injury",
        4,
        dx=("aki",),
        dx_optional=(("hyperkalemia", 0.3), ("acidosis", 0.3), ("dehydration", 0.4)),
        states=(("aki", 1.0, 1.2),),
        icu_p=0.12,
        los=5,
        death_p=0.04,
        procedures=(("hemodialysis", 0.12), ("dialysis_cath", 0.1)),
        drugs=(("ns_bolus", 0.6), ("kayexalate", 0.15), ("bicarb_iv", 0.1)),
        labs=("ua", "urine_chem"),
        boost=(("ckd", 2.0),),
    ),
    Scenario(
        "gi_bleed",
        5,
        dx=("gi_bleed",),
        dx_optional=(("blood_loss_anemia", 0.6),),
        states=(("bleed", 1.0, 1.0),),
        icu_p=0.35,
        vent_p=0.05,
        los=4,
        death_p=0.05,
        procedures=(("egd", 0.85), ("endo_hemostasis", 0.3), ("colonoscopy", 0.3), ("transfusion_rbc", 0.75)),
        drugs=(("pantoprazole_iv", 1.0), ("sucralfate", 0.2), ("octreotide", 0.1)),
        labs=("coag",),
        boost=(("liver", 2.0),),
    ),
    Scenario(
        "copd_exacerbation",
        1.5,
        dx=("copd_exac",),
        dx_optional=(("hypoxemia", 0.3),),
        states=(("resp", 1.0, 0.8), ("infection", 0.3, 0.4)),
        icu_p=0.15,
        vent_p=0.25,
        los=4,
        death_p=0.03,
        procedures=(("niv", 0.15),),
        drugs=(
            ("prednisone", 0.6),
            ("methylpred", 0.4),
            ("duoneb", 1.0),
            ("albuterol_neb", 0.8),
            ("azithromycin", 0.6),
            ("levofloxacin", 0.2),
        ),
        boost=(("copd", 8.0),),
    ),
    Scenario(
        "diabetic_ketoacidosis",
        2.5,
        dx=("dka",),
        dx_optional=(("dehydration", 0.4), ("hypokalemia", 0.2)),
        states=(("dka", 1.0, 1.0),),
        icu_p=0.6,
        icu_los=1.5,
        los=3,
        death_p=0.01,
        drugs=(
            ("insulin_drip", 0.9),
            ("kcl_iv", 0.8),
            ("ns_bolus", 1.0),
            ("d5_half", 0.5),
            ("glargine", 0.8),
        ),
        labs=("ua", "a1c"),
        requires="diabetes",
        boost=(("type1", 3.0),),
    ),
    Scenario(
        "elective_cabg",
        2,
        dx=("cad",),
        dx_optional=(("unstable_angina", 0.2), ("old_mi", 0.3)),
        states=(("postop", 1.0, 0.8),),
        kind="elective",
        service="CSURG",
        wards=("Cardiac Surgery", "Cardiology Surgery Intermediate"),
        icu_p=1.0,
        icu_units=(CVICU,),
        icu_los=2.0,
        vent_p=1.0,
        los=7,
        death_p=0.02,
        surgery="cabg",
        procedures=(("bypass_pump", 1.0), ("vein_harvest", 0.5), ("tee", 0.5), ("transfusion_rbc", 0.3)),
        drugs=_CARDIAC_SURGERY_DRUGS,
        labs=("coag", "a1c"),
        boost=(("cad", 3.0),),
    ),
    Scenario(
        "valve_replacement",
        1,
        dx=("valve",),
        states=(("postop", 1.0, 0.8),),
        kind="elective",
        service="CSURG",
        wards=("Cardiac Surgery", "Cardiology Surgery Intermediate"),
        icu_p=1.0,
        icu_units=(CVICU,),
        vent_p=0.9,
        los=6,
        death_p=0.03,
        surgery="avr",
        procedures=(("bypass_pump", 0.7), ("tee", 0.6), ("transfusion_rbc", 0.3)),
        drugs=_CARDIAC_SURGERY_DRUGS,
        labs=("coag",),
    ),
    Scenario(
        "joint_replacement",
        4,
        dx=("osteoarthritis",),
        states=(("postop", 1.0, 0.5),),
        kind="elective",
        service="ORTHO",
        wards=("Med/Surg", "Med/Surg/Trauma"),
        icu_p=0.02,
        icu_units=(SICU,),
        los=2.5,
        death_p=0.001,
        surgery="hip_replacement|knee_replacement",
        drugs=(
            ("cefazolin", 1.0),
            ("oxycodone", 1.0),
            ("acetaminophen", 1.0),
            ("enoxaparin_ppx", 0.6),
            ("ondansetron", 0.6),
            ("ketorolac", 0.3),
            ("tramadol", 0.3),
        ),
    ),
    Scenario(
        "hip_fracture",
        3,
        dx=("hip_fracture", "fall"),
        dx_optional=(("fall_place", 0.9), ("osteoporosis", 0.4)),
        states=(("trauma", 1.0, 0.6), ("postop", 1.0, 0.6)),
        service="ORTHO",
        wards=("Med/Surg/Trauma", "Surgery/Trauma"),
        icu_p=0.08,
        icu_units=(TSICU, SICU),
        los=5,
        death_p=0.03,
        surgery="hip_fixation|hip_replacement",
        drugs=(
            ("cefazolin", 1.0),
            ("oxycodone", 0.9),
            ("hydromorphone", 0.5),
            ("enoxaparin_ppx", 0.8),
            ("acetaminophen", 1.0),
            ("calcium_carbonate", 0.3),
            ("vitd", 0.3),
        ),
        labs=("coag",),
    ),
    Scenario(
        "trauma_head_injury",
        2,
        dx=("head_injury", "fall"),
        dx_optional=(("rib_fracture", 0.4), ("fall_place", 0.5)),
        states=(("trauma", 1.0, 1.0), ("bleed", 0.25, 0.7), ("stroke", 0.3, 0.7)),
        service="TRAUM",
        wards=("Surgery/Trauma", "Med/Surg/Trauma"),
        icu_p=0.6,
        icu_units=(TSICU,),
        vent_p=0.3,
        los=6,
        death_p=0.08,
        procedures=(("ct_head", 0.8), ("chest_tube", 0.15), ("craniotomy", 0.08), ("transfusion_rbc", 0.25)),
        drugs=(
            ("levetiracetam", 0.4),
            ("tdap", 0.5),
            ("hydromorphone", 0.6),
            ("oxycodone", 0.7),
            ("txa", 0.1),
        ),
        labs=("coag",),
    ),
    Scenario(
        "abdominal_surgery",
        4,
        dx=("cholecystitis|appendicitis|diverticulitis|bowel_obstruction",),
        dx_optional=(("abd_pain", 0.3), ("nausea", 0.3)),
        states=(("infection", 0.5, 0.5), ("postop", 1.0, 0.7)),
        service="SURG",
        wards=("Med/Surg", "Med/Surg/GYN"),
        icu_p=0.12,
        icu_units=(SICU,),
        vent_p=0.3,
        los=4,
        death_p=0.01,
        surgery="by_dx",
        drugs=(
            ("cefazolin", 0.5),
            ("amp_sulb", 0.4),
            ("pip_tazo", 0.3),
            ("metronidazole", 0.4),
            ("ceftriaxone", 0.3),
            ("oxycodone", 0.8),
            ("hydromorphone", 0.8),
            ("ondansetron", 0.8),
            ("enoxaparin_ppx", 0.6),
        ),
        micro=(("wound", 0.15, 0.6), ("peritoneal", 0.1, 0.5)),
        labs=("lft", "pancreas"),
    ),
    Scenario(
        "pancreatitis",
        2,
        dx=("pancreatitis",),
        dx_optional=(("nausea", 0.3),),
        states=(("pancreatitis", 1.0, 1.0), ("infection", 0.1, 0.5)),
        icu_p=0.15,
        los=5,
        death_p=0.03,
        procedures=(("ercp", 0.2), ("us_abdomen", 0.3)),
        drugs=(("hydromorphone", 0.9), ("lr_bolus", 0.9), ("ondansetron", 0.9)),
        labs=("pancreas", "lft", "lipids"),
        boost=(("alcohol", 3.0),),
    ),
    Scenario(
        "alcohol_withdrawal",
        2,
        dx=("alcohol_withdrawal",),
        dx_optional=(("hypomagnesemia", 0.3), ("hypokalemia", 0.3), ("thrombocytopenia", 0.2)),
        states=(("alcohol", 1.0, 1.0),),
        icu_p=0.25,
        vent_p=0.08,
        los=4,
        death_p=0.01,
        drugs=(
            ("lorazepam", 0.9),
            ("diazepam", 0.5),
            ("thiamine", 1.0),
            ("folic_acid", 1.0),
            ("multivitamin", 1.0),
            ("magnesium_iv", 0.5),
            ("haloperidol", 0.15),
        ),
        labs=("lft",),
        requires="alcohol",
    ),
    Scenario(
        "decompensated_cirrhosis",
        2,
        dx=("cirrhosis",),
        dx_optional=(
            ("ascites", 0.7),
            ("hepatic_enceph", 0.5),
            ("portal_htn", 0.5),
            ("hyponatremia", 0.3),
            ("thrombocytopenia", 0.5),
            ("coagulopathy", 0.3),
        ),
        states=(("hyponatremia", 0.3, 0.7), ("infection", 0.2, 0.6)),
        wards=("Transplant", "Medicine"),
        icu_p=0.15,
        los=6,
        death_p=0.07,
        procedures=(("paracentesis", 0.7), ("egd", 0.2), ("varices_banding", 0.1)),
        drugs=(
            ("lactulose", 0.9),
            ("rifaximin", 0.7),
            ("spironolactone", 0.5),
            ("furosemide_po", 0.5),
            ("albumin25", 0.5),
            ("ceftriaxone", 0.2),
            ("nadolol", 0.3),
        ),
        micro=(("peritoneal", 0.5, 0.1),),
        labs=("lft", "coag"),
        requires="liver",
    ),
    Scenario(
        "oncology",
        3,
        dx=("cancer",),
        dx_optional=(("chemo", 0.5), ("neutropenia", 0.4), ("metastasis", 0.3)),
        states=(("chemo", 0.6, 1.0), ("infection", 0.35, 0.6)),
        service="OMED",
        wards=("Hematology/Oncology", "Hematology/Oncology Intermediate"),
        icu_p=0.07,
        los=6,
        death_p=0.07,
        procedures=(
            ("chemo_infusion", 0.5),
            ("thoracentesis", 0.08),
            ("bone_marrow_biopsy", 0.1),
            ("transfusion_rbc", 0.3),
            ("transfusion_plt", 0.15),
        ),
        drugs=(
            ("cefepime", 0.4),
            ("filgrastim", 0.3),
            ("ondansetron", 0.9),
            ("prochlorperazine", 0.4),
            ("allopurinol", 0.3),
            ("cytarabine", 0.15),
            ("rituximab", 0.15),
            ("carboplatin", 0.15),
            ("paclitaxel", 0.15),
            ("acyclovir", 0.2),
            ("fluconazole", 0.2),
            ("morphine_sr", 0.3),
            ("oxycodone", 0.6),
        ),
        micro=(("blood", 0.5, 0.15), ("urine", 0.3, 0.2)),
        requires="cancer",
        boost=(("cancer", 2.0),),
    ),
    Scenario(
        "cellulitis",
        3,
        dx=("cellulitis",),
        states=(("infection", 1.0, 0.4),),
        los=4,
        death_p=0.003,
        procedures=(("debridement", 0.1),),
        drugs=(
            ("vancomycin", 0.7),
            ("cefazolin", 0.5),
            ("cephalexin", 0.4),
            ("clindamycin", 0.2),
            ("smx_tmp", 0.3),
            ("doxycycline", 0.2),
        ),
        micro=(("blood", 0.5, 0.05), ("wound", 0.3, 0.6)),
    ),
    Scenario(
        "urinary_tract_infection",
        3,
        dx=("uti",),
        states=(("infection", 1.0, 0.5),),
        los=3,
        death_p=0.005,
        drugs=(("ceftriaxone", 0.8), ("ciprofloxacin", 0.3), ("nitrofurantoin", 0.2)),
        micro=(("urine", 1.0, 0.7), ("blood", 0.5, 0.1)),
        labs=("ua",),
    ),
    Scenario(
        "pulmonary_embolism",
        2,
        dx=("pe",),
        dx_optional=(("dvt", 0.4),),
        states=(("resp", 0.5, 0.5),),
        icu_p=0.12,
        los=4,
        death_p=0.03,
        procedures=(("ct_chest", 0.6), ("thrombolysis", 0.03)),
        drugs=(("heparin_drip", 0.8), ("enoxaparin_tx", 0.3), ("apixaban", 0.6), ("warfarin", 0.2)),
        labs=("cardiac", "coag", "dic"),
    ),
    Scenario(
        "atrial_fibrillation",
        3,
        dx=("afib",),
        service="CMED",
        wards=("Medicine/Cardiology",),
        icu_p=0.08,
        icu_units=(CCU,),
        los=3,
        death_p=0.01,
        procedures=(("cardioversion", 0.15), ("tee", 0.1), ("echo", 0.4)),
        drugs=(
            ("diltiazem", 0.6),
            ("diltiazem_iv", 0.5),
            ("metoprolol_t", 0.7),
            ("metoprolol_iv", 0.4),
            ("apixaban", 0.6),
            ("heparin_drip", 0.3),
            ("amiodarone", 0.15),
        ),
        labs=("coag", "thyroid"),
        boost=(("afib", 3.0),),
    ),
    Scenario(
        "respiratory_failure",
        2,
        dx=("resp_failure",),
        dx_optional=(("ards", 0.3), ("pneumonia", 0.5)),
        states=(("resp", 1.0, 1.3), ("infection", 0.5, 0.6), ("shock", 0.2, 0.8)),
        icu_p=1.0,
        icu_los=4.0,
        vent_p=0.85,
        los=9,
        death_p=0.25,
        procedures=(("bronchoscopy", 0.15), ("tracheostomy", 0.12), ("peg", 0.1)),
        drugs=(("methylpred", 0.3), ("cisatracurium", 0.15), ("vancomycin", 0.5), ("cefepime", 0.4)),
        micro=(("blood", 0.8, 0.15), ("bal", 0.4, 0.4), ("sputum", 0.5, 0.4)),
        labs=("lactate", "coag", "lft"),
    ),
    Scenario(
        "cardiac_arrest",
        0.6,
        dx=("cardiac_arrest",),
        dx_optional=(("aki", 0.4), ("encephalopathy", 0.5)),
        states=(("shock", 1.0, 1.2), ("resp", 1.0, 1.0), ("coma", 0.8, 1.2), ("aki", 0.4, 0.8)),
        service="CMED",
        icu_p=1.0,
        icu_units=(CCU, MICU),
        icu_los=3.0,
        vent_p=1.0,
        los=6,
        death_p=0.45,
        procedures=(("cpr", 0.7), ("cardioversion", 0.3), ("cardiac_cath", 0.2)),
        labs=("lactate", "cardiac", "coag"),
    ),
    Scenario(
        "overdose",
        1,
        dx=("overdose",),
        dx_optional=(("opioid", 0.4), ("suicidal", 0.3), ("depression", 0.3)),
        states=(("resp", 0.5, 0.8), ("coma", 0.6, 0.8)),
        icu_p=0.45,
        icu_los=1.2,
        vent_p=0.35,
        los=2.5,
        death_p=0.03,
        drugs=(("naloxone", 0.6), ("nac", 0.3)),
        labs=("tox",),
    ),
    Scenario(
        "hyponatremia",
        1.5,
        dx=("hyponatremia",),
        dx_optional=(("dehydration", 0.4), ("hypokalemia", 0.3)),
        states=(("hyponatremia", 1.0, 1.0),),
        los=4,
        death_p=0.01,
        drugs=(("nacl_tabs", 0.5), ("ns_bolus", 0.5)),
        labs=("osm", "urine_chem"),
    ),
    Scenario(
        "altered_mental_status",
        2,
        dx=("encephalopathy|ams|delirium",),
        dx_optional=(("uti", 0.3), ("dehydration", 0.3)),
        states=(("coma", 0.4, 0.5),),
        los=5,
        death_p=0.04,
        procedures=(("lumbar_puncture", 0.15), ("ct_head", 0.4)),
        drugs=(("haloperidol", 0.4), ("quetiapine", 0.4)),
        labs=("ua", "tox", "thyroid"),
        boost=(("dementia", 3.0),),
    ),
    Scenario(
        "psychiatric",
        1,
        dx=("depression|bipolar|schizophrenia",),
        dx_optional=(("suicidal", 0.5),),
        service="PSYCH",
        wards=("Psychiatry",),
        los=6,
        death_p=0.0,
        drugs=(("sertraline", 0.3), ("olanzapine", 0.4), ("lithium", 0.15), ("risperidone", 0.2)),
        labs=("tox",),
        boost=(("depression", 3.0),),
    ),
    Scenario(
        "vascular_surgery",
        1,
        dx=("pvd|carotid",),
        states=(("postop", 1.0, 0.6),),
        kind="elective",
        service="VSURG",
        wards=("Vascular",),
        icu_p=0.3,
        icu_units=(CVICU, SICU),
        los=4,
        death_p=0.02,
        surgery="by_dx",
        drugs=(("cefazolin", 1.0), ("aspirin", 0.9), ("clopidogrel", 0.6), ("oxycodone", 0.8)),
        labs=("coag",),
        boost=(("pvd", 4.0),),
    ),
    Scenario(
        "neurosurgery",
        0.8,
        dx=("head_injury",),
        dx_optional=(("cerebral_edema", 0.3), ("seizure", 0.15)),
        states=(("postop", 1.0, 0.7), ("stroke", 0.5, 0.5)),
        kind="elective",
        service="NSURG",
        wards=("Neurology",),
        icu_p=0.9,
        icu_units=(NSICU,),
        vent_p=0.3,
        los=5,
        death_p=0.03,
        surgery="craniotomy",
        drugs=(("cefazolin", 1.0), ("levetiracetam", 0.8), ("dexamethasone", 0.6), ("oxycodone", 0.8)),
        labs=("coag",),
    ),
)

# Main operation for "surgery='by_dx'" scenarios.
_SURGERY_FOR_DX: dict[str, str] = {
    "cholecystitis": "cholecystectomy",
    "appendicitis": "appendectomy",
    "diverticulitis": "colectomy|ostomy",
    "bowel_obstruction": "adhesiolysis|small_bowel_resection|ex_lap",
    "pvd": "peripheral_bypass|angioplasty|amputation",
    "carotid": "endarterectomy",
}

# Chronic conditions: (name, base probability, added probability per decade over 18).
_CHRONIC: tuple[tuple[str, float, float], ...] = (
    ("htn", 0.12, 0.08),
    ("hyperlipidemia", 0.08, 0.06),
    ("diabetes", 0.05, 0.035),
    ("obesity", 0.22, 0.0),
    ("ckd", 0.0, 0.025),
    ("esrd", 0.005, 0.004),
    ("cad", 0.0, 0.04),
    ("hf", 0.0, 0.028),
    ("afib", 0.0, 0.03),
    ("copd", 0.0, 0.025),
    ("asthma", 0.08, 0.0),
    ("depression", 0.15, 0.0),
    ("anxiety", 0.12, 0.0),
    ("tobacco", 0.2, 0.0),
    ("alcohol", 0.08, 0.0),
    ("cancer", 0.02, 0.022),
    ("liver", 0.025, 0.003),
    ("hypothyroid", 0.03, 0.012),
    ("osa", 0.05, 0.005),
    ("gerd", 0.14, 0.0),
    ("anemia", 0.06, 0.01),
    ("gout", 0.02, 0.003),
    ("pvd", 0.0, 0.012),
    ("vitd", 0.05, 0.0),
)

# Common secondary diagnoses (comorbidities, complications, status codes), with weights.
# fmt: off
_SECONDARY = Weighted.of((
    ("hypokalemia", 8), ("hyponatremia", 5), ("hypomagnesemia", 4), ("hypernatremia", 1),
    ("dehydration", 4), ("constipation", 5), ("nausea", 3), ("diarrhea", 2), ("weakness", 3),
    ("anemia", 8), ("blood_loss_anemia", 1), ("thrombocytopenia", 4), ("coagulopathy", 1),
    ("urinary_retention", 2), ("uti", 3), ("fever", 2), ("hypotension", 3), ("hyperglycemia", 2),
    ("hypoglycemia", 1), ("gerd", 6), ("tobacco", 6), ("obesity", 4), ("vitd", 3), ("back_pain", 2),
    ("osteoarthritis", 2), ("anxiety", 3), ("depression", 3), ("malnutrition", 2),
    ("pressure_ulcer", 1), ("delirium", 1), ("steroid_use", 1), ("dvt_history", 1),
    ("stroke_history", 2), ("cancer_history", 2), ("gtube_status", 0.5), ("mrsa_carrier", 1),
    ("hepatitis_c", 0.5), ("transplant_status", 0.3), ("hiv", 0.3), ("pleural_effusion", 1.5),
    ("abd_pain", 1), ("dyspnea", 1), ("chest_pain", 1), ("headache", 0.5), ("dizziness", 0.5),
    ("osa", 1.5),
))
# fmt: on

# Lab effects of a state with severity s: ("add", m) adds m*s, ("mul", m) multiplies by 1+(m-1)*s.
_LAB_EFFECTS: dict[str, tuple[tuple[int, str, float], ...]] = {
    "infection": (
        (51301, "mul", 1.9),
        (52075, "mul", 2.2),
        (51256, "add", 12),
        (51244, "add", -9),
        (51144, "add", 6),
        (50889, "mul", 9),
        (51288, "mul", 2.5),
        (50813, "mul", 1.5),
        (50924, "mul", 2),
    ),
    "shock": (
        (50813, "add", 4.5),
        (50882, "add", -7),
        (50868, "add", 6),
        (50912, "mul", 1.6),
        (51265, "mul", 0.65),
        (51237, "mul", 1.4),
        (51274, "mul", 1.3),
        (50878, "mul", 3),
        (50861, "mul", 2.5),
        (50818, "add", -4),
    ),
    "aki": (
        (50912, "mul", 3.2),
        (51006, "mul", 2.6),
        (50971, "add", 0.7),
        (50882, "add", -3),
        (50970, "add", 1.5),
    ),
    "ckd": ((50912, "mul", 2.2), (51006, "mul", 1.9), (51222, "add", -1.2), (50970, "add", 0.8)),
    "esrd": (
        (50912, "mul", 6.5),
        (51006, "mul", 3.0),
        (50971, "add", 0.6),
        (51222, "add", -2.0),
        (50970, "add", 2.5),
        (50882, "add", -2),
    ),
    "diabetes": ((50931, "mul", 1.65), (50852, "add", 2.6), (50809, "mul", 1.65), (51613, "mul", 1.5)),
    "dka": (
        (50931, "mul", 4.2),
        (50809, "mul", 4.2),
        (50882, "add", -14),
        (50868, "add", 16),
        (50971, "add", 1.0),
        (51006, "mul", 1.6),
    ),
    "mi": ((51003, "mul", 80), (50911, "mul", 9), (50910, "mul", 4)),
    "hf": ((50963, "mul", 12), (50983, "add", -3), (51003, "mul", 2.5)),
    "resp": ((50818, "add", 14), (50821, "mul", 0.62)),
    "bleed": (
        (51222, "add", -3.8),
        (50811, "add", -3.5),
        (51006, "mul", 1.8),
        (51265, "mul", 0.85),
    ),
    "liver": (
        (50861, "mul", 2.2),
        (50878, "mul", 2.8),
        (50885, "mul", 5),
        (50883, "mul", 6),
        (51237, "mul", 1.6),
        (51274, "mul", 1.5),
        (50862, "add", -1.1),
        (51265, "mul", 0.5),
        (50983, "add", -3),
        (50927, "mul", 3),
    ),
    "pancreatitis": ((50956, "mul", 25), (50867, "mul", 8), (51301, "mul", 1.5), (50893, "add", -0.8)),
    "hyponatremia": ((50983, "add", -15), (50824, "add", -15), (50964, "add", -25)),
    "chemo": ((51301, "mul", 0.15), (52075, "mul", 0.1), (51265, "mul", 0.3), (51222, "add", -2.0)),
    "anemia": ((51222, "add", -2.0), (51250, "add", -7), (50952, "mul", 0.5), (50924, "mul", 0.4)),
    "alcohol": (
        (50878, "mul", 2.2),
        (50861, "mul", 1.4),
        (51250, "add", 7),
        (50927, "mul", 4),
        (50922, "add", 120),
    ),
    "trauma": ((51222, "add", -1.5), (50910, "mul", 5)),
    "postop": ((51222, "add", -1.8), (51301, "mul", 1.3)),
    "cancer": ((51222, "add", -1.2), (50954, "mul", 1.8)),
    "hypothyroid": ((50993, "mul", 4), (50995, "mul", 0.6)),
    "hyperlipidemia": ((50907, "mul", 1.3), (50905, "mul", 1.4), (51000, "mul", 1.6)),
}
_EFFECTS_BY_ITEM: dict[int, tuple[tuple[str, str, float], ...]] = {}
for _state, _effects in _LAB_EFFECTS.items():
    for _itemid, _mode, _mag in _effects:
        _EFFECTS_BY_ITEM[_itemid] = (*_EFFECTS_BY_ITEM.get(_itemid, ()), (_state, _mode, _mag))

# States that resolve during a stay (the others are chronic and constant).
_ACUTE_STATES = frozenset(
    {
        "infection",
        "shock",
        "aki",
        "mi",
        "resp",
        "bleed",
        "dka",
        "pancreatitis",
        "hyponatremia",
        "coma",
        "trauma",
        "postop",
        "stroke",
        "chemo",
    }
)
_CHRONIC_STATE_SEVERITY = {
    "diabetes": 1.0,
    "ckd": 1.0,
    "esrd": 1.0,
    "liver": 1.0,
    "anemia": 0.8,
    "cancer": 1.0,
    "hypothyroid": 0.5,
    "hyperlipidemia": 1.0,
    "alcohol": 0.4,
    "hf": 0.25,
}

# Lab panels: "daily" = every morning, otherwise at admission when asked for.
_DAILY_PANELS = ("bmp", "cbc", "mgphos")

# --------------------------------------------------------------------------- ICU items

# (itemid, value uom) of chart items generated from the vital-sign model.
_HR, _NBPS, _NBPD, _NBPM = 220045, 220179, 220180, 220181
_ABPS, _ABPD, _ABPM = 220050, 220051, 220052
_RR, _SPO2, _TEMPF = 220210, 220277, 223761
_GCS_EYE, _GCS_VERBAL, _GCS_MOTOR = 220739, 223900, 223901

_GCS_EYE_TEXT = {4: "Spontaneously", 3: "To Speech", 2: "To Pain", 1: "No Response"}
_GCS_VERBAL_TEXT = {
    5: "Oriented",
    4: "Confused",
    3: "Inappropriate Words",
    2: "Incomprehensible sounds",
    1: "No Response",
}
_GCS_MOTOR_TEXT = {
    6: "Obeys Commands",
    5: "Localizes Pain",
    4: "Flex-withdraws",
    3: "Abnormal Flexion",
    2: "Abnormal extension",
    1: "No response",
}
_RASS_TEXT = {
    2: "+2 Agitated",
    1: "+1 Restless",
    0: " 0  Alert and calm",
    -1: "-1 Drowsy",
    -2: "-2 Light sedation",
    -3: "-3 Moderate sedation",
    -4: "-4 Deep sedation",
    -5: "-5 Unarousable",
}

# How MIMIC (MetaVision) records each kind of input: item -> (ordercategoryname,
# secondaryordercategoryname, ordercomponenttypedescription, ordercategorydescription, amountuom,
# rateuom, totalamount, totalamountuom). A negative key is the bolus variant of a fluid.
_CRYST = ("02-Fluids (Crystalloids)", "Additive (Crystalloid)", "Main order parameter", "Continuous IV")
_DRIP = ("01-Drips", "02-Fluids (Crystalloids)", "Main order parameter", "Continuous Med")
_ABX = ("08-Antibiotics (IV)", "02-Fluids (Crystalloids)", "Main order parameter", "Drug Push")
_BOLUS = ("05-Med Bolus", None, "Main order parameter", "Drug Push")
_BLOOD = ("07-Blood Products", None, "Main order parameter", "Continuous IV")
_FEED = ("13-Enteral Nutrition", "Additives (EN)", "Main order parameter", "Continuous IV")
# fmt: off
_INPUT_SPEC: dict[int, tuple[str, str | None, str, str, str, str | None, float | None, str | None]] = {
    225158: (*_CRYST, "ml", "mL/hour", 1000, "ml"),           # NaCl 0.9%
    225828: (*_CRYST, "ml", "mL/hour", 1000, "ml"),           # LR
    -225158: ("03-IV Fluid Bolus", None, "Main order parameter", "Bolus", "ml", None, 1000, "ml"),
    -225828: ("03-IV Fluid Bolus", None, "Main order parameter", "Bolus", "ml", None, 1000, "ml"),
    225166: (*_CRYST, "mEq", None, 100, "ml"),                # Potassium Chloride
    222011: (*_CRYST, "grams", None, 50, "ml"),               # Magnesium Sulfate
    221906: (*_DRIP, "mg", "mcg/kg/min", 250, "ml"),          # Norepinephrine
    222315: (*_DRIP, "units", "units/hour", 100, "ml"),       # Vasopressin
    221749: (*_DRIP, "mg", "mcg/kg/min", 250, "ml"),          # Phenylephrine
    222168: (*_DRIP, "mg", "mcg/kg/min", 100, "ml"),          # Propofol
    225942: (*_DRIP, "mg", "mcg/hour", 250, "ml"),            # Fentanyl (Concentrate)
    225150: (*_DRIP, "mcg", "mcg/kg/hour", 100, "ml"),        # Dexmedetomidine
    223258: (*_DRIP, "units", "units/hour", 100, "ml"),       # Insulin - Regular
    225152: (*_DRIP, "units", "units/hour", 500, "ml"),       # Heparin Sodium
    225798: (*_ABX, "dose", None, 250, "ml"),                 # Vancomycin
    225893: (*_ABX, "dose", None, 100, "ml"),                 # Piperacillin/Tazobactam
    225851: (*_ABX, "dose", None, 100, "ml"),                 # Cefepime
    225883: (*_ABX, "dose", None, 100, "ml"),                 # Meropenem
    225855: (*_ABX, "dose", None, 50, "ml"),                  # Ceftriaxone
    225884: (*_ABX, "dose", None, 100, "ml"),                 # Metronidazole
    225850: (*_ABX, "dose", None, 50, "ml"),                  # Cefazolin
    225975: ("11-Prophylaxis (Non IV)", None, "Main order parameter", "Drug Push", "dose", None, None, None),
    225910: ("10-Prophylaxis (IV)", "02-Fluids (Crystalloids)", "Main order parameter", "Drug Push", "dose", None, 10, "ml"),
    223262: ("06-Insulin (Non IV)", None, "Main order parameter", "Drug Push", "units", None, None, None),
    221744: (*_BOLUS, "mcg", None, None, None),               # Fentanyl
    221833: (*_BOLUS, "mg", None, None, None),                # Hydromorphone
    221794: (*_BOLUS, "mg", None, None, None),                # Furosemide
    228315: (*_BOLUS, "mg", None, None, None),                # Acetaminophen-IV
    225168: (*_BLOOD, "ml", "mL/hour", 350, "ml"),            # Packed Red Blood Cells
    225170: (*_BLOOD, "ml", "mL/hour", 250, "ml"),            # Platelets
    220970: (*_BLOOD, "ml", "mL/hour", 250, "ml"),            # Fresh Frozen Plasma
    226452: ("14-Oral/Gastric Intake", None, "Main order parameter", "Bolus", "ml", None, None, "ml"),
    229295: (*_FEED, "ml", "mL/hour", 1000, "ml"),            # Glucerna 1.5 (Full)
    228351: (*_FEED, "ml", "mL/hour", 1000, "ml"),            # Nepro (Full)
    229011: (*_FEED, "ml", "mL/hour", 1000, "ml"),            # Jevity 1.5 (Full)
}
# fmt: on

_IV_ANTIBIOTIC_ITEM = {
    "vancomycin": (225798, 12),
    "pip_tazo": (225893, 8),
    "cefepime": (225851, 12),
    "meropenem": (225883, 8),
    "ceftriaxone": (225855, 24),
    "metronidazole": (225884, 8),
    "cefazolin": (225850, 8),
}

# --------------------------------------------------------------------------- helpers


def _h(hours: float) -> timedelta:
    """A duration in whole seconds (MIMIC timestamps carry no fractions)."""
    return timedelta(seconds=round(hours * 3600))


def _floor_min(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


def _ceil_min(t: datetime) -> datetime:
    f = t.replace(second=0, microsecond=0)
    return f if f == t else f + timedelta(minutes=1)


def _day(t: datetime) -> datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def _fmt(x: float, decimals: int) -> str:
    """A number as MIMIC writes it: fixed decimals, integers without a decimal point."""
    if decimals <= 0:
        return str(round(x))
    return f"{x:.{decimals}f}"


def _num(x: float, decimals: int = 4) -> str:
    """A float rounded to at most ``decimals`` places, trailing zeros removed."""
    s = f"{x:.{decimals}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(sigma * rng.gauss(0.0, 1.0))


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def _one_of(rng: random.Random, spec: str) -> str:
    """``"a|b|c"`` -> one of the alternatives, uniformly."""
    parts = spec.split("|")
    return parts[0] if len(parts) == 1 else rng.choice(parts)


class _CsvGzWriter:
    """One gzip-compressed CSV, written row by row, byte-for-byte reproducible."""

    def __init__(self, path: Path, header: Sequence[str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._part = path.with_name(path.name + ".part")
        self._raw = self._part.open("wb")
        # filename="" and mtime=0: the gzip header carries no name and no time.
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=6, mtime=0)
        self._text = io.TextIOWrapper(self._gz, encoding="utf-8", newline="")
        self._writer = csv.writer(self._text, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
        self._writer.writerow(header)
        self.rows = 0

    def write(self, row: Sequence[Any]) -> None:
        self._writer.writerow(row)
        self.rows += 1

    def close(self, *, keep: bool) -> None:
        self._text.close()
        self._raw.close()
        if keep:
            self._part.replace(self.path)
        else:
            self._part.unlink(missing_ok=True)


class _UniqueIds:
    """Random integer ids, unique within a range (MIMIC ids look random, not sequential)."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.used: set[int] = set()

    def draw(self, rng: random.Random) -> int:
        while True:
            value = rng.randint(self.lo, self.hi)
            if value not in self.used:
                self.used.add(value)
                return value


# --------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class GenerationResult(Mapping[str, int]):
    """Rows written per ``"module/table"``; behaves like that ``dict`` and also carries the horizon.

    ``as_of`` is ``AS_OF`` (every generated time is strictly earlier); ``latest_event`` is the
    latest timestamp or date actually written.
    """

    rows: dict[str, int]
    as_of: datetime
    latest_event: datetime
    out_dir: Path
    seconds: float
    # note/discharge and note/radiology with their truth file (synthetic_notes), when written.
    notes: NotesResult | None = None

    def __getitem__(self, key: str) -> int:
        return self.rows[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return (
            f"GenerationResult(rows={self.rows!r}, as_of={self.as_of!r}, latest_event={self.latest_event!r})"
        )


# --------------------------------------------------------------------------- generation state


@dataclass
class _Patient:
    subject_id: int
    gender: str
    anchor_age: int
    anchor_year: int
    year_group: str
    real_anchor_year: float
    chronic: dict[str, float]
    race: str
    language: str
    marital: str | None
    weight: float
    height: float
    hr0: float
    sbp0: float
    code_pick: dict[str, float] = field(default_factory=dict)
    lab_z: dict[int, float] = field(default_factory=dict)
    poe_seq: int = 0
    emar_seq: int = 0


@dataclass
class _Icu:
    stay_id: int
    units: list[tuple[str, datetime, datetime]]

    @property
    def intime(self) -> datetime:
        return self.units[0][1]

    @property
    def outtime(self) -> datetime:
        return self.units[-1][2]


@dataclass
class _Admission:
    hadm_id: int
    scenario: Scenario
    admittime: datetime
    dischtime: datetime
    ed: tuple[datetime, datetime] | None
    died: bool
    states: dict[str, float]
    segments: list[tuple[str, datetime, datetime]]
    icu: list[_Icu]
    vent: bool
    surgery: str | None
    surgery_time: datetime | None
    dx_choice: dict[str, str]
    age: int
    icd_version: int
    admission_type: str
    admission_location: str
    discharge_location: str | None
    insurance: str
    provider: str
    los_days: float = 0.0
    pressors: bool = False
    drug_keys: list[str] = field(default_factory=list)
    px_groups: list[str] = field(default_factory=list)

    def severity(self, state: str, t: datetime) -> float:
        """Severity of an acute state at time t (decays for survivors, worsens before death)."""
        s0 = self.states.get(state, 0.0)
        if s0 <= 0.0:
            return 0.0
        days = max(0.0, (t - self.admittime).total_seconds() / 86400.0)
        if state == "mi":
            peak = 0.75
            return s0 * (days / peak) * math.exp(1.0 - days / peak) + 0.02
        if self.died:
            return s0 * (0.7 + 0.6 * min(1.0, days / max(self.los_days, 0.5)))
        tau = {"resp": 3.0, "stroke": 6.0, "coma": 2.0, "postop": 2.0, "chemo": 5.0}.get(state, 2.0)
        return s0 * math.exp(-days / tau)


class _Generator:
    def __init__(self, out_dir: Path, patients: int, seed: int, vocab: Vocab) -> None:
        self.out_dir = out_dir
        self.n_patients = patients
        self.seed = seed
        self.v = vocab
        master = random.Random(f"askdb-synthetic:{seed}:master")
        self.subject_ids = sorted(master.sample(range(10_000_000, 20_000_000), patients))
        alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        self.providers = [
            "P" + "".join(master.choice(alphabet) for _ in range(5)) for _ in range(max(60, patients * 3))
        ]
        self.caregivers = sorted(master.sample(range(1, 100_000), max(40, patients * 2)))
        self.hadm_ids = _UniqueIds(20_000_000, 29_999_999)
        self.transfer_ids = _UniqueIds(30_000_000, 39_999_999)  # stay_id is a transfer_id, as in MIMIC
        self.pharmacy_ids = _UniqueIds(1_000_000, 99_999_999)
        self.specimen_ids = _UniqueIds(1_000_000, 99_999_999)
        self.micro_specimen_ids = _UniqueIds(1_000_000, 9_999_999)
        self.order_ids = _UniqueIds(1_000_000, 9_999_999)
        self.labevent_id = 0
        self.microevent_id = 0
        self.latest = datetime(2110, 1, 1)
        self.w: dict[str, _CsvGzWriter] = {}
        self.dx_groups = {g for g, _ in vocab.dx_by_group}
        self.lab_panels: dict[str, list[LabItem]] = {}
        for item in vocab.labs.values():
            self.lab_panels.setdefault(item.panel, []).append(item)

    # ------------------------------------------------------------------ driver

    def run(self, progress: bool) -> dict[str, int]:
        ok = False
        try:
            for name, header in TABLES.items():
                module, table = name.split("/")
                self.w[name] = _CsvGzWriter(self.out_dir / module / f"{table}.csv.gz", header)
            self._dictionaries()
            indices: Iterable[int] = range(self.n_patients)
            if progress:
                from tqdm import tqdm

                indices = tqdm(indices, total=self.n_patients, unit="patient", desc="synthetic")
            for i in indices:
                self._patient(i)
            ok = True
        finally:
            for writer in self.w.values():
                writer.close(keep=ok)
        return {name: writer.rows for name, writer in self.w.items()}

    def _dictionaries(self) -> None:
        seen: set[tuple[str, int]] = set()
        for c in self.v.diagnoses:
            if (c.code, c.version) not in seen:
                seen.add((c.code, c.version))
                self.w["hosp/d_icd_diagnoses"].write((c.code, c.version, c.title))
        seen.clear()
        for c in self.v.procedures:
            if (c.code, c.version) not in seen:
                seen.add((c.code, c.version))
                self.w["hosp/d_icd_procedures"].write((c.code, c.version, c.title))
        for item in self.v.labs.values():
            self.w["hosp/d_labitems"].write((item.itemid, item.label, item.fluid, item.category))
        for row in self.v.d_items:
            self.w["icu/d_items"].write([row[c] or None for c in TABLES["icu/d_items"]])

    def _seen(self, t: datetime) -> None:
        if t > self.latest:
            self.latest = t

    # ------------------------------------------------------------------ patients

    def _patient(self, index: int) -> None:
        rng = random.Random(f"askdb-synthetic:{self.seed}:patient:{index}")
        cat = self.v.categoricals
        gender = "M" if rng.random() < 0.52 else "F"
        age = int(_clip(rng.gauss(62, 17), 18, 95))
        anchor_age = 91 if age > 89 else age
        year_group = cat["anchor_year_group"].pick(rng)
        chronic = self._chronic(rng, age, gender)
        p = _Patient(
            subject_id=self.subject_ids[index],
            gender=gender,
            anchor_age=anchor_age,
            anchor_year=rng.randint(2110, 2200),
            year_group=year_group,
            real_anchor_year=int(year_group[:4]) + rng.random() * 3.0,
            chronic=chronic,
            race=cat["race"].pick(rng),
            language=cat["language"].pick(rng),
            marital=cat["marital_status"].pick(rng),
            weight=_clip(
                rng.gauss(86 if gender == "M" else 72, 17) + (18 if "obesity" in chronic else 0), 40, 200
            ),
            height=_clip(rng.gauss(176 if gender == "M" else 162, 7), 140, 205),
            hr0=rng.gauss(80, 9),
            sbp0=rng.gauss(122, 12) + (12 if "htn" in chronic else 0),
        )
        admissions = self._plan_admissions(rng, p, age)
        # Out-of-hospital death within a year of the last discharge (MIMIC's dod horizon).
        dod: date | None = None
        last = admissions[-1] if admissions else None
        if last is not None and last.died:
            dod = last.dischtime.date()
        elif last is not None:
            p_death = 0.04 + 0.002 * max(0, age - 60) + (0.25 if "cancer" in chronic else 0.0)
            if last.discharge_location == "HOSPICE":
                p_death = 0.85
            if rng.random() < p_death:
                candidate = last.dischtime.date() + timedelta(days=rng.randint(2, 365))
                if candidate < _HISTORY_LIMIT.date():
                    dod = candidate
        self.w["hosp/patients"].write((p.subject_id, gender, p.anchor_age, p.anchor_year, year_group, dod))
        if dod is not None:
            self._seen(datetime.combine(dod, datetime.min.time()))
        for adm in admissions:
            self._admission(rng, p, adm)
        self._outpatient(rng, p, admissions, dod)

    def _chronic(self, rng: random.Random, age: int, gender: str) -> dict[str, float]:
        decades = (age - 18) / 10.0
        out: dict[str, float] = {}
        for name, base, per_decade in _CHRONIC:
            prob = min(0.85, base + per_decade * decades)
            if rng.random() < prob:
                out[name] = _CHRONIC_STATE_SEVERITY.get(name, 1.0)
        if "esrd" in out:
            out.pop("ckd", None)
        if "diabetes" in out and (age < 35 or rng.random() < 0.08):
            out["type1"] = 1.0
            out["diabetes"] = 1.3
        if age >= 70 and rng.random() < 0.12 + 0.01 * (age - 70):
            out["dementia"] = 1.0
        if gender == "M" and age >= 50 and rng.random() < 0.25:
            out["bph"] = 1.0
        if gender == "F" and age >= 60 and rng.random() < 0.25:
            out["osteoporosis"] = 1.0
        return out

    # ------------------------------------------------------------------ admission planning

    def _pick_scenario(self, rng: random.Random, p: _Patient, age: int) -> Scenario:
        weights = []
        for s in SCENARIOS:
            if s.requires and s.requires not in p.chronic:
                weights.append(0.0)
                continue
            w = s.weight
            for cond, factor in s.boost:
                if cond in p.chronic:
                    w *= factor
            if s.name == "joint_replacement" and age < 45:
                w *= 0.2
            if s.name == "hip_fracture":
                w *= 0.3 if age < 60 else 2.0 if age >= 80 else 1.0
            if s.name in ("psychiatric", "overdose", "alcohol_withdrawal") and age >= 70:
                w *= 0.3
            weights.append(w)
        return rng.choices(SCENARIOS, weights=weights)[0]

    def _plan_admissions(self, rng: random.Random, p: _Patient, age: int) -> list[_Admission]:
        n = rng.choices((1, 2, 3, 4, 5, 6, 7, 8, 10, 12), weights=(50, 20, 11, 6, 4, 3, 2, 1.5, 1.5, 1))[0]
        start = datetime(p.anchor_year, 1, 1) + timedelta(days=rng.uniform(0, 500))
        plans: list[_Admission] = []
        t = start
        for _ in range(n):
            adm_age = age + int((t - start).days / 365.25)
            adm = self._plan_admission(rng, p, t, adm_age)
            plans.append(adm)
            if adm.died:
                break
            gap = _lognormal(rng, 110, 1.1)
            if rng.random() < 0.15:
                gap = rng.uniform(2, 30)  # early readmission
            t = adm.dischtime + timedelta(days=gap)
        # Keep the whole history (plus a year of follow-up) before the horizon.
        end = plans[-1].dischtime + timedelta(days=10)
        if end > _HISTORY_LIMIT:
            shift = end - _HISTORY_LIMIT + timedelta(days=rng.randint(1, 400))
            for adm in plans:
                self._shift(adm, -shift)
            p.anchor_year = max(2110, min(p.anchor_year, plans[0].admittime.year))
        for adm in plans:
            adm.icd_version = self._icd_version(p, adm.admittime)
        return plans

    def _icd_version(self, p: _Patient, t: datetime) -> int:
        real = p.real_anchor_year + (t.year - p.anchor_year) + (t.timetuple().tm_yday - 1) / 365.25
        return 10 if real >= 2015.75 else 9

    @staticmethod
    def _shift(adm: _Admission, delta: timedelta) -> None:
        adm.admittime += delta
        adm.dischtime += delta
        if adm.ed:
            adm.ed = (adm.ed[0] + delta, adm.ed[1] + delta)
        adm.segments = [(u, a + delta, b + delta) for u, a, b in adm.segments]
        for stay in adm.icu:
            stay.units = [(u, a + delta, b + delta) for u, a, b in stay.units]
        if adm.surgery_time:
            adm.surgery_time += delta

    def _plan_admission(self, rng: random.Random, p: _Patient, t: datetime, age: int) -> _Admission:
        scn = self._pick_scenario(rng, p, age)
        cat = self.v.categoricals
        states: dict[str, float] = {}
        for state, prob, sev in scn.states:
            if rng.random() < prob:
                states[state] = sev * rng.uniform(0.7, 1.3)
        kind = scn.kind
        day = _day(t)
        if kind == "elective":
            admittime = day + timedelta(hours=rng.choice((5, 6, 6, 7, 7, 8, 10)), minutes=rng.randrange(60))
        else:
            hour = rng.choices(
                range(24),
                weights=[2, 1.5, 1, 1, 1, 1, 1.5, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5, 4.5, 4, 4, 3.5, 3, 2.5],
            )[0]
            admittime = day + timedelta(hours=hour, minutes=rng.randrange(60))
        admission_type = cat[f"admission_type.{kind}"].pick(rng)
        admission_location = cat[f"admission_location.{kind}"].pick(rng)
        ed = None
        if admission_location in ("EMERGENCY ROOM", "WALK-IN/SELF REFERRAL") or (
            kind != "elective" and admission_type in ("EW EMER.", "EU OBSERVATION") and rng.random() < 0.8
        ):
            ed = (admittime - _h(rng.uniform(1.0, 7.0)), admittime + _h(rng.uniform(0.3, 3.5)))
            ed = (_floor_min(ed[0]), _floor_min(ed[1]))
        first_in = ed[1] if ed else admittime

        icu_p = scn.icu_p
        if "shock" in states:
            icu_p = 1.0
        if "resp" in states and states["resp"] > 1.0:
            icu_p = max(icu_p, 0.8)
        icu = rng.random() < icu_p
        vent = icu and rng.random() < (scn.vent_p + (0.25 if "shock" in states else 0.0))
        age_factor = 0.4 + max(0, age - 30) / 45.0
        death_p = scn.death_p * age_factor * (1.7 if icu else 0.9) * (1.5 if "shock" in states else 1.0)
        died = rng.random() < min(0.85, death_p)

        # Durations (days) of the stay before, in and after the ICU.
        surgery_time: datetime | None = None
        segments: list[tuple[str, datetime, datetime]] = []
        stays: list[list[tuple[str, datetime, datetime]]] = []
        wards = scn.wards
        if kind == "observation":
            wards = tuple(w for w in wards if w in self.v.careunits)
        cursor = first_in

        def add(unit: str, hours: float) -> None:
            nonlocal cursor
            end = cursor + _h(max(hours, 0.25)) + timedelta(seconds=rng.randrange(60))
            segments.append((unit, cursor, end))
            cursor = end

        def ward_block(total_hours: float) -> None:
            parts = 1 if total_hours < 30 else rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
            first = rng.choice(wards)
            for i in range(parts):
                unit = first if i == 0 else rng.choice((*wards, first))
                if i > 0 and unit == segments[-1][0] and rng.random() < 0.5:
                    unit = rng.choice(("Med/Surg", "Medicine", *wards))
                add(unit, total_hours / parts)

        surgery = scn.surgery
        dx_choice: dict[str, str] = {}
        for spec in scn.dx:
            if "|" in spec:
                dx_choice[spec] = _one_of(rng, spec)
        if surgery == "by_dx":
            chosen = next(iter(dx_choice.values()))
            surgery = _one_of(rng, _SURGERY_FOR_DX[chosen]) if chosen in _SURGERY_FOR_DX else None
            if chosen == "diverticulitis" and rng.random() < 0.5:
                surgery = None
        elif surgery:
            surgery = _one_of(rng, surgery)

        if kind == "elective" and surgery:
            # Pre-op and theatre are recorded as PACU time, then ICU or ward.
            add("PACU", rng.uniform(3, 7))
            surgery_time = segments[0][1] + _h(rng.uniform(0.5, 2.0))
        elif surgery:
            surgery_time = first_in + _h(rng.uniform(4, 30))
        los = _lognormal(rng, scn.los, 0.68 if kind != "observation" else 0.4)
        los = _clip(los, 0.3, 3.0) if kind == "observation" else _clip(los, 0.5, 75.0)
        if icu:
            icu_days = _clip(_lognormal(rng, scn.icu_los, 0.8), 0.3, 40.0)
            direct = bool(segments) or (ed is not None and rng.random() < 0.65)
            pre = 0.0 if direct else rng.uniform(0.2, 1.5) * 24
            if pre:
                ward_block(pre)
            unit = rng.choice(scn.icu_units)
            start = cursor
            if rng.random() < 0.08 and icu_days > 1.5:
                other = rng.choice([u for u in (MICU, MSICU, SICU, CVICU, CCU) if u != unit])
                add(unit, icu_days * 24 * 0.5)
                add(other, icu_days * 24 * 0.5)
            else:
                add(unit, icu_days * 24)
            stays.append([s for s in segments if s[1] >= start])
            if not (died and rng.random() < 0.85):
                post = max(los * 24 - (cursor - first_in).total_seconds() / 3600, rng.uniform(12, 60))
                if rng.random() < 0.05 and not died:
                    # ICU readmission within the same hospital stay.
                    ward_block(post * 0.5)
                    start = cursor
                    add(rng.choice(scn.icu_units), _clip(_lognormal(rng, 1.5, 0.6), 0.3, 10) * 24)
                    stays.append([s for s in segments if s[1] >= start])
                    ward_block(post * 0.5)
                else:
                    ward_block(post)
        else:
            remaining = los * 24 - (cursor - first_in).total_seconds() / 3600
            ward_block(max(remaining, 4.0))
        if not died and rng.random() < 0.12 and kind != "observation":
            add("Discharge Lounge", rng.uniform(1, 4))
        dischtime = _ceil_min(cursor)
        # A surgery planned after the end (short stays) moves inside the stay.
        if surgery_time and surgery_time >= dischtime:
            surgery_time = first_in + (dischtime - first_in) / 3
        icu_stays = [_Icu(self.transfer_ids.draw(rng), units) for units in stays]

        if died:
            discharge_location: str | None = "DIED"
        elif kind == "observation" and rng.random() < 0.45:
            discharge_location = None
        else:
            discharge_location = cat["discharge_location"].pick(rng)
            if age >= 78 and discharge_location == "HOME" and rng.random() < 0.5:
                discharge_location = rng.choice(("SKILLED NURSING FACILITY", "HOME HEALTH CARE", "REHAB"))
            if "cancer" in p.chronic and rng.random() < 0.08:
                discharge_location = "HOSPICE"
        if age >= 65:
            insurance = "Medicare" if rng.random() < 0.8 else rng.choice(("Other", "Medicaid"))
        else:
            insurance = rng.choices(("Other", "Medicaid", "Medicare"), weights=(65, 27, 8))[0]
        return _Admission(
            hadm_id=self.hadm_ids.draw(rng),
            scenario=scn,
            admittime=admittime,
            dischtime=dischtime,
            ed=ed,
            died=died,
            states=states,
            segments=segments,
            icu=icu_stays,
            vent=vent,
            surgery=surgery,
            surgery_time=surgery_time,
            dx_choice=dx_choice,
            age=age,
            icd_version=9,
            admission_type=admission_type,
            admission_location=admission_location,
            discharge_location=discharge_location,
            insurance=insurance,
            provider=rng.choice(self.providers),
            los_days=(dischtime - admittime).total_seconds() / 86400.0,
            pressors="shock" in states and icu,
        )

    # ------------------------------------------------------------------ one admission

    def _admission(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        self._seen(adm.dischtime)
        self.w["hosp/admissions"].write(
            (
                p.subject_id,
                adm.hadm_id,
                adm.admittime,
                adm.dischtime,
                adm.dischtime if adm.died else None,
                adm.admission_type,
                adm.provider,
                adm.admission_location,
                adm.discharge_location,
                adm.insurance,
                p.language,
                p.marital,
                p.race,
                adm.ed[0] if adm.ed else None,
                adm.ed[1] if adm.ed else None,
                1 if adm.died else 0,
            )
        )
        self._transfers(rng, p, adm)
        self._services(rng, p, adm)
        for stay in adm.icu:
            los = (stay.outtime - stay.intime).total_seconds() / 86400.0
            self.w["icu/icustays"].write(
                (
                    p.subject_id,
                    adm.hadm_id,
                    stay.stay_id,
                    stay.units[0][0],
                    stay.units[-1][0],
                    stay.intime,
                    stay.outtime,
                    repr(los),
                )
            )
        self._diagnoses(rng, p, adm)
        self._procedures(rng, p, adm)
        adm.drug_keys = self._medication_plan(rng, p, adm)
        self._labs_inpatient(rng, p, adm)
        self._medications(rng, p, adm)
        self._micro(rng, p, adm)
        for stay in adm.icu:
            self._icu_stay(rng, p, adm, stay)

    def _transfers(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        w = self.w["hosp/transfers"]
        stay_first = {stay.units[0][1]: stay.stay_id for stay in adm.icu}
        if adm.ed:
            w.write(
                (p.subject_id, adm.hadm_id, self.transfer_ids.draw(rng), "ED", ED_UNIT, adm.ed[0], adm.ed[1])
            )
        for i, (unit, start, end) in enumerate(adm.segments):
            tid = stay_first.get(start) if self.v.careunits.get(unit) == "icu" else None
            if tid is None:
                tid = self.transfer_ids.draw(rng)
            w.write((p.subject_id, adm.hadm_id, tid, "admit" if i == 0 else "transfer", unit, start, end))
        w.write(
            (p.subject_id, adm.hadm_id, self.transfer_ids.draw(rng), "discharge", None, adm.dischtime, None)
        )

    def _services(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        w = self.w["hosp/services"]
        first = adm.scenario.service
        if adm.scenario.name == "overdose" and rng.random() < 0.3:
            first = "PSYCH"
        t0 = adm.admittime + timedelta(seconds=rng.randint(0, 300))
        w.write((p.subject_id, adm.hadm_id, t0, None, first))
        change = {
            "MED": ("CMED", "OMED", "SURG"),
            "CMED": ("CSURG", "MED"),
            "SURG": ("MED",),
            "NMED": ("NSURG", "MED"),
            "ORTHO": ("MED",),
            "TRAUM": ("SURG", "NSURG"),
            "OMED": ("MED",),
        }.get(first)
        span = (adm.dischtime - t0).total_seconds()
        if change and span > 86400 and rng.random() < 0.1:
            t1 = t0 + timedelta(seconds=int(span * rng.uniform(0.2, 0.7)))
            w.write((p.subject_id, adm.hadm_id, t1, first, rng.choice(change)))

    # ------------------------------------------------------------------ coding

    def _code(
        self, rng: random.Random, p: _Patient, group: str, version: int, table: str = "dx"
    ) -> IcdCode | None:
        by_group = self.v.dx_by_group if table == "dx" else self.v.px_by_group
        codes = by_group.get((group, version)) or by_group.get((group, 19 - version))
        if not codes:
            return None
        # A patient keeps the same code for the same chronic group across admissions.
        u = p.code_pick.setdefault(f"{table}:{group}", rng.random())
        # Earlier codes in a group are the common ones.
        return codes[min(len(codes) - 1, int(len(codes) * u * u))]

    def _diagnoses(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        scn = adm.scenario
        groups: list[str] = []
        for spec in scn.dx:
            groups.append(adm.dx_choice.get(spec, spec))
        if "shock" in adm.states:
            groups.append(scn.shock_dx)
        for g, prob in scn.dx_optional:
            if rng.random() < prob:
                groups.append(g)
        st = adm.states
        if "aki" in st:
            groups.append("aki")
        if "resp" in st and (adm.vent or st["resp"] > 0.9):
            groups.append("resp_failure")
        if "bleed" in st and rng.random() < 0.5:
            groups.append("blood_loss_anemia")
        if "hyponatremia" in st:
            groups.append("hyponatremia")
        if ("shock" in st or "dka" in st) and rng.random() < 0.5:
            groups.append("acidosis")
        if adm.icu and adm.age >= 70 and rng.random() < 0.2:
            groups.append(rng.choice(("delirium", "encephalopathy")))
        if adm.vent and rng.random() < 0.05:
            groups.append("vap")
        ch = p.chronic
        chronic_groups: list[tuple[str, float]] = []
        if "htn" in ch:
            chronic_groups.append(
                (
                    "htn_esrd"
                    if "esrd" in ch
                    else "htn_ckd"
                    if "ckd" in ch
                    else "htn_hf"
                    if "hf" in ch
                    else "htn",
                    0.92,
                )
            )
        if "diabetes" in ch:
            kind = (
                "diabetes_t1"
                if "type1" in ch
                else "diabetes_ckd"
                if ("ckd" in ch or "esrd" in ch)
                else "diabetes"
            )
            chronic_groups += [(kind, 0.95), ("insulin_use", 0.5 if "type1" not in ch else 0.95)]
        for cond, group, prob in (
            ("hyperlipidemia", "hyperlipidemia", 0.85),
            ("ckd", "ckd", 0.9),
            ("esrd", "esrd", 0.95),
            ("esrd", "dialysis_status", 0.9),
            ("esrd", "anemia_ckd", 0.5),
            ("cad", "cad", 0.9),
            ("cad", "old_mi", 0.25),
            ("cad", "pci_status", 0.2),
            ("cad", "cabg_status", 0.12),
            ("hf", "hf_chronic", 0.9),
            ("afib", "afib", 0.9),
            ("afib", "anticoag", 0.6),
            ("copd", "copd", 0.9),
            ("asthma", "asthma", 0.8),
            ("obesity", "obesity", 0.6),
            ("depression", "depression", 0.75),
            ("anxiety", "anxiety", 0.6),
            ("tobacco", "tobacco", 0.7),
            ("alcohol", "alcohol", 0.7),
            ("cancer", "cancer", 0.95),
            ("liver", "cirrhosis", 0.9),
            ("liver", "portal_htn", 0.3),
            ("hypothyroid", "hypothyroid", 0.85),
            ("osa", "osa", 0.7),
            ("gerd", "gerd", 0.7),
            ("anemia", "anemia", 0.6),
            ("gout", "gout", 0.6),
            ("pvd", "pvd", 0.7),
            ("vitd", "vitd", 0.5),
            ("dementia", "dementia", 0.9),
            ("bph", "bph", 0.6),
            ("osteoporosis", "osteoporosis", 0.6),
        ):
            if cond in ch:
                chronic_groups.append((group, prob))
        for group, prob in chronic_groups:
            if rng.random() < prob:
                groups.append(group)
        n_extra = rng.choices((0, 1, 2, 3, 4, 5, 6), weights=(8, 15, 20, 20, 15, 12, 10))[0]
        n_extra += 3 if adm.icu else 0
        for _ in range(n_extra):
            groups.append(_SECONDARY.pick(rng))
        if "cad" in ch and rng.random() < 0.5:
            groups.append(rng.choice(("aspirin_use", "antiplatelet_use")))
        if adm.age >= 75 and rng.random() < 0.25:
            groups.append("fall")
        if adm.died:
            if rng.random() < 0.7:
                groups.append("dnr")
            if rng.random() < 0.5:
                groups.append("palliative")
        seen: set[tuple[str, int]] = set()
        seq = 0
        w = self.w["hosp/diagnoses_icd"]
        for g in groups:
            if g not in self.dx_groups:
                continue
            code = self._code(rng, p, g, adm.icd_version)
            if code is None or (code.code, code.version) in seen:
                continue
            seen.add((code.code, code.version))
            seq += 1
            w.write((p.subject_id, adm.hadm_id, seq, code.code, code.version))

    def _procedures(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        scn = adm.scenario
        version = adm.icd_version
        items: list[tuple[IcdCode, date]] = []

        def when() -> date:
            span = (adm.dischtime - adm.admittime).total_seconds()
            return (adm.admittime + timedelta(seconds=int(span * rng.random() * 0.8))).date()

        def add(group: str, day: date | None = None) -> None:
            code = self._code(rng, p, group, version, "px")
            adm.px_groups.append(group)
            if code is not None:
                items.append((code, day or when()))

        def add_code(icd9: str, icd10: str, day: date) -> None:
            code = self.v.px_by_code.get((icd10, 10) if version == 10 else (icd9, 9))
            if code is not None:
                items.append((code, day))

        if adm.surgery:
            sday = (adm.surgery_time or adm.admittime).date()
            add(adm.surgery, sday)
        for group, prob in scn.procedures:
            if rng.random() < prob:
                add(
                    group,
                    adm.surgery_time.date()
                    if adm.surgery_time and group in ("bypass_pump", "vein_harvest", "tee")
                    else None,
                )
        for stay in adm.icu:
            iday = stay.intime.date()
            if adm.vent:
                hours = (stay.outtime - stay.intime).total_seconds() / 3600 * rng.uniform(0.5, 0.95)
                if scn.kind != "elective" and rng.random() < 0.7:
                    add("intubation", iday)
                if version == 10:
                    code10 = "5A1935Z" if hours < 24 else "5A1945Z" if hours <= 96 else "5A1955Z"
                    add_code("", code10, iday)
                else:
                    add_code("9671" if hours < 96 else "9672", "", iday)
            if adm.pressors or rng.random() < 0.12:
                add("central_line", iday)
                if version == 10 and rng.random() < 0.4:
                    add("us_guidance", iday)
            if (adm.vent or adm.pressors or rng.random() < 0.1) and rng.random() < 0.5:
                add("art_line", iday)
        if "bleed" in adm.states and rng.random() < 0.6:
            add("transfusion_rbc")
        if "esrd" in p.chronic and rng.random() < 0.6:
            add("hemodialysis")
        if "aki" in adm.states and adm.icu and adm.states["aki"] > 1.0 and rng.random() < 0.25:
            add("crrt")
        seen: set[tuple[str, int]] = set()
        seq = 0
        w = self.w["hosp/procedures_icd"]
        for code, day in items:
            if (code.code, code.version) in seen:
                continue
            seen.add((code.code, code.version))
            day = _clip_date(day, adm.admittime.date(), adm.dischtime.date())
            seq += 1
            w.write((p.subject_id, adm.hadm_id, seq, day, code.code, code.version))

    # ------------------------------------------------------------------ labs

    def _states_at(self, p: _Patient, adm: _Admission | None, t: datetime) -> dict[str, float]:
        out = {k: v for k, v in p.chronic.items() if k in _CHRONIC_STATE_SEVERITY}
        if "diabetes" in out and "type1" in p.chronic:
            out["diabetes"] = 1.3
        if adm is not None:
            for state in adm.states:
                s = adm.severity(state, t)
                if s > 0.02:
                    out[state] = max(out.get(state, 0.0), s)
        return out

    def _lab_raw(self, rng: random.Random, p: _Patient, item: LabItem, states: dict[str, float]) -> float:
        z = p.lab_z.get(item.itemid)
        if z is None:
            z = p.lab_z[item.itemid] = rng.gauss(0.0, 1.0)
        zz = 0.65 * z + 0.55 * rng.gauss(0.0, 1.0)
        if item.dist == "lognormal":
            v = item.center * math.exp(item.spread * zz)
        else:
            v = item.center + item.spread * zz
        if p.gender == "M":
            if item.itemid in (51222, 50811):
                v += 1.3
            elif item.itemid == 50912:
                v *= 1.2
        for state, mode, mag in _EFFECTS_BY_ITEM.get(item.itemid, ()):
            s = states.get(state)
            if s:
                v = v + mag * s if mode == "add" else v * (1.0 + (mag - 1.0) * s)
        return _clip(v, item.lo, item.hi)

    def _lab_draw(
        self,
        rng: random.Random,
        p: _Patient,
        adm: _Admission | None,
        t: datetime,
        panels: Sequence[str],
        priority: str | None,
        uti: bool = False,
    ) -> None:
        """One blood (or urine) draw at t: one specimen per panel, values consistent across panels."""
        states = self._states_at(p, adm, t)
        ctx: dict[int, float] = {}
        w = self.w["hosp/labevents"]
        hadm_id = adm.hadm_id if adm is not None else None
        provider = rng.choice(self.providers) if adm is None and rng.random() < 0.7 else None
        for panel in panels:
            items = self.lab_panels.get(panel)
            if not items:
                continue
            values = self._panel_values(rng, p, panel, items, states, ctx)
            specimen = self.specimen_ids.draw(rng)
            store = t + timedelta(minutes=rng.randint(25, 150) if panel != "ua" else rng.randint(40, 240))
            self._seen(store)
            for item in items:
                value = values.get(item.itemid)
                if value is None:
                    continue
                self.labevent_id += 1
                if isinstance(value, str):
                    text = value
                    if uti and item.text_values and text == item.text_values[0] and rng.random() < 0.7:
                        text = rng.choice(item.text_values[1:])
                    flag = (
                        "abnormal"
                        if item.panel == "ua"
                        and text != item.text_values[0]
                        and item.itemid not in (51508, 51506)
                        else None
                    )
                    w.write(
                        (
                            self.labevent_id,
                            p.subject_id,
                            hadm_id,
                            specimen,
                            item.itemid,
                            provider,
                            t,
                            store,
                            text,
                            None,
                            item.uom,
                            item.ref_lower,
                            item.ref_upper,
                            flag,
                            priority,
                            None,
                        )
                    )
                    continue
                shown = _fmt(value, item.decimals)
                valuenum: str | None = shown
                if item.itemid == 51003 and value < 0.01:
                    shown, valuenum = "<0.01", "0.01"
                lo, hi = item.ref_range
                num = float(valuenum)
                flag = "abnormal" if (lo is not None and num < lo) or (hi is not None and num > hi) else None
                w.write(
                    (
                        self.labevent_id,
                        p.subject_id,
                        hadm_id,
                        specimen,
                        item.itemid,
                        provider,
                        t,
                        store,
                        shown,
                        valuenum,
                        item.uom,
                        item.ref_lower,
                        item.ref_upper,
                        flag,
                        priority,
                        None,
                    )
                )

    def _panel_values(
        self,
        rng: random.Random,
        p: _Patient,
        panel: str,
        items: Sequence[LabItem],
        states: dict[str, float],
        ctx: dict[int, float],
    ) -> dict[int, float | str]:
        labs = self.v.labs
        out: dict[int, float | str] = {}

        def raw(itemid: int) -> float:
            return self._lab_raw(rng, p, labs[itemid], states)

        if panel == "bmp":
            na, hco3, ag = raw(50983), raw(50882), raw(50868)
            cl = _clip(na - hco3 - ag, 75, 130)
            out.update({50983: na, 50882: hco3, 50868: na - cl - hco3, 50902: cl})
        elif panel == "cbc":
            hgb = raw(51222)
            mchc = raw(51249)
            hct = hgb * 100.0 / mchc
            mcv = raw(51250)
            rbc = hct * 10.0 / mcv
            out.update({51222: hgb, 51249: mchc, 51221: hct, 51250: mcv, 51279: rbc, 51248: hgb * 10.0 / rbc})
        elif panel == "diff":
            neut, lymph, mono, eos, baso = (max(0.0, raw(i)) for i in (51256, 51244, 51254, 51200, 51146))
            rest = lymph + mono + eos + baso
            scale = (100.0 - neut) / rest if rest > 0 else 0.0
            pct = {
                51256: neut,
                51244: lymph * scale,
                51254: mono * scale,
                51200: eos * scale,
                51146: baso * scale,
            }
            out.update(pct)
            wbc = ctx.get(51301) or raw(51301)
            out.update(
                {52075: wbc * pct[51256] / 100, 51133: wbc * pct[51244] / 100, 52074: wbc * pct[51254] / 100}
            )
            out.update({52073: wbc * pct[51200] / 100, 52069: wbc * pct[51146] / 100})
        elif panel == "abg":
            hco3 = ctx.get(50882) or raw(50882)
            pco2 = raw(50818)
            ph = 6.1 + math.log10(hco3 / (0.0307 * pco2))
            out.update({50818: pco2, 50820: _clip(ph, 6.8, 7.7), 50821: raw(50821)})
            out[50802] = _clip(0.93 * (hco3 - 24.4 + 14.8 * (ph - 7.4)), -30, 20)
            out[50804] = hco3 + 0.03 * pco2
            out[50817] = _clip(raw(50817) + (float(out[50821]) - 95) / 20.0, 50, 100)
            out[52033] = "ART." if rng.random() < 0.75 else "VEN."
        for item in items:
            if item.itemid in out:
                continue
            if item.dist == "text":
                out[item.itemid] = rng.choices(item.text_values, weights=item.text_weights)[0]
            else:
                out[item.itemid] = raw(item.itemid)
        for k, v in out.items():
            if isinstance(v, float):
                clipped = _clip(v, labs[k].lo, labs[k].hi)
                out[k] = clipped
                ctx[k] = clipped
        return out

    def _labs_inpatient(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        scn = adm.scenario
        uti = (
            "uti" in adm.dx_choice.values()
            or scn.name in ("urinary_tract_infection",)
            or (scn.name == "sepsis" and rng.random() < 0.4)
        )
        start = (adm.ed[0] if adm.ed else adm.admittime) + _h(rng.uniform(0.2, 1.5))
        start = _floor_min(max(start, adm.admittime + timedelta(minutes=5)))
        end = adm.dischtime
        first = ["bmp", "cbc", "mgphos"]
        if rng.random() < 0.6:
            first.append("diff")
        if rng.random() < 0.5:
            first.append("coag")
        if rng.random() < 0.45:
            first.append("lft")
        first += [x for x in scn.labs if x not in first]
        if "diabetes" in p.chronic and rng.random() < 0.4 and "a1c" not in first:
            first.append("a1c")
        for extra, prob in (
            ("lipids", 0.12),
            ("thyroid", 0.12),
            ("iron", 0.06),
            ("bili", 0.08),
            ("misc", 0.05),
        ):
            if extra not in first and rng.random() < prob:
                first.append(extra)
        if start < end:
            self._lab_draw(rng, p, adm, start, first, "STAT", uti=uti)
        # Serial troponins for chest pain / MI.
        if "cardiac" in first:
            for k in range(1, 3):
                t = start + _h(6 * k + rng.uniform(-0.5, 1))
                if t < end:
                    self._lab_draw(rng, p, adm, _floor_min(t), ["cardiac"], "STAT")
        # Body fluids sampled by a procedure, and occasional smears.
        for group, panel in (
            ("paracentesis", "ascites"),
            ("thoracentesis", "pleural"),
            ("lumbar_puncture", "csf"),
        ):
            if group in adm.px_groups:
                t = _floor_min(start + (end - start) * rng.uniform(0.1, 0.6))
                self._lab_draw(rng, p, adm, t, [panel], "STAT")
        if ("chemo" in adm.states or "anemia" in p.chronic) and rng.random() < 0.3:
            t = _floor_min(start + (end - start) * rng.uniform(0.0, 0.5))
            self._lab_draw(rng, p, adm, t, ["cbc", "smear", "hemolysis"], "ROUTINE")
        icu_spans = [(s.intime, s.outtime) for s in adm.icu]
        # Morning labs every day, extra draws in the ICU.
        day = _day(start) + timedelta(days=1)
        while day < end:
            t = day + timedelta(hours=rng.choice((3, 4, 4, 5, 5, 6)), minutes=rng.randrange(60))
            if t >= end:
                break
            in_icu = any(a <= t <= b for a, b in icu_spans)
            panels = list(_DAILY_PANELS)
            if rng.random() < (0.6 if in_icu else 0.3):
                panels.append("diff")
            if rng.random() < (0.7 if in_icu or "liver" in p.chronic else 0.2):
                panels.append("coag")
            if rng.random() < (0.4 if in_icu else 0.12) or ("liver" in p.chronic and rng.random() < 0.5):
                panels.append("lft")
            if "vancomycin" in adm.drug_keys and rng.random() < 0.2:
                panels.append("drug_level")
            self._lab_draw(rng, p, adm, t, panels, "ROUTINE" if rng.random() < 0.6 else "STAT")
            if in_icu:
                t2 = day + timedelta(hours=rng.randint(14, 18), minutes=rng.randrange(60))
                if t2 < end and rng.random() < 0.6:
                    self._lab_draw(rng, p, adm, t2, ["bmp", "cbc"], "STAT")
            day += timedelta(days=1)
        # Disease-specific serial draws during the first 48 h.
        for stay in adm.icu:
            t = stay.intime + _h(rng.uniform(0.5, 2))
            stop = min(stay.outtime, stay.intime + timedelta(hours=72))
            gap = 4.0 if ("shock" in adm.states or adm.vent) else 8.0
            while t < stop:
                panels = []
                if adm.vent or "resp" in adm.states:
                    panels += ["abg", "bg_chem"]
                    if adm.vent and rng.random() < 0.5:
                        panels.append("vent_gas")
                if "shock" in adm.states or "infection" in adm.states:
                    panels.append("lactate")
                if "bleed" in adm.states:
                    panels.append("cbc")
                if "dka" in adm.states:
                    panels.append("bmp")
                if panels:
                    self._lab_draw(rng, p, adm, _floor_min(t), panels, "STAT")
                t += _h(gap * rng.uniform(0.8, 1.5))

    def _outpatient(
        self, rng: random.Random, p: _Patient, admissions: list[_Admission], dod: date | None
    ) -> None:
        if not admissions:
            return
        lo = admissions[0].admittime - timedelta(days=200)
        hi = min(admissions[-1].dischtime + timedelta(days=300), _HISTORY_LIMIT - timedelta(days=2))
        if dod is not None:
            hi = min(hi, datetime.combine(dod, datetime.min.time()) - timedelta(days=1))
        if hi <= lo:
            return
        span = (hi - lo).total_seconds()
        n = rng.choices((0, 1, 2, 3, 4, 6), weights=(25, 25, 20, 12, 10, 8))[0]
        times = sorted(lo + timedelta(seconds=rng.random() * span) for _ in range(n))
        for t in times:
            t = _day(t) + timedelta(hours=rng.randint(7, 16), minutes=rng.randrange(60))
            if t >= hi or any(
                a.admittime - timedelta(days=1) <= t <= a.dischtime + timedelta(days=1) for a in admissions
            ):
                continue
            panels = ["bmp", "cbc"]
            if "diabetes" in p.chronic:
                panels.append("a1c")
            if rng.random() < 0.3:
                panels.append("lipids")
            if rng.random() < 0.2:
                panels.append("lft")
            if rng.random() < 0.1:
                panels.append("thyroid")
            self._lab_draw(rng, p, None, t, panels, rng.choice(("ROUTINE", None)))
        # An emergency-department visit that did not lead to an admission.
        if rng.random() < 0.2:
            t = lo + timedelta(seconds=rng.random() * span)
            t = _floor_min(t)
            end = t + _h(rng.uniform(2, 9))
            if end < hi and not any(
                a.admittime - timedelta(days=2) <= t <= a.dischtime + timedelta(days=2) for a in admissions
            ):
                w = self.w["hosp/transfers"]
                w.write((p.subject_id, None, self.transfer_ids.draw(rng), "ED", ED_UNIT, t, end))
                w.write((p.subject_id, None, self.transfer_ids.draw(rng), "discharge", None, end, None))
                self._seen(end)

    # ------------------------------------------------------------------ medications

    def _medication_plan(self, rng: random.Random, p: _Patient, adm: _Admission) -> list[str]:
        keys: list[str] = []
        scn = adm.scenario
        ch = p.chronic

        def maybe(key: str, prob: float = 1.0) -> None:
            if key not in keys and key in self.v.drugs and rng.random() < prob:
                keys.append(key)

        def one(options: Sequence[str], prob: float = 1.0) -> None:
            if rng.random() < prob:
                maybe(rng.choice(options))

        bleed = "bleed" in adm.states or scn.name in ("intracranial_hemorrhage",)
        maybe("flush", 0.9)
        if not bleed and "afib" not in ch and scn.kind != "observation":
            one(("heparin_sc", "heparin_sc", "enoxaparin_ppx"), 0.75)
        maybe("acetaminophen", 0.8)
        maybe("docusate", 0.5)
        maybe("senna", 0.5)
        maybe("peg", 0.3)
        maybe("bisacodyl", 0.2)
        maybe("ondansetron", 0.45)
        maybe("kcl_po", 0.25)
        maybe("magnesium_iv", 0.2)
        one(("melatonin", "trazodone"), 0.15)
        if scn.surgery or adm.surgery:
            maybe("oxycodone", 0.85)
        else:
            maybe("oxycodone", 0.2)
        for key, prob in scn.drugs:
            maybe(key, prob)
        # Home medications continued in hospital.
        if "htn" in ch:
            for key in rng.sample(
                ("lisinopril", "amlodipine", "metoprolol_t", "hctz", "losartan"), rng.randint(1, 2)
            ):
                maybe(key, 0.8)
        if "hyperlipidemia" in ch or "cad" in ch:
            one(("atorvastatin", "atorvastatin", "simvastatin", "rosuvastatin", "pravastatin"), 0.85)
            maybe("fenofibrate", 0.08)
            maybe("ezetimibe", 0.06)
        if "diabetes" in ch:
            maybe("insulin_ss", 0.95)
            maybe("glargine", 0.7 if "type1" in ch else 0.35)
            maybe("metformin", 0.15)
        if "cad" in ch:
            maybe("aspirin", 0.9)
            maybe("metoprolol_t", 0.7)
            maybe("isosorbide_mn", 0.15)
        if "hf" in ch:
            one(("furosemide_po", "torsemide"), 0.7)
            one(("metoprolol_s", "carvedilol"), 0.7)
            one(("lisinopril", "sacubitril"), 0.5)
            maybe("spironolactone", 0.3)
        if "afib" in ch and not bleed:
            one(("apixaban", "apixaban", "warfarin", "rivaroxaban"), 0.75)
            one(("metoprolol_t", "diltiazem_er"), 0.7)
        if "copd" in ch:
            one(("duoneb", "albuterol_neb"), 0.8)
            one(("advair", "tiotropium"), 0.6)
        if "asthma" in ch:
            maybe("albuterol_mdi", 0.7)
            maybe("montelukast", 0.3)
        if "depression" in ch:
            one(("sertraline", "citalopram", "escitalopram", "fluoxetine", "bupropion", "mirtazapine"), 0.75)
        if "anxiety" in ch:
            one(("lorazepam_po", "clonazepam", "alprazolam"), 0.5)
        if "hypothyroid" in ch:
            maybe("levothyroxine", 0.95)
        if "gerd" in ch:
            one(("pantoprazole", "omeprazole", "famotidine"), 0.8)
        if "esrd" in ch:
            maybe("sevelamer", 0.8)
            maybe("nephrocaps", 0.7)
            maybe("calcitriol", 0.4)
            maybe("epoetin", 0.4)
        if "dementia" in ch:
            one(("donepezil", "memantine"), 0.7)
        if "bph" in ch:
            one(("tamsulosin", "finasteride"), 0.7)
        if "gout" in ch:
            maybe("allopurinol", 0.7)
        if "osteoporosis" in ch:
            maybe("calcium_carbonate", 0.5)
            maybe("vitd", 0.5)
        if "tobacco" in ch:
            maybe("nicotine", 0.4)
        if "alcohol" in ch:
            maybe("thiamine", 0.7)
            maybe("folic_acid", 0.6)
            maybe("multivitamin", 0.6)
        if "anemia" in ch:
            maybe("ferrous", 0.4)
        if adm.icu:
            maybe("fentanyl_push", 0.4)
            maybe("hydromorphone", 0.3)
            one(("famotidine", "pantoprazole"), 0.6)
            maybe("kcl_iv", 0.5)
            maybe("magnesium_iv", 0.5)
            maybe("calcium_gluconate", 0.2)
            maybe("kphos", 0.12)
            maybe("haloperidol", 0.1)
        if adm.vent:
            maybe("chlorhexidine", 0.9)
            maybe("propofol", 0.85)
            maybe("fentanyl_drip", 0.7)
            maybe("midazolam", 0.25)
            maybe("dexmedetomidine", 0.3)
        if adm.pressors:
            maybe("norepinephrine", 1.0)
            maybe("vasopressin", 0.4)
            maybe("phenylephrine", 0.25)
            maybe("hydrocortisone", 0.3)
        if "infection" in adm.states and not any(k in keys for k in _IV_ANTIBIOTIC_ITEM):
            one(("ceftriaxone", "vancomycin", "pip_tazo", "cefepime"))
        return keys

    def _medications(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        for key in adm.drug_keys:
            drug = self.v.drugs[key]
            begin = adm.admittime + _h(rng.uniform(0.5, 6.0))
            if adm.surgery_time and key in ("cefazolin", "oxycodone", "enoxaparin_ppx", "hydromorphone"):
                begin = adm.surgery_time + _h(rng.uniform(0.5, 3.0))
            stay_hours = (adm.dischtime - begin).total_seconds() / 3600
            if stay_hours < 1:
                continue
            if drug.route == "IV DRIP" or key in (
                "ns_bolus",
                "lr_bolus",
                "alteplase",
                "dextrose50",
                "glucagon",
            ):
                hours = min(stay_hours, _clip(_lognormal(rng, 30, 0.7), 2, 24 * 6))
            elif "sepsis_abx" in drug.tags or "pna_abx" in drug.tags or "uti_abx" in drug.tags:
                hours = min(stay_hours, _clip(_lognormal(rng, 72, 0.5), 12, 24 * 14))
            else:
                hours = stay_hours * rng.uniform(0.6, 1.0)
            if adm.icu and key in (
                "propofol",
                "fentanyl_drip",
                "midazolam",
                "dexmedetomidine",
                "norepinephrine",
                "vasopressin",
                "phenylephrine",
                "chlorhexidine",
            ):
                stay = adm.icu[0]
                begin = stay.intime + _h(rng.uniform(0.2, 3))
                hours = max(1.0, (stay.outtime - begin).total_seconds() / 3600 * rng.uniform(0.5, 0.95))
            start = _floor_min(begin).replace(minute=0)
            if start < adm.admittime:
                start += timedelta(hours=1)
            stop = min(_floor_min(start + _h(max(hours, 1.0))), adm.dischtime)
            if stop <= start:
                continue
            orders = [(start, stop)]
            if hours > 48 and rng.random() < 0.2:
                mid = _floor_min(start + (stop - start) / 2).replace(minute=0)
                if start < mid < stop:
                    orders = [(start, mid), (mid, stop)]
            for a, b in orders:
                self._prescription(rng, p, adm, drug, a, b)

    def _prescription(
        self, rng: random.Random, p: _Patient, adm: _Admission, drug: Drug, start: datetime, stop: datetime
    ) -> None:
        p.poe_seq += rng.randint(1, 12)
        poe_id = f"{p.subject_id}-{p.poe_seq}"
        pharmacy_id = self.pharmacy_ids.draw(rng)
        provider = rng.choice(self.providers)
        letters = "".join(ch for ch in drug.drug.upper() if ch.isalpha())[:4]
        digits = "".join(ch for ch in drug.dose_val_rx if ch.isdigit())[:4]
        suffix = {"IV": "I", "IV DRIP": "D", "SC": "S", "IH": "H", "TD": "P", "PR": "R", "IM": "M"}.get(
            drug.route, ""
        )
        formulary = f"{letters}{digits}{suffix}"
        dose = drug.dose_val_rx
        if drug.key == "insulin_ss":
            dose = "0"
        per_day = None if drug.prn else drug.doses_per_24_hrs
        self.w["hosp/prescriptions"].write(
            (
                p.subject_id,
                adm.hadm_id,
                pharmacy_id,
                poe_id,
                p.poe_seq,
                provider,
                start,
                stop,
                drug.drug_type,
                drug.drug,
                formulary,
                None,
                None,
                drug.prod_strength,
                None,
                dose,
                drug.dose_unit_rx,
                drug.form_val_disp,
                drug.form_unit_disp,
                _num(per_day) if per_day is not None else None,
                drug.route,
            )
        )
        if drug.route == "IV DRIP":
            base = self.v.drugs[rng.choice(("ns_base", "ns_base", "d5w"))]
            self.w["hosp/prescriptions"].write(
                (
                    p.subject_id,
                    adm.hadm_id,
                    pharmacy_id,
                    poe_id,
                    p.poe_seq,
                    provider,
                    start,
                    stop,
                    "BASE",
                    base.drug,
                    None,
                    None,
                    None,
                    base.prod_strength,
                    None,
                    base.dose_val_rx,
                    base.dose_unit_rx,
                    base.form_val_disp,
                    base.form_unit_disp,
                    None,
                    "IV",
                )
            )
        self._emar(rng, p, adm, drug, poe_id, pharmacy_id, start, stop)

    def _emar(
        self,
        rng: random.Random,
        p: _Patient,
        adm: _Admission,
        drug: Drug,
        poe_id: str,
        pharmacy_id: int,
        start: datetime,
        stop: datetime,
    ) -> None:
        w = self.w["hosp/emar"]
        events: list[tuple[datetime, str]] = []
        if drug.route == "IV DRIP":
            events.append((start, "Started"))
            t = start + timedelta(hours=12)
            while t < stop - timedelta(hours=1):
                events.append((t, rng.choice(("Confirmed", "Confirmed", "Infusion Reconciliation"))))
                t += timedelta(hours=12)
            events.append((stop, "Stopped"))
        elif drug.prn:
            days = max(1.0, (stop - start).total_seconds() / 86400)
            n = min(int(rng.expovariate(1.0) * days * 1.2), 30)
            for _ in range(n):
                events.append(
                    (start + timedelta(seconds=rng.random() * (stop - start).total_seconds()), "Administered")
                )
        else:
            per_day = int(drug.doses_per_24_hrs or 1)
            hours = {
                1: (9,),
                2: (9, 21),
                3: (6, 14, 22),
                4: (0, 6, 12, 18),
                6: (0, 4, 8, 12, 16, 20),
            }.get(per_day) or tuple(range(0, 24, max(1, 24 // per_day)))
            day = _day(start)
            while day <= stop and len(events) < 80:
                for hour in hours:
                    t = day + timedelta(hours=hour)
                    if start <= t <= stop:
                        events.append((t, "Administered"))
                day += timedelta(days=1)
            if not events:
                events.append((start, "Administered"))
        events.sort()
        for scheduled, txt in events:
            if txt == "Administered":
                r = rng.random()
                if drug.key == "insulin_ss":
                    txt = "Not Given per Sliding Scale" if r < 0.35 else "Administered"
                elif drug.key == "flush":
                    txt = "Flushed" if r < 0.75 else "Not Flushed"
                elif drug.route == "TD":
                    txt = "Applied"
                elif r < 0.05:
                    txt = "Not Given"
                elif r < 0.07:
                    txt = "Hold Dose"
                elif r < 0.10:
                    txt = "Delayed Administered"
            delay = rng.randint(60, 180) if txt == "Delayed Administered" else rng.randint(-20, 45)
            charttime = _floor_min(scheduled + timedelta(minutes=delay))
            if charttime < start:
                charttime = start
            if charttime > stop or charttime > adm.dischtime:
                continue
            p.emar_seq += 1
            store = charttime + timedelta(minutes=rng.randint(0, 25))
            self._seen(store)
            w.write(
                (
                    p.subject_id,
                    adm.hadm_id,
                    f"{p.subject_id}-{p.emar_seq}",
                    p.emar_seq,
                    poe_id,
                    pharmacy_id,
                    rng.choice(self.providers) if rng.random() < 0.03 else None,
                    charttime,
                    drug.drug,
                    txt,
                    _floor_min(scheduled) if not drug.prn else None,
                    store,
                )
            )

    # ------------------------------------------------------------------ microbiology

    def _micro(self, rng: random.Random, p: _Patient, adm: _Admission) -> None:
        tests: list[tuple[str, datetime, float]] = []
        t0 = (adm.ed[1] if adm.ed else adm.admittime) + _h(rng.uniform(0.0, 3.0))
        t0 = max(t0, adm.admittime + timedelta(minutes=10))
        for kind, prob, positive in adm.scenario.micro:
            if rng.random() < prob:
                tests.append((kind, t0 + _h(rng.uniform(0, 4)), positive))
                if kind == "blood" and rng.random() < 0.8:
                    tests.append((kind, t0 + _h(rng.uniform(0.1, 4.5)), positive * 0.8))
        for stay in adm.icu:
            if rng.random() < 0.75:
                tests.append(("mrsa", stay.intime + _h(rng.uniform(0.5, 6)), 0.08))
            if rng.random() < 0.3:
                tests.append(("vre", stay.intime + _h(rng.uniform(0.5, 6)), 0.06))
            if adm.died is False and "infection" not in adm.states and rng.random() < 0.15:
                tests.append(("blood", stay.intime + _h(rng.uniform(12, 48)), 0.03))
        for kind, t, positive in tests:
            t = _floor_min(t)
            if not (adm.admittime <= t <= adm.dischtime):
                continue
            self._culture(rng, p, adm, kind, t, rng.random() < positive)

    def _culture(
        self, rng: random.Random, p: _Patient, adm: _Admission, kind: str, t: datetime, positive: bool
    ) -> None:
        test = self.v.micro_tests[kind]
        specimen = self.micro_specimen_ids.draw(rng)
        store = _floor_min(t + _h(rng.uniform(20, 96)))
        self._seen(store)
        w = self.w["hosp/microbiologyevents"]

        def row(org: Organism | None, ab: tuple[Any, ...], comments: str | None) -> None:
            self.microevent_id += 1
            w.write(
                (
                    self.microevent_id,
                    p.subject_id,
                    adm.hadm_id,
                    specimen,
                    None,
                    _day(t),
                    t,
                    test.spec_itemid,
                    test.spec_type_desc,
                    1,
                    _day(store),
                    store,
                    test.test_itemid,
                    test.test_name,
                    org.org_itemid if org else None,
                    org.org_name if org else None,
                    1 if org else None,
                    None,
                    *ab,
                    comments,
                )
            )

        no_ab = (None, None, None, None, None, None)
        if kind == "sputum_gram":
            comment = (
                test.negative_comment
                if not positive
                else "2+   (1-5 per 1000X FIELD):   GRAM NEGATIVE ROD(S)."
            )
            row(None, no_ab, comment)
            return
        if not positive:
            row(None, no_ab, test.negative_comment)
            return
        source = {"bal": "sputum"}.get(kind, kind)
        candidates = [(o, o.source_weights.get(source, 0.0)) for o in self.v.organisms]
        candidates = [(o, wgt) for o, wgt in candidates if wgt > 0]
        if not candidates:
            row(None, no_ab, test.negative_comment)
            return
        org = rng.choices([o for o, _ in candidates], weights=[wgt for _, wgt in candidates])[0]
        if kind in ("mrsa", "vre", "cdiff") or org.panel == "none":
            comment = {"cdiff": "POSITIVE FOR TOXIGENIC C. DIFFICILE."}.get(kind)
            row(org, no_ab, comment)
            return
        resistant_profile = rng.random() < 0.25  # a multi-drug-resistant isolate
        for ab in self.v.antibiotics:
            if org.panel not in ab.panels:
                continue
            if ab.ab_name == "NITROFURANTOIN" and kind != "urine":
                continue
            rate = ab.resistance_rate * (2.5 if resistant_profile else 0.7)
            if org.panel == "staph" and ab.ab_name == "VANCOMYCIN":
                rate = 0.0
            r = rng.random()
            if r < rate:
                interp, comp, value = "R", "=>", ab.r_mic
            elif r < rate + 0.04:
                interp, comp, value = "I", "=", ab.r_mic / 4
            else:
                interp, comp, value = "S", "<=", ab.s_mic
            if ab.ab_name in ("ERYTHROMYCIN", "CLINDAMYCIN") and rng.random() < 0.5:
                dil: tuple[Any, ...] = (ab.ab_itemid, ab.ab_name, None, None, None, interp)
            else:
                text = f"{comp}{_num(value)}"
                dil = (ab.ab_itemid, ab.ab_name, text, comp.ljust(10), _num(value), interp)
            row(org, dil, None)

    # ------------------------------------------------------------------ ICU

    def _icu_stay(self, rng: random.Random, p: _Patient, adm: _Admission, stay: _Icu) -> None:
        self._seen(stay.outtime)
        self._chartevents(rng, p, adm, stay)
        self._inputevents(rng, p, adm, stay)
        self._outputevents(rng, p, adm, stay)

    def _caregiver(self, rng: random.Random, stay: _Icu, t: datetime, cache: dict[int, int]) -> int:
        shift = int((t - stay.intime).total_seconds() // (12 * 3600))
        if shift not in cache:
            cache[shift] = rng.choice(self.caregivers)
        return cache[shift]

    def _chartevents(self, rng: random.Random, p: _Patient, adm: _Admission, stay: _Icu) -> None:
        w = self.w["icu/chartevents"]
        base = (p.subject_id, adm.hadm_id, stay.stay_id)
        nurses: dict[int, int] = {}
        art_line = adm.vent or adm.pressors or rng.random() < 0.15
        afib = "afib" in p.chronic or adm.scenario.name == "atrial_fibrillation"
        diabetic = "diabetes" in p.chronic or "dka" in adm.states
        ich = adm.scenario.name == "intracranial_hemorrhage"

        def put(
            t: datetime, itemid: int, value: str, valuenum: str | None, uom: str | None, warning: int = 0
        ) -> None:
            store = t + timedelta(minutes=rng.randint(0, 40))
            w.write(
                (
                    *base,
                    self._caregiver(rng, stay, t, nurses),
                    t,
                    store,
                    itemid,
                    value,
                    valuenum,
                    uom,
                    warning,
                )
            )

        t = stay.intime.replace(minute=0, second=0) + timedelta(hours=1)
        # One-off admission measurements.
        first = _ceil_min(stay.intime + timedelta(minutes=rng.randint(5, 50)))
        if first < stay.outtime:
            wt = _fmt(p.weight, 1)
            put(first, 226512, wt, wt, "kg")
            if rng.random() < 0.7:
                ht = _fmt(p.height, 0)
                put(first, 226730, ht, ht, "cm")
        hr_noise = sbp_noise = 0.0
        hour = 0
        while t < stay.outtime:
            st = self._states_at(p, adm, t)
            inf, shock, bleed = st.get("infection", 0.0), st.get("shock", 0.0), st.get("bleed", 0.0)
            resp, hf, coma = st.get("resp", 0.0), st.get("hf", 0.0), st.get("coma", 0.0)
            stroke, alcohol, dka = st.get("stroke", 0.0), st.get("alcohol", 0.0), st.get("dka", 0.0)
            hr_noise = 0.75 * hr_noise + rng.gauss(0, 4)
            sbp_noise = 0.7 * sbp_noise + rng.gauss(0, 6)
            hr = p.hr0 + 25 * inf + 22 * shock + 18 * bleed + 8 * resp + 14 * alcohol + 10 * dka + hr_noise
            if afib:
                hr += rng.gauss(12, 10)
            hr = _clip(hr, 35, 185)
            sbp = p.sbp0 - 28 * shock - 18 * bleed + (18 if ich else 8) * stroke + sbp_noise
            sbp = _clip(sbp, 60, 230)
            dbp = _clip(sbp * rng.uniform(0.5, 0.6), 30, 130)
            mbp = (sbp + 2 * dbp) / 3
            rr = _clip(16 + 6 * inf + 9 * resp + 8 * dka + 3 * hf + rng.gauss(0, 2.5), 6, 45)
            if adm.vent:
                rr = _clip(rng.choice((14, 16, 18, 20)) + rng.gauss(2, 2), 8, 35)
            spo2 = _clip(97.5 - 5 * resp - 2.5 * hf - 1.5 * inf + rng.gauss(0, 1.3), 70, 100)
            warn = 1 if hr > 130 or sbp < 85 or spo2 < 88 else 0
            put(t, _HR, _fmt(hr, 0), _fmt(hr, 0), "bpm", warn if hr > 130 else 0)
            put(t, _RR, _fmt(rr, 0), _fmt(rr, 0), "insp/min")
            put(t, _SPO2, _fmt(spo2, 0), _fmt(spo2, 0), "%", 1 if spo2 < 88 else 0)
            if art_line:
                put(t, _ABPS, _fmt(sbp, 0), _fmt(sbp, 0), "mmHg", 1 if sbp < 85 else 0)
                put(t, _ABPD, _fmt(dbp, 0), _fmt(dbp, 0), "mmHg")
                put(t, _ABPM, _fmt(mbp, 0), _fmt(mbp, 0), "mmHg")
            if not art_line or hour % 4 == 0:
                nb = sbp + rng.gauss(-3, 5)
                nd = dbp + rng.gauss(2, 4)
                put(t, _NBPS, _fmt(nb, 0), _fmt(nb, 0), "mmHg", 1 if nb < 85 else 0)
                put(t, _NBPD, _fmt(nd, 0), _fmt(nd, 0), "mmHg")
                put(t, _NBPM, _fmt((nb + 2 * nd) / 3, 0), _fmt((nb + 2 * nd) / 3, 0), "mmHg")
            if hour % 4 == 0:
                temp = _clip(
                    98.3 + 2.4 * inf * rng.uniform(0.3, 1.2) - 1.0 * shock * rng.random() + rng.gauss(0, 0.4),
                    93,
                    106,
                )
                put(t, _TEMPF, _fmt(temp, 1), _fmt(temp, 1), "°F", 1 if temp > 101.5 else 0)
                self._gcs(rng, t, put, adm, coma, stroke, alcohol)
                rhythm = (
                    "AF (Atrial Fibrillation)"
                    if afib and rng.random() < 0.8
                    else "ST (Sinus Tachycardia)"
                    if hr > 100
                    else "SB (Sinus Bradycardia)"
                    if hr < 60
                    else "SR (Sinus Rhythm)"
                )
                put(t, 220048, rhythm, None, None)
                device = (
                    "Endotracheal tube"
                    if adm.vent
                    else rng.choices(
                        ("None", "Nasal cannula", "Face tent", "High flow nasal cannula", "Non-rebreather"),
                        weights=(50 - 40 * min(1, resp), 40, 5, 10 * resp, 5 * resp),
                    )[0]
                )
                put(t, 226732, device, None, None)
                if device == "Nasal cannula":
                    flow = rng.choice((1, 2, 2, 3, 4, 5, 6))
                    put(t, 223834, str(flow), str(flow), "L/min")
                if adm.vent:
                    mode = rng.choice(
                        ("CMV/ASSIST/AutoFlow", "CMV/ASSIST/AutoFlow", "CPAP/PSV", "CMV/ASSIST")
                    )
                    put(t, 223849, mode, None, None)
                    fio2 = _clip(40 + 35 * resp * rng.uniform(0.5, 1.2), 30, 100)
                    put(t, 223835, _fmt(fio2, 0), _fmt(fio2, 0), None)
                    peep = rng.choice((5, 5, 5, 8, 10, 12 if resp > 0.8 else 8))
                    put(t, 220339, str(peep), str(peep), "cmH2O")
                    vt = _clip(p.height * 2.7 + rng.gauss(0, 40), 250, 800)
                    put(t, 224685, _fmt(vt, 0), _fmt(vt, 0), "mL")
                    rass = rng.choice((-4, -3, -3, -2, -2, -1))
                    put(t, 228096, _RASS_TEXT[rass], str(rass), None)
                else:
                    pain = rng.choices(
                        ("None", "Mild", "Moderate", "Severe", "Unable to Score"), weights=(45, 20, 18, 8, 9)
                    )[0]
                    put(t, 223791, pain, None, None)
            if (diabetic and hour % 6 == 3) or (not diabetic and hour % 12 == 6 and rng.random() < 0.3):
                gl = self._lab_raw(rng, p, self.v.labs[50931], st)
                put(t, 225664, _fmt(gl, 0), _fmt(gl, 0), "mg/dL", 1 if gl > 300 or gl < 60 else 0)
            if hour % 12 == 8:
                put(t, 220046, "120", "120", "bpm")
                put(t, 220047, "50", "50", "bpm")
                put(t, 223770, "88", "88", "%")
            if hour % 24 == 4 and hour > 0 and rng.random() < 0.6:
                wt = _fmt(p.weight + rng.gauss(0, 1.5), 1)
                put(t, 224639, wt, wt, "kg")
            t += timedelta(hours=1)
            hour += 1

    def _gcs(
        self,
        rng: random.Random,
        t: datetime,
        put: Any,
        adm: _Admission,
        coma: float,
        stroke: float,
        alcohol: float,
    ) -> None:
        if adm.vent:
            eye = rng.choice((1, 1, 2, 3, 4))
            verbal_text, verbal = "No Response-ETT", 1
            motor = rng.choice((1, 3, 4, 5, 6, 6))
        else:
            depth = coma * 2.5 + stroke * 1.5 + alcohol * 0.8 + rng.gauss(0, 0.4)
            eye = int(_clip(round(4 - depth), 1, 4))
            verbal = int(_clip(round(5 - depth * 1.2), 1, 5))
            motor = int(_clip(round(6 - depth), 1, 6))
            verbal_text = _GCS_VERBAL_TEXT[verbal]
        put(t, _GCS_EYE, _GCS_EYE_TEXT[eye], str(eye), None)
        put(t, _GCS_VERBAL, verbal_text, str(verbal), None)
        put(t, _GCS_MOTOR, _GCS_MOTOR_TEXT[motor], str(motor), None)

    def _input_row(
        self,
        rng: random.Random,
        p: _Patient,
        adm: _Admission,
        stay: _Icu,
        itemid: int,
        start: datetime,
        end: datetime,
        amount: float,
        rate: float | None,
        status: str,
        link: int | None = None,
        spec_key: int | None = None,
        caregiver: int | None = None,
    ) -> int:
        spec = _INPUT_SPEC[spec_key if spec_key is not None else itemid]
        cat, cat2, component, desc, amount_uom, rate_uom, total, total_uom = spec
        orderid = self.order_ids.draw(rng)
        store = end if rng.random() < 0.5 else start + timedelta(minutes=rng.randint(0, 30))
        self.w["icu/inputevents"].write(
            (
                p.subject_id,
                adm.hadm_id,
                stay.stay_id,
                caregiver or rng.choice(self.caregivers),
                start,
                end,
                store,
                itemid,
                _num(amount, 6),
                amount_uom,
                _num(rate, 6) if rate is not None else None,
                rate_uom if rate is not None else None,
                orderid,
                link or orderid,
                cat,
                cat2,
                component,
                desc,
                _num(p.weight, 1),
                _num(total, 2) if total is not None else None,
                total_uom,
                1 if desc.startswith("Continuous") else 0,
                0,
                status,
                _num(amount, 6),
                _num(rate, 6) if rate is not None else _num(1, 0),
            )
        )
        self._seen(store)
        return orderid

    def _infusion(
        self,
        rng: random.Random,
        p: _Patient,
        adm: _Admission,
        stay: _Icu,
        itemid: int,
        start: datetime,
        stop: datetime,
        rate_fn: Any,
        amount_fn: Any,
        seg_hours: tuple[float, float] = (1.0, 6.0),
    ) -> None:
        """A continuous infusion as MIMIC records it: rate-change segments linked by linkorderid."""
        t = _floor_min(start)
        stop = min(stop, stay.outtime)
        link: int | None = None
        nurse = rng.choice(self.caregivers)
        while t < stop:
            end = min(_floor_min(t + _h(rng.uniform(*seg_hours))), _floor_min(stop))
            if end <= t:
                break
            rate = rate_fn(t)
            hours = (end - t).total_seconds() / 3600
            status = "FinishedRunning" if end >= _floor_min(stop) else "ChangeDose/Rate"
            oid = self._input_row(
                rng, p, adm, stay, itemid, t, end, amount_fn(rate, hours), rate, status, link, caregiver=nurse
            )
            link = link or oid
            t = end

    def _push(
        self,
        rng: random.Random,
        p: _Patient,
        adm: _Admission,
        stay: _Icu,
        itemid: int,
        every_hours: float,
        amount: Any,
        start_offset: float = 1.0,
        spec_key: int | None = None,
        until: datetime | None = None,
        minutes: int = 1,
    ) -> None:
        t = _floor_min(stay.intime + _h(start_offset))
        end = min(until or stay.outtime, stay.outtime)
        while t + timedelta(minutes=minutes) <= end:
            value = amount() if callable(amount) else amount
            self._input_row(
                rng,
                p,
                adm,
                stay,
                itemid,
                t,
                t + timedelta(minutes=minutes),
                value,
                None,
                "FinishedRunning",
                spec_key=spec_key,
            )
            t = _floor_min(t + _h(every_hours * rng.uniform(0.9, 1.15)))

    def _inputevents(self, rng: random.Random, p: _Patient, adm: _Admission, stay: _Icu) -> None:
        keys = adm.drug_keys
        inside = stay.outtime - stay.intime
        hours_total = inside.total_seconds() / 3600
        st0 = adm.states
        wt = p.weight
        # Maintenance crystalloid.
        if "hf" not in st0 and rng.random() < 0.7:
            item = 225158 if rng.random() < 0.7 else 225828
            rate0 = rng.choice((50, 75, 75, 100, 125))
            stop = stay.intime + _h(min(hours_total, rng.uniform(12, 60)))
            self._infusion(
                rng,
                p,
                adm,
                stay,
                item,
                stay.intime + _h(rng.uniform(0.3, 2)),
                stop,
                lambda _t, r=rate0: r,
                lambda r, h: r * h,
                (3.0, 10.0),
            )
        # Fluid boluses for sepsis, shock, DKA, GI bleed.
        if any(s in st0 for s in ("infection", "shock", "dka", "bleed", "pancreatitis")):
            for _ in range(rng.randint(1, 4 if "shock" in st0 else 2)):
                t = _floor_min(stay.intime + _h(rng.uniform(0.2, min(12, hours_total * 0.8))))
                end = t + timedelta(minutes=rng.choice((30, 45, 60)))
                if end <= stay.outtime:
                    item = 225158 if rng.random() < 0.65 else 225828
                    vol = rng.choice((500, 1000, 1000))
                    self._input_row(
                        rng, p, adm, stay, item, t, end, vol, None, "FinishedRunning", spec_key=-item
                    )
        # Vasopressors.
        if adm.pressors:
            stop = stay.intime + _h(min(hours_total, _clip(_lognormal(rng, 36, 0.6), 4, 160)))
            if adm.died:
                stop = stay.outtime

            def norepi(t: datetime) -> float:
                return round(
                    _clip(0.05 + 0.25 * adm.severity("shock", t) * rng.uniform(0.5, 1.5), 0.02, 0.8), 3
                )

            self._infusion(
                rng,
                p,
                adm,
                stay,
                221906,
                stay.intime + _h(rng.uniform(0.2, 2)),
                stop,
                norepi,
                lambda r, h: r * wt * 60 * h / 1000,
            )
            if "vasopressin" in keys:
                self._infusion(
                    rng,
                    p,
                    adm,
                    stay,
                    222315,
                    stay.intime + _h(rng.uniform(2, 8)),
                    stop,
                    lambda _t: 2.4,
                    lambda r, h: r * h,
                )
            if "phenylephrine" in keys:
                self._infusion(
                    rng,
                    p,
                    adm,
                    stay,
                    221749,
                    stay.intime + _h(rng.uniform(0.2, 4)),
                    stay.intime + _h(min(hours_total, 12)),
                    lambda _t: round(rng.uniform(0.3, 2.5), 2),
                    lambda r, h: r * wt * 60 * h / 1000,
                )
        # Sedation and analgesia while ventilated.
        if adm.vent:
            vent_end = stay.intime + _h(hours_total * rng.uniform(0.5, 0.95))
            if "propofol" in keys or rng.random() < 0.7:
                self._infusion(
                    rng,
                    p,
                    adm,
                    stay,
                    222168,
                    stay.intime + _h(rng.uniform(0.1, 1)),
                    vent_end,
                    lambda _t: float(rng.choice((10, 15, 20, 25, 30, 40, 50))),
                    lambda r, h: r * wt * 60 * h / 1000,
                )
            if "fentanyl_drip" in keys:
                self._infusion(
                    rng,
                    p,
                    adm,
                    stay,
                    225942,
                    stay.intime + _h(rng.uniform(0.1, 1)),
                    vent_end,
                    lambda _t: float(rng.choice((25, 50, 75, 100, 150))),
                    lambda r, h: r * h / 1000,
                )
            if "dexmedetomidine" in keys:
                self._infusion(
                    rng,
                    p,
                    adm,
                    stay,
                    225150,
                    vent_end - _h(min(12, hours_total * 0.3)),
                    vent_end,
                    lambda _t: round(rng.uniform(0.2, 1.2), 2),
                    lambda r, h: r * wt * h,
                )
        # Insulin.
        if "dka" in st0:
            self._infusion(
                rng,
                p,
                adm,
                stay,
                223258,
                stay.intime + _h(rng.uniform(0.3, 1.5)),
                stay.intime + _h(min(hours_total, rng.uniform(12, 30))),
                lambda t: round(_clip(2 + 8 * adm.severity("dka", t), 1, 15), 1),
                lambda r, h: r * h,
            )
        elif "diabetes" in p.chronic:
            self._push(
                rng,
                p,
                adm,
                stay,
                223262,
                6,
                lambda: float(rng.choice((2, 2, 4, 4, 6, 8))),
                start_offset=rng.uniform(1, 5),
            )
        # Anticoagulation.
        if "heparin_drip" in keys:
            self._infusion(
                rng,
                p,
                adm,
                stay,
                225152,
                stay.intime + _h(rng.uniform(0.5, 4)),
                stay.outtime,
                lambda _t: float(rng.choice((800, 1000, 1100, 1200, 1400))),
                lambda r, h: r * h,
                (4, 12),
            )
        elif "heparin_sc" in keys:
            self._push(rng, p, adm, stay, 225975, 8, 1.0, start_offset=rng.uniform(2, 8))
        # Intravenous antibiotics, on schedule.
        for key, (itemid, every) in _IV_ANTIBIOTIC_ITEM.items():
            if key in keys:
                self._push(rng, p, adm, stay, itemid, every, 1.0, start_offset=rng.uniform(0.3, 4))
        # Electrolyte replacement, blood products, diuretics, analgesia.
        for _ in range(int(hours_total // 24) + 1):
            if rng.random() < 0.4:
                t = _floor_min(stay.intime + _h(rng.uniform(0, hours_total)))
                end = t + timedelta(hours=rng.choice((1, 2, 4)))
                if end <= stay.outtime:
                    if rng.random() < 0.6:
                        self._input_row(
                            rng,
                            p,
                            adm,
                            stay,
                            225166,
                            t,
                            end,
                            float(rng.choice((10, 20, 40))),
                            None,
                            "FinishedRunning",
                        )
                    else:
                        self._input_row(
                            rng,
                            p,
                            adm,
                            stay,
                            222011,
                            t,
                            end,
                            float(rng.choice((1, 2, 2, 4))),
                            None,
                            "FinishedRunning",
                        )
        if "bleed" in st0 or ("chemo" in st0 and rng.random() < 0.4) or rng.random() < 0.06:
            for _ in range(rng.randint(1, 3)):
                t = _floor_min(stay.intime + _h(rng.uniform(0.5, max(1, min(24, hours_total - 3)))))
                end = t + timedelta(minutes=rng.choice((90, 120, 150)))
                if end <= stay.outtime:
                    item = 225168 if rng.random() < 0.75 else rng.choice((225170, 220970))
                    vol = (
                        float(rng.choice((300, 320, 350)))
                        if item == 225168
                        else float(rng.choice((200, 250)))
                    )
                    self._input_row(
                        rng,
                        p,
                        adm,
                        stay,
                        item,
                        t,
                        end,
                        vol,
                        round(vol / ((end - t).total_seconds() / 3600), 2),
                        "FinishedRunning",
                    )
        if "hf" in st0 or "furosemide" in keys:
            self._push(
                rng,
                p,
                adm,
                stay,
                221794,
                12,
                lambda: float(rng.choice((20, 40, 40, 80))),
                start_offset=rng.uniform(1, 6),
            )
        if "fentanyl_push" in keys and not adm.vent:
            self._push(
                rng,
                p,
                adm,
                stay,
                221744,
                6,
                lambda: float(rng.choice((25, 25, 50))),
                start_offset=rng.uniform(0.5, 6),
            )
        if "hydromorphone" in keys:
            self._push(
                rng,
                p,
                adm,
                stay,
                221833,
                8,
                lambda: rng.choice((0.25, 0.5, 0.5, 1.0)),
                start_offset=rng.uniform(0.5, 6),
            )
        if "acetaminophen" in keys and rng.random() < 0.3:
            self._push(rng, p, adm, stay, 228315, 8, 1000.0, start_offset=rng.uniform(1, 6))
        if "pantoprazole_iv" in keys or (adm.vent and rng.random() < 0.5):
            self._push(rng, p, adm, stay, 225910, 24, 1.0, start_offset=rng.uniform(1, 8))
        # Oral intake, or tube feeds for long ventilations.
        if adm.vent and hours_total > 48:
            item = 229295 if "diabetes" in p.chronic else 228351 if "esrd" in p.chronic else 229011
            if item in _INPUT_SPEC:
                self._infusion(
                    rng,
                    p,
                    adm,
                    stay,
                    item,
                    stay.intime + _h(rng.uniform(24, 40)),
                    stay.outtime,
                    lambda _t: float(rng.choice((20, 30, 40, 50, 60))),
                    lambda r, h: r * h,
                    (4, 12),
                )
        elif not adm.vent and "coma" not in st0:
            self._push(
                rng,
                p,
                adm,
                stay,
                226452,
                5,
                lambda: float(rng.choice((60, 120, 120, 180, 240, 360))),
                start_offset=rng.uniform(2, 8),
            )

    def _outputevents(self, rng: random.Random, p: _Patient, adm: _Admission, stay: _Icu) -> None:
        w = self.w["icu/outputevents"]
        base = (p.subject_id, adm.hadm_id, stay.stay_id)
        nurses: dict[int, int] = {}
        seen: set[tuple[datetime, int]] = set()

        def put(t: datetime, itemid: int, value: float) -> None:
            t = _floor_min(t)
            if t < stay.intime or t > stay.outtime or (t, itemid) in seen:
                return
            seen.add((t, itemid))
            store = t + timedelta(minutes=rng.randint(-20, 40))
            w.write(
                (*base, self._caregiver(rng, stay, t, nurses), t, store, itemid, _num(max(value, 0), 0), "ml")
            )
            self._seen(store)

        foley = adm.vent or adm.pressors or rng.random() < 0.7
        surgical = adm.surgery is not None
        if surgical and stay.intime - (adm.surgery_time or adm.admittime) < timedelta(hours=12):
            put(
                stay.intime + timedelta(minutes=rng.randint(1, 30)),
                226627,
                rng.choice((150, 200, 300, 450, 600)),
            )
            put(
                stay.intime + timedelta(minutes=rng.randint(1, 30)),
                226626,
                rng.choice((100, 200, 300, 500, 800)),
            )
        t = stay.intime.replace(minute=0, second=0) + timedelta(hours=1)
        hour = 0
        while t <= stay.outtime:
            st = self._states_at(p, adm, t)
            if foley:
                every = 1 if (adm.vent or adm.pressors or hour < 24) else 2
                if hour % every == 0:
                    # ~1 mL/kg/h, down to ~0.25 mL/kg/h in severe AKI or shock.
                    oliguria = 0.45 * st.get("aki", 0.0) + 0.35 * st.get("shock", 0.0)
                    per_hour = p.weight * 0.9 * max(0.25, 1.0 - oliguria)
                    if "esrd" in p.chronic:
                        per_hour *= 0.15
                    put(t, 226559, round(per_hour * every * math.exp(rng.gauss(0, 0.35)) / 5) * 5)
            elif hour % rng.choice((4, 5, 6)) == 0 and hour > 0:
                put(
                    t + timedelta(minutes=rng.randint(0, 50)),
                    226560,
                    rng.choice((150, 200, 250, 300, 350, 400, 500)),
                )
            chest_tube = adm.surgery in ("cabg", "avr") or "chest_tube" in adm.px_groups
            if chest_tube and hour % 2 == 0 and hour <= 48:
                put(t, 226588, max(0, round(_lognormal(rng, 60 * math.exp(-hour / 24), 0.5) / 5) * 5))
            if (
                adm.surgery in ("colectomy", "small_bowel_resection", "ex_lap", "cholecystectomy")
                and hour % 4 == 0
            ):
                put(t, 226599, round(_lognormal(rng, 40, 0.6)))
            if (
                (adm.vent or adm.scenario.name == "abdominal_surgery")
                and hour % 6 == 2
                and rng.random() < 0.5
            ):
                put(t, 226576, round(_lognormal(rng, 120, 0.7)))
            if "evd" in adm.px_groups and hour % 2 == 0:
                put(t, 226606, round(_lognormal(rng, 10, 0.5)))
            if hour % 24 == 14 and rng.random() < 0.35:
                put(t + timedelta(minutes=rng.randint(0, 50)), 226579, rng.choice((100, 150, 200, 300, 400)))
            if "pancreatitis" in st and hour % 12 == 7 and rng.random() < 0.3:
                put(t, 226571, rng.choice((50, 100, 200)))
            t += timedelta(hours=1)
            hour += 1


def _clip_date(d: date, lo: date, hi: date) -> date:
    return lo if d < lo else hi if d > hi else d


# --------------------------------------------------------------------------- public API


def generate(
    out_dir: Path, *, patients: int = 100, seed: int = 42, progress: bool = False, notes: bool = True
) -> GenerationResult:
    """Write a synthetic MIMIC-IV v2.2 release folder (``hosp/`` and ``icu/``) into ``out_dir``.

    With ``notes`` (the default) also ``note/`` (discharge summaries and radiology reports for
    the same patients) and ``note_truth.json``, the phenotype truth the notes were written from.

    Returns the rows written per ``"module/table"`` (a mapping), plus the data's horizon
    ``as_of`` (``AS_OF``) and the latest timestamp written. Same ``(patients, seed)`` -> same bytes.
    Files are written under a ``.part`` name and renamed when complete.
    """
    if patients < 1:
        raise ValueError("patients must be at least 1")
    started = time.perf_counter()
    out_dir = Path(out_dir)
    gen = _Generator(out_dir, patients, seed, load_vocab())
    rows = gen.run(progress)
    notes_result = generate_notes(out_dir, seed=seed) if notes else None
    if gen.latest >= AS_OF:  # pragma: no cover - guarded by construction
        raise AssertionError(f"generated event at {gen.latest} is not before AS_OF {AS_OF}")
    return GenerationResult(
        rows=rows,
        as_of=AS_OF,
        latest_event=gen.latest,
        out_dir=out_dir,
        seconds=time.perf_counter() - started,
        notes=notes_result,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metadata_admin.clinical.synthetic",
        description="Write a deterministic synthetic MIMIC-IV v2.2 release (hosp/, icu/ *.csv.gz).",
    )
    parser.add_argument("out_dir", type=Path, help="folder to write hosp/ and icu/ into")
    parser.add_argument("--patients", type=int, default=100, help="number of patients (default 100)")
    parser.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    parser.add_argument("--progress", action="store_true", help="show a progress bar")
    args = parser.parse_args(argv)
    result = generate(args.out_dir, patients=args.patients, seed=args.seed, progress=args.progress)
    width = max(len(k) for k in result)
    for name, count in result.items():
        print(f"{name:<{width}}  {count:>10,}")
    print(f"{'total':<{width}}  {sum(result.values()):>10,}")
    print(
        f"as of {result.as_of:%Y-%m-%d %H:%M:%S} (latest event {result.latest_event:%Y-%m-%d %H:%M:%S});"
        f" {result.seconds:.1f} s -> {result.out_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
