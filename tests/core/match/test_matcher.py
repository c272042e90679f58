"""Offline answering from templates: matching, value binding, hard rules, calibration (pure: no database)."""

from __future__ import annotations

import json
import random

import pytest
import sqlglot
from rapidfuzz import fuzz
from sqlglot import exp

from core.match.binding import extract_values
from core.match.build import build_template
from core.match.calibrate import decide
from core.match.candidate import TemplateCandidate
from core.match.reading import mask_question
from core.match.risk import DEFAULT_CALIBRATION, DEFAULT_THRESHOLD, Calibration, fit_calibration
from core.types import CatalogSchema, TableSchema
from tests.core.match.support import match
from tests.core.match.test_template import (
    ELECTIVE_Q,
    ELECTIVE_SQL,
    FEMALE_Q,
    FEMALE_SQL,
    FENTANYL_Q,
    FENTANYL_SQL,
    GLUCOSE_Q,
    GLUCOSE_SQL,
    SEPSIS_Q,
    SEPSIS_SQL,
    literals,
)

HOSTILE = "Robert'); DROP TABLE mimiciv_hosp.patients; --"
HEPARIN_Q = "how many times was heparin prescribed to patient 10006580?"
HEPARIN_SQL = (
    "SELECT count(*) FROM mimiciv_hosp.prescriptions WHERE subject_id = 10006580 AND drug = 'Heparin'"
)
LAST_Q = "what was the last measured glucose value of patient 10004235 in 2150?"
LAST_SQL = GLUCOSE_SQL.replace("ASC", "DESC")

DB = {
    "mimiciv_hosp.d_labitems.label": ["Glucose", "Potassium", "Sodium", "Creatinine", "Glucose, Urine"],
    "mimiciv_hosp.prescriptions.drug": ["Fentanyl Citrate", "Fenofibrate", "Heparin", "Insulin", HOSTILE],
    "mimiciv_hosp.d_icd_diagnoses.long_title": [
        "Sepsis, unspecified organism",
        "Pneumonia, unspecified organism",
        "Acute kidney failure, unspecified",
    ],
}


class FakeLookup:
    """The value index in miniature: exact 1.0, containment 0.85, else rapidfuzz similarity."""

    def __init__(self, db=None):
        self.db = DB if db is None else db
        self.calls: list[tuple[str, str]] = []

    def __call__(self, table_column: str, text: str) -> list[tuple[str, float]]:
        self.calls.append((table_column, text))
        out = []
        for value in self.db.get(table_column, []):
            a, b = value.lower(), text.lower()
            score = 1.0 if a == b else 0.85 if b in a else fuzz.ratio(a, b) / 100
            if score >= 0.5:
                out.append((value, score))
        return sorted(out, key=lambda v: -v[1])


H = "mimiciv_hosp"
CATALOG = CatalogSchema(
    tables=(
        TableSchema(
            H, "labevents", ("labevent_id", "subject_id", "hadm_id", "itemid", "charttime", "valuenum")
        ),
        TableSchema(H, "d_labitems", ("itemid", "label", "fluid", "category")),
        TableSchema(H, "prescriptions", ("subject_id", "hadm_id", "starttime", "drug")),
        TableSchema(H, "diagnoses_icd", ("subject_id", "hadm_id", "icd_code", "icd_version")),
        TableSchema(H, "d_icd_diagnoses", ("icd_code", "icd_version", "long_title")),
        TableSchema(H, "admissions", ("subject_id", "hadm_id", "admittime", "dischtime", "admission_type")),
        TableSchema(H, "patients", ("subject_id", "gender", "anchor_age")),
    )
)

LIBRARY = {
    1: (GLUCOSE_Q, GLUCOSE_SQL),
    2: (FENTANYL_Q, FENTANYL_SQL),
    3: (SEPSIS_Q, SEPSIS_SQL),
    4: (ELECTIVE_Q, ELECTIVE_SQL),
    5: (FEMALE_Q, FEMALE_SQL),
    6: (HEPARIN_Q, HEPARIN_SQL),
    7: (LAST_Q, LAST_SQL),
}


def candidates(ids=None, similarity=0.85):
    return [
        TemplateCandidate(i, build_template(q, s), similarity, q)
        for i, (q, s) in LIBRARY.items()
        if ids is None or i in ids
    ]


def top(question, ids=None, lookup=None, **kwargs):
    return match(question, candidates(ids), lookup=lookup or FakeLookup(), catalog=CATALOG, **kwargs)[0]


def answered(question, ids=None, lookup=None):
    best, _ = decide(
        match(question, candidates(ids), lookup=lookup or FakeLookup(), catalog=CATALOG), DEFAULT_THRESHOLD
    )
    return best


# --- values bind ---------------------------------------------------------------------------------


def test_new_patient_lab_and_year_bind_into_the_approved_sql():
    r = top("what was the first measured potassium value of patient 10006580 in 2151?")
    assert r.example_id == 1 and r.hard_ok and r.confidence >= DEFAULT_THRESHOLD
    assert literals(r.sql) == {"Potassium", "10006580", "2151", "1"}
    assert "Glucose" not in r.sql and "10004235" not in r.sql and "2150" not in r.sql
    assert "ASC" in r.sql.upper()  # the approved ordering is kept
    assert {b.slot: (b.old, b.new, b.value) for b in r.bindings} == {
        "value": ("glucose", "potassium", "Potassium"),
        "patient_id": ("10004235", "10006580", "10006580"),
        "year": ("2150", "2151", "2151"),
    }
    assert r.masked_question == (
        "what was the first measured {value:mimiciv_hosp.d_labitems.label} value of patient {patient_id} in {year}?"
    )


def test_a_new_drug_binds_into_the_like_pattern_with_its_wildcards():
    r = top("how many times was fenofibrate prescribed to patient 10004235?")
    assert r.example_id == 2 and r.confidence >= DEFAULT_THRESHOLD
    assert literals(r.sql) == {"%fenofibrate%", "10004235"}
    binding = next(b for b in r.bindings if b.slot == "value")
    assert not binding.fuzzy and binding.score == 1.0


def test_an_equality_slot_binds_the_database_spelling():
    r = top("how many times was INSULIN prescribed to patient 10004235?", ids={6})
    assert literals(r.sql) == {"Insulin", "10004235"} and r.confidence >= DEFAULT_THRESHOLD


def test_a_diagnosis_links_to_its_full_title_and_is_flagged_fuzzy():
    r = top("count the number of patients diagnosed with pneumonia since 2152")
    assert r.example_id == 3 and r.hard_ok
    assert literals(r.sql) >= {"Pneumonia, unspecified organism", "2152-01-01"}
    binding = next(b for b in r.bindings if b.slot == "value")
    assert binding.fuzzy and binding.value == "Pneumonia, unspecified organism"
    assert r.features["fuzzy_penalty"] == pytest.approx(0.15)


def test_gender_and_year_range_rebind_together():
    r = top("how many male patients were admitted in 2160?")
    assert r.example_id == 5 and r.confidence >= DEFAULT_THRESHOLD
    assert literals(r.sql) == {"M", "2160-01-01", "2161-01-01"}


def test_unchanged_values_reuse_the_approved_sql_exactly():
    r = top(GLUCOSE_Q)
    assert r.example_id == 1 and r.sql == build_template(GLUCOSE_Q, GLUCOSE_SQL).sql_template
    assert r.confidence >= 0.95


@pytest.mark.parametrize(
    "question",
    [
        "patient 10004235: how many times was fentanyl prescribed?",
        "how many times was fentanyl prescribed for patient 10004235",
        "How many times was Fentanyl prescribed to patient 10004235?",
    ],
)
def test_word_order_and_wording_paraphrases_still_match(question):
    r = top(question)
    assert r.example_id == 2 and r.confidence >= DEFAULT_THRESHOLD
    assert literals(r.sql) == {"%fentanyl%", "10004235"}


def test_a_paraphrase_moving_the_lab_name_still_matches():
    r = top("what was the first glucose value measured for patient 10004235 in 2150?")
    assert r.example_id == 1 and r.confidence >= DEFAULT_THRESHOLD


def test_an_anchored_example_answers_only_when_its_anchor_is_there():
    assert answered("what was the average length of stay of elective admissions") is not None
    r = top("what is the average length of stay of emergency admissions?", ids={4})
    # admission_type is value-linked now: "emergency" must be a real value of it, and here it is not.
    assert r.confidence == 0 and any("elective" in x or "emergency" in x for x in r.reasons)


# --- precision first: abstain ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "question,example",
    [
        ("what was the last measured glucose value of patient 10004235 in 2150?", 1),
        ("what was the maximum glucose value of patient 10004235 in 2150?", 1),
        ("what was the average glucose value of patient 10004235 in 2150?", 1),
        ("what was the first measured glucose value of patient 10004235 since 2150?", 1),
        ("count the number of patients diagnosed with sepsis in 2150", 3),
        ("count the number of patients diagnosed with sepsis before 2150", 3),
        ("what is the total length of stay of elective admissions?", 4),
        ("what is the maximum length of stay of elective admissions?", 4),
        ("has fentanyl ever been prescribed to patient 10004235?", 2),
        ("how many patients were prescribed fentanyl?", 2),
        ("how many times was fentanyl not prescribed to patient 10004235?", 2),
    ],
)
def test_flip_words_force_confidence_zero(question, example):
    r = match(question, candidates({example}), lookup=FakeLookup(), catalog=CATALOG)[0]
    assert r.confidence == 0 and r.sql is None and not r.hard_ok
    assert r.reasons


def test_first_and_last_examples_each_win_their_own_question():
    assert answered("what was the last measured sodium value of patient 10006580 in 2151?").example_id == 7
    assert answered("what was the first measured sodium value of patient 10006580 in 2151?").example_id == 1


def test_flip_rejection_spends_no_value_lookups():
    lookup = FakeLookup()
    match(
        "what was the last measured potassium value of patient 10006580 in 2151?",
        candidates({1}),
        lookup=lookup,
    )
    assert lookup.calls == []


def test_an_unknown_drug_gives_no_answer():
    r = top("how many times was aspirin prescribed to patient 10004235?", ids={2, 6})
    assert r.confidence == 0 and r.sql is None
    assert any("aspirin" in reason for reason in r.reasons)
    assert answered("how many times was aspirin prescribed to patient 10004235?") is None


def test_a_weak_fuzzy_value_is_no_match():
    lookup = FakeLookup({"mimiciv_hosp.prescriptions.drug": ["Heparin"]})
    r = top("how many times was aspirin prescribed to patient 10004235?", ids={6}, lookup=lookup)
    assert r.confidence == 0 and any("the closest is 'Heparin'" in reason for reason in r.reasons)


def test_an_extra_patient_id_cannot_be_placed():
    r = top("how many times was fentanyl prescribed to patient 10004235 and patient 10006580?", ids={2})
    assert r.confidence == 0 and r.features["unplaced_values"] == 1
    assert "2 patient ids" in r.reasons[0]


def test_a_refused_result_says_why_without_the_risk_features_an_answer_gets():
    """A refused template's confidence is 0 whatever its features say: it keeps those that say why
    (a value it could not place, slots left unbound) and skips the risk model's similarities and word
    counts, which an answer gets in full (the risk model reads every one of them)."""
    refused = top("how many times was fentanyl prescribed to patient 10004235 and patient 10006580?", ids={2})
    assert refused.confidence == 0 and refused.features["unplaced_values"] == 1
    assert "all_slots_bound" in refused.features and refused.features["slots"] == 2
    assert "masked_similarity" not in refused.features and "paraphrase_missing" not in refused.features
    answer = top("how many times was fentanyl prescribed to patient 10004235?", ids={2})
    assert answer.hard_ok and answer.features["unplaced_values"] == 0
    assert {"masked_similarity", "lexical_overlap", "missing_words"} <= set(answer.features)


def test_a_value_the_template_has_no_slot_for_is_rejected():
    # The elective example has no year; "in 2150" would be silently ignored by its SQL.
    r = top("what is the average length of stay of elective admissions in 2150?", ids={4})
    assert r.confidence == 0 and r.sql is None


def test_a_missing_value_is_rejected():
    r = top("how many patients were admitted in 2160?", ids={5})
    assert r.confidence == 0 and r.reasons == (
        "This question gives no value for the verified question's gender.",
    )


def test_extra_content_words_lower_confidence_below_the_threshold():
    clean = top("what was the first measured glucose value of patient 10004235 in 2150?", ids={1})
    extra = top("what was the first measured glucose value of patient 10004235 in 2150 in the icu?", ids={1})
    assert extra.hard_ok and extra.features["extra_words"] == 1
    assert extra.confidence < DEFAULT_THRESHOLD <= clean.confidence


def test_hostile_value_is_bound_as_one_literal_and_validates():
    lookup = FakeLookup()
    r = top(f'how many times was "{HOSTILE}" prescribed to patient 10004235?', ids={6}, lookup=lookup)
    assert r.hard_ok, r.reasons
    statements = sqlglot.parse(r.sql, dialect="postgres")
    assert len(statements) == 1 and isinstance(statements[0], exp.Select)
    assert not list(statements[0].find_all(exp.Drop))
    assert HOSTILE in literals(r.sql)


def test_decide_abstains_below_the_threshold_and_reports_competitors():
    results = match(
        "what was the first measured potassium value of patient 10006580 in 2151?",
        candidates(),
        lookup=FakeLookup(),
    )
    best, others = decide(results, DEFAULT_THRESHOLD)
    assert best is not None and best.example_id == 1 and others == []
    best, _ = decide(results, 1.0)
    assert best is None


def test_results_are_sorted_with_clean_bindings_first():
    results = match(
        "how many times was fenofibrate prescribed to patient 10004235?", candidates(), lookup=FakeLookup()
    )
    assert [r.hard_ok for r in results] == sorted((r.hard_ok for r in results), reverse=True)
    assert results[0].example_id == 2
    # The equality template also binds (Fenofibrate exists), but both answer the same question.
    assert {r.example_id for r in results if r.hard_ok} == {2, 6}


# --- extraction ------------------------------------------------------------------------------------


def test_extract_values_types_and_leftover_runs():
    template = build_template(FENTANYL_Q, FENTANYL_SQL)
    spans = extract_values(
        "how many times was sodium chloride prescribed to patient 10004235 in 2150?", template
    )
    assert [(s.type, s.text) for s in spans] == [
        ("text", "sodium chloride"),
        ("patient_id", "10004235"),
        ("year", "2150"),
    ]
    quoted = extract_values("was 'Insulin Glargine' given to patient 10004235?")
    assert ("text", "Insulin Glargine") in [(s.type, s.text) for s in quoted]


def test_mask_question_hides_values_for_retrieval():
    assert (
        mask_question("first glucose of patient 10004235 in 2150")
        == "first glucose of patient {patient_id} in {year}"
    )


# --- calibration -----------------------------------------------------------------------------------


def synthetic_samples(n=200, seed=7):
    rng = random.Random(seed)
    samples = []
    for _ in range(n):
        good = rng.random() < 0.6
        features = {
            "hard_ok": 1.0,
            "similarity": rng.uniform(0.75, 0.95) if good else rng.uniform(0.55, 0.9),
            "masked_similarity": rng.uniform(0.9, 1.0) if good else rng.uniform(0.6, 0.95),
            "lexical_overlap": rng.uniform(0.8, 1.0) if good else rng.uniform(0.4, 0.9),
            "extra_words": float(rng.random() < 0.1) if good else float(rng.randint(0, 3)),
            "missing_words": 0.0 if good else float(rng.randint(0, 2)),
            "fuzzy_penalty": 0.0 if good else rng.choice([0.0, 0.15, 0.3]),
        }
        samples.append((features, good))
    return samples


def test_fit_calibration_separates_good_from_bad_matches():
    train, test = synthetic_samples(seed=1), synthetic_samples(seed=2)
    cal = fit_calibration(train)
    assert cal.samples == len(train)
    good = [cal.predict(f) for f, ok in test if ok]
    bad = [cal.predict(f) for f, ok in test if not ok]
    assert sum(good) / len(good) > 0.8 and sum(bad) / len(bad) < 0.3
    assert cal.weights["masked_similarity"] > 0 and cal.weights["extra_words"] < 0
    # Ranking quality: a random good match outscores a random bad one almost always (AUC).
    pairs = sum(g > b for g in good for b in bad) / (len(good) * len(bad))
    assert pairs > 0.95


def test_fit_calibration_ignores_hard_rule_failures_and_needs_both_outcomes():
    only_good = [(f, True) for f, _ in synthetic_samples(20)]
    assert fit_calibration(only_good) == Calibration(
        dict(DEFAULT_CALIBRATION.weights), DEFAULT_CALIBRATION.intercept, DEFAULT_THRESHOLD, 0
    )
    # Hard-rule failures are confidence 0 whatever the model says: they are not fitted on.
    forced = [({**f, "hard_ok": 0.0}, ok) for f, ok in synthetic_samples(50, seed=3)]
    mixed = synthetic_samples(30, seed=4)
    assert fit_calibration(forced + mixed).samples == 30
    assert fit_calibration(forced + only_good).samples == 0


def test_calibration_json_round_trip():
    cal = fit_calibration(synthetic_samples())
    cal = Calibration(cal.weights, cal.intercept, 0.87, cal.samples)
    again = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again == cal
    features = synthetic_samples(1)[0][0]
    assert again.predict(features) == cal.predict(features)


def test_a_fitted_calibration_is_used_by_match():
    never = Calibration({"masked_similarity": 0.0}, -20.0)
    r = top("how many times was fenofibrate prescribed to patient 10004235?", ids={2}, calibration=never)
    assert r.hard_ok and r.confidence < 0.001


def test_calibrate_on_held_out_library_questions():
    """The intended loop: score held-out paraphrases against the library, fit the calibration."""
    held_out = [
        ("what was the first measured sodium value of patient 10006580 in 2151?", 1),
        ("what was the first glucose value measured for patient 10004235 in 2152?", 1),
        ("patient 10004235: how many times was heparin prescribed?", 2),
        ("how many times was insulin prescribed to patient 10006580?", 2),
        ("count the number of patients diagnosed with pneumonia since 2151", 3),
        ("how many female patients were admitted in 2155?", 5),
        ("how many male patients were admitted in 2150?", 5),
        ("what was the last measured creatinine value of patient 10004235 in 2150?", 7),
        # Near misses the library must not answer (right template, changed meaning by an extra word).
        ("what was the first measured sodium value of patient 10006580 in 2151 in the icu?", None),
        ("what was the first measured serum creatinine value of patient 10006580 in 2151?", None),
        ("how many times was insulin prescribed intravenously to patient 10006580?", None),
        ("count the number of female patients diagnosed with pneumonia since 2151", None),
    ]
    scored, samples = [], []
    for question, expected in held_out:
        r = match(question, candidates(), lookup=FakeLookup(), catalog=CATALOG)[0]
        correct = r.hard_ok and r.example_id == expected
        scored.append((r.confidence, correct))
        samples.append((r.features, correct))
    cal = fit_calibration(samples)
    refit = [(cal.predict(f), ok) for f, ok in samples if f["hard_ok"]]
    assert min(c for c, ok in refit if ok) > max(c for c, ok in refit if not ok)
