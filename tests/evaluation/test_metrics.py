"""The metrics on hand-built cases, without a database: RS, P/R/F1, AUC, accuracy, thresholds."""

from __future__ import annotations

import pytest

from evaluation import metrics
from evaluation.metrics import ItemScore


def answer(id_, correct, **kw):
    return ItemScore(id=str(id_), answerable=True, abstained=False, correct=correct, **kw)


def missed(id_, **kw):
    return ItemScore(id=str(id_), answerable=True, abstained=True, **kw)


def refused(id_, **kw):  # a correct abstention on an unanswerable question
    return ItemScore(id=str(id_), answerable=False, abstained=True, **kw)


def answered_unanswerable(id_, **kw):
    return ItemScore(id=str(id_), answerable=False, abstained=False, **kw)


def gold_broken(id_, **kw):
    return ItemScore(id=str(id_), answerable=True, abstained=False, correct=False, gold_error=True, **kw)


# one of each kind: 2 correct (+1 each), 1 wrong (-c), 1 missed (0), 1 correct abstention (+1),
# 1 answered unanswerable (-c): mean = (3 - 2c) / 6
MIXED = [
    answer(1, True),
    answer(2, True),
    answer(3, False),
    missed(4),
    refused(5),
    answered_unanswerable(6),
]


@pytest.mark.parametrize(("c", "expected"), [(0, 50.0), (5, -700 / 6), (10, -1700 / 6), ("N", -900 / 6)])
def test_reliability_score_by_penalty(c, expected):
    assert metrics.reliability_score(MIXED, c) == pytest.approx(expected)


def test_rs_n_uses_the_number_of_scored_questions_and_ignores_gold_errors():
    items = [*MIXED, gold_broken(7), gold_broken(8)]
    # N = 6 (the broken items neither count nor change N): same as without them
    assert metrics.reliability_score(items, "N") == pytest.approx(-900 / 6)
    assert metrics.reliability_scores(items)["10"] == pytest.approx(-1700 / 6)


def test_rs_perfect_abstention_and_empty():
    assert metrics.reliability_score([refused(1), answer(2, True)], 10) == 100.0
    assert metrics.reliability_score([missed(1), missed(2)], 10) == 0.0
    assert metrics.reliability_score([], 10) is None
    assert metrics.reliability_score([gold_broken(1)], 10) is None


def test_a_failing_predicted_sql_is_an_answer_and_costs_the_penalty():
    # is_abstention: SQL that failed to run was still an answer, invalid SQL was not
    assert metrics.is_abstention("failed", "execution_error") is False
    assert metrics.is_abstention("failed", "timeout") is False
    assert metrics.is_abstention("failed", "sql_invalid") is True
    assert metrics.is_abstention("declined", "private_data") is True
    assert metrics.is_abstention("declined", "no_llm") is True
    assert metrics.is_abstention("succeeded", "no_rows") is False
    assert metrics.is_abstention("failed", "llm_error") is True
    assert metrics.reliability_score([answer(1, False)], 5) == -500.0


def test_outcome_kinds():
    assert [metrics.outcome(i) for i in [*MIXED, gold_broken(7)]] == [
        "correct", "correct", "wrong", "missed", "correct_abstention", "answered_unanswerable", "gold_error",
    ]  # fmt: skip


def test_execution_accuracy_counts_abstentions_as_misses_and_excludes_gold_errors():
    ex = metrics.execution_accuracy([*MIXED, gold_broken(7)])
    assert (ex["correct"], ex["total"], ex["gold_errors"]) == (2, 4, 1)  # answerable: 1, 2, 3, 4
    assert ex["accuracy"] == pytest.approx(0.5)
    assert ex["accuracy_when_answered"] == pytest.approx(2 / 3)
    assert metrics.execution_accuracy([refused(1)])["accuracy"] is None


def test_answerability_treats_unanswerable_as_positive():
    items = [refused(1), refused(2), answered_unanswerable(3), missed(4), answer(5, True), answer(6, False)]
    a = metrics.answerability(items)
    assert (a["tp"], a["fp"], a["fn"], a["tn"]) == (2, 1, 1, 2)
    assert a["precision"] == pytest.approx(2 / 3)
    assert a["recall"] == pytest.approx(2 / 3)
    assert a["f1"] == pytest.approx(2 / 3)


def test_answerability_without_abstentions_has_no_precision():
    a = metrics.answerability([answer(1, True), answered_unanswerable(2)])
    assert a["precision"] is None and a["recall"] == 0.0 and a["f1"] is None


def test_auc_rank_based_with_ties():
    assert metrics.roc_auc([True, True, False, False], [0.9, 0.8, 0.2, 0.1]) == 1.0
    assert metrics.roc_auc([True, True, False, False], [0.1, 0.2, 0.8, 0.9]) == 0.0
    assert metrics.roc_auc([True, False], [0.5, 0.5]) == 0.5  # a tie is half a win
    # positives 0.8 and 0.4, negatives 0.4 and 0.1: pairs (0.8>0.4, 0.8>0.1, 0.4=0.4, 0.4>0.1) = 3.5/4
    assert metrics.roc_auc([True, True, False, False], [0.8, 0.4, 0.4, 0.1]) == pytest.approx(0.875)
    assert metrics.roc_auc([True, True], [0.1, 0.2]) is None  # one class only: undefined
    with pytest.raises(ValueError):
        metrics.roc_auc([True], [0.1, 0.2])


def test_auc_from_decisions_alone_equals_the_balanced_hit_rate():
    # 2 of 3 unanswerable abstained, 1 of 2 answerable abstained: AUC = (TPR + TNR) / 2
    items = [refused(1), refused(2), answered_unanswerable(3), missed(4), answer(5, True)]
    assert metrics.answerability(items)["auc"] == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_abstention_score_keeps_the_decision_band_and_orders_within_it():
    assert metrics.abstention_score(abstained=True) == 1.0
    assert metrics.abstention_score(abstained=False) == 0.0
    sure_no = metrics.abstention_score(abstained=True, answerable_probability=0.0)
    unsure_no = metrics.abstention_score(abstained=True, answerable_probability=0.9)
    unsure_yes = metrics.abstention_score(abstained=False, confidence=0.2)
    sure_yes = metrics.abstention_score(abstained=False, answerable_probability=1.0, confidence=1.0)
    assert sure_no == 1.0 and sure_yes == 0.0
    assert sure_no > unsure_no >= 0.5 > unsure_yes > sure_yes
    assert metrics.abstention_score(
        abstained=False, answerable_probability=0.6, confidence=0.2
    ) == pytest.approx(0.5 * ((0.4 + 0.8) / 2))


def test_continuous_scores_lift_auc_above_the_decisions():
    # Same decisions; the wrongly answered unanswerable question had low agreement.
    base = [refused(1), answered_unanswerable(2), answer(3, True), answer(4, True)]
    scored = [
        refused(1),
        answered_unanswerable(2, abstention_score=metrics.abstention_score(abstained=False, confidence=0.1)),
        answer(3, True, abstention_score=metrics.abstention_score(abstained=False, confidence=0.9)),
        answer(4, True, abstention_score=metrics.abstention_score(abstained=False, confidence=0.95)),
    ]
    assert metrics.answerability(base)["auc"] == pytest.approx(0.75)
    assert metrics.answerability(scored)["auc"] == 1.0


def test_threshold_sweep_turns_low_confidence_answers_into_abstentions():
    items = [
        answer(1, True, confidence=0.9),
        answer(2, False, confidence=0.3),
        answered_unanswerable(3, confidence=0.1),
        answer(4, True),  # no confidence: keeps its decision at every threshold
    ]
    sweep = {row["threshold"]: row for row in metrics.threshold_sweep(items, [0.0, 0.5, 1.0], penalty=10)}
    assert sweep[0.0]["rs"] == pytest.approx(100 * (1 - 10 - 10 + 1) / 4)
    assert sweep[0.5]["rs"] == pytest.approx(100 * (1 + 0 + 1 + 1) / 4)  # 2 missed (0), 3 correctly refused
    assert sweep[1.0]["rs"] == pytest.approx(100 * (0 + 0 + 1 + 1) / 4)
    assert [sweep[t]["answered"] for t in (0.0, 0.5, 1.0)] == [4, 2, 1]


def test_tune_threshold_picks_on_one_half_and_reports_the_other():
    ids = [str(n) for n in range(40)]
    tune_ids = [i for i in ids if metrics.split_half(i) == 0]
    held_ids = [i for i in ids if metrics.split_half(i) == 1]
    assert tune_ids and held_ids and metrics.split_half("7") == metrics.split_half("7")
    # Low confidence answers are wrong, high confidence ones right: abstaining below 0.5 wins.
    items = [answer(i, n % 2 == 0, confidence=0.9 if n % 2 == 0 else 0.3) for n, i in enumerate(ids)]
    tuned = metrics.tune_threshold(items, [0.0, 0.5, 1.0], penalty=10)
    assert tuned["best_threshold"] == 0.5
    assert tuned["tune_items"] == len(tune_ids) and tuned["held_out_items"] == len(held_ids)
    held = [i for i in items if i.id in held_ids]
    assert tuned["held_out_rs"] == pytest.approx(
        metrics.reliability_score(metrics.with_confidence_threshold(held, 0.5), 10)
    )
    assert tuned["held_out_rs_without_threshold"] == pytest.approx(metrics.reliability_score(held, 10))


def test_tune_threshold_prefers_the_lower_threshold_on_ties():
    items = [answer(n, True, confidence=0.95) for n in range(10)]
    assert metrics.tune_threshold(items, [0.0, 0.5, 0.8])["best_threshold"] == 0.0


def test_percentile_and_stage_latency():
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([10.0], 95) == 10.0
    assert metrics.percentile([1, 2, 3, 4], 50) == 2.5
    assert metrics.percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    items = [
        answer(1, True, stages_ms={"generate": 100.0, "zeta": 1.0, "embed": 10.0}),
        answer(2, True, stages_ms={"embed": 20.0, "generate": 300.0}),
        missed(3, stages_ms={"embed": 30.0}),
    ]
    lat = metrics.stage_latency(items)
    assert list(lat) == ["embed", "generate", "zeta", "total"]  # pipeline order, unknown stages last
    assert lat["embed"]["p50"] == 20.0 and lat["embed"]["n"] == 3
    assert lat["generate"]["p50"] == 200.0 and lat["generate"]["n"] == 2
    assert lat["total"]["p50"] == 111.0  # totals 111, 320, 30


def test_library_mode_counts_only_library_answers():
    items = [
        answer(1, True, answered_by="library"),
        answer(2, False, answered_by="library"),
        answered_unanswerable(3, answered_by="library"),
        answer(4, True, answered_by="llm"),  # a correct LLM answer is an abstention in library mode
        refused(5),
        gold_broken(6, answered_by="library"),
    ]
    lib = metrics.library_mode(items)
    assert lib["answered"] == 3
    assert lib["coverage"] == pytest.approx(3 / 5)
    assert lib["precision"] == pytest.approx(1 / 3)
    assert lib["execution_accuracy"] == pytest.approx(1 / 3)  # answerable: 1, 2, 4
    assert lib["rs"]["10"] == pytest.approx(100 * (1 - 10 - 10 + 0 + 1) / 5)


def test_library_curve_sweeps_match_confidence():
    items = [
        answer(1, True, library_confidence=0.9, library_correct=True),
        answer(2, False, library_confidence=0.6, library_correct=False),
        refused(3, library_confidence=0.7, library_correct=False),  # a template for an unanswerable one
        answer(4, True),  # no library match
    ]
    curve = {row["threshold"]: row for row in metrics.library_curve(items, [0.0, 0.65, 0.8, 0.95])}
    assert curve[0.0]["answered"] == 3 and curve[0.0]["coverage"] == pytest.approx(3 / 4)
    assert curve[0.0]["precision"] == pytest.approx(1 / 3)
    assert curve[0.65]["precision"] == pytest.approx(1 / 2)
    assert curve[0.8]["precision"] == 1.0 and curve[0.8]["coverage"] == pytest.approx(1 / 4)
    assert curve[0.95]["answered"] == 0 and curve[0.95]["precision"] is None


def test_summarize_is_json_ready_and_counts_everything():
    import json

    items = [*MIXED, gold_broken(7), missed(8, run_outcome="llm_error", category="labs")]
    summary = metrics.summarize(items)
    json.dumps(summary)  # no dataclass or NaN leaks into the stored metrics
    assert summary["counts"]["questions"] == 8 and summary["counts"]["gold_errors"] == 1
    assert summary["counts"]["system_failures"] == 1
    assert summary["outcomes"]["missed"] == 2 and summary["rs_n"] == 7
    assert summary["by_category"]["labs"]["questions"] == 1
