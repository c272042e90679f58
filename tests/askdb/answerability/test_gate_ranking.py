"""The gate's score, what its AUC ranks (issue 28, round 17): a rule's or a held reading's verdict decides
pass or decline, not how sure the gate is. A held attribute was scored 1 and a decisive rule 0, so one
reading that wrongly held an unanswerable question ranked it above every answerable one (valid's AUC
fell 0.954 -> 0.948 with round 16's readings while the learned model's did not move)."""

from __future__ import annotations

import numpy as np

from askdb.answerability.model import DECLINED_SCALE, gate_probability

T = 0.9


def score(p, declined=False, held=False, named=False):
    return gate_probability(
        np.array([p]), np.array([declined]), np.array([held]), np.array([named]), threshold=T
    )[0]


def test_a_held_reading_lifts_to_the_threshold_not_past_unrelated_questions():
    assert score(0.2, held=True) == T  # passed, as before
    assert score(0.2, held=True) < score(0.95)  # but not above a question the model is sure of
    assert score(0.97, held=True) == 0.97  # a confident one keeps its own rank


def test_a_decisive_rule_declines_below_every_model_score_in_the_models_order():
    assert score(0.99, declined=True) < T and score(0.99, declined=True) < score(0.01)
    assert score(0.3, declined=True) < score(0.6, declined=True)
    assert score(0.6, declined=True) == 0.6 * DECLINED_SCALE


def test_the_attack_a_rule_still_beats_a_held_reading_and_a_named_value_keeps_its_margin():
    assert score(0.99, declined=True, held=True) < T
    assert score(0.7, named=True) >= T > score(0.7)
