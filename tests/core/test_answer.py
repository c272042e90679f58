"""The answer as a sentence without an LLM, and numbers rounded as people write them."""

from __future__ import annotations

import pytest

from core.answer import answer_sentence, format_cell, format_number
from core.labels import draft_label, result_labels


@pytest.mark.parametrize(
    ("question", "columns", "rows", "sentence"),
    [
        ("How many patients are older than 70?", ["count"], [[30]], "30 patients are older than 70."),
        ("how many patients are there?", ["n"], [[40]], "40 patients."),
        ("How many admissions did patient 7 have?", ["n"], [[3]], "3 admissions."),
        ("count the number of patients older than 70.", ["n_patients"], [[30]], "30 patients older than 70."),
        ("Count the total number of ICU stays", ["count"], [[12]], "12 ICU stays."),
        (
            "what is the gender of patient 10004235?",
            ["gender"],
            [["F"]],
            "The gender of patient 10004235 is F.",
        ),
        (
            "What was the average length of stay?",
            ["avg"],
            [[4.364982638888889]],
            "The average length of stay was 4.36.",
        ),
        ("show the first admission", ["admittime"], [["2180-05-06"]], "The admission time is 2180-05-06."),
        (
            "x",
            ["care_unit", "stays"],
            [["MICU", 10], ["SICU", 3]],
            "Of 2 care units, MICU has the highest stays: 10.",
        ),
        ("x", ["a", "b"], [], "Nothing in the data matches this question."),
        # the examples: a database's words replaced by a person's
        ("how many female patients are there?", ["count"], [[42]], "42 female patients."),
        (
            "how many female patients are there?",
            ["count"],
            [["<11"]],
            "Fewer than 11 female patients — the exact number is withheld to protect privacy.",
        ),
        ("how many patients died in 2150?", ["n"], [[0]], "No patients died in 2150."),
        (
            "what was the code of the first diagnosis?",
            ["icd_code", "icd_version"],
            [["4280", 9]],
            "The ICD code is 4280 and the ICD version is 9.",
        ),
        (
            "list the admissions of patient 7",
            ["hadm_id", "admittime"],
            [[1, "x"]] * 9,
            "9 admissions, listed below.",
        ),
        (
            "list the admissions of patient 7",
            ["hadm_id", "admittime"],
            [],
            "No admissions in the data match this question.",
        ),
        ("which drugs?", ["drug"], [["a"], ["b"], ["c"], ["d"]], "4 drugs: a, b, c and 1 more."),
    ],
)
def test_a_sentence_from_the_question_and_the_result(question, columns, rows, sentence):
    assert answer_sentence(question, columns, rows) == sentence


@pytest.mark.parametrize(
    ("value", "shown"),
    [(4.364982638888889, "4.36"), (1234.5678, "1,234.6"), (0.000123456, "0.000123"), (10004235, "10004235"),
     (12.0, "12"), (0.5, "0.5"), (-3.14159, "-3.14"), (True, "True"), ("F", "F")],
)  # fmt: skip
def test_numbers_are_rounded_sensibly_and_ids_left_alone(value, shown):
    assert format_number(value) == shown


def test_cells_spell_null():
    assert format_cell(None) == "NULL" and format_cell(2.0) == "2" and format_cell(7) == "7"


def test_labels_name_the_columns_units_follow_the_value_and_top_n_lists_its_rows():
    catalog = {"los": draft_label("los", "ICU length of stay in fractional days", table="icustays")}
    sql = "SELECT first_careunit, ROUND(AVG(los), 2) AS avg_los_days FROM mimiciv_icu.icustays GROUP BY 1"
    labels = result_labels(["first_careunit", "avg_los_days"], sql=sql, catalog=catalog)
    rows = [["MICU", 3.2], ["SICU", 4.123]]
    assert answer_sentence(
        "average icu stay by unit", ["first_careunit", "avg_los_days"], rows, labels=labels
    ) == ("Of 2 first care units, SICU has the highest average ICU length of stay: 4.12 days.")
    sql = (
        "SELECT d.long_title, COUNT(DISTINCT dx.subject_id) AS n FROM mimiciv_hosp.diagnoses_icd dx "
        "JOIN mimiciv_hosp.d_icd_diagnoses d ON d.icd_code = dx.icd_code GROUP BY 1 ORDER BY 2 DESC LIMIT 3"
    )
    catalog = {"long_title": draft_label("long_title", table="d_icd_diagnoses")}
    labels = result_labels(["long_title", "n"], sql=sql, catalog=catalog)
    rows = [["Hypertension", 40], ["Heart failure", "<11"], ["Sepsis", 12]]
    question = "what are the top 3 diagnoses of patients aged 80 or older?"
    assert answer_sentence(question, ["long_title", "n"], rows, labels=labels) == (
        "Top 3 by number of patients: Hypertension (40), Heart failure (<11) and Sepsis (12)."
    )
    rows = [["Hypertension", "<11"], ["Heart failure", "<11"]]
    assert answer_sentence(question, ["long_title", "n"], rows, labels=labels) == (
        "Each of the 2 diagnoses has fewer than 11 patients — the exact numbers are withheld to protect privacy."
    )


def test_a_suppressed_count_without_a_how_many_question_says_what_it_counts():
    labels = result_labels(["n"], sql="SELECT COUNT(DISTINCT subject_id) AS n FROM mimiciv_hosp.admissions")
    assert answer_sentence("female patients over 80", ["n"], [["<11"]], labels=labels) == (
        "Fewer than 11 patients — the exact number is withheld to protect privacy."
    )


@pytest.mark.parametrize(
    ("value", "fmt", "shown"),
    [(1234567, "integer", "1,234,567"), (10004235, "code", "10004235"), (0.4567, "percent", "0.457 %"),
     ("2180-05-06 10:11:00", "date", "2180-05-06"), (4.36498, "decimal", "4.36"), (3, "", "3")],
)  # fmt: skip
def test_cells_follow_the_catalogs_format(value, fmt, shown):
    assert format_cell(value, fmt) == shown
