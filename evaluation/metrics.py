"""The evaluation metrics, as pure functions over `ItemScore`s (no Django, no database).

Definitions (EHRSQL 2024 where it has one):

* An item's *outcome* is one of: correct, wrong (an answer whose result differs from gold, or
  whose SQL failed to run), missed (abstained on an answerable question), correct_abstention,
  answered_unanswerable, gold_error (the gold SQL itself failed: the item is excluded from
  accuracy and RS, because a broken benchmark item must not count against the model).
* Execution accuracy: correct / answerable questions (an abstention counts as not correct).
* Answerability precision / recall / F1 treat *unanswerable* as the positive class and an
  abstention as a positive prediction. AUC ranks items by their abstention score.
* RS(c), the reliability score: per item +1 for a correct answer or a correct abstention, 0 for
  abstaining on an answerable question, -c for a wrong answer or for answering an unanswerable
  one; RS = 100 x the mean. RS(N) uses c = the number of scored questions, so one wrong answer
  costs more than every correct one earns.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

RS_PENALTIES: tuple[int | str, ...] = (0, 5, 10, "N")
CONFIDENCE_THRESHOLDS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0)
STAGE_ORDER = (
    "embed",
    "retrieve",
    "library",
    "gate",
    "prompt",
    "generate",
    "validate",
    "execute",
    "summarize",
)
CURVE_THRESHOLDS: tuple[float, ...] = tuple(round(i / 20, 2) for i in range(21))

CORRECT = "correct"
WRONG = "wrong"
MISSED = "missed"
CORRECT_ABSTENTION = "correct_abstention"
ANSWERED_UNANSWERABLE = "answered_unanswerable"
GOLD_ERROR = "gold_error"
OUTCOMES = (CORRECT, WRONG, MISSED, CORRECT_ABSTENTION, ANSWERED_UNANSWERABLE, GOLD_ERROR)


@dataclass(frozen=True)
class ItemScore:
    """What the metrics need to know about one evaluated question."""

    id: str
    answerable: bool  # the gold has SQL
    abstained: bool
    correct: bool = False  # the predicted result matched gold (only meaningful for an answer)
    gold_error: bool = False
    abstention_score: float | None = None  # higher = more reason to abstain; None: use the decision
    confidence: float | None = None  # run.confidence: candidate agreement, 0..1
    answered_by: str = ""  # "llm" | "library" | ""
    library_confidence: float | None = None  # the offline matcher's best template, answered or not
    library_correct: bool | None = None  # that template's SQL matched gold (None: no template SQL)
    category: str = ""
    run_outcome: str = ""  # the run's own outcome (answered, no_data, llm_error…)
    stages_ms: dict[str, float] = field(default_factory=dict)
    tokens_prompt: int = 0
    tokens_completion: int = 0
    cost_usd: float = 0.0


def outcome(item: ItemScore) -> str:
    if item.gold_error:
        return GOLD_ERROR
    if item.answerable:
        if item.abstained:
            return MISSED
        return CORRECT if item.correct else WRONG
    return CORRECT_ABSTENTION if item.abstained else ANSWERED_UNANSWERABLE


def reward(item: ItemScore, penalty: float) -> float | None:
    """The item's RS contribution (None: excluded, the gold SQL was broken)."""
    kind = outcome(item)
    if kind == GOLD_ERROR:
        return None
    if kind in (CORRECT, CORRECT_ABSTENTION):
        return 1.0
    if kind == MISSED:
        return 0.0
    return -float(penalty)


def scored(items: Iterable[ItemScore]) -> list[ItemScore]:
    """The items that count for accuracy and RS: all but those whose gold SQL failed."""
    return [i for i in items if not i.gold_error]


def reliability_score(items: Sequence[ItemScore], penalty: float | str) -> float | None:
    """RS(c) = 100 x mean reward; c may be "N" (the number of scored questions)."""
    counted = scored(items)
    if not counted:
        return None
    c = len(counted) if penalty == "N" else float(penalty)
    return 100.0 * sum(reward(i, c) or 0.0 for i in counted) / len(counted)


def reliability_scores(items: Sequence[ItemScore]) -> dict[str, float | None]:
    return {str(c): reliability_score(items, c) for c in RS_PENALTIES}


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def execution_accuracy(items: Sequence[ItemScore]) -> dict[str, Any]:
    """Share of answerable questions (gold SQL ran) whose answer matched gold."""
    answerable = [i for i in scored(items) if i.answerable]
    correct = sum(1 for i in answerable if outcome(i) == CORRECT)
    answered = sum(1 for i in answerable if not i.abstained)
    return {
        "correct": correct,
        "total": len(answerable),
        "accuracy": _ratio(correct, len(answerable)),
        "answered": answered,
        "accuracy_when_answered": _ratio(correct, answered),
        "gold_errors": sum(1 for i in items if i.gold_error),
    }


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve by ranks (Mann-Whitney U), ties given their mean rank.

    None when only one class is present: the AUC is then undefined, not 0.5.
    """
    if len(labels) != len(scores):
        raise ValueError("labels and scores differ in length")
    positives = sum(1 for x in labels if x)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and scores[order[end + 1]] == scores[order[start]]:
            end += 1
        mean_rank = (start + end) / 2 + 1  # ranks are 1-based
        for k in range(start, end + 1):
            ranks[order[k]] = mean_rank
        start = end + 1
    rank_sum = sum(r for r, x in zip(ranks, labels, strict=True) if x)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def abstention_score(
    *, abstained: bool, answerable_probability: float | None = None, confidence: float | None = None
) -> float:
    """How strongly the system leans to abstaining, for the answerability AUC.

    The decision sets the band: an abstention scores in [0.5, 1], an answer in [0, 0.5], so the
    ranking never contradicts what the system did. Within a band the continuous evidence orders
    the items: 1 - the answerability model's probability of answerable, and 1 - the candidates'
    agreement, averaged over whichever are present. With neither, the score is the decision
    itself: 1.0 for an abstention, 0.0 for an answer.
    """
    doubts = [1.0 - _clip(p) for p in (answerable_probability, confidence) if p is not None]
    if not doubts:
        return 1.0 if abstained else 0.0
    doubt = sum(doubts) / len(doubts)
    return 0.5 + 0.5 * doubt if abstained else 0.5 * doubt


def _clip(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


def answerability(items: Sequence[ItemScore]) -> dict[str, Any]:
    """Precision, recall, F1 and AUC of abstaining, with unanswerable as the positive class."""
    tp = sum(1 for i in items if not i.answerable and i.abstained)
    fp = sum(1 for i in items if i.answerable and i.abstained)
    fn = sum(1 for i in items if not i.answerable and not i.abstained)
    tn = sum(1 for i in items if i.answerable and not i.abstained)
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    scores = [
        i.abstention_score if i.abstention_score is not None else (1.0 if i.abstained else 0.0) for i in items
    ]
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "auc": roc_auc([not i.answerable for i in items], scores),
    }


def with_confidence_threshold(items: Sequence[ItemScore], threshold: float) -> list[ItemScore]:
    """The items as if every answer whose confidence is below `threshold` had abstained.

    A run without a confidence (no candidates sampled) keeps its own decision.
    """
    return [
        replace(i, abstained=True)
        if not i.abstained and i.confidence is not None and i.confidence < threshold
        else i
        for i in items
    ]


def threshold_sweep(
    items: Sequence[ItemScore], thresholds: Sequence[float] = CONFIDENCE_THRESHOLDS, penalty: float = 10
) -> list[dict[str, Any]]:
    """RS(penalty) and coverage (share answered) when abstaining below each confidence threshold."""
    out = []
    for t in thresholds:
        adjusted = scored(with_confidence_threshold(items, t))
        answered = sum(1 for i in adjusted if not i.abstained)
        out.append(
            {
                "threshold": t,
                "rs": reliability_score(adjusted, penalty),
                "answered": answered,
                "coverage": _ratio(answered, len(adjusted)),
            }
        )
    return out


def split_half(item_id: str) -> int:
    """0 or 1, from a hash of the id: a split that is the same on every machine and every run."""
    return int(hashlib.sha256(str(item_id).encode()).hexdigest()[:8], 16) % 2


def tune_threshold(
    items: Sequence[ItemScore], thresholds: Sequence[float] = CONFIDENCE_THRESHOLDS, penalty: float = 10
) -> dict[str, Any]:
    """Pick the confidence threshold maximising RS(penalty) on one half, report it on the other.

    Choosing and scoring on the same items would flatter the threshold; ties go to the lower
    threshold (abstain less).
    """
    tune = [i for i in items if split_half(i.id) == 0]
    held = [i for i in items if split_half(i.id) == 1]
    best, best_rs = None, None
    for row in threshold_sweep(tune, thresholds, penalty):
        if row["rs"] is not None and (best_rs is None or row["rs"] > best_rs + 1e-12):
            best, best_rs = row["threshold"], row["rs"]
    held_rs = reliability_score(with_confidence_threshold(held, best), penalty) if best is not None else None
    return {
        "penalty": penalty,
        "best_threshold": best,
        "tune_items": len(scored(tune)),
        "tune_rs": best_rs,
        "held_out_items": len(scored(held)),
        "held_out_rs": held_rs,
        "held_out_rs_without_threshold": reliability_score(held, penalty),
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def stage_latency(items: Sequence[ItemScore]) -> dict[str, dict[str, float | int | None]]:
    """p50/p95/mean per pipeline stage, in pipeline order, plus the total per question."""
    per_stage: dict[str, list[float]] = {}
    totals = []
    for item in items:
        for name, ms in item.stages_ms.items():
            per_stage.setdefault(name, []).append(ms)
        if item.stages_ms:
            totals.append(sum(item.stages_ms.values()))
    out: dict[str, dict[str, float | int | None]] = {}
    # Pipeline order, whatever order the stored JSON kept (PostgreSQL's jsonb does not keep it).
    names = sorted(
        per_stage, key=lambda n: (STAGE_ORDER.index(n) if n in STAGE_ORDER else len(STAGE_ORDER), n)
    )
    for name, values in [*((n, per_stage[n]) for n in names), ("total", totals)]:
        out[name] = {
            "n": len(values),
            "p50": percentile(values, 50),
            "p95": percentile(values, 95),
            "mean": sum(values) / len(values) if values else None,
        }
    return out


def usage(items: Sequence[ItemScore]) -> dict[str, Any]:
    n = len(items)
    prompt = sum(i.tokens_prompt for i in items)
    completion = sum(i.tokens_completion for i in items)
    cost = sum(i.cost_usd for i in items)
    return {
        "tokens_prompt": prompt,
        "tokens_completion": completion,
        "cost_usd": round(cost, 6),
        "tokens_per_question": (prompt + completion) / n if n else None,
        "cost_per_question_usd": round(cost / n, 6) if n else None,
    }


def library_mode(items: Sequence[ItemScore]) -> dict[str, Any]:
    """The offline mode: only answers from verified library templates count, everything else is
    an abstention. Coverage = share answered by the library; precision = correct among them."""
    counted = scored(items)
    library = [i for i in counted if i.answered_by == "library" and not i.abstained]
    mode = [replace(i, abstained=not (i.answered_by == "library" and not i.abstained)) for i in counted]
    return {
        "answered": len(library),
        "coverage": _ratio(len(library), len(counted)),
        "precision": _ratio(sum(1 for i in library if outcome(i) == CORRECT), len(library)),
        "execution_accuracy": execution_accuracy(mode)["accuracy"],
        "rs": reliability_scores(mode),
    }


def library_curve(
    items: Sequence[ItemScore], thresholds: Sequence[float] = CURVE_THRESHOLDS
) -> list[dict[str, Any]]:
    """Coverage vs precision if the library answered whenever its match confidence >= t.

    Uses every question with a template SQL, whether or not that template answered in this run;
    coverage is over all scored questions.
    """
    counted = scored(items)
    points = [i for i in counted if i.library_confidence is not None and i.library_correct is not None]
    out = []
    for t in thresholds:
        chosen = [i for i in points if i.library_confidence >= t]
        correct = sum(1 for i in chosen if i.library_correct and i.answerable)
        out.append(
            {
                "threshold": t,
                "answered": len(chosen),
                "coverage": _ratio(len(chosen), len(counted)),
                "precision": _ratio(correct, len(chosen)),
            }
        )
    return out


def summarize(items: Sequence[ItemScore]) -> dict[str, Any]:
    """Every metric of an evaluation, as JSON-ready data."""
    kinds = {k: 0 for k in OUTCOMES}
    for i in items:
        kinds[outcome(i)] += 1
    categories: dict[str, list[ItemScore]] = {}
    for i in items:
        categories.setdefault(i.category or "", []).append(i)
    return {
        "counts": {
            "questions": len(items),
            "answerable": sum(1 for i in items if i.answerable),
            "unanswerable": sum(1 for i in items if not i.answerable),
            "scored": len(scored(items)),
            "abstained": sum(1 for i in items if i.abstained),
            "gold_errors": kinds[GOLD_ERROR],
            "system_failures": sum(1 for i in items if i.run_outcome in SYSTEM_FAILURES),
        },
        "outcomes": kinds,
        "execution_accuracy": execution_accuracy(items),
        "answerability": answerability(items),
        "rs": reliability_scores(items),
        "rs_n": len(scored(items)),
        "latency_ms": stage_latency(items),
        "usage": usage(items),
        "library": library_mode(items),
        "library_curve": library_curve(items),
        "confidence": {
            "sweep": threshold_sweep(items),
            "tuned": tune_threshold(items),
            "runs_with_confidence": sum(1 for i in items if i.confidence is not None),
        },
        "by_category": {
            name: {
                "questions": len(group),
                "accuracy": execution_accuracy(group)["accuracy"],
                "rs10": reliability_score(group, 10),
            }
            for name, group in sorted(categories.items())
            if name
        },
    }


# Run outcomes that are failures of the system rather than decisions about the question; they
# count as abstentions (no answer was shown) but are reported apart so an outage is visible.
SYSTEM_FAILURES = frozenset({"llm_error", "error", "time_limit", "worker_lost", "cancelled"})
ANSWER_OUTCOMES = frozenset({"execution_error", "timeout"})


def is_abstention(status: str, outcome: str) -> bool:
    """Did a run abstain? The one place that maps run status and outcome to the decision.

    * succeeded (answered, no_rows) -> an answer, whoever wrote the SQL (LLM or library);
    * succeeded but ambiguous (sampled candidates disagreed, none shown as fact) -> abstention;
    * failed with execution_error or timeout -> an answer: SQL was produced and shown to run,
      so it is scored (as wrong) rather than forgiven;
    * declined (the gate said no, no_data, no_llm, no confident library match) -> abstention;
    * failed with sql_invalid (no valid SQL could be written) -> abstention;
    * any other failure (llm_error, worker_lost, …) -> abstention: no answer reached the user;
      `SYSTEM_FAILURES` lets the report count these separately.
    """
    if status == "succeeded":
        # "ambiguous": the sampled candidates disagreed and no answer was presented as fact.
        return outcome == "ambiguous"
    return not (status == "failed" and outcome in ANSWER_OUTCOMES)
