"""The gate's rules against the bundled MIMIC-IV catalog: each kind of unanswerable question is
declined with the right reason in plain words, and answerable look-alikes pass. Questions here
are written for these tests (none comes from a benchmark)."""

from __future__ import annotations

import pytest

from askdb.answerability import rules
from askdb.answerability.data import docs_catalog
from metadata_admin.docs import BUNDLED_DOCS, read_docs


@pytest.fixture(scope="module")
def absent() -> frozenset[str]:
    _, columns = docs_catalog(read_docs([BUNDLED_DOCS]))
    return rules.absent_concepts(c.text for c in columns)


def _decisive(question: str, absent, as_of_year: int | None = 2210) -> rules.Finding | None:
    found = [f for f in rules.findings(question, absent=absent, as_of_year=as_of_year) if f.decisive]
    return found[0] if found else None


NOT_IN_SCHEMA = [
    ("What is the home address of patient 10000032?", "patient addresses"),
    ("Give me the phone number for subject 10002428.", "phone numbers"),
    ("Which blood group does patient 10014729 have?", "blood types"),
    ("Has patient 10004235 travelled abroad in the last year?", "travel histories"),
    ("List the genetic test results of patient 10019003.", "genetic test results"),
    ("What religion is patient 10021118?", "religions"),
    ("What is the occupation of patient 10035185?", "occupations"),
    ("What was the yearly income of patient 10039708?", "incomes"),
    ("What is the date of birth of patient 10000032?", "birth dates (ages are kept, birth dates are not)"),
    ("What was the cause of death of patient 10002428?", "causes of death"),
    (
        "Who was the attending physician of patient 10014729 on the last admission?",
        "names of doctors or nurses",
    ),
    ("Show me the discharge summary of patient 10004235.", "clinical notes or reports"),
    ("Which room number was patient 10019003 in during the ICU stay?", "room or bed numbers"),
    (
        "Was patient 10021118 satisfied with the care on the last visit?",
        "records of patient satisfaction or feedback",
    ),
    ("What is the nationality of patient 10035185?", "nationalities or places of birth"),
    ("Does patient 10039708 have any pets?", "personal details of this kind"),
    ("Show me a photo of patient 10000032.", "photographs"),
    ("Is patient 10002428 allergic to penicillin?", "allergy lists"),
    ("List the known allergies of patient 10014729.", "allergy lists"),
    ("Does patient 10004235 smoke?", "smoking, drinking or exercise habits"),
    ("How much alcohol does patient 10019003 drink a week?", "smoking, drinking or exercise habits"),
    ("What is the smoking status of patient 10021118?", "smoking, drinking or exercise habits"),
    ("What diet was patient 10035185 on during the last stay?", "diets or meals"),
    ("What did patient 10039708 eat for breakfast?", "diets or meals"),
    ("What is the religion of the nurse who cared for patient 10000032?", "religions"),
    ("How old is the attending doctor of patient 10002428?", "details about doctors or nurses"),
    ("What is the specialty of the doctor who treated patient 10014729?", "details about doctors or nurses"),
    (
        "How many years of experience does the surgeon of patient 10004235 have?",
        "details about doctors or nurses",
    ),
    ("What is the name of the hospital patient 10019003 was admitted to?", "hospital names"),
    ("Did patient 10021118 sign a consent form before the surgery?", "consent forms or advance directives"),
    ("Does patient 10035185 have an advance directive?", "consent forms or advance directives"),
]
FUTURE = [
    "Will patient 10000032 be readmitted within 30 days?",
    "Predict the length of stay for patient 10002428's next admission.",
    "How many ICU beds will we need next month?",
    "What is the forecast of sepsis cases for next year?",
    "When is patient 10014729 scheduled to come back?",
    "How many patients were admitted in 2250?",
    "What is the chance that patient 10019003 is readmitted?",
    "How likely is patient 10021118 to develop sepsis?",
    "What is the risk of dying for patient 10035185 in the ICU?",
    "When is the next follow-up visit of patient 10039708?",
    "When can patient 10000032 go home?",
    "Which patients will need dialysis?",
    "How many days until patient 10002428's next admission?",
]
ADVICE = [
    "What medication should be prescribed to patient 10004235 for his hypertension?",
    "Which antibiotic should we give patient 10019003 next?",
    "Is it safe to give warfarin with aspirin?",
    "What precautions should a nurse take after a central line placement?",
    "What do you recommend for a patient with a creatinine of 3?",
    "What is the best treatment for sepsis?",
    "Is it okay for patient 10000032 to take ibuprofen with warfarin?",
    "Can she stop taking metoprolol now?",
    "What do you suggest for patient 10002428's low potassium?",
    "How should we manage patient 10014729's blood sugar?",
    "In your opinion, which is better for atrial fibrillation, heparin or apixaban?",
    "How to prevent pressure ulcers in the ICU?",
]
PRIVATE = [
    "What is the real name of patient 10000032?",
    "Help me re-identify the patient with the longest ICU stay.",
    "How can I contact patient 10002428's family?",
    "What is the social security number of subject 10014729?",
    "Who is patient 10019003?",
    "Can you identify the patient who died on 2180-07-23?",
]
OUT_OF_SCOPE = [
    "What will the weather be like in Boston tomorrow?",
    "Tell me a joke about nurses.",
    "How many operating rooms are available right now?",
    "What are Dr. Smith's rounds and procedures today?",
    "What is the reimbursement standard for an MRI?",
    "Which diagnoses did patient 10000032 get at another hospital?",
    "Which doctors are on call tonight?",
    "How many beds are available in the MICU?",
    "What is the waiting time at the emergency department today?",
    "What does the abbreviation CHF stand for?",
    "What is the mechanism of action of metformin?",
    "Who won the last presidential election?",
]
LOOK_ALIKES = [  # answerable questions that share words with the kinds above
    "What insurance did patient 10000032 have on the last admission?",
    "What language does patient 10002428 speak?",
    "What is the marital status of patient 10014729?",
    "What race is recorded for patient 10004235?",
    "How many patients were admitted in 2150?",
    "Which medications were prescribed to patient 10019003 in the ICU?",
    "What was the last dose of insulin given to patient 10021118?",
    "How many patients have a family history of ischemic heart disease diagnosis?",
    "How many patients were transferred to the operating room?",
    "Which patients visited the emergency department twice in one year?",
    "Count the patients who died in the hospital.",
    "What is the average length of stay in the MICU?",
    "How many patients had an adverse effect of anticoagulants diagnosis?",
    "Which drug was given most often during the last ICU stay of patient 10035185?",
    "When was patient 10039708 first admitted to the hospital?",
    "How much will it cost to get a coronary bypass procedure done?",
    "Will you list the drugs prescribed to patient 10000032 on the last visit?",
    "Would you tell me the age of patient 10002428?",
    "What was the age of patient 10014729 at the first admission?",
    "When did patient 10004235 die?",
    "Which careunit was patient 10019003 first transferred to?",
    "How many patients were diagnosed with alcohol abuse in 2150?",
    "What was the patient weight recorded for patient 10021118's last input event?",
    "How many patients had a body mass index 35.0-35.9, adult diagnosis?",
    "Which lab tests were done after the diagnosis of pneumonitis due to inhalation of food or vomitus?",
    "What was the discharge location of patient 10035185?",
    "How many patients were discharged from the hospital last year?",
    "When was the last time patient 10039708 had a procedure in 2150?",
    "How many patients were diagnosed with allergic rhinitis, cause unspecified in 2150?",
    "What are the costs of a personal history of allergy to penicillin diagnosis?",
    "How many patients were diagnosed with nicotine dependence, cigarettes, uncomplicated?",
    "Which drugs were prescribed after a tobacco use disorder diagnosis?",
    "How many patients had a dietary counseling and surveillance diagnosis?",
    "Which caregiver documented the last procedure event of patient 10000032?",
    "How long did the last ventilation procedure event of patient 10002428 last?",
]


def test_the_catalog_documents_insurance_language_marital_status_and_race(absent):
    # MIMIC's admissions table holds them: a question about them is not "not in the schema".
    assert {"address", "phone", "blood_type", "travel", "genetics"} <= absent
    assert not {"insurance", "language", "marital_status", "race"} & absent


@pytest.mark.parametrize(("question", "what"), NOT_IN_SCHEMA)
def test_information_no_column_holds_is_declined_naming_it(absent, question, what):
    found = _decisive(question, absent)
    assert found is not None and found.kind == "not_in_schema"
    assert found.reason == f"The database has no {what}, so askdb cannot answer this."


@pytest.mark.parametrize(
    ("kind", "questions", "words"),
    [
        ("future", FUTURE, "future"),
        ("advice", ADVICE, "advice"),
        ("private", PRIVATE, "de-identified"),
        ("out_of_scope", OUT_OF_SCOPE, "askdb cannot answer it"),
    ],
)
def test_each_kind_is_declined_with_its_reason(absent, kind, questions, words):
    assert len(questions) >= 5
    for question in questions:
        found = _decisive(question, absent)
        assert found is not None, question
        assert found.kind == kind, (question, found)
        assert words in found.reason or kind == "future", (question, found.reason)
        assert "_" not in found.reason  # plain words, never a category code


def test_a_year_after_the_as_of_date_is_the_future(absent):
    found = _decisive("How many patients were admitted in 2250?", absent, as_of_year=2210)
    assert found.kind == "future" and "2250" in found.reason and "2210" in found.reason
    assert _decisive("How many patients were admitted in 2150?", absent, as_of_year=2210) is None


@pytest.mark.parametrize("question", LOOK_ALIKES)
def test_answerable_look_alikes_pass_the_rules(absent, question):
    assert _decisive(question, absent) is None


def test_rule_features_mark_decisive_and_soft_hits():
    found = rules.findings("Does patient 3 have diabetes in his family?", absent={"family_history"})
    assert [f.decisive for f in found] == [False]
    features = dict(zip(rules.FEATURE_NAMES, rules.rule_features(found), strict=True))
    assert features["rule_not_in_schema"] == 0.5 and features["rule_future"] == 0.0
