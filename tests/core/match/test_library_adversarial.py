"""No answer that drops a condition: questions one step away from a library question must abstain.

Each case takes a question of the EHRSQL-2024 train split (in the test library) and adds a
condition, negates it, or swaps an operator. The library (a slice of train plus every paraphrase of
the originals' SQL) answers through core.match.match_library with a risk model cross-validated on
that library, exactly as the app does. A case passes when the matcher abstains, or answers with SQL
whose result equals the case's gold (given only for swaps whose meaning the library does hold).

Reads ../shared/ehrsql-2024-dev (the benchmark's own data); under CI=true missing data fails.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "ehrsql-2024-dev"
AS_OF = "2100-12-31 23:59:00"

# (original question in train, adversarial question, gold SQL transform or None = must abstain)
CASES: list[tuple[str, str, tuple[str, str] | None]] = [
    # added conditions
    ("How many patients were given a triiodothyronine (t3) lab test since 1 year ago?",
     "How many female patients were given a triiodothyronine (t3) lab test since 1 year ago?", None),
    ("How many patients were given a triiodothyronine (t3) lab test since 1 year ago?",
     "How many patients who died in the hospital were given a triiodothyronine (t3) lab test since 1 year ago?", None),
    ("How many patients were given a triiodothyronine (t3) lab test since 1 year ago?",
     "How many patients older than 70 were given a triiodothyronine (t3) lab test since 1 year ago?", None),
    ("Count the number of hospital visits patient 10021118 had since 2100.",
     # a condition another train question expresses: composed (core/match/compose.py), right or abstain
     "Count the number of hospital visits patient 10021118 had through the emergency room since 2100.",
     ("WHERE admissions.subject_id", "WHERE admissions.admission_location = 'emergency room' AND admissions.subject_id")),
    ("Count the number of hospital visits patient 10021118 had since 2100.",
     "Count the number of hospital visits with a sepsis diagnosis patient 10021118 had since 2100.", None),
    ("What was the total vitamin d dose that has been prescribed in 05/2100 to patient 10035185?",
     "What was the total vitamin d dose that has been prescribed intravenously in 05/2100 to patient 10035185?", None),
    ("What was the total vitamin d dose that has been prescribed in 05/2100 to patient 10035185?",
     "What was the total vitamin d dose that has been prescribed in 05/2100 to patient 10035185 in the ICU?", None),
    ("What is the maximum total cost for a hospital visit that involved a uric acid lab test in 2100?",
     "What is the maximum total cost for a hospital visit of female patients that involved a uric acid lab test in 2100?", None),
    ("What is the maximum total cost for a hospital visit that involved a uric acid lab test in 2100?",
     "What is the maximum total cost for a hospital visit that involved a uric acid lab test and a sodium lab test in 2100?", None),
    ("What was the maximum value of creatinine in patient 10031404's body since 05/2100?",
     "What was the maximum value of creatinine in patient 10031404's body since 05/2100 while in the ICU?", None),
    ("Tell me the total number of patients who stayed in neuro stepdown in 2100.",
     "Tell me the total number of patients who stayed in neuro stepdown in 2100 and were older than 60.", None),
    ("Tell me the total number of patients who stayed in neuro stepdown in 2100.",
     "Tell me the total number of patients who died after they stayed in neuro stepdown in 2100.", None),
    ("Was patient 10002428 to the er during their last hospital visit?",
     "Was patient 10002428 to the er twice during their last hospital visit?", None),
    ("What was the number of patients receiving excision of dental lesion of jaw in 2100?",
     "What was the number of patients receiving excision of dental lesion of jaw in 2100 who were later readmitted?", None),
    ("What was the total amount of polyethylene glycol prescribed to patient 10037861 since 08/2100?",
     "What was the total amount of polyethylene glycol prescribed to patient 10037861 since 08/2100 by mouth?", None),
    ("How many people had a test for amylase, body fluid?",
     "How many people had an abnormal test for amylase, body fluid?", None),
    ("How many people had a test for amylase, body fluid?",
     "How many men over 50 had a test for amylase, body fluid?", None),
    ("List the top five most common diagnoses in this year.",
     "List the top five most common diagnoses among women in this year.", None),
    ("List the top five most common diagnoses in this year.",
     "List the top five most common diagnoses in this year in patients over 80.", None),
    ("How much is the drug morphine sr (ms contin)?",
     "How much is the drug morphine sr (ms contin) for patients on medicare?", None),
    ("Can you tell me how much lansoprazole oral disintegrating tab costs?",
     "Can you tell me how much lansoprazole oral disintegrating tab costs per ICU day?", None),
    ("What is the void output for patient 10018845 since 103 days ago?",
     "What is the void output for patient 10018845 since 103 days ago during night shifts?", None),
    ("When was the last microbiological test of patient 10037861 since 01/2100?",
     "When was the last microbiological test of patient 10037861 since 01/2100 that found an organism resistant to vancomycin?", None),
    ("How many sodium bicarbonate prescription instances occurred since 1 year ago?",
     "How many sodium bicarbonate prescription instances occurred in the ICU since 1 year ago?", None),
    ("How many sodium bicarbonate prescription instances occurred since 1 year ago?",
     "How many sodium bicarbonate prescription instances occurred since 1 year ago for patients with diabetes?", None),
    ("Tell me the top four most common specimens tested since 1 year ago.",
     "Tell me the top four most common specimens tested in children since 1 year ago.", None),
    ("What are the three diagnoses with the lowest 3-month survival rate?",
     "What are the three diagnoses with the lowest 3-month survival rate among female patients?", None),
    ("Show me the top four diagnoses with the highest 6-month mortality rate.",
     "Show me the top four diagnoses with the highest 6-month mortality rate in the elderly.", None),
    ("How many hours have elapsed since patient 10018081's first stay in the careunit emergency department on this hospital encounter?",
     "How many hours have elapsed since patient 10018081's first stay in the careunit emergency department on this hospital encounter after surgery?", None),
    ("What was the drug name that patient 10024043 was last prescribed through the oral route on the last hospital stay?",
     "What was the drug name that patient 10024043 was last prescribed through the oral route on the last hospital stay, apart from antibiotics?", None),
    ("What was the number of patients that were given a protein test since 2100?",
     "What was the number of patients that were given a protein test since 2100 and had a positive blood culture?", None),
    ("Tell me the name of the organism found in patient 10019172's last urine microbiology tests since 10/2100?",
     "Tell me the name of the organism found in patient 10019172's last urine microbiology tests since 10/2100 that was resistant to penicillin?", None),
    # negations
    ("How many patients were given a triiodothyronine (t3) lab test since 1 year ago?",
     "How many patients were not given a triiodothyronine (t3) lab test since 1 year ago?", None),
    ("Tell me the total number of patients who stayed in neuro stepdown in 2100.",
     "Tell me the total number of patients who never stayed in neuro stepdown in 2100.", None),
    ("Was patient 10002428 to the er during their last hospital visit?",
     "Was patient 10002428 never to the er during their last hospital visit?", None),
    ("What was the drug name that patient 10024043 was last prescribed through the oral route on the last hospital stay?",
     "What was the drug name that patient 10024043 was last prescribed not through the oral route on the last hospital stay?", None),
    ("How many people had a test for amylase, body fluid?",
     "How many people had no test for amylase, body fluid?", None),
    ("What was the number of patients that were given a protein test since 2100?",
     "What was the number of patients that were never given a protein test since 2100?", None),
    ("List the top five most common diagnoses in this year.",
     "List the diagnoses that were not among the top five most common in this year.", None),
    # swapped operators (the library may hold the swapped meaning: then it must be answered right)
    ("What was the maximum value of creatinine in patient 10031404's body since 05/2100?",
     "What was the minimum value of creatinine in patient 10031404's body since 05/2100?", ("MAX(", "MIN(")),
    ("What is patient 10039831's maximum asparate aminotransferase (ast) value in their current hospital visit?",
     "What is patient 10039831's minimum asparate aminotransferase (ast) value in their current hospital visit?", ("MAX(", "MIN(")),
    ("What was the total amount of polyethylene glycol prescribed to patient 10037861 since 08/2100?",
     "What was the average amount of polyethylene glycol prescribed to patient 10037861 since 08/2100?", ("SUM(", "AVG(")),
    ("What is the maximum total cost for a hospital visit that involved a uric acid lab test in 2100?",
     "What is the minimum total cost for a hospital visit that involved a uric acid lab test in 2100?", ("MAX(", "MIN(")),
    ("How many patients were given a triiodothyronine (t3) lab test since 1 year ago?",
     "How many patients were given a triiodothyronine (t3) lab test before 1 year ago?", None),
    ("Count the number of hospital visits patient 10021118 had since 2100.",
     "Count the number of hospital visits patient 10021118 had before 2100.", None),
    ("What is the void output for patient 10018845 since 103 days ago?",
     "What is the void output for patient 10018845 until 103 days ago?", None),
    ("List the top five most common diagnoses in this year.",
     "List the top five least common diagnoses in this year.", None),
    ("Show me the top four diagnoses with the highest 6-month mortality rate.",
     "Show me the top four diagnoses with the lowest 6-month mortality rate.", None),
    ("What are the three diagnoses with the lowest 3-month survival rate?",
     "What are the three diagnoses with the highest 3-month survival rate?", None),
    ("How many hours have elapsed since patient 10018081's first stay in the careunit emergency department on this hospital encounter?",
     "How many hours have elapsed since patient 10018081's last stay in the careunit emergency department on this hospital encounter?",
     ("intime ASC", "intime DESC")),
    ("What was the drug name that patient 10024043 was last prescribed through the oral route on the last hospital stay?",
     # first for last on a column the library orders both ways (core/match/direction.py): right or abstain
     "What was the drug name that patient 10024043 was first prescribed through the oral route on the last hospital stay?",
     ("prescriptions.starttime DESC LIMIT 1 )", "prescriptions.starttime ASC LIMIT 1 )")),
    ("Tell me the top four most common specimens tested since 1 year ago.",
     "Tell me the four least common specimens tested since 1 year ago.", None),
    # a time period said another way (core/match/retimed.py): "in the last year" is the previous
    # calendar year wherever the library says it (46 train questions, none the past twelve months)
    ("How many sodium bicarbonate prescription instances occurred since 1 year ago?",
     "How many sodium bicarbonate prescription instances occurred in the last year?",
     ("datetime(prescriptions.starttime) >= datetime(current_time,'-1 year')",
      "datetime(prescriptions.starttime,'start of year') = datetime(current_time,'start of year','-1 year')")),
    ("When was the last microbiological test of patient 10037861 since 01/2100?",
     "When was the last microbiological test of patient 10037861 before 01/2100?", None),
    # another asked-for thing: a name where the SQL returns a time
    ("What was the last input time of patient 10026354 since 03/12/2100?",
     "What was the name of the last input of patient 10026354 since 03/12/2100?", None),
    ("When was patient 10006053's last input during their last ICU visit?",
     "What was the name of patient 10006053's last input during their last ICU visit?", None),
    # another subject where the wording around it is the same: abstain or answer with the other table
    ("Was patient 10037861 through any procedure in the first hospital visit?",
     "Was patient 10037861 given any diagnosis in the first hospital visit?", ("procedures_icd", "diagnoses_icd")),
    ("Has patient 10020306 been given any diagnosis since 2100?",
     "Has patient 10020306 been given any procedure since 2100?", ("diagnoses_icd", "procedures_icd")),
    ("How many aspirin prescriptions were administered since 2100?",
     "How many aspirin prescriptions were administered to female patients since 2100?", None),
    ("Has patient 10018081 gone through any procedure?",
     "Has patient 10018081 never gone through any procedure?", None),
    ("Has patient 10006580 been through any procedure?",
     "Has patient 10006580 been through any procedure in the ICU?", None),
    ("What was the last input time of patient 10026354 since 03/12/2100?",
     "What was the last input time of patient 10026354 since 03/12/2100 that was not saline?", None),
]  # fmt: skip


def _skeleton(sql: str) -> str:
    return re.sub(r"'[^']*'|\b\d+(?:\.\d+)?\b", "?", " ".join(sql.lower().split()))


@pytest.fixture(scope="module")
def ehrsql():
    if not (DATA / "train" / "label.json").is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"EHRSQL data missing at {DATA}")
        pytest.skip("EHRSQL data not available")
    from askdb.adapters.ports import column_values_like
    from core import match as L
    from core.asof import AsOfExecutor
    from core.compare import results_match
    from core.match import build_template, mask_question
    from infra.adapters.clinical import SqliteExecutor
    from infra.providers.embeddings import LocalEmbedder

    data = json.loads((DATA / "train" / "data.json").read_text())["data"]
    labels = json.loads((DATA / "train" / "label.json").read_text())
    train = [(d["question"], "" if labels[d["id"]] == "null" else labels[d["id"]]) for d in data]
    sql_of = dict(train)
    originals = {_skeleton(sql_of[o]) for o, _, _ in CASES}
    chosen = [
        (q, s) for n, (q, s) in enumerate(train) if n % 5 == 0 or (s and _skeleton(s) in originals)
    ]  # a slice of train, and every paraphrase of the originals' SQL
    executor = AsOfExecutor(SqliteExecutor(str(DATA / "mimic_iv.sqlite")), dialect="sqlite", as_of=AS_OF)
    # The executor's authorizer refuses sqlite_master to generated SQL; tables() introspects.
    value_index = L.load_values(executor, {t.name.lower(): t.name for t in executor.tables()}, "sqlite")
    entries = [
        e
        for n, (q, s) in enumerate(chosen)
        if (e := L.entry_for(n, q, s, build_template(q, s, dialect="sqlite") if s else None))
    ]
    embedder = LocalEmbedder()
    index = L.LibraryIndex(entries, embedder.embed([mask_question(e.question, value_index) for e in entries]))

    def lookup(column: str, text: str):
        return column_values_like(executor, column, text, dialect="sqlite")

    def rows(sql: str):
        return executor.execute(sql, timeout_s=30, row_cap=1000).rows

    def probe(sql: str) -> bool:
        return bool(rows(sql))

    def same(sql: str, gold: str) -> bool:
        return results_match(rows(sql), rows(gold))

    samples = L.cross_validate(
        index, lambda held: index.matrix[held], lookup=lookup, values=value_index,
        is_correct=lambda entry, best: same(best.sql, entry.template.sql), probe=probe,
    )  # fmt: skip
    risk = L.fit_risk(samples, wrong_answer_cost=10)
    return {
        "index": index, "values": value_index, "embedder": embedder, "lookup": lookup, "risk": risk,
        "same": same, "sql_of": sql_of, "probe": probe,
    }  # fmt: skip


def _answer(lib, question: str):
    from core import match as L

    masked = L.mask_question(question, lib["values"])
    found = L.match_library(
        question, lib["embedder"].embed([masked])[0], lib["index"], lookup=lib["lookup"], values=lib["values"],
        risk=lib["risk"], probe=lib["probe"],
    )  # fmt: skip
    best, _ = L.decide(found.results, lib["risk"].threshold)
    return best


def test_the_originals_are_in_the_library_and_most_are_answered(ehrsql):
    """The adversarial cases mean something only if their originals are answerable."""
    answered = [o for o in dict.fromkeys(o for o, _, _ in CASES) if _answer(ehrsql, o) is not None]
    assert len(answered) >= len({o for o, _, _ in CASES}) // 3


@pytest.mark.parametrize(("original", "question", "swap"), CASES, ids=[c[1][:60] for c in CASES])
def test_one_step_away_abstains_or_is_answered_right(ehrsql, original, question, swap):
    best = _answer(ehrsql, question)
    if best is None:
        return
    assert swap is not None, f"answered {question!r} from {best.example_question!r}: {best.sql}"
    gold = ehrsql["sql_of"][original].replace(*swap)
    assert ehrsql["same"](best.sql, gold), f"wrong answer: {best.sql}"
