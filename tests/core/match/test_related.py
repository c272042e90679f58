"""The relation between two events replaced (core/match/related.py): a verified two-event template's
relation ("within the same day") replaced by the one another verified template writes for the
question's relation phrase ("within 2 days", "within the same hospital visit"), on EHRSQL-shaped
SQLite templates with a bag-of-words stand-in for the embedder. Which relation a phrase writes comes
from the library's own pairs of templates, never from a list; the attacks: the events in the other
order, a unit the library never shows for a relation, two relation phrases, a number with a unit
that is no relation the library shows, a negation, the same event twice (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import build_template, mask_question
from core.match.library import Vote
from core.match.reading import read_question
from core.match.related import _rewritten, library_relations, relation_plans, template_relation
from tests.core.match.test_library import ask_with_own_values, embed, index_of

# The drug a patient was prescribed after a procedure, as EHRSQL writes it: two events (T1, T2) joined
# on the patient, the procedure first, and a relation between them.
DRUG_AFTER = (
    "SELECT T2.drug FROM (SELECT procedures_icd.subject_id, procedures_icd.charttime{v1} FROM procedures_icd "
    "WHERE procedures_icd.hadm_id IN (SELECT admissions.hadm_id FROM admissions WHERE admissions.subject_id = {p}) "
    "AND procedures_icd.icd_code = (SELECT d_icd_procedures.icd_code FROM d_icd_procedures WHERE "
    "d_icd_procedures.long_title = '{proc}'){t1}) AS T1 JOIN (SELECT prescriptions.subject_id, prescriptions.drug, "
    "prescriptions.starttime{v2} FROM prescriptions WHERE prescriptions.hadm_id IN (SELECT admissions.hadm_id FROM "
    "admissions WHERE admissions.subject_id = {p}){t2}) AS T2 ON T1.subject_id = T2.subject_id WHERE "
    "T1.charttime < T2.starttime AND {rel}"
)
SAME_DAY = "DATETIME(T1.charttime, 'start of day') = DATETIME(T2.starttime, 'start of day')"
SAME_VISIT = "T1.hadm_id = T2.hadm_id"


def within_days(n: int) -> str:
    return f"DATETIME(T2.starttime) BETWEEN DATETIME(T1.charttime) AND DATETIME(T1.charttime, '+{n} day')"


def last_month(column: str) -> str:
    return f" AND DATETIME({column}, 'start of month') = DATETIME(CURRENT_TIME, 'start of month', '-1 month')"


def drug_after(p: int, proc: str, rel: str, *, period: bool = False) -> str:
    visit = rel == SAME_VISIT
    return DRUG_AFTER.format(
        p=p, proc=proc, rel=rel,
        v1=", procedures_icd.hadm_id" if visit else "", v2=", prescriptions.hadm_id" if visit else "",
        t1=last_month("procedures_icd.charttime") if period else "",
        t2=last_month("prescriptions.starttime") if period else "",
    )  # fmt: skip


BIOPSY, VALVE, BYPASS, STENT = (
    "closed biopsy of kidney",
    "open and other replacement of aortic valve",
    "bypass coronary artery",
    "insertion of intraluminal device",
)
ITEMS = [
    # one frame (no period) three ways: the pairs that show which relation each phrase writes
    ("What was the name of the drug patient 10004733 was prescribed within the same day after having received a closed biopsy of kidney procedure?", drug_after(10004733, BIOPSY, SAME_DAY)),
    ("What was the name of the drug patient 10019172 was prescribed within 2 days after having received a open and other replacement of aortic valve procedure?", drug_after(10019172, VALVE, within_days(2))),
    ("What was the name of the drug patient 10021118 was prescribed within the same hospital visit after having received a bypass coronary artery procedure?", drug_after(10021118, BYPASS, SAME_VISIT)),
    # the same day last month alone: the base the question asks another relation of
    ("What was the name of the drug patient 10005909 was prescribed within the same day after having received a insertion of intraluminal device procedure last month?", drug_after(10005909, STENT, SAME_DAY, period=True)),
]  # fmt: skip


@pytest.fixture(scope="module")
def library():
    return index_of(ITEMS)


def plans(index, question, base=4):
    vote = Vote.of(embed([mask_question(question)])[0], index)
    return relation_plans(read_question(question, None), index, base - 1, vote)


def related(index, question):
    results = ask_with_own_values(index, question).results
    return [r for r in results if r.hard_ok and "instead of within the same day" in r.composed_with]


def test_the_library_shows_which_relation_a_phrase_writes(library):
    forms = library_relations(library).forms
    assert forms[("within", "<number>", "days")] == (
        "DATETIME(T2._c) BETWEEN DATETIME(T1._c) AND DATETIME(T1._c, '+<number> day')"
    )
    assert (
        forms[("within", "the", "same", "day")]
        == "DATETIME(T1._c, 'start of day') = DATETIME(T2._c, 'start of day')"
    )
    assert forms[("within", "the", "same", "hospital", "visit")] == "T1.hadm_id = T2.hadm_id"
    # a library with no two templates alike but for their relation maps nothing
    assert library_relations(index_of(ITEMS[3:])).forms == {}


def test_within_n_days_takes_the_place_of_the_same_day_with_the_questions_n(library):
    question = (
        "What was the name of the drug patient 10005909 was prescribed within 3 days after having received a "
        "insertion of intraluminal device procedure last month?"
    )
    (source, swap), *_ = plans(library, question)
    assert swap.phrase == "within 2 days instead of within the same day" and source == 1
    best = related(library, question)[0]
    assert (
        "DATETIME(T2.starttime) BETWEEN DATETIME(T1.charttime) AND DATETIME(T1.charttime, '+3 day')"
        in best.sql
    )
    assert "start of day" not in best.sql and best.sql.count("'-1 month'") == 2  # the base's period kept
    assert "subject_id = 10005909" in best.sql and "'insertion of intraluminal device'" in best.sql
    assert best.features["composed"] == 1.0 and best.composed_from == (4, 2)


def test_the_same_visit_returns_the_visit_of_each_event_as_the_library_writes_it(library):
    question = (
        "What was the name of the drug patient 10005909 was prescribed within the same hospital visit after "
        "having received a insertion of intraluminal device procedure last month?"
    )
    best = related(library, question)[0]
    assert "T1.hadm_id = T2.hadm_id" in best.sql and "start of day" not in best.sql
    assert "procedures_icd.charttime, procedures_icd.hadm_id FROM" in best.sql
    assert "prescriptions.starttime, prescriptions.hadm_id FROM" in best.sql


def test_the_visit_a_relation_alone_returned_is_no_longer_returned():
    sql = drug_after(10021118, BYPASS, SAME_VISIT)
    conjunct = "DATETIME(T2._c) BETWEEN DATETIME(T1._c) AND DATETIME(T1._c, '+2 day')"
    written = _rewritten(sql, "sqlite", conjunct, ())
    assert "hadm_id = T2.hadm_id" not in written and "procedures_icd.charttime FROM" in written
    assert (
        "DATETIME(T2.starttime) BETWEEN DATETIME(T1.charttime) AND DATETIME(T1.charttime, '+2 day')"
        in written
    )
    # a column the new relation reads that an event cannot return as the library writes it: refused
    assert _rewritten(drug_after(1, BIOPSY, SAME_DAY), "sqlite", SAME_VISIT, (("T1", "hadm_id", "admissions.hadm_id"),)) is None  # fmt: skip


@pytest.mark.parametrize(
    "question",
    [
        # the events in the other order: "before" the procedure is not "after" it
        "What was the name of the drug patient 10005909 was prescribed within 2 days before having received a insertion of intraluminal device procedure last month?",
        # a unit the library never shows for a relation: within 2 months is not within 2 days
        "What was the name of the drug patient 10005909 was prescribed within 2 months after having received a insertion of intraluminal device procedure last month?",
        "What was the name of the drug patient 10005909 was prescribed within 2 weeks after having received a insertion of intraluminal device procedure last month?",
        # two relation phrases: which one replaces the relation is not one answer
        "What was the name of the drug patient 10005909 was prescribed within 2 days after having received a insertion of intraluminal device procedure within the same hospital visit last month?",
        "What was the name of the drug patient 10005909 was prescribed within 2 days after having received a insertion of intraluminal device procedure within 2 days last month?",
        # a number with a unit that is no relation the library shows ("for 2 days": how long, not when)
        "What was the name of the drug patient 10005909 was prescribed for 2 days after having received a insertion of intraluminal device procedure last month?",
        # a negation: "not within 2 days" is another question
        "What was the name of the drug patient 10005909 was not prescribed within 2 days after having received a insertion of intraluminal device procedure last month?",
        # the same event twice: no procedure is named, the prescription is related to itself
        "What was the name of the drug patient 10005909 was prescribed within 2 days after having been prescribed a drug last month?",
    ],
)
def test_no_relation_the_question_does_not_ask(library, question):
    assert not related(library, question)


def test_the_plans_refuse_before_anything_is_built(library):
    # the base's own relation: a verified question, not a replacement
    assert not plans(
        library,
        "What was the name of the drug patient 10005909 was prescribed within the same day after having received "
        "a insertion of intraluminal device procedure last month?",
    )
    # the question differs from the base in more than its relation (this month, not last month)
    assert not plans(
        library,
        "What was the name of the drug patient 10005909 was prescribed within 2 days after having received a "
        "insertion of intraluminal device procedure in 2100?",
    )


def test_a_template_of_one_event_or_of_two_relations_has_no_relation():
    one = build_template(
        "what drug was patient 1 prescribed last month?",
        "SELECT prescriptions.drug FROM prescriptions WHERE prescriptions.subject_id = 1",
        dialect="sqlite",
    )
    assert template_relation(one) is None
    two = drug_after(10004733, BIOPSY, SAME_DAY).replace(SAME_DAY, f"{SAME_DAY} AND {within_days(2)}")
    template = build_template("What was the name of the drug patient 10004733 was prescribed within 2 days?", two, dialect="sqlite")  # fmt: skip
    assert template_relation(template) is None
