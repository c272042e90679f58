"""The table swap (core/match/retabled.py): a verified template over diagnoses answered for a
procedure the question names (or the reverse), where the library shows in other shapes that the two
table sets are used alike, with the attacks it must refuse (pure: no database)."""

from __future__ import annotations

import pytest

from core.match import ValueIndex, build_template, entry_for, mask_question, match_library
from tests.core.match.test_library import embed, index_of

DX = "(SELECT d_icd_diagnoses.icd_code FROM d_icd_diagnoses WHERE d_icd_diagnoses.long_title = '{v}')"
PX = "(SELECT d_icd_procedures.icd_code FROM d_icd_procedures WHERE d_icd_procedures.long_title = '{v}')"
COST = (
    "what is the cost of a diagnosis of sepsis?",
    "SELECT DISTINCT cost.cost FROM cost WHERE cost.event_type = 'diagnoses_icd' AND cost.event_id IN "
    "(SELECT diagnoses_icd.row_id FROM diagnoses_icd WHERE diagnoses_icd.icd_code = "
    + DX.format(v="sepsis")
    + ")",
)
# Two shapes the library holds over both sides: diagnoses and procedures are used alike.
ALIKE = [
    ("how many patients were diagnosed with sepsis?",
     "SELECT COUNT(DISTINCT diagnoses_icd.subject_id) FROM diagnoses_icd WHERE diagnoses_icd.icd_code = "
     + DX.format(v="sepsis")),
    ("how many patients had the procedure appendectomy?",
     "SELECT COUNT(DISTINCT procedures_icd.subject_id) FROM procedures_icd WHERE procedures_icd.icd_code = "
     + PX.format(v="appendectomy")),
    ("when was patient 10014354 last diagnosed with sepsis?",
     "SELECT diagnoses_icd.charttime FROM diagnoses_icd WHERE diagnoses_icd.subject_id = 10014354 AND "
     "diagnoses_icd.icd_code = " + DX.format(v="sepsis") + " ORDER BY diagnoses_icd.charttime DESC LIMIT 1"),
    ("when did patient 10014354 last have the procedure appendectomy?",
     "SELECT procedures_icd.charttime FROM procedures_icd WHERE procedures_icd.subject_id = 10014354 AND "
     "procedures_icd.icd_code = " + PX.format(v="appendectomy") + " ORDER BY procedures_icd.charttime DESC LIMIT 1"),
]  # fmt: skip
VALUES = {
    "d_icd_diagnoses.long_title": ["sepsis", "hyperkalemia"],
    "d_icd_procedures.long_title": ["appendectomy", "colonoscopy"],
    "prescriptions.drug": ["heparin"],
}


def ask(index, question):
    values = ValueIndex(VALUES)
    vector = embed([mask_question(question, values)])[0]
    return match_library(question, vector, index, lookup=lambda c, t: [], values=values)


def retabled(found):
    return [r for r in found.results if r.composed_from and r.hard_ok and "procedures_icd" in (r.sql or "")]


@pytest.fixture(scope="module")
def library():
    return index_of([COST, *ALIKE], dialect="postgres")


def test_a_procedure_asked_of_the_diagnosis_template_is_answered_over_procedures(library):
    found = retabled(ask(library, "what is the cost of a procedure of colonoscopy?"))
    best = found[0]
    assert "diagnoses" not in best.sql, best.sql
    assert "cost.event_type = 'procedures_icd'" in best.sql
    assert "d_icd_procedures.long_title = 'colonoscopy'" in best.sql
    assert best.composed_from[0] == 1 and best.composed_with == "colonoscopy instead of sepsis"


@pytest.mark.parametrize(
    "question",
    [
        "what is the cost of a diagnosis of colonoscopy?",  # a procedure named with a diagnosis word
        "what is the cost of a procedure of colonoscopy for sepsis?",  # both tables named
        "what is the cost of not having a procedure of colonoscopy?",  # a negation
        "what is the cost of a procedure of heparin?",  # an item the other table does not hold
        "what is the cost of a procedure of colonoscopy per patient?",  # a phrase the library never shows
    ],
)
def test_no_table_swap_for_the_attacks(library, question):
    assert not retabled(ask(library, question))


def test_no_table_swap_where_the_library_shows_the_tables_alike_in_one_shape_only():
    """One pair of templates may be an accident of the library: the renaming needs two shapes."""
    index = index_of([COST, *ALIKE[:2]], dialect="postgres")
    assert not retabled(ask(index, "what is the cost of a procedure of colonoscopy?"))


def test_the_base_wording_says_the_new_side_as_the_question_says_it_or_no_side():
    """'a diagnosis of sepsis' becomes 'a procedure of colonoscopy' where the question says
    'procedure', and 'a of colonoscopy' where it says no side: the guard then reads the words the
    question says, never the old table's subject."""
    from core.match.retabled import TableSwap

    rename = (("d_icd_diagnoses", "d_icd_procedures"), ("diagnoses_icd", "procedures_icd"))
    common = (
        rename,
        "d_icd_diagnoses.long_title",
        "d_icd_procedures.long_title",
        "colonoscopy",
        "colonoscopy",
    )
    template = build_template(*COST)
    said = TableSwap(*common, "sepsis", old_subjects=frozenset({"diagnos"}), new_word="procedure")
    unsaid = TableSwap(*common, "sepsis", old_subjects=frozenset({"diagnos"}))
    assert said.apply(template)[0] == "what is the cost of a procedure of colonoscopy?"
    assert unsaid.apply(template)[0] == "what is the cost of a of colonoscopy?"
    assert "procedures_icd" in unsaid.apply(template)[1]


def test_a_question_that_says_no_side_is_answered_over_the_table_that_holds_its_item(library):
    found = retabled(ask(library, "what is the cost of colonoscopy?"))
    assert found and "d_icd_procedures.long_title = 'colonoscopy'" in found[0].sql


def test_a_shape_is_read_once_per_template_key_and_is_the_shape_of_its_sql():
    """Paraphrases of one template (same key, other values) share one shape, read once per key
    (items.shape_of: a calibration's CPU); it is the shape read from either paraphrase's own SQL, and
    another template (other key) keeps its own shape even if asked after."""
    from core.match.items import _BY_KEY, _shape, shape_of

    first, second = (entry_for(n, q, sql, build_template(q, sql)) for n, (q, sql) in enumerate(ALIKE[:2]))
    again = entry_for(9, "how many patients were diagnosed with hyperkalemia?",
                      ALIKE[0][1].replace("sepsis", "hyperkalemia"),
                      build_template("how many patients were diagnosed with hyperkalemia?",
                                     ALIKE[0][1].replace("sepsis", "hyperkalemia")))  # fmt: skip
    assert again.key == first.key and again.template.sql_template != first.template.sql_template
    _BY_KEY.clear()
    shape = shape_of(first.template, first.key)
    assert (
        shape
        == _shape(first.template.sql_template, "sqlite")
        == _shape(again.template.sql_template, "sqlite")
    )
    assert shape_of(again.template, again.key) is shape and len(_BY_KEY) == 1
    other = shape_of(second.template, second.key)
    assert other[1] != shape[1] and other[0] == shape[0]  # the same masked SQL over the other tables
    assert len(_BY_KEY) == 2


# The role swap: an event table and its own columns renamed (transfers.careunit / intime for
# prescriptions.drug / starttime), where the library shows the two read alike in two shapes.
ADM = "(SELECT admissions.hadm_id FROM admissions WHERE admissions.subject_id = 10014354)"
STAY = (
    "how many patients stayed in the sicu since 2100?",
    "SELECT COUNT(DISTINCT admissions.subject_id) FROM admissions WHERE admissions.hadm_id IN (SELECT "
    "transfers.hadm_id FROM transfers WHERE transfers.careunit = 'sicu' AND strftime('%Y',transfers.intime) >= '2100')",
)
ROLES = [
    ("when did patient 10014354 last stay in the sicu?",
     f"SELECT transfers.intime FROM transfers WHERE transfers.hadm_id IN {ADM} AND transfers.careunit = 'sicu' "
     "ORDER BY transfers.intime DESC LIMIT 1"),
    ("when was patient 10014354 last prescribed heparin?",
     f"SELECT prescriptions.starttime FROM prescriptions WHERE prescriptions.hadm_id IN {ADM} AND "
     "prescriptions.drug = 'heparin' ORDER BY prescriptions.starttime DESC LIMIT 1"),
    ("did patient 10014354 stay in the sicu in 2100?",
     f"SELECT COUNT(*)>0 FROM transfers WHERE transfers.hadm_id IN {ADM} AND transfers.careunit = 'sicu' AND "
     "strftime('%Y',transfers.intime) = '2100'"),
    ("was patient 10014354 prescribed heparin in 2100?",
     f"SELECT COUNT(*)>0 FROM prescriptions WHERE prescriptions.hadm_id IN {ADM} AND prescriptions.drug = 'heparin' "
     "AND strftime('%Y',prescriptions.starttime) = '2100'"),
]  # fmt: skip
ROLE_VALUES = {
    **VALUES,
    "transfers.careunit": ["sicu", "vascular"],
    "prescriptions.drug": ["heparin", "insulin"],
}


@pytest.fixture(scope="module")
def roles():
    return index_of([STAY, *ROLES], dialect="postgres")


def ask_roles(index, question):
    values = ValueIndex(ROLE_VALUES)
    vector = embed([mask_question(question, values)])[0]
    found = match_library(question, vector, index, lookup=lambda c, t: [], values=values)
    return [r for r in found.results if r.composed_from and r.hard_ok and "prescriptions" in (r.sql or "")]


def test_a_drug_asked_of_the_care_unit_template_is_answered_over_prescriptions(roles):
    found = ask_roles(roles, "how many patients were prescribed insulin since 2100?")
    assert found, "the role swap should reach the care-unit template"
    sql = found[0].sql
    assert "transfers" not in sql and "careunit" not in sql and "intime" not in sql, sql
    assert "prescriptions.drug = 'insulin'" in sql and "prescriptions.starttime" in sql, sql


@pytest.mark.parametrize(
    "question",
    [
        "how many patients were prescribed colonoscopy since 2100?",  # an item of neither table
        "how many patients in the sicu were prescribed insulin since 2100?",  # both sides' items
        "how many patients were not prescribed insulin since 2100?",  # a negation
        "how many patients stayed in insulin since 2100?",  # the old side's verb
    ],
)
def test_no_role_swap_for_the_attacks(roles, question):
    assert not ask_roles(roles, question)


def test_no_role_swap_where_the_base_reads_a_column_the_renaming_does_not_rename():
    """A prescriptions base that reads its dose (no column of transfers) is never renamed onto
    transfers: the renamed SQL would read transfers.dose_val_rx."""
    from core.match.retabled import _covered, library_tables

    dose = ("what was the dose of heparin patient 10014354 was last prescribed?",
            f"SELECT prescriptions.dose_val_rx FROM prescriptions WHERE prescriptions.hadm_id IN {ADM} AND "
            "prescriptions.drug = 'heparin' ORDER BY prescriptions.starttime DESC LIMIT 1")  # fmt: skip
    index = index_of([STAY, *ROLES, dose], dialect="postgres")
    learned = library_tables(index)
    key = (("prescriptions", "transfers"),)
    assert key in learned.sources and learned.columns[key]
    assert not _covered(index.entries[-1], key, learned.columns[key])
    assert _covered(index.entries[2], key, learned.columns[key])


# --- the subject swap: a template that names no item, over the renamed tables --------------------

ANY_PX = (
    "was patient 10014354 given any procedure on the first hospital visit?",
    "SELECT COUNT(*) > 0 FROM procedures_icd WHERE procedures_icd.hadm_id IN (SELECT admissions.hadm_id FROM "
    "admissions WHERE admissions.subject_id = 10014354 AND admissions.dischtime IS NOT NULL ORDER BY "
    "admissions.admittime ASC LIMIT 1)",
)


@pytest.fixture(scope="module")
def subjects():
    return index_of([ANY_PX, *ALIKE], dialect="postgres")


def subject_swapped(found):
    return [r for r in found.results if r.composed_from and r.hard_ok and "diagnoses_icd" in (r.sql or "")]


def test_a_template_that_names_no_item_is_asked_of_the_other_side(subjects):
    best = subject_swapped(
        ask(subjects, "was patient 10002495 given any diagnosis on the first hospital visit?")
    )[0]
    assert "procedures_icd" not in best.sql and "COUNT(*) > 0 FROM diagnoses_icd" in best.sql
    assert "subject_id = 10002495" in best.sql
    assert best.composed_with == "diagnosis instead of procedure"


@pytest.mark.parametrize(
    "question",
    [
        # an item named: a condition the base's SQL lacks ("diagnosed with sepsis" is not "any diagnosis")
        "was patient 10002495 given a diagnosis of sepsis on the first hospital visit?",
        # both sides' subjects: which one it asks of is not one answer
        "was patient 10002495 given any diagnosis or procedure on the first hospital visit?",
        # a negation
        "was patient 10002495 not given any diagnosis on the first hospital visit?",
        # no side named: the base's own question, not a swap
        "was patient 10002495 given anything on the first hospital visit?",
    ],
)
def test_no_subject_swap_for_the_attacks(subjects, question):
    assert not subject_swapped(ask(subjects, question))


def test_no_subject_swap_where_the_library_shows_the_tables_alike_in_one_shape_only():
    index = index_of([ANY_PX, *ALIKE[:2]], dialect="postgres")
    assert not subject_swapped(
        ask(index, "was patient 10002495 given any diagnosis on the first hospital visit?")
    )
