"""Templates from approved examples: slots, masked questions, operators, binding (pure: no database)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from core.match.build import build_template
from core.match.operators import question_operators
from core.match.spans import extract_typed_spans
from core.match.template import (
    TEMPLATE_VERSION,
    BindError,
    Slot,
    Template,
    _literal_for,
    _skeleton_of,
    bind_sql,
    dialect_named,
    parse_sql,
    parsed_sql,
    template_is_current,
    template_key,
)

GLUCOSE_Q = "what was the first measured glucose value of patient 10004235 in 2150?"
GLUCOSE_SQL = """
SELECT l.valuenum FROM mimiciv_hosp.labevents l
JOIN mimiciv_hosp.d_labitems d ON l.itemid = d.itemid
WHERE d.label = 'Glucose' AND l.subject_id = 10004235 AND extract(year from l.charttime) = 2150
ORDER BY l.charttime ASC LIMIT 1
"""
FENTANYL_Q = "how many times was fentanyl prescribed to patient 10006580?"
FENTANYL_SQL = (
    "SELECT count(*) FROM mimiciv_hosp.prescriptions WHERE subject_id = 10006580 AND drug ILIKE '%fentanyl%'"
)
SEPSIS_Q = "count the number of patients diagnosed with sepsis since 2150"
SEPSIS_SQL = """
SELECT count(DISTINCT di.subject_id) FROM mimiciv_hosp.diagnoses_icd di
JOIN mimiciv_hosp.d_icd_diagnoses dd ON di.icd_code = dd.icd_code AND di.icd_version = dd.icd_version
JOIN mimiciv_hosp.admissions a ON a.hadm_id = di.hadm_id
WHERE dd.long_title = 'Sepsis, unspecified organism' AND a.admittime >= '2150-01-01'
"""
ELECTIVE_Q = "what is the average length of stay of elective admissions?"
ELECTIVE_SQL = (
    "SELECT avg(extract(epoch from dischtime - admittime) / 86400) FROM mimiciv_hosp.admissions "
    "WHERE admission_type = 'ELECTIVE'"
)
FEMALE_Q = "how many female patients were admitted in 2151?"
FEMALE_SQL = """
SELECT count(DISTINCT p.subject_id) FROM mimiciv_hosp.patients p
JOIN mimiciv_hosp.admissions a ON a.subject_id = p.subject_id
WHERE p.gender = 'F' AND a.admittime >= '2151-01-01' AND a.admittime < '2152-01-01'
"""


def literals(sql: str, dialect: str = "postgres") -> set[str]:
    return {lit.this for lit in sqlglot.parse_one(sql, dialect=dialect).find_all(exp.Literal)}


def slot(template: Template, name: str):
    return next(s for s in template.slots if s.name == name)


# --- building ------------------------------------------------------------------------------------


def test_glucose_example_gets_a_lab_value_a_patient_and_a_year_slot():
    t = build_template(GLUCOSE_Q, GLUCOSE_SQL)
    assert t.usable, t.error
    assert t.masked_question == (
        "what was the first measured {value:mimiciv_hosp.d_labitems.label} value of patient {patient_id} in {year}?"
    )
    assert {(s.name, s.type, s.text, s.value) for s in t.slots} == {
        ("value", "value", "glucose", "Glucose"),
        ("patient_id", "patient_id", "10004235", "10004235"),
        ("year", "year", "2150", "2150"),
    }
    assert slot(t, "patient_id").column == "mimiciv_hosp.labevents.subject_id"
    assert slot(t, "year").column == "mimiciv_hosp.labevents.charttime"
    # LIMIT 1 is not in the question: it stays fixed, with no slot.
    assert all(u.literal != "1" for s in t.slots for u in s.uses)
    assert t.operators["order"] == "first" and t.operators["time"] == "in"
    assert t.version == TEMPLATE_VERSION


def test_like_pattern_slot_keeps_its_wildcards_when_rebound():
    t = build_template(FENTANYL_Q, FENTANYL_SQL)
    value = slot(t, "value")
    assert value.column == "mimiciv_hosp.prescriptions.drug"
    assert (value.uses[0].prefix, value.uses[0].suffix, value.uses[0].like) == ("%", "%", True)
    sql = bind_sql(t, {"value": "fenofibrate", "patient_id": "10004235"})
    assert literals(sql) == {"%fenofibrate%", "10004235"}
    assert "fentanyl" not in sql and "10006580" not in sql
    assert t.operators["times"] is True and t.operators["aggregate"] == "count"


def test_a_fuzzy_name_span_maps_a_short_question_word_to_a_long_title():
    t = build_template(SEPSIS_Q, SEPSIS_SQL)
    value = slot(t, "value")
    assert (value.text, value.value, value.column) == (
        "sepsis",
        "Sepsis, unspecified organism",
        "mimiciv_hosp.d_icd_diagnoses.long_title",
    )
    year = slot(t, "year")
    assert year.uses[0].literal == "2150-01-01" and year.uses[0].suffix == "-01-01"
    assert (
        t.masked_question
        == "count the number of patients diagnosed with {value:mimiciv_hosp.d_icd_diagnoses.long_title} since {year}"
    )
    assert t.operators["time"] == "since"


def test_year_range_bounds_are_one_slot_with_an_offset_for_the_upper_bound():
    t = build_template(FEMALE_Q, FEMALE_SQL)
    year = slot(t, "year")
    assert sorted((u.literal, u.offset) for u in year.uses) == [("2151-01-01", 0), ("2152-01-01", 1)]
    sql = bind_sql(t, {"year": "2160", "gender": "M"})
    assert literals(sql) == {"M", "2160-01-01", "2161-01-01"}


def test_female_maps_to_the_gender_code_and_back():
    t = build_template(FEMALE_Q, FEMALE_SQL)
    gender = slot(t, "gender")
    assert (gender.text, gender.value, gender.column) == ("female", "F", "mimiciv_hosp.patients.gender")
    assert "{gender}" in t.masked_question


def test_a_name_in_a_column_without_value_index_is_an_anchor_not_a_slot():
    t = build_template(ELECTIVE_Q, ELECTIVE_SQL, value_columns=lambda table, col: False)
    assert t.slots == ()
    assert t.anchors == ("elective",)
    assert t.operators["aggregate"] == "avg"
    # A caller whose lookup covers admission_type can make it a slot.
    linked = build_template(
        ELECTIVE_Q, ELECTIVE_SQL, value_columns=lambda table, col: col == "admission_type"
    )
    assert [(s.type, s.text, s.value, s.column) for s in linked.slots] == [
        ("value", "elective", "ELECTIVE", "mimiciv_hosp.admissions.admission_type")
    ]
    assert linked.anchors == ()


def test_interval_number_is_a_slot_and_rebinds_inside_the_interval():
    t = build_template(
        "how many prescriptions were started in the last 6 months?",
        "SELECT count(*) FROM mimiciv_hosp.prescriptions WHERE starttime >= now() - interval '6 months'",
    )
    number = slot(t, "number")
    assert number.text == "6"
    sql = bind_sql(t, {"number": "3"})
    interval = sqlglot.parse_one(sql, dialect="postgres").find(exp.Interval)
    assert interval is not None and interval.this.this == "3"
    assert t.operators["period"] == "last n month" and t.operators["units"] == "month"


def test_sqlite_year_string_and_date_range_bounds():
    t = build_template(
        "how many admissions were there in 2150?",
        "SELECT count(*) FROM admissions WHERE strftime('%Y', admittime) = '2150'",
        dialect="sqlite",
    )
    assert [s.type for s in t.slots] == ["year"]
    sql = bind_sql(t, {"year": "2155"})
    assert literals(sql, "sqlite") == {"%Y", "2155"}

    day = build_template(
        "how many lab tests did patient 10004235 have on 2150-03-04?",
        "SELECT count(*) FROM mimiciv_hosp.labevents WHERE subject_id = 10004235 "
        "AND charttime >= '2150-03-04' AND charttime < '2150-03-05'",
    )
    date = slot(day, "date")
    assert sorted((u.literal, u.offset) for u in date.uses) == [("2150-03-04", 0), ("2150-03-05", 1)]
    sql = bind_sql(day, {"date": "2150-12-31", "patient_id": "10004235"})
    assert {"2150-12-31", "2151-01-01"} <= literals(sql)


def test_values_the_sql_does_not_use_are_kept_as_fixed_values():
    t = build_template(
        "what was the first measured glucose value of patient 10004235 in 2150?",
        "SELECT valuenum FROM mimiciv_hosp.labevents WHERE subject_id = 10004235 AND itemid = 50931 "
        "ORDER BY charttime LIMIT 1",
    )
    assert t.fixed_values == ("2150",)
    assert [s.name for s in t.slots] == ["patient_id"]


def test_a_number_inside_a_name_is_part_of_the_name_not_a_fixed_value():
    t = build_template(
        "What is the maximum total hospital cost which involves closed fracture of seven ribs since 2100?",
        "SELECT MAX(c) FROM (SELECT SUM(cost) AS c FROM cost WHERE hadm_id IN (SELECT hadm_id FROM "
        "diagnoses_icd WHERE icd_code = (SELECT icd_code FROM d_icd_diagnoses WHERE long_title = "
        "'closed fracture of seven ribs')) AND STRFTIME('%Y', chargetime) >= '2100' GROUP BY hadm_id)",
        dialect="sqlite",
    )
    assert t.fixed_values == ()
    assert slot(t, "value").text == "closed fracture of seven ribs"
    assert "seven" not in t.masked_question


def test_an_ambiguous_number_stays_fixed():
    # "3" occurs twice in the question: which one the SQL means cannot be told, so neither is a slot.
    t = build_template(
        "which 3 drugs were prescribed at least 3 times to patient 10004235?",
        "SELECT drug FROM mimiciv_hosp.prescriptions WHERE subject_id = 10004235 GROUP BY drug "
        "HAVING count(*) >= 3 LIMIT 3",
    )
    assert [s.name for s in t.slots] == ["patient_id"]
    assert t.fixed_values == ("3", "3")


def test_unparseable_sql_gives_an_unusable_template_not_an_exception():
    t = build_template("how many patients?", "SELEC count( FROM")
    assert not t.usable and t.error.startswith("unusable SQL")
    with pytest.raises(BindError):
        bind_sql(t, {})
    two = build_template("how many patients?", "SELECT 1; SELECT 2")
    assert not two.usable


def test_building_a_template_leaves_the_shared_parse_as_parsed():
    # The parse of a template's SQL is cached and shared (binding and keys copy it before changing
    # it); building reads it without a copy, so it must not change it.
    first = build_template(GLUCOSE_Q, GLUCOSE_SQL)
    shared = parsed_sql(first.sql_template, first.dialect)
    before = shared.sql(dialect=first.dialect)
    bind_sql(first, {s.name: s.value for s in first.slots})
    again = build_template(GLUCOSE_Q, GLUCOSE_SQL)
    assert again == first and again.usable
    assert parsed_sql(first.sql_template, first.dialect) is shared
    assert shared.sql(dialect=first.dialect) == before == first.sql_template


# --- binding -------------------------------------------------------------------------------------


def test_binding_replaces_literals_and_nothing_else():
    t = build_template(GLUCOSE_Q, GLUCOSE_SQL)
    sql = bind_sql(t, {"value": "Potassium", "patient_id": "10006580", "year": "2151"})
    assert literals(sql) == {"Potassium", "10006580", "2151", "1"}
    # Same shape: only the literals changed.
    original = sqlglot.parse_one(t.sql_template, dialect="postgres")
    bound = sqlglot.parse_one(sql, dialect="postgres")
    assert [type(n).__name__ for n in original.walk()] == [type(n).__name__ for n in bound.walk()]


def test_a_real_number_literal_is_usable_and_stays_real_when_rebound():
    t = build_template(
        "What percentile of the mcv value is 85.0 among patients of the same age as patient 10004733?",
        "SELECT DISTINCT c FROM (SELECT valuenum, PERCENT_RANK() OVER (ORDER BY valuenum) AS c FROM labevents "
        "WHERE subject_id = 10004733) WHERE valuenum = 85.0",
        dialect="sqlite",
    )
    assert t.usable, t.error
    assert {"92.0", "92.5"} == {
        lit
        for v in ("92", "92.5")
        for lit in literals(bind_sql(t, {"number": v, "patient_id": "1"}), "sqlite")
    } - {"1"}


def test_binding_refuses_values_of_the_wrong_type():
    t = build_template(GLUCOSE_Q, GLUCOSE_SQL)
    good = {"value": "Glucose", "patient_id": "10004235", "year": "2150"}
    with pytest.raises(BindError):
        bind_sql(t, {**good, "patient_id": "10004235 OR 1=1"})
    with pytest.raises(BindError):
        bind_sql(t, {**good, "year": "21500"})
    with pytest.raises(BindError):
        bind_sql(t, {"value": "Glucose", "patient_id": "10004235"})  # a slot left unbound


def test_hostile_names_become_one_quoted_literal():
    t = build_template(FENTANYL_Q, FENTANYL_SQL)
    hostile = "x'; DROP TABLE mimiciv_hosp.patients; --"
    sql = bind_sql(t, {"value": hostile, "patient_id": "10004235"})
    statements = sqlglot.parse(sql, dialect="postgres")
    assert len(statements) == 1 and isinstance(statements[0], exp.Select)
    assert f"%{hostile}%" in literals(sql)
    assert not list(statements[0].find_all(exp.Drop))


def test_a_stale_template_refuses_to_bind():
    t = build_template(GLUCOSE_Q, GLUCOSE_SQL)
    moved = Template(**{**t.__dict__, "sql_template": t.sql_template.replace("'Glucose'", "'Sodium'")})
    with pytest.raises(BindError, match="stale"):
        bind_sql(moved, {"value": "Potassium", "patient_id": "10004235", "year": "2150"})


# --- storage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question,sql", [(GLUCOSE_Q, GLUCOSE_SQL), (FEMALE_Q, FEMALE_SQL), (ELECTIVE_Q, ELECTIVE_SQL)]
)
def test_json_round_trip(question, sql):
    t = build_template(question, sql)
    data = json.loads(json.dumps(t.to_dict()))
    again = Template.from_dict(data)
    assert again == t
    assert bind_sql(again, {s.name: s.value for s in again.slots}) == t.sql_template
    assert template_is_current(data)
    assert not template_is_current({**data, "version": TEMPLATE_VERSION - 1})
    assert not template_is_current({})


def test_preview_shows_slots_for_people():
    preview = build_template(GLUCOSE_Q, GLUCOSE_SQL).preview()
    assert "{patient_id}" in preview and "{year}" in preview and "10004235" not in preview


# --- operators and spans -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,key",
    [
        ("first glucose of patient 1", "last glucose of patient 1", "order"),
        ("earliest heart rate", "most recent heart rate", "order"),
        ("maximum glucose in 2150", "minimum glucose in 2150", "extreme"),
        ("highest creatinine", "lowest creatinine", "extreme"),
        ("how many admissions", "average admissions", "aggregate"),
        ("total dose of heparin", "average dose of heparin", "aggregate"),
        ("patients diagnosed in 2150", "patients diagnosed since 2150", "time"),
        ("admitted before 2150", "admitted after 2150", "time"),
        ("prescribed this year", "prescribed last year", "period"),
        ("in the last 6 months", "in the last 6 days", "units"),
        ("has patient 1 ever had a culture", "has patient 1 had a culture", "ever"),
        ("how many times was heparin given", "how many patients were given heparin", "times"),
        ("patients older than 65", "patients younger than 65", "compare"),
        ("patients over 65", "patients aged at least 65", "compare"),
        ("patients prescribed heparin", "patients not prescribed heparin", "negation"),
    ],
)
def test_meaning_flip_words_change_the_operator_signature(a, b, key):
    assert question_operators(a)[key] != question_operators(b)[key]


@pytest.mark.parametrize(
    "a,b",
    [
        ("first glucose value", "earliest glucose value"),
        ("how many patients", "count the number of patients"),
        ("maximum heart rate", "highest heart rate"),
        ("in 2150", "during 2150"),
        ("the last glucose of patient 1", "the latest glucose of patient 1"),
        ("admissions in the last year", "admissions in the past year"),
    ],
)
def test_synonyms_keep_the_operator_signature(a, b):
    assert question_operators(a) == question_operators(b)


def test_last_year_is_a_period_not_an_order():
    ops = question_operators("how many patients were admitted last year?")
    assert ops["order"] is None and ops["period"] == "last year"


def test_typed_spans_use_mimic_id_ranges_and_context_words():
    spans = extract_typed_spans(
        "patient 10004235, admission 20044587, stay 30057454, patient 42, aged over 65, in 2150 on 2150-03-04, female"
    )
    assert [(s.type, s.value) for s in spans] == [
        ("patient_id", "10004235"),
        ("admission_id", "20044587"),
        ("stay_id", "30057454"),
        ("patient_id", "42"),
        ("number", "65"),
        ("year", "2150"),
        ("date", "2150-03-04"),
        ("gender", "F"),
    ]
    # "patients older than 65": the number is an age, not a patient id.
    assert [s.type for s in extract_typed_spans("patients older than 65")] == ["number"]


def test_typed_spans_are_read_once_but_each_caller_gets_its_own_list():
    """extract_typed_spans is kept per text (a calibration reads the same questions again and
    again); binding.extract_values adds its runs to the list it gets. The attack: a cached list
    handed out as it is, which one caller's additions would change for every later one."""
    question = "how many female patients were admitted in 2150 with elective admission?"
    first = extract_typed_spans(question)
    expected = [(s.type, s.text, s.start, s.end, s.value) for s in first]
    first.append(first[0])
    first.clear()
    again = extract_typed_spans(question)
    assert again is not first
    assert [(s.type, s.text, s.start, s.end, s.value) for s in again] == expected
    assert [s.type for s in again] == ["gender", "year"]


def test_a_slot_used_on_two_columns_takes_the_first_uses_column_whatever_the_hash_seed():
    # '07' is compared with both visits' times; a set picked one by string hash (per process).
    sql = (
        "SELECT T2.drug FROM (SELECT procedures_icd.subject_id, procedures_icd.charttime FROM procedures_icd"
        " WHERE strftime('%m', procedures_icd.charttime) = '07') AS T1 JOIN (SELECT prescriptions.subject_id,"
        " prescriptions.drug, prescriptions.starttime FROM prescriptions"
        " WHERE strftime('%m', prescriptions.starttime) = '07') AS T2 ON T1.subject_id = T2.subject_id"
    )
    template = build_template("Which drug was prescribed after a procedure in 07?", sql, dialect="sqlite")
    month = [s for s in template.slots if s.text == "07"]
    assert len(month) == 1 and len(month[0].uses) == 2
    assert month[0].column == "procedures_icd.charttime"


# A name that starts with '%' (a d_labitems label, not a LIKE pattern), written in four subqueries.
A1C_Q = (
    "Was patient 10023239's % hemoglobin a1c last measured on the first hospital visit greater than "
    "the value first measured on the first hospital visit?"
)
_A1C_ONE = (
    "SELECT labevents.valuenum FROM labevents WHERE labevents.subject_id = 10023239 AND labevents.itemid IN "
    "(SELECT d_labitems.itemid FROM d_labitems WHERE d_labitems.label = '% hemoglobin a1c') AND "
    "labevents.charttime = (SELECT labevents.charttime FROM labevents WHERE labevents.subject_id = 10023239 "
    "AND labevents.itemid IN (SELECT d_labitems.itemid FROM d_labitems WHERE d_labitems.label = "
    "'% hemoglobin a1c') ORDER BY labevents.charttime {} LIMIT 1)"
)
A1C_SQL = f"SELECT ({_A1C_ONE.format('DESC')}) > ({_A1C_ONE.format('ASC')})"


def test_a_name_starting_with_a_percent_sign_fills_every_copy_of_its_slot():
    t = build_template(A1C_Q, A1C_SQL, dialect="sqlite")
    value = slot(t, "value")
    assert value.value == "% hemoglobin a1c"
    assert len(value.uses) == 4  # one per subquery: not one use and three copies left fixed
    bound = bind_sql(t, {"value": "mesothelial cell", "patient_id": "10007818"})
    assert "hemoglobin" not in bound and bound.count("'mesothelial cell'") == 4


def test_binding_refuses_a_new_name_where_a_copy_of_the_old_one_stays_fixed():
    # Attack: a template that (however it was built) fills one copy of its item and leaves another
    # fixed would answer about two items at once; binding refuses rather than run it.
    t = build_template(A1C_Q, A1C_SQL, dialect="sqlite")
    value = slot(t, "value")
    one_use = Template(**{**t.__dict__, "slots": tuple(
        s if s.name != "value" else Slot(**{**s.__dict__, "uses": s.uses[:1]}) for s in t.slots
    )})  # fmt: skip
    assert bind_sql(one_use, {"value": value.value, "patient_id": "10023239"})  # its own value: as written
    with pytest.raises(BindError, match="old value"):
        bind_sql(one_use, {"value": "mesothelial cell", "patient_id": "10023239"})
    patient = slot(t, "patient_id")
    one_id = Template(**{**t.__dict__, "slots": tuple(
        s if s.name != "patient_id" else Slot(**{**s.__dict__, "uses": s.uses[:1]}) for s in t.slots
    )})  # fmt: skip
    assert len(patient.uses) == 4
    with pytest.raises(BindError, match="old value"):
        bind_sql(one_id, {"value": value.value, "patient_id": "10007818"})


# --- binding written into the template's text (template._Skeleton) -------------------------------

HOSTILE = [
    "O'Brien",
    "x'; DROP TABLE patients; --",
    "back\\slash\\'",
    "a -- comment",
    "a /* comment */ b",
    "line\nbreak",
    "carriage\rreturn\r\n'",
    "''",
    "%_'%",
]


def _tree_bound(template: Template, values: dict[str, str]) -> str:
    """The bound SQL as the tree writes it: the parse copied, its slot literals replaced (what
    bind_sql did before it wrote literals into the template's text)."""
    tree = parsed_sql(template.sql_template, template.dialect).copy()
    nodes = list(tree.find_all(exp.Literal))
    new = {}
    for s in template.slots:
        for use in s.uses:
            new.setdefault(use.index, _literal_for(s, use, str(values[s.name]).strip()))
    for i, node in new.items():
        nodes[i].replace(node)
    return tree.sql(dialect=template.dialect)


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_name_binds_to_the_sql_the_tree_writes_and_stays_one_literal(hostile, dialect):
    t = build_template(FENTANYL_Q, FENTANYL_SQL, dialect=dialect)
    assert _skeleton_of(t).parts is not None  # written into the text, not on a tree copy
    values = {"value": hostile, "patient_id": "10004235"}
    sql = bind_sql(t, values)
    assert sql == _tree_bound(t, values)
    statements = sqlglot.parse(sql, dialect=dialect)
    assert len(statements) == 1 and isinstance(statements[0], exp.Select)
    like = statements[0].find(exp.ILike) or statements[0].find(exp.Like)
    assert like is not None and like.expression.find(exp.Literal).this == f"%{hostile}%"  # the value whole
    assert literals(sql, dialect) == {f"%{hostile}%", "10004235"}


def test_every_slot_type_binds_as_the_tree_writes_it():
    cases = [
        (GLUCOSE_Q, GLUCOSE_SQL, {"value": "Potassium", "patient_id": "10006580", "year": "2151"}),
        (FEMALE_Q, FEMALE_SQL, {"gender": "M", "year": "2160"}),
        (SEPSIS_Q, SEPSIS_SQL, {"value": "Sepsis due to 'E. coli'", "year": "2101"}),
    ]
    for question, sql, values in cases:
        t = build_template(question, sql)
        assert t.usable, t.error
        assert bind_sql(t, values) == _tree_bound(t, values)


def test_sql_that_says_the_stand_in_binds_on_the_tree():
    # The skeleton's stand-in for slot 0 already in the SQL: no cuts, binding copies the tree.
    t = build_template(
        "how many times was askdbslot0x prescribed to patient 10006580?",
        "SELECT count(*) FROM prescriptions WHERE subject_id = 10006580 AND drug = 'askdbslot0x' "
        "AND route = 'askdbslot1x'",
        dialect="sqlite",
    )
    assert t.usable and _skeleton_of(t).parts is None
    values = {s.name: s.value for s in t.slots} | {"patient_id": "7"}
    assert bind_sql(t, values) == _tree_bound(t, values)
    assert "askdbslot1x" in bind_sql(t, values)


def test_template_keys_are_the_tree_written_keys():
    for question, sql in [(GLUCOSE_Q, GLUCOSE_SQL), (FENTANYL_Q, FENTANYL_SQL), (FEMALE_Q, FEMALE_SQL)]:
        t = build_template(question, sql)
        tree = parsed_sql(t.sql_template, t.dialect).copy()
        nodes = list(tree.find_all(exp.Literal))
        for s in t.slots:
            for use in s.uses:
                shift = f"{use.offset:+d}" if use.offset else ""
                text = f"{use.prefix}{{{s.type}{shift}}}{use.suffix}"
                nodes[use.index].replace(exp.Literal.string(text) if use.is_string else exp.var(text))
        assert template_key(t) == tree.sql(dialect=t.dialect)


# --- an age decade ("in their 40s") is one slot of two bounds --------------------------------------

DECADE_Q = "How many current patients are in their 40s?"
DECADE_SQL = (
    "SELECT COUNT(DISTINCT admissions.subject_id) FROM admissions "
    "WHERE admissions.dischtime IS NULL AND admissions.age BETWEEN {lo} AND {hi}"
)


def test_an_age_decade_is_one_slot_whose_upper_bound_is_the_decade_plus_nine():
    template = build_template(DECADE_Q, DECADE_SQL.format(lo=40, hi=49), dialect="sqlite")
    (slot,) = template.slots
    assert (slot.type, slot.value, slot.text) == ("decade", "40", "40s")
    assert [(u.literal, u.offset) for u in slot.uses] == [("40", 0), ("49", 9)]
    # one template for every decade: "30s" binds both bounds, never one of them
    other = build_template(
        "how many current patients are in their 20s?", DECADE_SQL.format(lo=20, hi=29), dialect="sqlite"
    )
    assert template_key(template) == template_key(other)
    assert bind_sql(template, {"decade": "30"}).endswith("BETWEEN 30 AND 39")


def test_a_decade_binds_only_a_decade_and_a_bound_the_question_does_not_say_stays_fixed():
    template = build_template(DECADE_Q, DECADE_SQL.format(lo=40, hi=49), dialect="sqlite")
    with pytest.raises(BindError):
        bind_sql(template, {"decade": "65"})  # a threshold's number is no decade
    # the SQL's range is not the question's decade: no slot (a fixed range, its own template)
    fixed = build_template(DECADE_Q, DECADE_SQL.format(lo=40, hi=59), dialect="sqlite")
    assert not fixed.slots and "BETWEEN 40 AND 59" in template_key(fixed)
    threshold = build_template(
        DECADE_Q, "SELECT COUNT(*) FROM admissions WHERE admissions.age >= 40", dialect="sqlite"
    )
    assert not threshold.slots  # "40s" is not "40 or older": the SQL's 40 is no decade's
    # a threshold ("aged 40 or above") is a number, never a decade; "50's" is not read as one
    assert [s.type for s in extract_typed_spans("patients aged 40 or above")] == ["number"]
    assert "decade" not in {s.type for s in extract_typed_spans("patients in their 50's or 1990s")}


# --- a kept parse lets its empty comment lists go (copies skip them) -------------------------------


def test_a_kept_parse_drops_empty_comment_lists_and_writes_the_same_sql():
    # The parser leaves an empty comment list on SELECTs, aliases and functions; a copy deep-copies
    # each one. A kept parse lets them go: its copies and the SQL written from them are unchanged.
    sqls = [
        (GLUCOSE_SQL, "postgres"),
        (SEPSIS_SQL, "postgres"),
        (
            "SELECT COUNT(*) FROM (SELECT DISTINCT p.subject_id FROM patients AS p WHERE p.gender = 'F' "
            "AND STRFTIME('%Y', p.dob) >= '2100') AS t",
            "sqlite",
        ),
    ]
    for sql, dialect in sqls:
        fresh = sqlglot.parse_one(sql, dialect=dialect)
        assert any(n.comments == [] for n in fresh.walk())  # what the parser leaves
        kept = parsed_sql(sql, dialect)
        assert all(n.comments is None for n in kept.walk())
        assert kept.copy().sql(dialect=dialect) == fresh.sql(dialect=dialect)
        assert kept.copy() == fresh


def test_a_kept_parse_keeps_a_comment_that_says_something():
    sql = "SELECT /* the newest */ MAX(charttime) FROM labevents"
    fresh = sqlglot.parse_one(sql, dialect="sqlite")
    kept = parsed_sql(sql, "sqlite")
    assert kept.copy().sql(dialect="sqlite") == fresh.sql(dialect="sqlite")
    assert "the newest" in kept.copy().sql(dialect="sqlite")


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_one_dialect_instance_reads_and_writes_sql_as_its_name_does(dialect):
    """dialect_named hands out one shared sqlglot Dialect per name: every parse and every write with
    it must be the one the name gives, and using it must not change it (the attack: a shared
    instance that a parse or a write left different would change every later reading)."""
    shared = dialect_named(dialect)
    assert dialect_named(dialect) is shared
    before = dict(vars(shared))
    sqls = [
        "SELECT COUNT(*) FROM patients AS p WHERE p.gender = 'F' AND p.anchor_age > 65",
        "SELECT labevents.valuenum FROM labevents WHERE labevents.subject_id = 1 AND "
        "STRFTIME('%Y', labevents.charttime) = '2100' ORDER BY labevents.charttime DESC LIMIT 1",
        "SELECT d.long_title FROM d_icd_diagnoses AS d WHERE d.long_title LIKE '%o''brien%'",
        "SELECT CAST(x AS INT) FROM t WHERE DATETIME(t.charttime) >= DATETIME(CURRENT_TIME, '-19 month')",
        "SELECT MAX(a.admittime) FROM admissions AS a WHERE a.hadm_id IN (SELECT hadm_id FROM icustays)",
    ]
    for sql in sqls:
        by_name = sqlglot.parse_one(sql, dialect=dialect)
        by_instance = sqlglot.parse_one(sql, dialect=shared)
        assert by_instance == by_name
        assert by_instance.sql(dialect=shared) == by_name.sql(dialect=dialect)
        assert parse_sql(sql, dialect).sql(dialect=shared) == by_name.sql(dialect=dialect)
    assert vars(shared) == before == vars(sqlglot.Dialect.get_or_raise(dialect))


def _name_span_the_long_way(question, core, spans, claims):
    """build._find_name_span as it was before its windows were cut short (session 24): every window
    of up to the name's length + 2 words scored, its checks in the original order."""
    from core.match.build import _window_score
    from core.match.words import FUNCTION_WORDS, name_pattern, overlaps, tokenize

    taken = [(s.start, s.end) for s in spans] + list(claims)
    for m in name_pattern(core.strip()).finditer(question):
        cut = [(a, b) for a, b in taken if not (m.start() <= a and b <= m.end())]
        if not overlaps(m.start(), m.end(), list(claims) + cut):
            return m.start(), m.end()
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9.%]+", core) if w.lower() not in FUNCTION_WORDS]
    if not words:
        return None
    tokens = tokenize(question)
    near: dict = {}
    best = None
    for i in range(len(tokens)):
        for j in range(i + 1, min(len(tokens), i + len(words) + 2) + 1):
            window = tokens[i:j]
            if window[0].lower in FUNCTION_WORDS or window[-1].lower in FUNCTION_WORDS:
                continue
            start, end = window[0].start, window[-1].end
            if overlaps(start, end, taken):
                continue
            score = _window_score(question[start:end].lower(), window, core.lower(), words, near)
            if score is None:
                continue
            key = (score, j - i, (start, end))
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else None


def test_a_name_span_found_with_windows_cut_short_is_the_one_every_window_finds():
    """_find_name_span stops widening a window at the first value it would cover and skips windows
    that start with a function word: the same span as scoring every window (the long way), for every
    name of the fixture library's SQL in its own question and in the others', with and without the
    question's values claimed (the attack: a cut that drops a longer, better window)."""
    from core.match.build import _find_name_span

    library = json.loads((Path(__file__).parent / "fixtures" / "library.json").read_text())
    questions = [e["question"] for e in library] + [
        "count the number of patients diagnosed with sepsis, unspecified organsm since 2150",
        "what was the last sodium chlorde 0.9% flush dose of patient 10004235 in 2150?",
        "how many patients got the closed fracture of seven ribs in 2150 or 2151?",
        "how many patients got the closed fractre of the seven ribs in 2150?",
        "count the patients with sepsis of the unspecifid organism in 2150",
        "was patient 10004235 given sodium chlorde in the 0.9% flush in 2150?",
    ]
    names = sorted(
        {
            lit.this.strip("%")
            for e in library
            if e.get("sql")
            for lit in sqlglot.parse_one(e["sql"], dialect="postgres").find_all(exp.Literal)
            if lit.is_string and len(re.sub(r"[^A-Za-z]", "", lit.this)) >= 2
        }
        | {"Sepsis, unspecified organism", "sodium chloride 0.9% flush", "closed fracture of seven ribs"}
    )
    compared = 0
    for question in questions:
        spans = extract_typed_spans(question)
        for claims in ({}, {(s.start, s.end): [] for s in spans[:1]}):
            for name in names:
                assert _find_name_span(question, name, spans, claims) == _name_span_the_long_way(
                    question, name, spans, claims
                ), (question, name, claims)
                compared += 1
    assert compared > 1000
