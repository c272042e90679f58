"""Ranking and join expansion of retrieved tables (pure: no database, no model)."""

from __future__ import annotations

from core.retrieval import (
    Edge,
    LinkedValue,
    TableProfile,
    content_words,
    lexical_score,
    question_terms,
    rank_tables,
    value_is_mentioned,
)

H, ICU = "mimiciv_hosp", "mimiciv_icu"
PROFILES = {
    f"{H}.patients": TableProfile(f"{H}.patients", ("patient", "age", "gender")),
    f"{H}.admissions": TableProfile(f"{H}.admissions", ("hospital stay", "admission")),
    f"{H}.labevents": TableProfile(f"{H}.labevents", ("lab result", "lab test")),
    f"{H}.d_labitems": TableProfile(f"{H}.d_labitems", ("lab item",), is_dictionary=True),
    f"{H}.diagnoses_icd": TableProfile(f"{H}.diagnoses_icd", ("diagnosis",)),
    f"{H}.d_icd_diagnoses": TableProfile(f"{H}.d_icd_diagnoses", ("icd title",), is_dictionary=True),
    f"{ICU}.icustays": TableProfile(f"{ICU}.icustays", ("icu stay",)),
    f"{ICU}.chartevents": TableProfile(f"{ICU}.chartevents", ("vital signs", "heart rate")),
    f"{ICU}.inputevents": TableProfile(f"{ICU}.inputevents", ("infusion",)),
    f"{ICU}.d_items": TableProfile(f"{ICU}.d_items", ("item",), is_dictionary=True),
}
EDGES = [
    Edge(f"{H}.admissions", f"{H}.patients"),
    Edge(f"{H}.labevents", f"{H}.d_labitems"),
    Edge(f"{H}.labevents", f"{H}.admissions"),
    Edge(f"{H}.diagnoses_icd", f"{H}.d_icd_diagnoses"),
    Edge(f"{H}.diagnoses_icd", f"{H}.admissions"),
    Edge(f"{ICU}.icustays", f"{H}.admissions"),
    Edge(f"{ICU}.chartevents", f"{ICU}.d_items"),
    Edge(f"{ICU}.chartevents", f"{ICU}.icustays"),
    Edge(f"{ICU}.inputevents", f"{ICU}.d_items"),
    Edge(f"{ICU}.inputevents", f"{ICU}.icustays"),
]


def names(ranked):
    return [r.qualified for r in ranked]


def test_question_terms_keep_content_phrases_and_drop_filler():
    terms = question_terms(
        "What was the average creatinine of patients diagnosed with severe sepsis in 2150?"
    )
    assert "creatinine" in terms and "severe sepsis" in terms and "sepsis" in terms
    assert not {"what", "the", "average", "patients", "2150", "diagnosed"} & set(terms)


def test_lexical_score_needs_a_whole_phrase():
    assert lexical_score("show the heart rate of patient 1", PROFILES[f"{ICU}.chartevents"]) > 0.6
    assert lexical_score("show the heartbeat", PROFILES[f"{ICU}.chartevents"]) == 0.0


def test_a_linked_value_lifts_its_table_above_doc_similarity():
    doc = {t: 0.3 for t in PROFILES} | {f"{ICU}.icustays": 0.45}
    sepsis = LinkedValue(
        f"{H}.d_icd_diagnoses", "long_title", "Severe sepsis", "R652", 0.9, "sepsis", "fuzzy"
    )
    ranked = rank_tables("patients with sepsis", doc, PROFILES, linked_values=[sepsis], edges=EDGES, k=1)
    assert ranked[0].qualified == f"{H}.d_icd_diagnoses"
    assert any("Severe sepsis" in reason for reason in ranked[0].reasons)


def test_a_named_code_brings_the_event_table_and_events_bring_their_dictionary():
    doc = dict.fromkeys(PROFILES, 0.1) | {f"{ICU}.chartevents": 0.2}
    heart_rate = LinkedValue(f"{ICU}.d_items", "label", "Heart Rate", "220045", 1.0, "heart rate", "fuzzy")
    ranked = rank_tables(
        "last pulse of subject 7", doc, PROFILES, linked_values=[heart_rate], edges=EDGES, k=1
    )
    assert names(ranked)[0] == f"{ICU}.d_items"
    added = {r.qualified: r.via for r in ranked[1:]}
    assert added.get(f"{ICU}.chartevents") == "join"  # the most similar table that records d_items codes

    doc = dict.fromkeys(PROFILES, 0.0) | {f"{H}.labevents": 0.9}
    ranked = rank_tables("lab results", doc, PROFILES, edges=EDGES, k=1)
    assert {r.qualified: r.via for r in ranked}[f"{H}.d_labitems"] == "dictionary"


def test_unconnected_picks_are_bridged_by_the_shortest_join_path():
    doc = dict.fromkeys(PROFILES, 0.0) | {f"{H}.patients": 0.9, f"{ICU}.chartevents": 0.8}
    ranked = rank_tables("x", doc, PROFILES, edges=EDGES, k=2)
    bridged = [r.qualified for r in ranked if r.via == "join"]
    assert bridged == [f"{H}.admissions", f"{ICU}.icustays"]


def test_noise_below_the_value_floor_is_ignored():
    doc = dict.fromkeys(PROFILES, 0.2) | {f"{H}.admissions": 0.4}
    weak = LinkedValue(f"{ICU}.d_items", "label", "Rate", "1", 0.3, "rate", "fuzzy")
    ranked = rank_tables("admissions per year", doc, PROFILES, linked_values=[weak], edges=EDGES, k=1)
    assert names(ranked)[0] == f"{H}.admissions"


# --------------------------------------------------------------------------- value linking: a mention, not a brush

# The catalog's everyday words (its docs say "care", "length", "unit", "height", "stay" …).
COMMON = frozenset(content_words(
    "ICU length of stay in fractional days; care unit; height and weight charted; encounter; infarction of the heart; "
    "blood pressure; chronic kidney disease; heart failure"
))  # fmt: skip


def _lv(value: str, term: str, method: str = "fuzzy") -> LinkedValue:
    return LinkedValue("mimiciv_hosp.d_icd_diagnoses", "long_title", value, "", 0.8, term, method)


def test_an_icu_length_of_stay_question_links_no_title_and_no_item():
    """The issue's case: "Encounter for palliative care, Height, Subendocardial infarction" were listed
    for an ICU length-of-stay question (semantic neighbours of common words, one common word inside a
    long title)."""
    question = "What is the average ICU length of stay by care unit?"
    for value, term, method in [
        ("Encounter for palliative care", "care", "fuzzy"),
        ("Encounter for palliative care", "stay", "semantic"),
        ("Height", "length", "semantic"),
        ("Subendocardial infarction", "icu", "semantic"),
        ("Hypertensive chronic kidney disease", "unit", "semantic"),
        ("Encounter for palliative care", "palliative", "fuzzy"),  # a word inside it, not its head
    ]:
        assert not value_is_mentioned(question, _lv(value, term, method), COMMON), value


def test_a_value_is_linked_when_the_question_says_it():
    said = [
        ("How many patients got palliative care?", "Encounter for palliative care", "palliative care"),
        ("patients with sepsis", "Sepsis, unspecified organism", "sepsis"),  # its head term, not everyday
        ("average height of patients", "Height", "height"),  # the whole value
        (
            "patients with chronic kidney disease",
            "Chronic kidney disease, unspecified",
            "chronic kidney disease",
        ),
        ("patients with hemoglobn below 7", "Hemoglobin", "hemoglobn"),  # a typo of a long word
        (
            "heart failure admissions",
            "Congestive heart failure, unspecified",
            "heart failure",
        ),  # two common words
    ]
    for question, value, term in said:
        assert value_is_mentioned(question, _lv(value, term), COMMON), value
    # an abbreviation the catalog does not use is linked by meaning ("hgb" → Hemoglobin) …
    assert value_is_mentioned("lowest hgb of patient 7", _lv("Hemoglobin", "hgb", "semantic"), COMMON)
    # … but one common word is not a mention of a longer value, even spelled out, nor a word inside it
    assert not value_is_mentioned("heart rate of patient 7", _lv("Heart failure", "heart"), COMMON)
    assert not value_is_mentioned("sodium below 130", _lv("Docusate Sodium", "sodium"), COMMON)
    assert value_is_mentioned("sodium below 130", _lv("Sodium, Whole Blood", "sodium"), COMMON)
