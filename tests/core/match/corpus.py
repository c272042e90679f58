"""The match stage's fixture corpus: a small library and hundreds of questions, each with the decision
the matcher makes (the SQL it answers with, or the code it refuses with). A rule or a word list that
changes a decision shows up as a diff of `fixtures/cases.jsonl`.

The library is the demo's seed (benchmarks/data/mimiciv/train.json) and the hand-written
EHRSQL-shaped examples of `fixtures/library.json`. The questions: every library question, the
paraphrases of the demo's test split, each answerable library question with other values, with one
condition more, and with an operator word swapped, and the adversarial questions the demo library
must never answer. Pure: no database, no model. The masked questions' MiniLM vectors and the
are stored beside the cases (`vectors.npz`), so the test needs
neither the encoder nor a calibration run. P(correct) is the library's hand-set risk model
(match.DEFAULT_RISK, what a library answers with before its first calibration): the corpus is
about the rules, and a risk fitted on a library this small says little.

Regenerate after a deliberate change (embeds with the app's encoder, rewrites the expected decisions;
review the diff before committing it):

    .venv/bin/python -m tests.core.match.corpus --update
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rapidfuzz import fuzz, process

from core.match import (
    DEFAULT_RISK,
    Calibration,
    LibraryIndex,
    ValueIndex,
    bind_sql,
    build_template,
    decide,
    entry_for,
    mask_question,
    match_library,
)
from core.match.spans import VALUE

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEMO = ROOT / "benchmarks" / "data" / "mimiciv"
CASES = FIXTURES / "cases.jsonl"
VECTORS = FIXTURES / "vectors.npz"
RISK = DEFAULT_RISK

# One condition more than the example says: the library must not answer with the example's SQL.
CONDITIONS = (" for female patients", " among patients who died in the hospital", " in the ICU",
              " after an emergency admission", " with a sepsis diagnosis")  # fmt: skip
# Operator words and the word that flips them.
SWAPS = (("first", "last"), ("last", "first"), ("maximum", "minimum"), ("minimum", "maximum"),
         ("highest", "lowest"), ("lowest", "highest"), ("average", "total"), ("since", "before"),
         ("how many", "what is the average number of"), ("most", "least"))  # fmt: skip
# Each adds a condition, negates, or swaps an operator relative to one of the demo library's examples
# ("count the number of patients older than 65" -> "… older than 70 who died in the hospital"):
# never answered wrong (tests/askdb/test_library_demo_adversarial.py asks them of the app too). A few
# add a condition another verified question expresses: composed answers (core/match/compose.py) may
# answer those, and only with the SQL in ANSWERED_RIGHT.
MUST_ABSTAIN = [
    "count the number of patients older than 70 who died in the hospital.",
    "count the number of patients older than 70 with an ICU stay.",
    "how many patients over 85 had sepsis and were admitted to the ICU?",
    "count the number of female patients older than 65.",
    "count the number of patients older than 65 who were never admitted.",
    "how many patients died in the hospital after an ICU stay?",
    "how many female patients died in 2155?",
    "what is the average age of male patients who died?",
    "what is the average age of male patients with diabetes?",
    "how many times was patient 10014354 admitted to the hospital through the emergency room?",
    "what was the maximum sodium value of patient 10014354 in the ICU in 2148?",
    "how many patients were prescribed heparin and warfarin in 2150?",
    "what was the first creatinine value of patient 10004235 in the ICU?",
    "what are the top 5 most frequent diagnoses of female patients?",
    "count the number of patients diagnosed with atrial fibrillation who died.",
    "what was the minimum platelet count of patient 10020740 before 2150?",
    "how many patients were not prescribed heparin in 2150?",
    "what is the average age of male patients without insurance?",
    # An aggregate swapped (core/match/swap.py): right where the library maps the word to the function
    # and the column takes it; never for two functions, nor a total of a column the library never sums.
    "what is the minimum age of male patients?",
    "what is the average count of male patients?",
    "what is the minimum average age of male patients?",
    "what is the total age of male patients?",
    # First and last swapped (core/match/direction.py): right where the library shows the column
    # ordered both ways, or one template says one end and picks it on that column alone (the
    # microbiology test, the service: answered right); never for two operators flipped at once, a
    # visit that is neither first nor last, a list sorted for reading ("for each first care unit": a
    # column's name), both ends, or a negation.
    "what organism was found in the last blood culture test of patient 10037861?",
    "what was the last service of patient 10020740 in the last hospital visit?",
    "what was the average ICU length of stay in days for each last care unit?",
    "what organism was found in the first and the last blood culture test of patient 10037861?",
    "what organism was not found in the last blood culture test of patient 10037861?",
    # A comparison word learned from one template ("since 2148" beside "in 2150"): never a word no
    # template writes for that form ("before"), nor two time words.
    "how many hospital admissions have there been before 2148?",
    "how many hospital admissions have there been since 2148 until 2150?",
    # The outer of two functions swapped (swap.py): never one word for two, nor a count.
    "what is the minimum total age of male patients?",
    "what is the number of the average age of male patients?",
    "what was the first potassium value of patient 10002428 in the last hospital visit?",
    "what was the insurance of patient 10021118 at the current hospital visit?",
    # A comparison flipped (core/match/compared.py): right where the library shows both words' operators
    # for the comparison's form (two subqueries compared); never for a comparison word that compares
    # something else (a threshold), two comparisons at once, or a negation.
    "was the last heart rate of patient 10002428 less than the first heart rate?",
    "was the last heart rate of patient 10004235 less than 100?",
    "was the last heart rate of patient 10004235 greater than the first heart rate and less than 100?",
    "was the last heart rate of patient 10004235 not greater than the first heart rate?",
    "was the last heart rate of patient 10004235 greater than 100 than the first heart rate?",
    # A time period said another way (core/match/retimed.py): right where the library shows the
    # question's time phrase and the base's writing two conditions in one frame; never for two time
    # phrases, a time about another event than the one the condition filters, a negation, or a phrase
    # the library never shows ("months ago": it shows "year ago").
    "how many times was patient 10004235 admitted to the hospital since 1 year ago?",
    "how many times was patient 10004235 admitted to the hospital since 1 year ago in 2150?",
    "how many patients were diagnosed with acute kidney failure, unspecified after an admission since 1 year ago?",
    "how many patients diagnosed with acute kidney failure, unspecified were admitted since 1 year ago?",
    "how many times was patient 10004235 admitted to the hospital, except since 1 year ago?",
    "how many times was patient 10004235 admitted to the hospital since 2 months ago?",
    # An age decade (one slot, both bounds: "in their 30s" beside the library's 40s and 60s): never
    # two decades, a negated one, a threshold for a decade, or a decade with a condition more.
    "how many patients are in their 30s or 40s?",
    "how many patients are not in their 30s?",
    "how many patients in their 30s died in the hospital?",
    "how many patients are in their 30s or older?",
    # A table swap (core/match/retabled.py: a diagnosis template over procedures, or the reverse,
    # where the library shows the tables used alike in two shapes): never for a question that names
    # the old table's subject, both tables, a negation, or an item the new table does not hold.
    "how many patients had the procedure acute kidney failure, unspecified since 2150?",
    "how many patients were diagnosed with acute kidney failure, unspecified after the procedure since 2150?",
    "how many patients were not diagnosed with acute kidney failure, unspecified since 2150?",
    "how many patients had the procedure heparin since 2150?",
    # A role swap (retabled.py: an event table renamed with its own columns, a care unit's stay for a
    # drug's order): never for the old side's verb, both sides' items, a negation, an item of neither.
    "how many patients stayed in heparin in 2150?",
    "how many patients stayed in medicine and were prescribed heparin in 2150?",
    "how many patients were not prescribed heparin in medicine in 2150?",
    "how many patients stayed in colonoscopy in 2150?",
    # "medicine" says "drug" (a synonym of the bound column's name) but names a care unit here: a
    # prescriptions count that binds heparin would drop it (answered wrong until session 16).
    "how many patients in medicine were prescribed heparin in 2150?",
    # A time drop (core/match/untimed.py: the base's time condition left out where the question says
    # no time): never for a negation of a time, or a time about another event.
    "how many times was heparin prescribed to patient 10004235 but not since 2150?",
    "how many times was heparin prescribed to patient 10004235 before the ICU stay?",
    # A subject swap (retabled.py: a template that names no item over the other side's tables): never
    # for an item named, both sides' subjects, or a negation.
    "was patient 10004235 given any diagnosis of sepsis on the first hospital visit?",
    "was patient 10004235 given any procedure or diagnosis on the first hospital visit?",
    "was patient 10004235 not given any diagnosis on the first hospital visit?",
    # A lab value for a chart value across their paths (retabled.py with paths.py: the ICU stay hop
    # and the dictionary's link learned from the library): never an ICU stay asked of a lab value, a
    # chart item asked as a lab test, both sides' items, or a negation.
    "what was the first lactate value of patient 10039708 during the last icu stay?",
    "what was the first heart rate lab test value of patient 10039708?",
    "was the last lactate of patient 10004235 greater than the first heart rate?",
    "what was the last hemoglobin value of patient 10014354 not measured in the icu?",
    # "recently" names no period: a count over all time would drop it (answered until session 17;
    # "most recently" is the last one, which the operator signature reads).
    "how many times was heparin prescribed to patient 10004235 recently?",
    "has patient 10014354 recently been prescribed insulin?",
    # A selected column swapped (core/match/reselected.py: the column a base returns for another of its
    # table, where two library templates alike but for it show each phrase's column): never for both
    # columns named, a negation, a column of a table the base does not read, or an aggregate of one.
    "what was the insurance and admission type of patient 10021118 at the first hospital visit?",
    "what was not the insurance of patient 10021118 at the first hospital visit?",
    "what was the gender of patient 10021118 at the first hospital visit?",
    "what was the maximum insurance of patient 10021118 at the first hospital visit?",
    # A time returned in place of a value (core/match/timed.py: the time column of the base's table the
    # question names, its word learned from the library's templates that read it as a time): never for
    # two times, a negation, the value and the time asked together, a duration, or another table's time.
    "when was patient 10021118 admitted and discharged at the first hospital visit?",
    "when was patient 10021118 not discharged from the hospital at the first hospital visit?",
    "how old was patient 10021118 and when was the patient discharged at the first hospital visit?",
    "how many days was patient 10021118 in the hospital before the discharge at the first hospital visit?",
    "when was patient 10021118 transferred to the icu at the first hospital visit?",
    # "the first discharge", "discharged for the last time" are that visit (operators._DISCHARGE): never
    # for an event after it, a discharge location, or the discharge from the ICU (no hospital visit).
    "what was the first drug prescribed to patient 10021118 after the first discharge?",
    "when was the first time patient 10021118 was discharged to home?",
    "when was patient 10021118's first discharge from the icu?",
    "when was patient 10021118 last discharged from the icu?",
    # A visit swapped (core/match/revisited.py: the visit subquery renamed where two library shapes show
    # it): never two visits named, a visit word with no visit meaning, the admission type, an ICU stay
    # for a hospital visit, a negation, or another patient's visit.
    "what was the insurance of patient 10021118 at the first hospital visit or the current hospital visit?",
    "what was the insurance of patient 10021118 when they visit the lab?",
    "what was the insurance of patient 10021118 on an urgent admission?",
    "what was the insurance of patient 10021118 at the current icu stay?",
    "what was the insurance of patient 10021118 not at the current hospital visit?",
    "what was the insurance of patient 10021118 at the first hospital visit of patient 10035185?",
    # … and a period left out with every visit renamed to one (revisited.py: "… on the first hospital
    # visit" from the verified "… since 2150"): never a negation, an ICU stay for a hospital visit,
    # another patient's visit, or a visit with another period the question says.
    "how many times was heparin prescribed to patient 10004235 not on the first hospital visit?",
    "how many times was heparin prescribed to patient 10004235 on the first icu stay?",
    "how many times was heparin prescribed to patient 10004235 on the first hospital visit of patient 10006580?",
    "how many times was heparin prescribed to patient 10004235 on the first hospital visit since 1 year ago?",
    "what is the average glucose value of patient 10004235 during the last hospital visit since 1 year ago?",
    # The relation between two events replaced (core/match/related.py: "within 2 days" for "within the
    # same day" where the library shows both relations in one frame): never for the events in the other
    # order, a unit the library shows for no relation, two relations, a negation, or a number with a
    # unit that is no relation ("for 2 days").
    "what drug was patient 10020740 prescribed within 2 days before the procedure insertion of endotracheal tube in 2150?",
    "what drug was patient 10020740 prescribed within 2 months after the procedure insertion of endotracheal tube in 2150?",
    "what drug was patient 10020740 prescribed within 2 days after the procedure insertion of endotracheal tube within the same hospital visit in 2150?",
    "what drug was patient 10020740 not prescribed within 2 days after the procedure insertion of endotracheal tube in 2150?",
    "what drug was patient 10020740 prescribed for 2 days after the procedure insertion of endotracheal tube in 2150?",
    # … and right where the library shows it: the question's N bound, the visit returned by each event
    "what drug was patient 10020740 prescribed within 3 days after the procedure insertion of endotracheal tube in 2150?",
    "what drug was patient 10020740 prescribed within the same hospital visit after the procedure insertion of endotracheal tube in 2150?",
]
ANSWERED_RIGHT: dict[str, str | tuple[str, ...]] = {
    "what drug was patient 10020740 prescribed within 3 days after the procedure insertion of endotracheal tube in 2150?": (
        "SELECT t2.drug FROM (SELECT pr.subject_id, pr.chartdate FROM mimiciv_hosp.procedures_icd AS pr JOIN "
        "mimiciv_hosp.d_icd_procedures AS dp ON dp.icd_code = pr.icd_code WHERE pr.subject_id = 10020740 AND "
        "dp.long_title = 'Insertion of endotracheal tube' AND EXTRACT(YEAR FROM pr.chartdate) = 2150) AS t1 J"
        "OIN (SELECT p.subject_id, p.drug, p.starttime FROM mimiciv_hosp.prescriptions AS p WHERE p.subject_i"
        "d = 10020740 AND EXTRACT(YEAR FROM p.starttime) = 2150) AS t2 ON t1.subject_id = t2.subject_id WHERE"
        " t1.chartdate < t2.starttime AND t2.starttime BETWEEN t1.chartdate AND t1.chartdate + INTERVAL '3 DA"
        "Y'"
    ),
    "what drug was patient 10020740 prescribed within the same hospital visit after the procedure insertion of endotracheal tube in 2150?": (
        "SELECT t2.drug FROM (SELECT pr.subject_id, pr.chartdate, pr.hadm_id FROM mimiciv_hosp.procedures_icd"
        " AS pr JOIN mimiciv_hosp.d_icd_procedures AS dp ON dp.icd_code = pr.icd_code WHERE pr.subject_id = 1"
        "0020740 AND dp.long_title = 'Insertion of endotracheal tube' AND EXTRACT(YEAR FROM pr.chartdate) = 2"
        "150) AS t1 JOIN (SELECT p.subject_id, p.drug, p.starttime, p.hadm_id FROM mimiciv_hosp.prescriptions"
        " AS p WHERE p.subject_id = 10020740 AND EXTRACT(YEAR FROM p.starttime) = 2150) AS t2 ON t1.subject_i"
        "d = t2.subject_id WHERE t1.chartdate < t2.starttime AND t1.hadm_id = t2.hadm_id"
    ),
    "was the last heart rate of patient 10002428 less than the first heart rate?": (
        "SELECT (SELECT c.valuenum FROM mimiciv_icu.chartevents AS c JOIN mimiciv_icu.d_items AS di "
        "ON di.itemid = c.itemid WHERE c.subject_id = 10002428 AND di.label = 'Heart Rate' ORDER BY c.charttime DESC "
        "LIMIT 1) < (SELECT c.valuenum FROM mimiciv_icu.chartevents AS c JOIN mimiciv_icu.d_items AS di "
        "ON di.itemid = c.itemid WHERE c.subject_id = 10002428 AND di.label = 'Heart Rate' ORDER BY c.charttime ASC "
        "LIMIT 1)"
    ),
    "what is the minimum age of male patients?": (
        "SELECT MIN(p.anchor_age) AS min_age FROM mimiciv_hosp.patients AS p WHERE p.gender = 'M'"
    ),
    "what organism was found in the last blood culture test of patient 10037861?": (
        # the corpus's "first blood culture" template flipped, and the demo's "first urine test" (the app's
        # library: its date, charttime and event id order, each flipped)
        "SELECT m.org_name FROM mimiciv_hosp.microbiologyevents AS m WHERE m.subject_id = 10037861 AND "
        "m.spec_type_desc = 'BLOOD CULTURE' ORDER BY m.charttime DESC LIMIT 1",
        "SELECT m.org_name, m.chartdate FROM mimiciv_hosp.microbiologyevents AS m WHERE m.subject_id = 10037861 "
        "AND m.spec_type_desc = 'BLOOD CULTURE' AND m.org_name IS NOT NULL "
        "ORDER BY m.chartdate DESC, m.charttime DESC, m.microevent_id DESC LIMIT 1",
    ),
    "what was the last service of patient 10020740 in the last hospital visit?": (
        "SELECT s.curr_service, s.transfertime FROM mimiciv_hosp.services AS s WHERE s.hadm_id = (SELECT a.hadm_id FROM mimiciv_hosp.admissions AS a WHERE a.subject_id = 10020740 ORDER BY a.admittime DESC LIMIT 1) ORDER BY s.transfertime DESC LIMIT 1"
    ),
    "count the number of female patients older than 65.": (
        "SELECT COUNT(*) AS n_patients FROM mimiciv_hosp.patients AS p WHERE p.anchor_age > 65 AND p.gender = 'F'"
    ),
    "how many female patients died in 2155?": (
        "SELECT COUNT(*) AS n_patients FROM mimiciv_hosp.patients AS p "
        "WHERE EXTRACT(YEAR FROM p.dod) = 2155 AND p.gender = 'F'"
    ),
    "how many times was patient 10004235 admitted to the hospital since 1 year ago?": (
        "SELECT COUNT(*) FROM mimiciv_hosp.admissions AS a WHERE a.subject_id = 10004235 "
        "AND a.admittime >= CURRENT_TIMESTAMP - INTERVAL '1 YEAR'"
    ),
    "how many times was patient 10014354 admitted to the hospital through the emergency room?": (
        "SELECT COUNT(*) AS n_admissions FROM mimiciv_hosp.admissions AS a "
        "WHERE a.subject_id = 10014354 AND a.admission_location = 'EMERGENCY ROOM'"
    ),
}


def answered_right(question: str, sql: str) -> bool:
    """Whether `sql` is a right answer to the adversarial `question` (ANSWERED_RIGHT: one SQL, or the
    right SQL of each library that composes it another way)."""
    right = ANSWERED_RIGHT.get(question, ())
    return sql in ((right,) if isinstance(right, str) else right)


# How people write what the library says another way (issue 26), and the attacks on each reading:
# a time asked for is not answered with a value, nor the reverse ("first time patient … was
# prescribed a drug" wants the time; "the lactate the first time it was measured" the value); group-by
# said as "by", "per", "for each", "broken down by" reads alike, and a "by" that groups nothing
# ("prescribed by", "by 2150", "caused by") is no group-by.
READING = [
    "first time patient 10014354 was prescribed a drug?",
    "the first time patient 10020740 was prescribed a drug?",
    "first time, what drug was prescribed for patient 10014354?",
    "when was patient 10014354 first prescribed a drug?",
    "what was the lactate value of patient 10039708 the first time it was measured?",
    "what was the lactate of patient 10031404 at the first measurement?",
    "what was the time of the first lactate measurement of patient 10031404?",
    "when was lactate last measured for patient 10031404?",
    "what was the last time patient 10020740 was prescribed furosemide?",
    "what was furosemide last prescribed to patient 10020740?",
    "average length of stay in the ICU by first care unit",
    "what was the average ICU length of stay in days per first care unit?",
    "what was the average ICU length of stay in days broken down by first care unit?",
    "what was the average ICU length of stay across first care units?",
    "what was the average ICU length of stay in hours for each first care unit?",
    "what was the average ICU length of stay in days?",
    "what is the average age of patients by gender?",
    "what is the average age of male patients per year?",
    "how many times was heparin prescribed by the doctor to patient 10004235 since 2150?",
    "how many patients died by 2155?",
    "how many patients died in 2155, by any cause?",
    "how many patients died of causes caused by sepsis in 2155?",
    "when was patient 10021118 discharged from the hospital for the first time?",
    "what was the last time patient 10021118 was discharged from the hospital?",
    "how old was patient 10021118 at the first discharge?",
]
OTHER_IDS = ("10002428", "10014354", "10019003", "10031404", "10037861")


def _norm(sql: str) -> str:
    return " ".join(sql.lower().split()).rstrip(";")


@dataclass
class Corpus:
    index: LibraryIndex
    values: ValueIndex
    golds: list[str]  # each library entry's SQL as its template binds it


def library_items() -> list[dict]:
    demo = json.loads((DEMO / "train.json").read_text())
    mine = json.loads((FIXTURES / "library.json").read_text())
    return [{"question": i["question"], "sql": i.get("sql") or ""} for i in demo + mine]


def value_index(templates) -> ValueIndex:
    """The database values the corpus knows: those the library's examples name, by column."""
    columns: dict[str, set[str]] = {}
    for template in templates:
        for slot in template.slots:
            if slot.type == VALUE and slot.column:
                columns.setdefault(slot.column, set()).add(slot.value)
    return ValueIndex({c: sorted(v) for c, v in columns.items()})


def lookup_in(values: dict[str, list[str]]):
    """A value lookup over the known values: rapidfuzz's best five, exact spelling first."""

    def lookup(column: str, text: str) -> list[tuple[str, float]]:
        bare = ".".join(column.lower().split(".")[-2:])
        known = next((v for c, v in values.items() if ".".join(c.lower().split(".")[-2:]) == bare), [])
        hits = process.extract(text, known, scorer=fuzz.WRatio, limit=5)
        return [(v, score / 100) for v, score, _ in hits]

    return lookup


def questions() -> list[tuple[str, str]]:
    """(kind, question) of every case, in a stable order."""
    items = library_items()
    out = [("library", i["question"]) for i in items]
    out += [("paraphrase", i["question"]) for i in json.loads((DEMO / "test.json").read_text())]
    answerable = [i["question"] for i in items if i["sql"]]
    for n, q in enumerate(answerable):
        other = _other_values(q, n)
        if other != q:
            out.append(("values", other))
        out.append(("condition", _with_condition(q, CONDITIONS[n % len(CONDITIONS)])))
        swapped = _swapped(q)
        if swapped != q:
            out.append(("operator", swapped))
    out += [("adversarial", q) for q in MUST_ABSTAIN]
    out += [("reading", q) for q in READING]
    return list(dict.fromkeys(out))


def _other_values(question: str, n: int) -> str:
    question = re.sub(r"\b1\d{7}\b", OTHER_IDS[n % len(OTHER_IDS)], question)
    question = re.sub(r"\b(21[0-9]{2})\b", lambda m: str(int(m.group(1)) + 1), question)
    return re.sub(
        r"\b(older than|over|more than|at least) (\d{2})\b",
        lambda m: f"{m.group(1)} {int(m.group(2)) + 5}",
        question,
    )


def _with_condition(question: str, condition: str) -> str:
    stripped = question.rstrip(" ?.")
    return stripped + condition + question[len(stripped) :]


def _swapped(question: str) -> str:
    for old, new in SWAPS:
        pattern = rf"\b{old}\b"
        if re.search(pattern, question, flags=re.I):
            return re.sub(pattern, new, question, count=1, flags=re.I)
    return question


def build() -> Corpus:
    entries, golds = [], []
    for n, item in enumerate(library_items()):
        template = build_template(item["question"], item["sql"]) if item["sql"] else None
        entry = entry_for(n, item["question"], item["sql"], template)
        if entry is None:
            continue
        entries.append(entry)
        golds.append(bind_sql(template, {s.name: s.value for s in template.slots}) if template else "")
    values = value_index(e.template for e in entries if e.template)
    masked = [mask_question(e.question, values) for e in entries]
    return Corpus(LibraryIndex(entries, vectors_for(masked)), values, golds)


def _values_by_column(corpus: Corpus) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for e in corpus.index.entries:
        for s in e.template.slots if e.template else ():
            if s.type == VALUE and s.column:
                out.setdefault(s.column, set()).add(s.value)
    return {c: sorted(v) for c, v in out.items()}


_VECTORS: dict[str, np.ndarray] = {}


def vectors_for(texts: list[str]) -> np.ndarray:
    """The stored MiniLM vectors of these masked texts (`--update` stores new ones)."""
    if not _VECTORS and VECTORS.is_file():
        data = np.load(VECTORS, allow_pickle=False)
        _VECTORS.update(zip(data["texts"].tolist(), data["vectors"].astype(np.float32), strict=True))
    missing = [t for t in texts if t not in _VECTORS]
    if missing:
        raise LookupError(
            f"{len(missing)} masked questions have no stored vector (e.g. {missing[0]!r}): "
            "a change to masking? Run `python -m tests.core.match.corpus --update`."
        )
    return np.stack([_VECTORS[t] for t in texts]) if texts else np.zeros((0, 384), dtype=np.float32)


def decisions(corpus: Corpus, risk: Calibration) -> list[dict]:
    """Every case's decision: the SQL answered (and from which example), or the refusal code."""
    lookup = lookup_in(_values_by_column(corpus))
    cases = questions()
    vectors = vectors_for([mask_question(q, corpus.values) for _, q in cases])
    out = []
    for n, ((kind, question), vector) in enumerate(zip(cases, vectors, strict=True)):
        found = match_library(question, vector, corpus.index, lookup=lookup, values=corpus.values, risk=risk)
        best, competitors = decide(found.results, risk.threshold)
        top = found.best
        case = {"id": n, "kind": kind, "question": question}
        if best is not None:
            case |= {"answer": best.sql, "from": best.example_id, "competitors": len(competitors)}
        elif top is None:
            case |= {"refused": "no_template"}
        else:
            case |= {"refused": top.reason_codes[0] if top.reason_codes else "below_threshold"}
        case["p"] = round(top.confidence, 2) if top is not None else 0.0
        out.append(case)
    return out


def update() -> None:
    """Embed every masked text with the app's encoder, rewrite the expected cases."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()
    from infra.providers.embeddings import get_embedder

    items = library_items()
    templates = [build_template(i["question"], i["sql"]) for i in items if i["sql"]]
    values = value_index(t for t in templates if t.usable)
    texts = sorted({mask_question(i["question"], values) for i in items}
                   | {mask_question(q, values) for _, q in questions()})  # fmt: skip
    vectors = np.asarray(get_embedder().embed(texts), dtype=np.float16)
    np.savez_compressed(VECTORS, texts=np.array(texts), vectors=vectors)
    _VECTORS.clear()
    cases = decisions(build(), RISK)
    CASES.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in cases))
    answered = sum(1 for c in cases if "answer" in c)
    print(f"{len(cases)} cases ({answered} answered), {len(texts)} vectors")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="re-embed and rewrite the expected cases")
    args = parser.parse_args(argv)
    if args.update:
        update()
        return 0
    parser.print_help()
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
