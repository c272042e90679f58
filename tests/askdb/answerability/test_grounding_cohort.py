"""A statistic over patients read as the question it asks of one of them (grounding `_one_of`, issue 28,
round 18): "what percentage of patients … were vegetarian", "the top three hometowns of patients …", "the
average daily step count of patients …", "how many patients of each religion", "the distribution of
education levels among patients" ground their attribute as "was patient 0 vegetarian" or "what is the
hometown of patient 0" does; the answerable look-alike of each shape is grounded and held. And the one
score a run reports is the one the AUC ranks. No database, no encoder download."""

from __future__ import annotations

import numpy as np
import pytest

from askdb.answerability import grounding
from askdb.answerability.model import AnswerabilityModel, Combiner
from tests.askdb.answerability.test_grounding import COLUMNS, TABLES, _Unsure
from tests.core.test_answerability_model import BagOfWordsEncoder


@pytest.mark.parametrize(
    ("question", "attribute"),
    [
        ("what percentage of patients admitted in 2150 were vegetarian?", "vegetarian"),
        ("what proportion of patients diagnosed with pneumonia had an autopsy?", "autopsy"),
        ("what are the top three hometowns of patients aged 80 or above?", "hometowns"),
        (
            "what are the five most frequent lab machines used for patients with heart failure?",
            "lab machines",
        ),
        ("what is the average daily step count of patients with diabetes?", "daily step count"),
        ("how many patients of each religion were admitted in 2150?", "religion"),
        ("what is the distribution of education levels among patients admitted in 2150?", "education levels"),
        # what was done to the things counted is not the attribute
        ("What are the three most often performed treatments for patients aged 60 or above?", "treatments"),
        (
            "What are the five most common laboratory tests undertaken by patients in 2100?",
            "laboratory tests",
        ),
        (
            "what is the median hospital length of stay of patients admitted in 2150?",
            "hospital length of stay",
        ),
    ],
)
def test_a_statistic_over_patients_asks_for_the_attribute_of_one_of_them(question, attribute):
    assert grounding.asked_attribute(question) == attribute


@pytest.mark.parametrize(
    "question",
    [
        # Attack: a statistic over someone or something else keeps the plain reading (no attribute of a
        # patient: "the heart rate of the nurses" is not the patients' heart rate).
        "what is the average heart rate of the nurses working in the surgical icu in 2150?",
        "what is the average body temperature of the operating room during bypass grafts?",
        "what are the top four pharmacies where prescriptions written in 2150 were filled?",
        "what percentage of potassium tests in 2150 were flagged abnormal?",
        # a population's own words are never the attribute ("the average time patients spent …")
        "what is the average time patients spent in the emergency department before admission in 2150?",
    ],
)
def test_a_statistic_over_anyone_but_patients_keeps_the_plain_reading(question):
    assert grounding.asked_attribute(question) == ""


def _model(combiner: Combiner | None = None, values=()) -> AnswerabilityModel:
    return AnswerabilityModel(
        BagOfWordsEncoder(), combiner or _Unsure(), 0.5, TABLES, COLUMNS, [], version="v", values=values
    )


@pytest.mark.parametrize(
    ("unanswerable", "answerable", "column"),
    [
        ("what percentage of patients admitted in 2150 were vegetarian?",
         "what is the distribution of marital status among patients admitted in 2150?",
         "hosp.admissions.marital_status"),
        ("what are the top three hometowns of patients aged 80 or above?",
         "what are the top three insurance types of patients aged 80 or above?", "hosp.admissions.insurance"),
        ("what is the average daily step count of patients with diabetes?",
         "what is the average bmi of patients with diabetes?", "hosp.omr.result_name"),
        ("how many patients of each religion were admitted in 2150?",
         "how many patients of each race were admitted in 2150?", "hosp.admissions.race"),
        ("what is the distribution of education levels among patients admitted in 2150?",
         "what are the five most common routes of administration for patients given heparin?",
         "hosp.prescriptions.route"),
    ],
)  # fmt: skip
def test_the_gate_declines_an_attribute_no_column_holds_and_holds_the_look_alike_of_the_same_shape(
    unanswerable, answerable, column
):
    model = _model()  # a learned model that calls everything unanswerable: only the catalog can hold
    declined = model.score(unanswerable)
    assert not declined.answerable and declined.kind == "not_in_schema", declined.reason
    held = model.score(answerable)
    assert held.answerable and held.grounded_column == column, held.reason


def test_a_shape_of_statistic_is_not_a_way_around_a_rule():
    # Attack: a held attribute in a statistic about the future is still declined by the rule.
    score = _model().score(
        "what will be the distribution of marital status among patients admitted next year?"
    )
    assert not score.answerable


class _Constant(Combiner):
    """A learned model that gives every question one probability."""

    def __init__(self, p: float) -> None:
        super().__init__(np.zeros(1), float(np.log(p / (1 - p))), np.zeros(1), np.ones(1))


@pytest.mark.parametrize(
    ("p", "question", "values"),
    [
        (0.4, "what is the average bmi of patients with diabetes?", ()),  # held by a column: 1
        (
            0.4,
            "what is the dose of desmopressin acetate given to patient 7?",
            ("desmopressin acetate",),
        ),  # margin
        (0.4, "what percentage of patients admitted in 2150 were vegetarian?", ()),  # declined: 0
        (0.4, "what will the heparin dose of patient 7 be next year?", ()),  # a rule: 0
        (0.6, "what is the thing of patient 7?", ()),
        (0.3, "what is the thing of patient 7?", ()),
    ],
)
def test_the_probability_a_run_reports_is_the_gate_score_the_auc_ranks_and_passes_exactly_at_the_threshold(
    p, question, values
):
    score = _model(_Constant(p), values).score(question)
    reported = score.to_json()["probability"]
    assert reported == pytest.approx(score.gate_probability, abs=1e-4)
    assert (reported >= score.threshold) == score.answerable
    assert score.to_json()["model_probability"] == pytest.approx(p, abs=1e-4)
