"""The local sentence encoder (all-MiniLM-L6-v2) in plain numpy: the same vectors as
sentence-transformers, without importing torch.

A six-layer BERT with mean pooling and normalisation is a few matrix products per layer. Loading
it takes a fraction of a second where sentence-transformers (torch, transformers, scikit-learn)
takes 3–10 s, which is most of a management command's start-up and of a worker's, and a short
question encodes as fast. The weights and the tokenizer are the model package's own files
(model.safetensors, tokenizer.json), and the vectors agree with sentence-transformers' to about
1e-7 (tests/infra/test_minilm.py), so vectors stored by either are comparable.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import numpy as np

# The sentence-transformers modules this encoder implements; another layout is refused.
_MODULES = [
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
]


_FLOAT32_MIN = np.finfo(np.float32).min  # the attention score of a padding token
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))


class ModelLayoutError(ValueError):
    """The model folder is not a BERT encoder with mean pooling and normalisation."""


# Abramowitz & Stegun 7.1.26: erfc(z) ≈ t (a1 + t (a2 + … + t a5)) exp(-z²), t = 1 / (1 + p z), z ≥ 0.
_ERFC_P = 0.3275911
_ERFC_POLY = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)  # a5 … a1


def _scaled_gelu_in_place(u: np.ndarray, rows: int = 256) -> None:
    """u = u (1 + erf(u)), in place, `rows` token rows at a time: BERT's exact GELU of h = u sqrt 2,
    times sqrt 2 (the encoder keeps the two factors of 1 / sqrt 2 in the weights beside it, so the
    GELU is two numpy operations shorter). Written as u + |u| - |u| erfc(|u|), with Abramowitz &
    Stegun's five-term erfc (absolute error < 1.5e-7, as float32 rounding; numpy has no erf): no
    comparison and no masked subtraction, and for u < 0 the first two terms cancel exactly, so the
    negative side loses no digits. The temporaries of a few rows stay in the CPU cache (about 40%
    faster than the whole batch at once, the same numbers). Not fewer rows: each numpy call lets go
    of the GIL and must get it back, a wait of up to the switch interval when another thread runs
    Python (an import's SQL checks)."""
    if not u.flags.c_contiguous:
        raise ValueError("u must be C-contiguous (changed through a view)")
    flat = u.reshape(-1, u.shape[-1])
    for i in range(0, flat.shape[0], rows):
        part = flat[i : i + rows]
        z = np.abs(part)
        t = z * _ERFC_P
        t += 1.0
        np.divide(1.0, t, out=t)
        poly = t * _ERFC_POLY[0]
        for c in _ERFC_POLY[1:]:
            poly += c
            poly *= t
        np.multiply(z, z, out=t)
        np.negative(t, out=t)
        np.exp(t, out=t)
        t *= poly  # erfc(|u|)
        t *= z
        part += z
        part -= t


class MiniLM:
    """encode(texts) -> unit vectors (float32, one row per text), as SentenceTransformer.encode(
    texts, normalize_embeddings=True) computes them. Not thread-safe (encode may change the
    tokenizer's truncation): callers serialise, or encode with a `sibling()` each."""

    def __init__(self, path: str | Path, *, blocks: bool | None = None):
        """`blocks`: multiply a short text's rows by column blocks of the weights (see _Dense);
        None: when it measures faster here, as it does where OpenBLAS has a small-matrix kernel."""
        from safetensors.numpy import load_file

        path = Path(path)
        modules = [m.get("type") for m in json.loads((path / "modules.json").read_text())]
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
        config = json.loads((path / "config.json").read_text())
        if (
            modules != _MODULES
            or config.get("model_type") != "bert"
            or config.get("hidden_act") != "gelu"
            or not pooling.get("pooling_mode_mean_tokens")
            or any(
                v
                for k, v in pooling.items()
                if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"
            )
        ):
            raise ModelLayoutError(f"{path} is not a BERT sentence encoder with mean pooling")
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.max_tokens = int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
        self._tokenizer_file = str(path / "tokenizer.json")
        self.tokenizer = self._new_tokenizer()
        w = load_file(str(path / "model.safetensors"))
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            attention = [w[f"{p}attention.self.{name}.weight"] for name in ("query", "key", "value")]
            self.layers.append(
                {
                    # query, key and value in one product
                    "qkv": _Dense(np.concatenate(attention),
                                  np.concatenate([w[f"{p}attention.self.{n}.bias"] for n in ("query", "key", "value")])),
                    "out": _Dense(w[f"{p}attention.output.dense.weight"], w[f"{p}attention.output.dense.bias"]),
                    "norm1": (w[f"{p}attention.output.LayerNorm.weight"], w[f"{p}attention.output.LayerNorm.bias"]),
                    # GELU(h) = u (1 + erf u) / sqrt 2 for u = h / sqrt 2: both factors in the weights
                    "up": _Dense(w[f"{p}intermediate.dense.weight"] * _INV_SQRT2,
                                 w[f"{p}intermediate.dense.bias"] * _INV_SQRT2),
                    "down": _Dense(w[f"{p}output.dense.weight"] * _INV_SQRT2, w[f"{p}output.dense.bias"]),
                    "norm2": (w[f"{p}output.LayerNorm.weight"], w[f"{p}output.LayerNorm.bias"]),
                }
            )  # fmt: skip
        if blocks is None:
            blocks = self.layers[0]["up"].blocks_pay()
        if blocks:
            for layer in self.layers:
                for name in ("qkv", "out", "up", "down"):
                    layer[name].add_blocks()
        # The full products (OpenBLAS packing the weights, its Haswell kernels where AVX-512 is off)
        # cost steps of 4 rows: a question's 24 products at 9, 10 or 11 rows measured 7%, 10% and
        # 24% slower than at 12, at 13-15 rows 0-17% slower than at 16, the weights streamed the
        # same (the kernels take the rows 4 at a time, a remainder by slower edge code). So a
        # text's rows are rounded up to a multiple of 4 there; the vectors agree to float32
        # rounding. The blocked products (the small-matrix kernel) have no such steps: rows added
        # there measured slower (9 rows as 12: 7%).
        self.row_multiple = 1 if blocks else 4

    def _new_tokenizer(self):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(self._tokenizer_file)
        tokenizer.enable_truncation(self.max_tokens)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        return tokenizer

    def sibling(self) -> MiniLM:
        """The same model with a tokenizer of its own: the weights (read only) are shared, so two
        threads can encode at once, one with each, without doubling the memory. Its tokenizer is
        read from the file, not copied: the model's may be cut shorter at this moment (encode's
        max_tokens, in another thread)."""
        twin = copy.copy(self)
        twin.tokenizer = self._new_tokenizer()
        return twin

    def _layer_norm(self, x: np.ndarray, weight_bias: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """LayerNorm of x's rows, computed in x (the caller's temporary) to spare the copies. The
        means are np.mean's own sum and division without its Python wrapper (the same numbers; the
        wrapper was a tenth of a short question's encoding)."""
        width = x.shape[-1]
        x -= np.add.reduce(x, axis=-1, keepdims=True) / width
        variance = np.add.reduce(np.square(x), axis=-1, keepdims=True)
        variance /= width
        variance += self.eps
        x /= np.sqrt(variance, out=variance)
        x *= weight_bias[0]
        x += weight_bias[1]
        return x

    def encode(self, texts: list[str], batch_size: int = 32, max_tokens: int | None = None) -> np.ndarray:
        """Unit vectors of `texts`; `max_tokens` cuts them shorter than the model's own limit (as a
        sentence-transformers model with a lower max_seq_length would)."""
        if not texts:
            return np.zeros((0, self.word.shape[1]), dtype=np.float32)
        if max_tokens is not None and max_tokens < self.max_tokens:
            self.tokenizer.enable_truncation(max_tokens)
            try:
                return self.encode(texts, batch_size)
            finally:
                self.tokenizer.enable_truncation(self.max_tokens)
        # Each text is tokenised once, all of them padded to the longest; a batch takes its rows
        # cut to its own longest text (what tokenising the batch alone gives: padding is on the
        # right). Batches of texts of similar length: a batch is padded to its longest text, so a
        # 10-token question batched with a 60-token one costs 60 tokens of work (about half the
        # work saved on a library's worth of questions). Small batches keep the activations in the cache.
        ids, mask = self._tokenize(texts)
        lengths = mask.sum(1, dtype=np.int64)
        if len(texts) == 1:  # a question: nothing to sort or cut
            return self._encode_batch(ids, mask)
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(texts), self.word.shape[1]), dtype=np.float32)
        for i in range(0, len(order), batch_size):
            chunk = order[i : i + batch_size]
            longest = int(lengths[chunk].max())
            out[chunk] = self._encode_batch(ids[chunk, :longest], mask[chunk, :longest])
        return out

    def token_counts(self, texts: list[str]) -> list[int]:
        """Word pieces of each text, [CLS] and [SEP] included, up to the model's limit."""
        return [sum(e.attention_mask) for e in self.tokenizer.encode_batch(list(texts))]

    def _tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and attention mask (float32) of `texts`, padded on the right to the longest."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        return ids, mask

    def _encode_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        tokens = batch * length
        # The token rows of the whole batch as one matrix: each projection is one matrix product
        # (numpy multiplies a (batch, length, d) stack one text at a time, a fifth slower), its
        # rows rounded up to a multiple of row_multiple by rows of zeros: the row-wise steps carry
        # them along (finite: a zero row's LayerNorm is the bias), attention and the mean never
        # read them.
        rows = -(-tokens // self.row_multiple) * self.row_multiple
        x = np.zeros((rows, self.word.shape[1]), dtype=np.float32)
        embedded = x[:tokens].reshape(batch, length, -1)
        np.add(self.word[ids] + self.position[:length], self.token_type, out=embedded)
        x = self._layer_norm(x, self.norm)
        context = np.zeros_like(x)  # attention's output rows, its padding rows left at zero
        heads, dim = self.heads, x.shape[-1] // self.heads
        # Padding gets no attention; a batch without padding (a single question) adds nothing.
        padded = not mask.all()
        padding = ((1.0 - mask) * _FLOAT32_MIN)[:, None, None, :] if padded else None
        scale = np.float32(1.0 / math.sqrt(dim))
        for layer in self.layers:
            qkv = layer["qkv"](x)[:tokens].reshape(batch, length, 3, heads, dim)
            q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (batch, heads, length, dim)
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            if padded:
                scores += padding
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= np.add.reduce(scores, axis=-1, keepdims=True)
            np.copyto(context[:tokens].reshape(batch, length, heads, dim), (scores @ v).transpose(0, 2, 1, 3))
            out = layer["out"](context)
            out += x
            x = self._layer_norm(out, layer["norm1"])
            h = layer["up"](x)
            _scaled_gelu_in_place(h)
            out = layer["down"](h)
            out += x
            x = self._layer_norm(out, layer["norm2"])
        x = x[:tokens].reshape(batch, length, -1)
        if not padded:  # every token counts alike: the mean of the rows
            pooled = np.add.reduce(x, axis=1) / np.float32(length)
        else:
            weights = mask[:, :, None]
            pooled = (x * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


# OpenBLAS multiplies small matrices (m·n·k ≤ 100³) with a kernel of its own where it has one
# (its SkylakeX and later x86 targets), without packing the operands first.
_SMALL_PRODUCT = 1_000_000


class _Dense:
    """x @ weight + bias for a weight stored as (out, in), as the model file has it: kept as (in, out)
    in C order (the fastest layout for a full product), and, with add_blocks, also as column
    blocks (blocks, in, width). A short text's product (a question: 10-40 rows against 384×1536
    weights) is mostly the packing of the weights, done anew on every call; each block's product
    is small enough for OpenBLAS's small-matrix kernel, which reads the weights as they lie: one
    stacked matmul, about 2.3x faster there for a question's rows, within float32 rounding of
    the full product (a longer text's rows in up to four parts; a batch's, the full product). Where no such kernel exists (OpenBLAS told to use its Haswell kernels, the
    AVX-512-off stand-in) the blocks measure no faster, and are not made (the memory is not spent)."""

    __slots__ = ("bias", "blocks", "rows", "weight")

    def __init__(self, weight: np.ndarray, bias: np.ndarray):
        self.weight = np.ascontiguousarray(weight.T)
        self.bias = bias
        self.blocks: np.ndarray | None = None
        self.rows = 0  # the most rows a blocked product takes

    def add_blocks(self) -> None:
        inner, outer = self.weight.shape
        width = 64 if inner <= 512 else 32  # 40 rows by 384 inputs, 20 rows by 1,536
        if outer % width:
            return
        self.blocks = np.ascontiguousarray(
            self.weight.reshape(inner, outer // width, width).transpose(1, 0, 2)
        )
        self.rows = _SMALL_PRODUCT // (width * inner)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = x.shape[0]
        if self.blocks is None or rows > 4 * self.rows:  # a batch: the full product
            out = x @ self.weight
        else:  # a text: its rows in at most 4 equal parts of at most self.rows each (15-30% faster)
            blocks, _, width = self.blocks.shape
            out = np.empty((rows, blocks * width), dtype=np.float32)
            step = -(-rows // -(-rows // self.rows))
            for i in range(0, rows, step):
                part = np.matmul(x[i : i + step], self.blocks)  # (blocks, rows, width)
                np.copyto(out[i : i + step].reshape(-1, blocks, width), part.transpose(1, 0, 2))
        out += self.bias  # in place: no second temporary of the product's size
        return out

    def blocks_pay(self, rows: int = 12, tries: int = 11) -> bool:
        """Are blocked products clearly faster than full ones here (a question's rows, the best of
        a few tries each)? Decided once, when the model loads (a few milliseconds)."""
        twin = _Dense(self.weight.T, self.bias)
        twin.add_blocks()
        if twin.blocks is None:
            return False
        x = np.ones((rows, self.weight.shape[0]), dtype=np.float32)
        full, blocked = [], []
        for _ in range(tries):
            start = time.perf_counter()
            x @ twin.weight
            middle = time.perf_counter()
            twin(x)
            full.append(middle - start)
            blocked.append(time.perf_counter() - middle)
        return min(blocked) < 0.75 * min(full)


# --- worker processes, for a bulk job's thousands of texts ------------------------------------------

_PROCESS_MODEL: MiniLM | None = None  # the model of this worker process (see encoder_processes)


def _process_start(path: str) -> None:
    global _PROCESS_MODEL
    _PROCESS_MODEL = MiniLM(path)


def process_encode(texts: list[str]) -> np.ndarray:
    """Unit vectors of `texts` by this worker process's model: run in an encoder_processes pool."""
    if _PROCESS_MODEL is None:
        raise RuntimeError("process_encode runs in an encoder_processes worker")
    return _PROCESS_MODEL.encode(list(texts))


def encoder_processes(path: str | Path, processes: int):
    """A pool of `processes` worker processes, each with its own copy of the model in `path`
    (started fresh, not forked: a forked worker would inherit the parent's threads and locks).

    Why processes and not threads: numpy lets go of the GIL inside each matrix product but needs
    it back between them, and a bulk import's other thread (SQL checks, pure Python) holds it in
    turn, so a threaded encoder spent much of an import waiting for the interpreter instead of
    computing. A process has an interpreter of its own; the vectors are the same computation."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(
        max_workers=processes,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_process_start,
        initargs=(str(path),),
    )
