"""Scoring one question fast (askdb/answerability/model.py `AnswerabilityModel.score`): the
one-question path gives the features training computes in batch, and a question the pipeline has
embedded already is not encoded again. No database, no encoder download."""

from __future__ import annotations

import numpy as np
import pytest

from askdb.answerability.model import (
    AnswerabilityModel,
    ColumnText,
    Combiner,
    TableText,
    catalog_signals,
    neighbour_signals,
)
from tests.core.test_answerability_model import BagOfWordsEncoder

TABLES = [TableText(f"hosp.t{i}", f"Table t{i} about thing{i} and other{i}") for i in range(6)]
COLUMNS = [ColumnText(f"hosp.t{i % 6}.c{i}", f"t{i % 6}.c{i}: measure{i} of thing{i % 6}") for i in range(20)]


def _model(library) -> AnswerabilityModel:
    dims = BagOfWordsEncoder.DIMS
    combiner = Combiner(np.linspace(-1, 1, 9 + dims), 0.3, np.zeros(9 + dims), np.ones(9 + dims))
    return AnswerabilityModel(BagOfWordsEncoder(), combiner, 0.5, TABLES, COLUMNS, library, version="v")


@pytest.mark.parametrize(
    "library",
    [
        [(i, f"question about thing{i % 7} and measure{i % 5} number{i}", i % 3 != 0) for i in range(40)],
        [(1, "only approved thing1", True), (2, "another approved measure2", True)],  # no flagged question
        [(1, "one flagged thing3", False), (2, "approved thing1", True)],  # fewer than five of each
        [],
    ],
)
def test_one_question_gets_the_features_and_neighbours_training_computes(library):
    model = _model(library)
    for question in ("how many thing1 with measure3?", "what is thing4 of number12", "unrelated words here"):
        vec = model.encoder.encode_questions([question])[0]
        signals, catalog, _, near_a, near_u = model._signals(vec)
        batch, _ = neighbour_signals(vec[None, :], model.library.vectors, model.library.answerable)
        batch_catalog, _ = catalog_signals(vec[None, :], model.table_vectors, model.column_vectors)
        np.testing.assert_allclose(signals, batch[0], atol=1e-6)
        np.testing.assert_allclose(catalog, batch_catalog[0], atol=1e-6)
        for near, wanted in ((near_a, True), (near_u, False)):
            rows = [i for i, (_, _, a) in enumerate(library) if a == wanted]
            if not rows:
                assert near is None
                continue
            sims = model.library.vectors[rows] @ vec
            assert near[1] == pytest.approx(float(sims.max()), abs=1e-6)
        score = model.score(question)
        assert [c for c, _ in score.per_column] == [
            model.column_names[i] for i in np.argsort(-(model.column_vectors @ vec))[:8]
        ]


def test_a_question_the_pipeline_embedded_is_not_encoded_again_and_scores_the_same():
    model = _model([(1, "approved thing1 measure1", True), (2, "flagged thing2", False)])
    question = "what is the measure1 of thing1 for patient 7?"
    before = len(model.encoder.calls)
    vector = model.encoder._vec(question)
    given = model.score(question, vector=vector.tolist())
    assert len(model.encoder.calls) == before
    encoded = model.score(question)
    assert len(model.encoder.calls) == before + 1
    assert given.probability == pytest.approx(encoded.probability) and given.answerable == encoded.answerable
    # a vector of another size (an OpenAI embedding, 1536 dims) is not this model's: encoded here
    model.score(question, vector=[0.1] * 1536)
    assert len(model.encoder.calls) == before + 2
