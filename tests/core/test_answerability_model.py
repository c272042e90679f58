"""The answerability model's pure parts: threshold choice, metrics, combiner, paraphrase families
and grouped folds, the training protocol (with a fake encoder), reasons, and versioned storage.
No database."""

from __future__ import annotations

import json
import re
import zlib
from datetime import datetime

import numpy as np
import pytest

from askdb.answerability import store
from askdb.answerability.model import (
    AnswerabilityModel,
    ColumnText,
    Combiner,
    TableText,
    TrainConfig,
    TrainingError,
    TrainQuestion,
    attribute_kinds,
    choose_threshold,
    classification_metrics,
    family_folds,
    kind_groups,
    load_combiner,
    neighbour_signals,
    paraphrase_groups,
    roc_auc,
    sql_template,
    train,
)


class BagOfWordsEncoder:
    """A deterministic stand-in for MiniLM: hashed bag of words, L2-normalised."""

    DIMS = 256
    name = "bag-of-words"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.DIMS, dtype=np.float32)
        for word in re.findall(r"[a-z]+", text.lower()):
            if len(word) > 3:
                v[zlib.crc32(word.encode()) % self.DIMS] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def encode_questions(self, texts):
        self.calls.append(len(texts))
        return np.vstack([self._vec(t) for t in texts]) if len(texts) else np.zeros((0, self.DIMS))

    encode_docs = encode_questions


TABLES = [
    TableText(
        "hosp.labevents", "Laboratory results: glucose, creatinine, hemoglobin, sodium lab measurements"
    ),
    TableText("hosp.prescriptions", "Prescriptions: drugs, medication orders, dose, insulin, antibiotics"),
    TableText("hosp.patients", "Patients: gender, birth year, anchor age, date of death"),
]
COLUMNS = [
    ColumnText(
        "hosp.labevents.valuenum", "labevents.valuenum: numeric lab result, glucose creatinine sodium"
    ),
    ColumnText("hosp.prescriptions.drug", "prescriptions.drug: drug name, insulin, antibiotics, medication"),
    ColumnText("hosp.patients.gender", "patients.gender: administrative sex of the patient"),
    ColumnText(
        "hosp.admissions.insurance", "admissions.insurance: the patient's insurance (Medicare, Medicaid)"
    ),
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
    """Three paraphrases per answerable question (one SQL template each), off-topic unanswerables."""
    out = []
    for n, (word, table) in enumerate(ANSWERABLE):
        sql = f"SELECT {word} FROM {table} WHERE subject_id = {100 + n}"
        for k, frame in enumerate(("what was the {} of patient {}?", "show the {} values for subject {}",
                                   "list every {} entry for patient {}")):  # fmt: skip
            out.append(TrainQuestion(f"a{n}-{k}", frame.format(word, 100 + n), True, (table,), sql=sql))
    for n, topic in enumerate(OFF_TOPIC):
        out.append(TrainQuestion(f"u{n}", f"tell me about {topic} in paris", False))
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


def test_threshold_blocks_at_most_the_allowed_share_of_answerable_questions():
    rng = np.random.default_rng(4)
    answerable = rng.random(400) > 0.2
    p = np.clip(np.where(answerable, 0.6, 0.4) + rng.normal(0, 0.15, 400), 0, 1)
    loose, _ = choose_threshold(p, answerable)
    strict, _ = choose_threshold(p, answerable, max_blocked=0.02)
    blocked = lambda t: ((p < t) & answerable).sum() / answerable.sum()  # noqa: E731
    assert blocked(strict) <= 0.02 < blocked(loose)


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


# -- paraphrase families and grouped folds ----------------------------------------------------------


def test_sql_templates_mask_literals_so_paraphrases_share_one():
    assert sql_template("SELECT x FROM t WHERE id = 10 AND name = 'a''b'") == sql_template(
        "select x from t where id = 7 and name = 'zz'"
    )
    assert sql_template("SELECT x FROM t") != sql_template("SELECT y FROM t")


def test_families_group_paraphrases_and_folds_never_split_a_family():
    questions = _dataset()
    encoder = BagOfWordsEncoder()
    groups = paraphrase_groups(questions, encoder.encode_questions([q.text for q in questions]))
    by_id = dict(zip((q.id for q in questions), groups, strict=True))
    assert by_id["a0-0"] == by_id["a0-1"] == by_id["a0-2"] != by_id["a1-0"]
    assert len({g for q, g in zip(questions, groups, strict=True) if q.answerable}) == len(ANSWERABLE)
    folds = family_folds(groups, 4, seed=1)
    assert sorted(i for f in folds for i in f) == list(range(len(questions)))
    fold_of = {i: k for k, f in enumerate(folds) for i in f}
    for i, gi in enumerate(groups):
        assert all(fold_of[i] == fold_of[j] for j, gj in enumerate(groups) if gj == gi)


def test_near_duplicate_unanswerable_questions_form_one_family():
    qs = [TrainQuestion("u1", "what is the blood type of patient 1?", False),
          TrainQuestion("u2", "what is the blood type of patient 2?", False),
          TrainQuestion("u3", "how many operating rooms are free?", False)]  # fmt: skip
    groups = paraphrase_groups(qs, BagOfWordsEncoder().encode_questions([q.text for q in qs]))
    assert groups[0] == groups[1] != groups[2]


def test_the_attribute_hold_out_groups_sibling_templates_of_one_attribute_and_nothing_else():
    """The first and the last visit's marital status are one attribute (held out together); the
    insurance of the same visit, or a count, is another; unanswerable questions keep their kind."""
    first = "SELECT admissions.marital_status FROM admissions WHERE admissions.subject_id = 1 ORDER BY admissions.admittime ASC LIMIT 1"
    last = "SELECT admissions.marital_status FROM admissions WHERE admissions.subject_id = 2 AND admissions.dischtime IS NOT NULL ORDER BY admissions.admittime DESC LIMIT 1"
    other = "SELECT admissions.insurance FROM admissions WHERE admissions.subject_id = 1 ORDER BY admissions.admittime ASC LIMIT 1"
    count = "SELECT COUNT(*) FROM admissions WHERE admissions.subject_id = 1"
    questions = [
        TrainQuestion("1", "marital status at the first visit", True, sql=first),
        TrainQuestion("2", "marital status at the last visit", True, sql=last),
        TrainQuestion("3", "insurance at the first visit", True, sql=other),
        TrainQuestion("4", "how many visits", True, sql=count),
        TrainQuestion("5", "the spouse's name", False),
        TrainQuestion("6", "unparsable", True, sql="SELECT (((("),
    ]
    kinds = attribute_kinds(questions, ["a", "b", "c", "d", "u", "e"])
    assert kinds[0] == kinds[1] == "attribute:admissions:admissions.marital_status"
    assert kinds[2] == "attribute:admissions:admissions.insurance" and kinds[3] == "attribute:admissions:*"
    assert kinds[4] == "u" and kinds[5] == "attribute:"


def test_kinds_join_unanswerable_families_that_are_alike_on_average_and_keep_answerable_ones():
    qs = [TrainQuestion("u1", "rounds of dr smith today", False),
          TrainQuestion("u2", "when are dr smith rounds today", False),
          TrainQuestion("u3", "rounds and procedures of dr jones", False),
          TrainQuestion("u4", "how many operating rooms are free", False),
          TrainQuestion("a1", "how many patients were admitted", True, sql="select count(*) from admissions"),
          TrainQuestion("a2", "count the admitted patients", True, sql="select count(*) from admissions")]  # fmt: skip
    vectors = BagOfWordsEncoder().encode_questions([q.text for q in qs])
    families = ["u:1", "u:1", "u:2", "u:3", "sql:a", "sql:a"]
    kinds = kind_groups(qs, vectors, families, similarity=0.3)
    assert kinds[0] == kinds[1] == kinds[2] != kinds[3]  # two families of one kind; another kind
    assert kinds[4:] == ["sql:a", "sql:a"]
    assert kind_groups(qs, vectors, families, similarity=0.99)[:4] == ["kind:0", "kind:0", "kind:1", "kind:2"]


def test_neighbour_signals_hide_the_question_s_own_family():
    lib = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    answerable = np.array([True, False, True])
    q = np.array([[1.0, 0.0]])
    open_, _ = neighbour_signals(q, lib, answerable)
    hidden, _ = neighbour_signals(q, lib, answerable, query_groups=["g"], library_groups=["g", "h", "i"])
    assert open_[0, 0] == pytest.approx(1.0) and hidden[0, 0] == pytest.approx(0.6)
    assert open_[0, 2] == pytest.approx(0.0)  # nearest flagged question: orthogonal


# -- combiner, features --------------------------------------------------------------------------


def test_combiner_learns_the_informative_feature_and_is_calibrated_on_average():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    y = (X[:, 0] + 0.3 * rng.normal(size=200) > 0.5).astype(float)
    combiner = Combiner.fit(X, y, l2=1.0)
    assert np.argmax(np.abs(combiner.weights)) == 0 and combiner.weights[0] > 0
    p = combiner.predict(X)
    assert p.mean() == pytest.approx(y.mean(), abs=1e-3)  # an unpenalised intercept matches the base rate
    assert roc_auc(p, y.astype(bool)) > 0.95
    again = Combiner.from_dict(json.loads(json.dumps(combiner.to_dict())))
    assert np.allclose(again.predict(X), p)


def test_a_stored_ensemble_from_the_removed_opt_in_asks_to_be_trained_again():
    with pytest.raises(TrainingError, match="train it again"):
        load_combiner({"members": [{"kind": "hidden_layer"}]})


def test_combiner_refuses_a_single_class():
    with pytest.raises(TrainingError, match="both answerable and unanswerable"):
        Combiner.fit(np.ones((5, 3)), np.ones(5))


# -- the training protocol -----------------------------------------------------------------------


def test_training_measures_out_of_family_and_separates_off_topic():
    questions = _dataset()
    encoder = BagOfWordsEncoder()
    lines: list[str] = []
    config = TrainConfig(folds=3, seed=5)
    result = train(questions, TABLES, COLUMNS, encoder=encoder, config=config, progress=lines.append)
    assert len(ANSWERABLE) < result.families <= len(ANSWERABLE) + len(OFF_TOPIC)
    assert result.metrics["n"] == len(questions) and result.metrics["auc"] >= 0.9
    assert len(result.selection) == 3 and any("setting 3/3" in line for line in lines)
    assert isinstance(result.combiner, Combiner) and result.member_l2 == {"embedding": result.l2}
    assert result.library_vectors.shape == (len(questions), BagOfWordsEncoder.DIMS)
    assert "phone" in result.absent and "address" in result.absent  # no column documents them

    model = AnswerabilityModel(encoder, result.combiner, result.threshold, TABLES, COLUMNS,
                               [(q.id, q.text, q.answerable) for q in questions], version="v1")  # fmt: skip
    on_topic = model.score("what was the creatinine of patient 7?")
    off_topic = model.score("tell me about cheap concert tickets in paris")
    assert on_topic.per_table[0][0] == "hosp.labevents" and len(on_topic.per_table) == 3
    assert on_topic.answerable and on_topic.reason == "" and on_topic.kind == ""
    assert not off_topic.answerable and off_topic.reason and off_topic.kind
    assert off_topic.probability < result.threshold < on_topic.probability
    phone = model.score("what was the phone number of patient 7?")
    assert (
        not phone.answerable
        and phone.reason == "The database has no phone numbers, so askdb cannot answer this."
    )
    data = phone.to_json()
    assert (
        data["category"] == "not_in_schema"
        and data["version"] == "v1"
        and json.loads(json.dumps(data)) == data
    )


def test_training_refuses_tiny_data_and_a_library_without_unanswerable_questions():
    questions = _dataset()
    with pytest.raises(TrainingError, match="at least 20"):
        train(questions[:10], TABLES, COLUMNS, encoder=BagOfWordsEncoder())
    with pytest.raises(TrainingError, match="unanswerable"):
        train([q for q in questions if q.answerable], TABLES, COLUMNS, encoder=BagOfWordsEncoder())


# -- storage ---------------------------------------------------------------------------------------


def test_store_round_trip_versions_and_current_pointer(tmp_path):
    combiner = Combiner.fit(np.array([[0.0], [1.0], [0.2], [0.9]]), np.array([0, 1, 0, 1.0]))
    v1 = store.new_version(datetime(2026, 1, 2, 3, 4, 5), "abc")
    v2 = store.new_version(datetime(2026, 1, 3, 3, 4, 5), "abc")
    assert v1.startswith("20260102T030405-") and v1 < v2
    for version in (v1, v2):
        store.save_version("mimic", version, combiner=combiner, threshold=0.42, manifest={"source": "mimic"},
                           library=(["q one", "q two"], np.eye(2, dtype=np.float32)), home=tmp_path)  # fmt: skip
    assert store.current_version("mimic", home=tmp_path) == v2
    assert [(v["version"], v["current"]) for v in store.list_versions("mimic", home=tmp_path)] == [
        (v1, False),
        (v2, True),
    ]
    store.set_current("mimic", v1, home=tmp_path)
    loaded, threshold, manifest, vectors = store.load_version("mimic", v1, home=tmp_path)
    assert store.current_version("mimic", home=tmp_path) == v1
    assert threshold == 0.42 and manifest == {"version": v1, "source": "mimic"}
    assert set(vectors) == {"q one", "q two"} and np.allclose(vectors["q two"], [0, 1])
    assert np.allclose(loaded.predict(np.array([[0.5]])), combiner.predict(np.array([[0.5]])))
    with pytest.raises(store.StoreError, match="no answerability model version 'nope'"):
        store.set_current("mimic", "nope", home=tmp_path)
    with pytest.raises(store.StoreError, match="already exists"):
        store.save_version("mimic", v1, combiner=combiner, threshold=0.5, manifest={}, home=tmp_path)
    assert store.current_version("other", home=tmp_path) is None


def test_a_failed_save_leaves_no_version_behind(tmp_path):
    class Broken(Combiner):
        def to_dict(self):
            raise OSError("disk full")

    combiner = Combiner.fit(np.array([[0.0], [1.0]]), np.array([0, 1.0]))
    broken = Broken(combiner.weights, combiner.bias, combiner.mean, combiner.std)
    with pytest.raises(OSError):
        store.save_version("mimic", "v", combiner=broken, threshold=0.5, manifest={}, home=tmp_path)
    assert store.list_versions("mimic", home=tmp_path) == []
    assert store.current_version("mimic", home=tmp_path) is None


def test_a_not_in_schema_decline_names_what_askdb_can_answer_instead():
    """Issue 28 item 4: a decline names the nearest column that records something, with what it
    records, as what askdb can answer instead; a key (subject_id) or a far column is not offered."""
    from askdb.answerability import rules

    model = AnswerabilityModel(BagOfWordsEncoder(), Combiner.__new__(Combiner), 0.5, TABLES, COLUMNS,
                               [], version="v1")  # fmt: skip
    near = [("hosp.patients.subject_id", 0.9), ("hosp.admissions.insurance", 0.53)]
    kind, reason = model._explain([], None, near)
    assert kind == "not_in_schema" and reason.startswith("No table or column in this database seems to hold")
    assert reason.endswith(
        " The closest thing the database records is hosp.admissions.insurance (the patient's insurance "
        "(Medicare, Medicaid)); askdb can answer questions about that instead."
    )
    # a concept no column documents says what is missing, then the column nearest to the concept's
    # own words, when one is near: not the whole question's nearest column (attack: "phone numbers"
    # offered admissions.insurance because the question's vector was near it)
    found = rules.findings("what is the phone number of patient 7?", absent=model.absent)
    kind, reason = model._explain(found, None, near)
    assert (kind, reason) == (
        "not_in_schema",
        "The database has no phone numbers, so askdb cannot answer this.",
    )
    assert model._concept_instead("drug_classes").startswith(
        " The closest thing the database records is hosp.prescriptions.drug ("
    )
    # only keys, or columns too far from the question: nothing offered, the decline stands alone
    for per_column in ([("hosp.patients.subject_id", 0.9)], [("hosp.admissions.insurance", 0.2)], []):
        assert "closest thing" not in model._explain([], None, per_column)[1]
    # another kind of decline offers no column (a future question is not about a missing attribute)
    found = rules.findings("what will the insulin dose of patient 7 be next year?", absent=model.absent)
    assert found[0].kind == "future" and "closest thing" not in model._explain(found, None, near)[1]
