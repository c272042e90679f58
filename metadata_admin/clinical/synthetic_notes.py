"""Synthetic MIMIC-IV-Note files (note/discharge.csv.gz, note/radiology.csv.gz) with known truth.

Why: phenotyping from notes must be measured on a machine with no credentialed data, and
measured against a truth the clinical database does not hold. For every patient and phenotype
(pulmonary hypertension, heart failure, sepsis, atrial fibrillation) this module decides the
truth first (present / absent / uncertain), then writes notes that say it the way clinicians do:
affirmed mentions, negated ones ("no evidence of …", "denies …"), past history, a family
member's ("mother had …"), hypothetical ones ("rule out …", "return if …") and uncertain ones
("possible …"), inside the usual sections. Some patients have the condition but never got the
code, some got the code and the notes rule it out.

The truth goes to ``note_truth.json`` beside the module folders, never into the clinical
database (the loader reads only ``<module>/*.csv[.gz]``), so a reader of the database cannot
see it; tests and benchmarks read the file.

With a hosp/ folder already written (``synthetic.generate``) the notes follow its patients,
admissions and coded diagnoses; without one (the scale benchmark) they invent subjects.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

NOTE_HEADER = ("note_id", "subject_id", "hadm_id", "note_type", "note_seq", "charttime", "storetime", "text")
TRUTH_FILE = "note_truth.json"

# phenotype -> ICD code prefixes (stored without the dot, as in MIMIC) that make it "coded".
CODE_PREFIXES: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": ("I27", "416"),
    "heart failure": ("I50", "428"),
    "sepsis": ("A40", "A41", "038", "R652", "99591", "99592"),
    "atrial fibrillation": ("I48", "42731"),
}
PHENOTYPES = tuple(CODE_PREFIXES)

# Mentions by assertion. Each entry is a sentence with the concept as one of the phenotype's
# terms; {t} is replaced by a synonym chosen per sentence. Written to read like MIMIC notes.
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": ("pulmonary hypertension", "pulmonary arterial hypertension"),
    "heart failure": ("heart failure", "congestive heart failure", "CHF"),
    "sepsis": ("sepsis", "septic shock", "urosepsis"),
    "atrial fibrillation": ("atrial fibrillation", "afib", "paroxysmal atrial fibrillation"),
}

_AFFIRMED: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": (
        "TTE this admission showed severe {t} with an RVSP of 72 mmHg.",
        "Right heart catheterization confirmed {t} with mean PA pressure of 41 mmHg.",
        "Her dyspnea was attributed to worsening {t}; sildenafil was uptitrated.",
        "Known {t}, followed in pulmonary clinic, on home oxygen 2L.",
    ),
    "heart failure": (
        "Admitted with acute on chronic systolic {t}, EF 25%.",
        "Diuresed with IV furosemide for decompensated {t}, net negative 4 L.",
        "Chest x-ray consistent with volume overload from {t}.",
        "Known {t} with reduced ejection fraction, on carvedilol and lisinopril.",
    ),
    "sepsis": (
        "Patient met criteria for {t} with lactate 4.1 and hypotension requiring pressors.",
        "Treated for {t} from a urinary source with vancomycin and cefepime.",
        "Transferred to the MICU for {t} requiring norepinephrine.",
        "Blood cultures grew E. coli and the patient was treated for {t}.",
    ),
    "atrial fibrillation": (
        "Found to be in {t} with rapid ventricular response, rate controlled with diltiazem.",
        "Telemetry showed {t} with rates in the 120s; metoprolol was increased.",
        "EKG on admission demonstrated {t}.",
        "Started on apixaban for {t} with CHA2DS2-VASc of 4.",
    ),
}
_HISTORICAL: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": ("History of {t} diagnosed in 2150.",),
    "heart failure": ("Past history significant for {t} diagnosed several years ago.",),
    "sepsis": ("Prior admission in the past year for {t} requiring ICU care.",),
    "atrial fibrillation": ("History of {t} status post ablation in the past.",),
}
_NEGATED: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": (
        "Echocardiogram showed no evidence of {t}.",
        "Right heart catheterization ruled out {t}.",
        "Normal RV size and function, no {t}.",
    ),
    "heart failure": (
        "No evidence of {t} on exam or imaging.",
        "BNP was normal and {t} was ruled out.",
        "Denies orthopnea or PND; no signs of {t}.",
    ),
    "sepsis": (
        "Lactate normal and cultures negative; no evidence of {t}.",
        "The patient was afebrile and {t} was ruled out.",
        "Not felt to be consistent with {t} given normal vital signs.",
    ),
    "atrial fibrillation": (
        "Telemetry without {t} throughout the admission.",
        "Denies palpitations; EKG without evidence of {t}.",
        "Holter monitor negative for {t}.",
    ),
}
_FAMILY: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": ("Mother had {t}.", "Sister with {t}."),
    "heart failure": ("Father died of {t} at age 70.", "Mother had {t}."),
    "sepsis": ("Her brother died of {t}.",),
    "atrial fibrillation": ("Father had {t}.", "Mother with {t} on warfarin."),
}
_HYPOTHETICAL: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": ("Will need an outpatient echocardiogram to rule out {t}.",),
    "heart failure": ("Please return to the emergency department if you develop symptoms of {t}.",),
    "sepsis": ("Return if you develop fevers or chills, which could be signs of {t}.",),
    "atrial fibrillation": ("Outpatient Holter monitor to rule out {t}.",),
}
_UNCERTAIN: dict[str, tuple[str, ...]] = {
    "pulmonary hypertension": ("Possible {t}, to be evaluated as an outpatient.",),
    "heart failure": ("Mild bibasilar crackles, possibly early {t}.",),
    "sepsis": ("Low grade fever, concern for possible {t}.",),
    "atrial fibrillation": ("Irregular rhythm on exam, questionable {t}.",),
}

_FILLER_HPI = (
    "Patient is a ___ year old {sex} who presents with shortness of breath.",
    "Patient is a ___ year old {sex} who presents with chest pain and fatigue.",
    "Patient is a ___ year old {sex} who presents with fever and cough.",
    "Patient is a ___ year old {sex} who presents with weakness and dizziness.",
)
_FILLER_PMH = ("Hypertension.", "Type 2 diabetes mellitus.", "Hyperlipidemia.", "COPD.", "CKD stage 3.")
_FILLER_COURSE = (
    "Electrolytes were repleted as needed.",
    "Patient was seen by physical therapy who recommended discharge home.",
    "Home medications were continued.",
    "Pain was controlled with acetaminophen.",
)
_FILLER_RAD = (
    "The lungs are clear without focal consolidation.",
    "No pleural effusion or pneumothorax.",
    "Cardiomediastinal silhouette is within normal limits.",
    "Mild degenerative changes of the thoracic spine.",
)


@dataclass
class _Subject:
    subject_id: int
    sex: str
    admissions: list[tuple[int, datetime, datetime]]  # hadm_id, admittime, dischtime
    coded: set[str]


@dataclass(frozen=True)
class NotesResult:
    discharge: int
    radiology: int
    patients: int
    truth_path: Path


def _read_gz(path: Path) -> Iterator[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        yield from csv.DictReader(f)


def _subjects_from_hosp(hosp: Path) -> list[_Subject]:
    by_id: dict[int, _Subject] = {}
    for row in _read_gz(hosp / "patients.csv.gz"):
        sid = int(row["subject_id"])
        by_id[sid] = _Subject(sid, "woman" if row["gender"] == "F" else "man", [], set())
    for row in _read_gz(hosp / "admissions.csv.gz"):
        s = by_id.get(int(row["subject_id"]))
        if s is not None:
            s.admissions.append(
                (
                    int(row["hadm_id"]),
                    datetime.fromisoformat(row["admittime"]),
                    datetime.fromisoformat(row["dischtime"]),
                )
            )
    diagnoses = hosp / "diagnoses_icd.csv.gz"
    if diagnoses.exists():
        for row in _read_gz(diagnoses):
            s = by_id.get(int(row["subject_id"]))
            if s is None:
                continue
            for phenotype, prefixes in CODE_PREFIXES.items():
                if row["icd_code"].startswith(prefixes):
                    s.coded.add(phenotype)
    for s in by_id.values():
        s.admissions.sort(key=lambda a: a[1])
    return [by_id[k] for k in sorted(by_id)]


def _invented_subjects(patients: int, rng: random.Random) -> list[_Subject]:
    # Prevalence of the codes roughly as in an ICU cohort: heart failure and AF common, PH rare.
    prevalence = {
        "pulmonary hypertension": 0.06,
        "heart failure": 0.2,
        "sepsis": 0.15,
        "atrial fibrillation": 0.2,
    }
    subjects = []
    start = datetime(2150, 1, 1)
    for i in range(patients):
        admit = start + timedelta(days=rng.randint(0, 20_000), hours=rng.randint(0, 23))
        hadm = 20_000_000 + i
        coded = {p for p, rate in prevalence.items() if rng.random() < rate}
        subjects.append(
            _Subject(
                10_000_000 + i,
                rng.choice(("woman", "man")),
                [(hadm, admit, admit + timedelta(days=rng.randint(2, 9)))],
                coded,
            )
        )
    return subjects


def _truth(subject: _Subject, rng: random.Random) -> dict[str, str]:
    """present / absent / uncertain per phenotype; codes are wrong both ways some of the time."""
    truth = {}
    for p in PHENOTYPES:
        draw = rng.random()
        if p in subject.coded:
            truth[p] = "present" if draw < 0.8 else "absent"  # coded, ruled out in the notes
        else:
            truth[p] = "present" if draw < 0.08 else "uncertain" if draw < 0.12 else "absent"
    return truth


def _fill(rng: random.Random, template: str, phenotype: str) -> str:
    return template.format(t=rng.choice(_SYNONYMS[phenotype]))


def _sentences(rng: random.Random, phenotype: str, state: str, coded: bool) -> dict[str, list[str]]:
    """Sentences per section expressing `state`, plus distractors that must not change it."""
    out: dict[str, list[str]] = {"hpi": [], "pmh": [], "course": [], "family": [], "dx": [], "instr": []}
    if state == "present":
        out["course"].append(_fill(rng, rng.choice(_AFFIRMED[phenotype]), phenotype))
        if rng.random() < 0.5:
            term = rng.choice(_SYNONYMS[phenotype])
            out["dx"].append(term[0].upper() + term[1:] + ".")
        if phenotype != "sepsis" and rng.random() < 0.4:
            out["pmh"].append(_fill(rng, _HISTORICAL[phenotype][0], phenotype))
    elif state == "uncertain":
        out["course"].append(_fill(rng, rng.choice(_UNCERTAIN[phenotype]), phenotype))
    elif coded or rng.random() < 0.3:
        # Coded yet ruled out, or simply considered and excluded.
        out["course"].append(_fill(rng, rng.choice(_NEGATED[phenotype]), phenotype))
    # Distractors, in any state: they say nothing about this patient having the condition now.
    if rng.random() < 0.15:
        out["family"].append(_fill(rng, rng.choice(_FAMILY[phenotype]), phenotype))
    if state != "present" and rng.random() < 0.1:
        out["instr"].append(_fill(rng, rng.choice(_HYPOTHETICAL[phenotype]), phenotype))
    return out


def _discharge_text(rng: random.Random, subject: _Subject, parts: dict[str, list[str]]) -> str:
    hpi = [rng.choice(_FILLER_HPI).format(sex=subject.sex), *parts["hpi"]]
    pmh = rng.sample(_FILLER_PMH, 2) + parts["pmh"]
    course = [*rng.sample(_FILLER_COURSE, 2), *parts["course"]]
    rng.shuffle(course)
    dx = ["Primary: ___", *parts["dx"]]
    family = parts["family"] or ["Noncontributory."]
    instr = ["Please take all medications as prescribed.", *parts["instr"]]
    return (
        "Name:  ___                     Unit No:   ___\n\n"
        "Admission Date:  ___              Discharge Date:   ___\n\n"
        f"Sex:   {'F' if subject.sex == 'woman' else 'M'}\n\n"
        "Service: MEDICINE\n\n"
        "Chief Complaint:\nshortness of breath\n\n"
        "History of Present Illness:\n" + " ".join(hpi) + "\n\n"
        "Past Medical History:\n" + "\n".join(f"- {x}" for x in pmh) + "\n\n"
        "Social History:\n___\n\n"
        "Family History:\n" + " ".join(family) + "\n\n"
        "Brief Hospital Course:\n" + " ".join(course) + "\n\n"
        "Discharge Diagnosis:\n" + "\n".join(dx) + "\n\n"
        "Discharge Instructions:\n" + " ".join(instr) + "\n\nFollowup Instructions:\n___\n"
    )


def _radiology_text(rng: random.Random, findings: list[str]) -> str:
    body = [*rng.sample(_FILLER_RAD, 2), *findings]
    return (
        "EXAMINATION:  CHEST (PA AND LAT)\n\n"
        "INDICATION:  ___ with dyspnea, evaluate for pneumonia\n\n"
        "COMPARISON:  ___\n\n"
        "FINDINGS: \n\n" + " ".join(body) + "\n\n"
        "IMPRESSION: \n\nNo acute cardiopulmonary process.\n"
    )


class _Writer:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self._part = path, path.with_name(path.name + ".part")
        self._raw = self._part.open("wb")
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=6, mtime=0)
        self._text = io.TextIOWrapper(self._gz, encoding="utf-8", newline="")
        self._csv = csv.writer(self._text, lineterminator="\n")
        self._csv.writerow(NOTE_HEADER)
        self.rows = 0

    def write(self, row: tuple) -> None:
        self._csv.writerow(row)
        self.rows += 1

    def close(self) -> None:
        self._text.close()
        self._raw.close()
        self._part.replace(self.path)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def generate_notes(out_dir: Path, *, patients: int = 100, seed: int = 42) -> NotesResult:
    """Write note/discharge.csv.gz, note/radiology.csv.gz and note_truth.json into `out_dir`.

    Follows `out_dir/hosp/` when it exists (its patients, admissions and codes); otherwise
    invents `patients` subjects. Same inputs and seed -> same bytes.
    """
    out_dir = Path(out_dir)
    rng = random.Random(f"notes/{seed}")
    hosp = out_dir / "hosp"
    subjects = (
        _subjects_from_hosp(hosp)
        if (hosp / "patients.csv.gz").exists()
        else _invented_subjects(patients, rng)
    )
    discharge = _Writer(out_dir / "note" / "discharge.csv.gz")
    radiology = _Writer(out_dir / "note" / "radiology.csv.gz")
    truth: dict[str, dict[str, list[int]]] = {
        p: {"present": [], "uncertain": [], "coded": []} for p in PHENOTYPES
    }
    with_notes: list[int] = []
    for s in subjects:
        if not s.admissions:
            continue
        prng = random.Random(f"notes/{seed}/{s.subject_id}")
        states = _truth(s, prng)
        with_notes.append(s.subject_id)
        for p, state in states.items():
            if state != "absent":
                truth[p][state].append(s.subject_id)
            if p in s.coded:
                truth[p]["coded"].append(s.subject_id)
        # The mentions go to the last admission's summary; earlier admissions get plain notes.
        parts: dict[str, list[str]] = {
            "hpi": [],
            "pmh": [],
            "course": [],
            "family": [],
            "dx": [],
            "instr": [],
        }
        rad_findings: list[str] = []
        for p, state in states.items():
            for section, sentences in _sentences(prng, p, state, p in s.coded).items():
                parts[section].extend(sentences)
            if p == "heart failure" and state == "present" and prng.random() < 0.5:
                rad_findings.append("Findings consistent with mild congestive heart failure.")
            if p == "pulmonary hypertension" and state == "absent" and prng.random() < 0.05:
                rad_findings.append("No radiographic evidence of pulmonary hypertension.")
        empty: dict[str, list[str]] = {k: [] for k in parts}
        for i, (hadm, admit, disch) in enumerate(s.admissions):
            last = i == len(s.admissions) - 1
            text = _discharge_text(prng, s, parts if last else empty)
            store = disch + timedelta(hours=prng.randint(2, 30))
            discharge.write(
                (f"{s.subject_id}-DS-{i + 1}", s.subject_id, hadm, "DS", i + 1, _ts(disch), _ts(store), text)
            )
            rtime = admit + timedelta(hours=prng.randint(1, 12))
            findings = rad_findings if last else []
            radiology.write(
                (
                    f"{s.subject_id}-RR-{i + 1}",
                    s.subject_id,
                    hadm,
                    "RR",
                    i + 1,
                    _ts(rtime),
                    _ts(rtime + timedelta(hours=1)),
                    _radiology_text(prng, findings),
                )
            )
    discharge.close()
    radiology.close()
    truth_path = out_dir / TRUTH_FILE
    truth_path.write_text(
        json.dumps({"seed": seed, "subjects": with_notes, "phenotypes": truth}, indent=1, sort_keys=True)
    )
    return NotesResult(discharge.rows, radiology.rows, len(with_notes), truth_path)


def read_truth(path: Path) -> dict:
    """The truth file: {"subjects": [...], "phenotypes": {name: {"present", "uncertain", "coded"}}}."""
    return json.loads(Path(path).read_text())
