"""The answer as a sentence without an LLM, and numbers rounded as people write them."""

from __future__ import annotations

import pytest

from core.answer import answer_sentence, format_cell, format_number


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
        ("show the first admission", ["admittime"], [["2180-05-06"]], "admittime: 2180-05-06."),
        (
            "x",
            ["care_unit", "stays"],
            [["MICU", 10], ["SICU", 3]],
            "Of 2 rows, MICU has the highest stays: 10.",
        ),
        ("x", ["a", "b"], [], "Nothing in the data matches this question."),
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
