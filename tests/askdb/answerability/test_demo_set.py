"""The gate on questions nobody trained it on: 150 unanswerable and 150 answerable questions about
the demo's MIMIC-IV layout (demo_set.jsonl), written before the catalog grounding was built.

Unanswerable ones ask for attributes no column holds (people around a patient, documents and
their properties, objects that are not clinical, personal details, bills and rooms); answerable
ones ask for attributes MIMIC-IV does hold, most of them kinds the seeded library has no example
of (marital status, a drug's route, care units, an item's label, emar sites, DRG severity, ...).
The gate is trained as `manage.py demo` trains it: on the seeded library
(benchmarks/data/mimiciv/train.json) over the bundled catalog docs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from askdb.answerability.data import docs_catalog, score_items
from askdb.answerability.model import AnswerabilityModel, LocalEncoder, TrainConfig, TrainQuestion, train
from metadata_admin.docs import BUNDLED_DOCS, read_docs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DEMO_SET = HERE / "demo_set.jsonl"
LIBRARY = ROOT / "benchmarks" / "data" / "mimiciv" / "train.json"


def set_items(path: Path, *, each: int) -> list[dict]:
    """A held-out set's questions, numbered; it must hold `each` of each kind, none a library question
    (a question the gate was trained on would measure its memory, not the gate)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    items = [{"id": str(n), **r} for n, r in enumerate(rows)]
    assert sum(not i["answerable"] for i in items) >= each and sum(i["answerable"] for i in items) >= each
    library = {" ".join(i["question"].lower().split()) for i in json.loads(LIBRARY.read_text())}
    assert not library & {" ".join(i["question"].lower().split()) for i in items}
    return items


def assert_floor(name: str, metrics: dict, *, f1: float, blocked: int, missed: int) -> None:
    """A held-out set's measured level, held as a floor: its F1 may only rise and its answerable
    questions blocked and unanswerable ones let through may only fall (each listed when they do not)."""
    got = metrics["unanswerable"]["f1"]
    assert got >= f1 and len(metrics["blocked"]) <= blocked and len(metrics["missed"]) <= missed, (
        f"{name}: F1 {got:.3f} (floor {f1}), blocked {len(metrics['blocked'])} (at most {blocked}), let "
        f"through {len(metrics['missed'])} (at most {missed}); "
        f"blocked {[b['question'] for b in metrics['blocked']]}; missed {metrics['missed']}"
    )


def demo_items() -> list[dict]:
    return set_items(DEMO_SET, each=150)


@pytest.fixture(scope="module")
def gate() -> AnswerabilityModel:
    from infra.providers.embeddings import LocalEmbedder

    encoder = LocalEncoder(LocalEmbedder())
    tables, columns = docs_catalog(read_docs([BUNDLED_DOCS]))
    library = [
        TrainQuestion(i["id"], i["question"], i["category"] == "answerable", tuple(i.get("tables") or ()),
                      "file", i.get("sql") or "")
        for i in json.loads(LIBRARY.read_text())
    ]  # fmt: skip
    result = train(library, tables, columns, encoder=encoder, config=TrainConfig())
    return AnswerabilityModel(
        encoder, result.combiner, result.threshold, tables, columns,
        [(q.id, q.text, q.answerable) for q in library], version="demo-set",
        vector_cache=dict(zip([q.text for q in library], result.library_vectors, strict=True)),
    )  # fmt: skip


def test_the_demo_set_holds_150_questions_of_each_kind_none_from_the_library():
    assert len(demo_items()) >= 300


def test_the_gate_meets_its_targets_on_the_demo_set(gate):
    metrics = score_items(gate, demo_items())
    f1, blocked = metrics["unanswerable"]["f1"], metrics["answerable_blocked"]
    assert f1 >= 0.90 and blocked <= 0.02, (
        f"demo set: F1 {f1:.3f} (target ≥ 0.90), answerable blocked {blocked:.1%} (target ≤ 2 %); "
        f"blocked {[b['question'] for b in metrics['blocked']]}; missed {metrics['missed']}"
    )


NEW_KINDS_SET = HERE / "new_kinds_set.jsonl"


def test_the_gate_holds_on_kinds_the_demo_set_lacks(gate):
    """45 + 45 questions of kinds neither the demo set nor the grounding's patterns were written
    from (vehicles, banking, dental care, media...; vital signs, NDC codes, DRG severity, item
    links...), written before round 9 changed the grounding. Before it: F1 0.816, 0 blocked; round 9: 0.889;
    round 10: 0.916, 0 blocked; round 13 (a state no catalog text names, "lonely"): 0.941, 0 blocked."""
    items = set_items(NEW_KINDS_SET, each=40)
    metrics = score_items(gate, items)
    f1, blocked = metrics["unanswerable"]["f1"], metrics["answerable_blocked"]
    assert f1 >= 0.90 and blocked <= 0.025, (
        f"new kinds: F1 {f1:.3f} (floor 0.90), answerable blocked {blocked:.1%} (at most 1 of 45); "
        f"blocked {[b['question'] for b in metrics['blocked']]}; missed {metrics['missed']}"
    )


CATALOG_WORDS_SET = HERE / "catalog_words_set.jsonl"


def test_the_gate_on_attributes_whose_words_the_catalog_has_but_no_column_holds(gate):
    """45 + 45 questions written before round 10 changed the gate, measured twice (before and after,
    never tuned on): unanswerable ones ask for an attribute of someone or something other than the
    patient, or whose words the catalog says only in passing (a relative's marital status, a
    nurse's language, a room's temperature, a drug's lot number); answerable ones ask for marital
    status, route, care unit, item label, insurance, language... in unusual words. Before: F1 0.610,
    20 let through, 12 blocked; after: F1 0.774, 9 let through, 12 blocked. The blocked ones are
    synonyms no catalog text uses ("relationship status", "tongue", "pass away", "ethnic
    background"): a known gap, held here so it can only shrink. Round 11 (grounding by meaning,
    reported once, not tuned on): F1 0.800, 9 blocked, 9 let through. Round 16 (the property asked of a
    thing, not the thing; reported, not tuned on): F1 0.875, 9 blocked, 3 let through."""
    items = set_items(CATALOG_WORDS_SET, each=40)
    assert_floor("catalog words", score_items(gate, items), f1=0.87, blocked=9, missed=3)


SYNONYMS_SET = HERE / "synonyms_set.jsonl"


def test_the_gate_on_synonyms_no_catalog_text_has_and_things_mimic_does_not_hold(gate):
    """54 + 55 questions written before round 11 changed the gate, measured before and after (never
    tuned on): answerable ones ask for what MIMIC-IV holds in words no catalog text uses ("civil
    status", "who paid for the stay", "path of administration", "date of demise", "ward", "mother
    tongue"), in EHRSQL's shapes; unanswerable ones ask, in the same shapes, for what it does not hold
    (people around a patient, documents, costs of things with no cost, objects, opinions, feelings,
    identities). One unanswerable question written was a flagged library question and was dropped
    (declined in both runs). Before round 11: F1 0.793 (P 0.742, R 0.852), 16 of 55 answerable
    blocked (all by the grounding: the words are not the catalog's), 8 let through; after (grounding
    by meaning): F1 0.829 (P 0.807, R 0.852), 11 blocked, 8 let through. Held so it can only get
    better. Round 16 (the property asked of a thing; reported, not tuned on): F1 0.860, 11 blocked, 5 let
    through."""
    items = set_items(SYNONYMS_SET, each=50)
    assert_floor("synonyms", score_items(gate, items), f1=0.85, blocked=11, missed=5)


AMBIGUITY_SET = HERE / "ambiguity_set.jsonl"


def test_the_gate_on_ambiguous_and_underspecified_questions(gate):
    """55 + 55 questions written before round 12 changed the gate, measured before and after (never
    tuned on): unanswerable ones are ambiguous or underspecified in EHRSQL's shapes (a class of drugs
    or tests no column names, how long a procedure or a test took when only its time is recorded, "a
    test" or "a drug" with no name where the answer depends on which, doses of two drugs compared
    without units, vague times); answerable ones are the same shapes specified (a named drug or test,
    a procedure's date, a stay's length, how long a drug was prescribed). Before round 12: F1 0.324
    (P 0.846, R 0.200), 2 of 55 answerable blocked (by the grounding), 44 let through; after (a class
    no column records, a duration of an event with no end time, a value of an unnamed test or drug):
    F1 0.800 (P 0.950, R 0.691), the same 2 blocked, 17 let through. Not tuned on after that: held
    so it can only get better. Round 14 (a period with no anchor, reported once): F1 0.860, 2
    blocked, 12 let through."""
    items = set_items(AMBIGUITY_SET, each=50)
    assert_floor("ambiguity", score_items(gate, items), f1=0.86, blocked=2, missed=12)


RESEARCHER_SET = HERE / "researcher_set.jsonl"


def test_the_gate_on_what_a_researcher_asks_that_mimic_does_not_record(gate):
    """60 + 60 questions written before round 13 changed the gate, of kinds none of the other sets
    holds: unanswerable ones ask for what a hospital researcher wants and MIMIC-IV does not record
    (imaging findings, severity scores nobody charted, outcomes after discharge beyond the date of
    death, the reason for a transfer or a stop, tumour staging, surgical details, what happened
    before arrival, trial enrolment, hospital capacity, advance directives, medication at home,
    pregnancy); answerable ones are their look-alikes that it does record (procedures, lab values,
    charted vital signs, death and readmission, transfer and stop times, diagnoses, inputs and
    outputs, admission details, cohort counts, care units, drugs, demographics and body measures).
    Before round 13: F1 0.716 (P 0.971, R 0.567), 1 of 60 answerable blocked (by the grounding), 26 let
    through; after (a reason no column keeps, imaging findings and care outside the hospital the catalog
    does not record, a medication "taken regularly", a cause of death, a state no catalog text names):
    F1 0.870 (P 0.979, R 0.783), the same 1 blocked, 13 let through. Measured twice, not tuned on after:
    held so it can only get better. Round 13's rules were written for kinds the issue names, some of
    them this set's, so its rise is not a held-out measure of those kinds. Round 14 (reported once, not
    tuned on): F1 0.891, the same 1 blocked, 11 let through. Round 16 (reported, not tuned on): F1 0.901, 1
    blocked, 10 let through."""
    items = set_items(RESEARCHER_SET, each=60)
    assert_floor("researcher", score_items(gate, items), f1=0.90, blocked=1, missed=10)


UNANCHORED_SET = HERE / "unanchored_set.jsonl"


def test_the_gate_on_unanchored_times_existence_the_hospital_and_after_discharge(gate):
    """62 + 62 questions written before round 14 changed the gate, of kinds none of the other sets
    holds: unanswerable ones say a period with no anchor ("recently", "in the past", "around the time
    of the surgery"), ask whether something no column records ever happened ("is there any record
    that …", "has patient N ever had a tattoo"), ask about the hospital or the database as an
    organisation (staff, capacity, occupancy, budget, who maintains it), about life after discharge
    (work, walking, a follow-up visit) or what the patient said or rated; answerable ones are their
    look-alikes that MIMIC-IV records (anchored periods, recorded events, counts of stays and
    admissions, death and readmission, charted values and diagnoses). Before round 14: F1 0.584
    (P 0.963, R 0.419), 1 of 62 answerable blocked (by the learned model), 36 let through; after (a
    period with no anchor, an existence question read as the question it wraps, an attribute of the
    hospital or a unit, what happened after discharge beyond a death or a later stay, what the
    patient said, the database itself, staff counts): F1 0.967 (P 0.983, R 0.952), the same 1
    blocked, 3 let through. Measured twice, not tuned on after: held so it can only get better."""
    items = set_items(UNANCHORED_SET, each=60)
    assert_floor("unanchored", score_items(gate, items), f1=0.96, blocked=1, missed=3)


UNSEEN_WORDS_SET = HERE / "unseen_words_set.jsonl"


def test_the_gate_on_rare_attributes_in_words_the_catalog_does_not_use(gate):
    """93 + 93 questions written in round 15 before anything was changed for them: answerable ones
    ask for rare attributes MIMIC-IV holds (marital status, route, care unit, an item's label,
    insurance, language, discharge location, specimen, units, order status, DRG, OMR, emar,
    pharmacy...) in words and sentence forms the catalog does not use ("recorded as widowed",
    "covered by medicaid", "sent to a skilled nursing facility", imperatives); unanswerable ones are
    a look-alike of each that MIMIC-IV does not hold (the policy number, who approved, what it
    cost, how it felt). Measured as written: F1 0.736 (P 0.919, R 0.613), 5 of 93 answerable
    blocked (all by the grounding), 36 let through. Round 15's grounding changes for it were held
    back (see the README), so this is the gate's floor as it stands: it can only get better. Round 16 tuned
    on it (the property asked of a thing, not the thing: a policy number, a colour, who approved, what it
    cost, how it felt): F1 0.874 (P 0.938, R 0.817), the same 5 blocked, 17 let through."""
    items = set_items(UNSEEN_WORDS_SET, each=90)
    assert_floor("unseen words", score_items(gate, items), f1=0.87, blocked=5, missed=17)


ENTITY_ATTRIBUTES_SET = HERE / "entity_attributes_set.jsonl"


def test_the_gate_on_attributes_of_real_entities_no_column_holds(gate):
    """90 + 90 questions written in round 16 before anything was changed for them, each unanswerable one
    beside an answerable look-alike: attributes of real MIMIC-IV entities (a drug, a lab test or item, a
    culture, an order, a stay, a DRG) that no column holds (a price where the layout has none, a brand, a
    maker, who approved, mixed or witnessed, how it felt or tasted, a colour, a reason, a rating), and the
    ones the layout does hold (dose, route, strength, status, reference range, priority, organism, care
    unit, caregiver, ordering provider). Held out: round 16 was built on the eighth set and the train
    CVs, and this set read before (F1 0.612, P 0.932, R 0.456; 3 blocked, 49 let through) and after (F1
    0.792, P 0.953, R 0.678; 3 blocked, 29 let through). Round 20 (a property of a thing the catalog
    names): F1 0.808, R 0.700; 3 blocked, 27 let through. Round 21 (a column's name in words): F1 0.813,
    2 blocked, 27 let through. A floor: it can only get better."""
    items = set_items(ENTITY_ATTRIBUTES_SET, each=80)
    assert_floor("entity attributes", score_items(gate, items), f1=0.81, blocked=2, missed=27)


COHORT_SET = HERE / "cohort_set.jsonl"


def test_the_gate_on_cohort_statistics_over_patients(gate):
    """64 + 64 questions written in round 17 before anything was changed for them, each unanswerable one
    beside an answerable look-alike in the same sentence: cohort statistics (a share, the top N, an average
    or median, a count per year, a distribution, two units compared, a list of patients), a shape the nine
    other sets hardly use, over attributes the layout holds (marital status, insurance, route, care unit,
    ED times, DRG severity, emar sites, pharmacy verification, OMR, caregivers, reference ranges) and
    look-alikes it does not (who paid or filled, staff and their pay, devices and makers, what happened at
    home or at another hospital, religion, education, visitors). Read before and after round 17 (not tuned
    on): F1 0.476 (P 1.000, R 0.312), 0 blocked, 44 let through, both times: the grounding reads no
    attribute in a cohort statistic's shape ("what percentage of patients ... were vegetarian", "the top
    three hometowns of ..."), so the learned model alone decides. The EHRSQL gate: F1 0.593, 12 blocked
    (by the model), 32 let through. Round 18 (a statistic over patients read as the question it asks of one
    of them, built on this set): F1 0.609 (P 1.000, R 0.438), 0 blocked, 36 let through; the EHRSQL gate
    0.642, 10 blocked, 29 let through. Round 21 (an agent of a thing read to decline): F1 0.653, 0 blocked,
    33 let through. A floor: it can only get better."""
    items = set_items(COHORT_SET, each=60)
    assert_floor("cohort statistics", score_items(gate, items), f1=0.65, blocked=0, missed=33)


RELATIONS_SET = HERE / "relations_set.jsonl"


def test_the_gate_on_relations_between_events_people_and_stays(gate):
    """64 + 64 questions written in round 18 before anything was changed, of kinds the ten other sets lack,
    each unanswerable one beside an answerable look-alike: the time between two events (an admission and
    its first lab test; symptom onset and admission), two patients compared, a cohort filtered by a
    condition the layout records or does not (married, medicare; vaccinated, born by caesarean section),
    clinical shorthand (k+, los, dx; fhx, pcp, hpi), derived measures (weekday, fluid balance, age at death;
    steps walked, body fat), absence ("never had a procedure"; "never missed a meal"), a patient's own stays
    compared, and what came before or after. Held out: never read to build round 18, scored before and
    after only: F1 0.609 (P 1.000, R 0.438), 0 blocked, 36 let through, both times (AUC 0.834 → 0.832); the
    EHRSQL gate 0.661 → 0.654 (blocked 11 → 10, let through 27 → 28). A floor: it can only get better."""
    items = set_items(RELATIONS_SET, each=60)
    assert_floor("relations", score_items(gate, items), f1=0.60, blocked=0, missed=36)


COLUMN_TOUCH_SET = HERE / "column_touch_set.jsonl"


def test_the_gate_on_questions_whose_words_touch_a_real_column(gate):
    """64 + 64 questions written in round 19 before anything was changed, of a kind the eleven other sets
    lack, each unanswerable one beside the answerable question of the column its words touch: something a
    column's value names but no column holds (the insurance company's phone number, the admission
    location's address, a lab test's price or loinc code, a drug's half-life, a care unit's floor, the
    caregiver's email, a drg's national length of stay), beside the column itself (insurance, admission
    location, a lab value, route, care unit, caregiver id, drg severity). Held out: never listed, never
    tuned on; scored before and after round 19 only. Round 19 (before and after: no gate change was kept): F1 0.817, 4 of 64
    answerable blocked, 17 let through, AUC 0.919; the EHRSQL gate F1 0.748, 13 blocked, 18 let through, AUC
    0.827. Round 20 (a property of a thing the catalog names, built on the thirteenth set; numbers read
    once before and once after): F1 0.848, 4 blocked, 14 let through, AUC 0.934; the EHRSQL gate F1 0.770,
    11 blocked, 17 let through, AUC 0.837. Round 21 (a column's name in words; numbers read once before and
    once after): F1 0.855, 3 blocked, 14 let through, AUC 0.944; the EHRSQL gate F1 0.777, 10 blocked, 17 let
    through, AUC 0.850. A floor: it can only get better."""
    items = set_items(COLUMN_TOUCH_SET, each=60)
    assert_floor("column touch", score_items(gate, items), f1=0.85, blocked=3, missed=14)


THING_PROPERTY_SET = HERE / "thing_property_set.jsonl"


def test_the_gate_on_a_property_asked_of_a_thing_a_column_names(gate):
    """70 + 70 questions written in round 20 before the gate changed: a property asked of a thing a
    column names (a drug, a lab test, an insurance, a care unit, a chart item, a culture...) that no
    column holds (a storage temperature, a deductible, a turnaround time, how it smelled, the ward's
    visiting policy), each beside a look-alike asking a property a column does hold (route, dose, fluid,
    category, care unit, insurance). Round 20 built the grounding of such a property on it (and on the
    train CV): F1 0.769 -> 0.848 (blocked 2 -> 2, let through 25 -> 17), AUC 0.902 -> 0.934; the EHRSQL
    gate F1 0.742 -> 0.784 (blocked 8 -> 6, let through 24 -> 21). Round 21 (a column's name in words, "the
    event text" no longer texting, an agent of a thing): F1 0.848 -> 0.871 (blocked 2 -> 0, let through 17 ->
    16); the EHRSQL gate 0.784 -> 0.797 (blocked 6 -> 4). A floor: it can only get better."""
    items = set_items(THING_PROPERTY_SET, each=70)
    assert_floor("thing property", score_items(gate, items), f1=0.87, blocked=0, missed=16)


SPLIT_WORDS_SET = HERE / "split_words_set.jsonl"


def test_the_gate_on_a_column_asked_in_the_words_its_name_joins_or_shortens(gate):
    """72 + 72 questions written in round 21 before the gate changed: a column asked for in the words its
    name joins or shortens ("the normal high value" of d_items.highnormalvalue, "the event text" of
    emar.event_txt, "the total amount", "the emergency department registration time"), each beside a
    look-alike asking a property no column holds in the same sentence ("the alarm high value", "the event
    font", "the total price"). Round 21 built the reading of a name's words on it (and on the train CV):
    F1 0.812 -> 0.844 (blocked 7 -> 2, let through 18 -> 18), AUC 0.891 -> 0.939; the EHRSQL gate F1 0.719
    -> 0.754 (blocked 10 -> 4). A floor: it can only get better."""
    items = set_items(SPLIT_WORDS_SET, each=72)
    assert_floor("split words", score_items(gate, items), f1=0.84, blocked=2, missed=18)
