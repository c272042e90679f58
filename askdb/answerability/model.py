"""The schema-relevance answerability model, free of Django: a fine-tuned question/table-doc
bi-encoder, a logistic combiner over its signals, and the F1-maximising threshold.

Unanswerable questions are rare, so the model does not learn them directly. It learns, for every
table, whether a question needs it (plentiful labels from approved SQL), and calls a question
answerable when the evidence that some table serves it (table relevance, closeness to approved
and to flagged questions, values it mentions) is strong enough.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

QUESTION_MAX_TOKENS = 128
DOC_MAX_TOKENS = 256
VALUE_FLOOR = 0.55  # linked values scoring below this are noise (retrieval's Weights.value_floor)

FEATURE_NAMES = (
    "max_relevance",
    "second_relevance",
    "top3_mean_relevance",
    "nearest_answerable",
    "nearest_unanswerable",
    "nearest_margin",
    "linked_values",
    "best_linked_value",
)


class TrainingError(ValueError):
    """The data cannot train a useful model; the message says what is missing."""


@dataclass(frozen=True)
class TrainQuestion:
    """One labelled question. `tables` are the qualified tables it needs (empty if unanswerable)."""

    id: str
    text: str
    answerable: bool
    tables: tuple[str, ...] = ()
    origin: str = "library"  # library | file | catalog (catalog ones only teach the encoder)
    n_values: int = 0  # linked values at or above VALUE_FLOOR
    best_value: float = 0.0


@dataclass(frozen=True)
class TableText:
    qualified: str
    text: str


# -- the encoder -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FineTuneConfig:
    epochs: int = 4
    batch_size: int = 16
    lr: float = 3e-5
    head_lr: float = 1e-2
    listwise_weight: float = 1.0
    seed: int = 13
    max_seconds: float = 150.0  # stop early on a busy machine rather than run for ever
    threads: int = 2


class Encoder(Protocol):
    """What training and scoring need from an encoder: vectors are L2-normalised rows."""

    def encode_questions(self, texts: Sequence[str]) -> np.ndarray: ...
    def encode_docs(self, texts: Sequence[str]) -> np.ndarray: ...
    def relevance(self, questions: np.ndarray, docs: np.ndarray) -> np.ndarray: ...
    def fine_tune(
        self,
        questions: Sequence[TrainQuestion],
        tables: Sequence[TableText],
        config: FineTuneConfig,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]: ...
    def save(self, path: str) -> None: ...


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


class MiniLMBiEncoder:
    """all-MiniLM-L6-v2 fine-tuned as a bi-encoder: question vs table-doc text, with a learned
    scale and bias turning cosine similarity into P(table needed).

    Training backpropagates through the question side only and re-encodes the docs once per
    epoch with the current weights (shared encoder, lagging doc vectors): encoding ~31 docs of
    256 word pieces with gradients on every step would cost minutes per epoch on two cores, and
    with cached doc vectors every question sees every table as a negative.
    """

    def __init__(self, model: Any, *, scale: float = 10.0, bias: float = -3.0, base_model: str = "") -> None:
        self.model = model
        self.scale = float(scale)
        self.bias = float(bias)
        self.base_model = base_model

    @classmethod
    def from_path(cls, path: str, *, base_model: str = "") -> MiniLMBiEncoder:
        """Load a saved (or the base) sentence-transformers model; never reaches for a hub."""
        import json
        import os
        from pathlib import Path

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        head = Path(path) / "relevance_head.json"
        if head.exists():
            data = json.loads(head.read_text())
            return cls(model, scale=data["scale"], bias=data["bias"], base_model=data.get("base_model", ""))
        return cls(model, base_model=base_model)

    def _encode(self, texts: Sequence[str], max_tokens: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        self.model.max_seq_length = max_tokens
        vectors = self.model.encode(
            list(texts),
            batch_size=32,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode_questions(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, QUESTION_MAX_TOKENS)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, DOC_MAX_TOKENS)

    def relevance(self, questions: np.ndarray, docs: np.ndarray) -> np.ndarray:
        return _sigmoid(self.scale * (questions @ docs.T) + self.bias)

    def fine_tune(
        self,
        questions: Sequence[TrainQuestion],
        tables: Sequence[TableText],
        config: FineTuneConfig,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        rng = random.Random(config.seed)
        index = {t.qualified: i for i, t in enumerate(tables)}
        # An answerable question none of whose tables is here would teach "no table fits".
        items = [
            q for q in questions if q.text.strip() and (not q.answerable or set(q.tables) & index.keys())
        ]
        labels = np.zeros((len(items), len(tables)), dtype=np.float32)
        for row, q in enumerate(items):
            for name in q.tables:
                if name in index:
                    labels[row, index[name]] = 1.0
        scale = torch.nn.Parameter(torch.tensor(self.scale))
        bias = torch.nn.Parameter(torch.tensor(self.bias))
        # The word-piece embeddings are half the weights: frozen, each step costs half as much,
        # and a few hundred questions cannot move them usefully anyway.
        for name, param in self.model.named_parameters():
            param.requires_grad = ".embeddings." not in f".{name}"
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(
            [
                {"params": trainable, "lr": config.lr, "weight_decay": 0.01},
                {"params": [scale, bias], "lr": config.head_lr, "weight_decay": 0.0},
            ]
        )
        steps_per_epoch = max(1, math.ceil(len(items) / config.batch_size))
        total = max(1, steps_per_epoch * config.epochs)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min(1.0, (step + 1) / max(1, total // 10)) * max(0.05, 1 - step / total)
        )
        started = time.monotonic()
        step, losses, stopped_early = 0, [], False
        doc_texts = [t.text for t in tables]
        for epoch in range(config.epochs):
            # Docs are re-encoded with this epoch's weights, without gradients (see the class doc).
            self.model.eval()
            docs = torch.from_numpy(self.encode_docs(doc_texts))
            self.model.train()
            self.model.max_seq_length = QUESTION_MAX_TOKENS
            order = list(range(len(items)))
            rng.shuffle(order)
            epoch_losses = []
            for start in range(0, len(order), config.batch_size):
                batch = order[start : start + config.batch_size]
                features = self.model.preprocess([items[i].text for i in batch])
                features = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
                q = self.model(features)["sentence_embedding"]
                q = F.normalize(q, dim=-1)
                logits = scale * (q @ docs.T) + bias
                target = torch.from_numpy(labels[batch])
                loss = F.binary_cross_entropy_with_logits(logits, target)
                answerable = target.sum(dim=1) > 0
                if config.listwise_weight and bool(answerable.any()):
                    # Multi-positive softmax: every needed table must beat every other table.
                    log_probs = F.log_softmax(scale * (q @ docs.T), dim=1)[answerable]
                    pos = target[answerable]
                    listwise = -(log_probs * pos).sum(dim=1) / pos.sum(dim=1)
                    loss = loss + config.listwise_weight * listwise.mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                optimizer.step()
                schedule.step()
                step += 1
                epoch_losses.append(float(loss.detach()))
                if time.monotonic() - started > config.max_seconds:
                    stopped_early = True
                    break
            losses.append(round(float(np.mean(epoch_losses)), 4) if epoch_losses else None)
            if progress:
                progress(
                    f"epoch {epoch + 1}/{config.epochs}: loss {losses[-1]} ({time.monotonic() - started:.0f}s)"
                )
            if stopped_early:
                break
        self.model.eval()
        self.scale, self.bias = float(scale.detach()), float(bias.detach())
        return {
            "steps": step,
            "epoch_losses": losses,
            "seconds": round(time.monotonic() - started, 1),
            "stopped_early": stopped_early,
            "scale": round(self.scale, 4),
            "bias": round(self.bias, 4),
        }

    def save(self, path: str) -> None:
        import json
        from pathlib import Path

        self.model.save(str(path), create_model_card=False)
        head = {"scale": self.scale, "bias": self.bias, "base_model": self.base_model}
        (Path(path) / "relevance_head.json").write_text(json.dumps(head, indent=2))


# -- features, combiner, threshold ---------------------------------------------------------------


def feature_vector(
    relevance: np.ndarray,
    *,
    nearest_answerable: float,
    nearest_unanswerable: float,
    n_values: int,
    best_value: float,
) -> np.ndarray:
    """The combiner's inputs for one question, in FEATURE_NAMES order."""
    ranked = np.sort(np.asarray(relevance, dtype=np.float64))[::-1]
    first = float(ranked[0]) if ranked.size else 0.0
    second = float(ranked[1]) if ranked.size > 1 else 0.0
    top3 = float(ranked[:3].mean()) if ranked.size else 0.0
    return np.array(
        [
            first,
            second,
            top3,
            nearest_answerable,
            nearest_unanswerable,
            nearest_answerable - nearest_unanswerable,
            math.log1p(max(0, n_values)),
            best_value,
        ],
        dtype=np.float64,
    )


def nearest(
    vector: np.ndarray, pool: np.ndarray, ids: Sequence[str], *, exclude: str | None = None
) -> tuple[str, float] | None:
    """The most similar pool entry (cosine of normalised rows), skipping `exclude` (itself)."""
    if pool.shape[0] == 0:
        return None
    sims = pool @ vector
    order = np.argsort(-sims)
    for i in order:
        if exclude is None or ids[i] != exclude:
            return ids[i], float(sims[i])
    return None


@dataclass
class Combiner:
    """Logistic regression over standardised features: a calibrated P(answerable)."""

    weights: np.ndarray
    bias: float
    mean: np.ndarray
    std: np.ndarray
    feature_names: tuple[str, ...] = FEATURE_NAMES

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, *, l2: float = 1.0, iterations: int = 50) -> Combiner:
        """Newton's method on the L2-penalised log-loss (the bias is not penalised)."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if len(set(y.tolist())) < 2:
            raise TrainingError("the combiner needs both answerable and unanswerable questions")
        mean = X.mean(axis=0)
        std = X.std(axis=0)
        std[std < 1e-9] = 1.0
        Z = np.hstack([(X - mean) / std, np.ones((X.shape[0], 1))])
        w = np.zeros(Z.shape[1])
        penalty = np.full(Z.shape[1], l2)
        penalty[-1] = 0.0
        for _ in range(iterations):
            p = _sigmoid(Z @ w)
            grad = Z.T @ (p - y) + penalty * w
            hess = (Z * (p * (1 - p))[:, None]).T @ Z + np.diag(penalty) + 1e-9 * np.eye(Z.shape[1])
            delta = np.linalg.solve(hess, grad)
            w -= delta
            if np.abs(delta).max() < 1e-8:
                break
        return cls(weights=w[:-1], bias=float(w[-1]), mean=mean, std=std)

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        return _sigmoid(((X - self.mean) / self.std) @ self.weights + self.bias)

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names),
            "weights": self.weights.tolist(),
            "bias": self.bias,
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Combiner:
        return cls(
            weights=np.array(data["weights"], dtype=np.float64),
            bias=float(data["bias"]),
            mean=np.array(data["mean"], dtype=np.float64),
            std=np.array(data["std"], dtype=np.float64),
            feature_names=tuple(data["feature_names"]),
        )


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Probability a random positive outscores a random negative (ties count half)."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return None
    greater = (s[pos][:, None] > s[~pos][None, :]).sum()
    ties = (s[pos][:, None] == s[~pos][None, :]).sum()
    return float((greater + 0.5 * ties) / (n_pos * n_neg))


def classification_metrics(
    probabilities: Sequence[float], answerable: Sequence[bool], threshold: float
) -> dict[str, Any]:
    """Precision/recall/F1 with unanswerable as the positive class (as the evaluation harness
    counts), the same from the answerable side, accuracy and AUC."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(answerable, dtype=bool)
    said_answerable = p >= threshold
    out: dict[str, Any] = {
        "n": int(y.size),
        "n_unanswerable": int((~y).sum()),
        "threshold": round(threshold, 4),
    }
    for view, truth, predicted in (
        ("unanswerable", ~y, ~said_answerable),
        ("answerable", y, said_answerable),
    ):
        tp = int((truth & predicted).sum())
        fp = int((~truth & predicted).sum())
        fn = int((truth & ~predicted).sum())
        precision, recall, f1 = _prf(tp, fp, fn)
        out[view] = {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}
    out["accuracy"] = round(float((said_answerable == y).mean()), 4) if y.size else 0.0
    auc = roc_auc(p, y)
    out["auc"] = round(auc, 4) if auc is not None else None
    return out


def choose_threshold(probabilities: Sequence[float], answerable: Sequence[bool]) -> tuple[float, float]:
    """The P(answerable) cut that maximises F1 for detecting unanswerable questions.

    Candidates sit halfway between adjacent distinct probabilities, so a threshold never lands
    exactly on a held-out score; among equal F1s the one with the widest gap wins (the most
    room for new questions to fall on the same side).
    """
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(answerable, dtype=bool)
    if not p.size:
        raise TrainingError("no held-out questions to choose a threshold on")
    distinct = np.unique(p)
    candidates = [(distinct[0] + 0.0) / 2, *((distinct[:-1] + distinct[1:]) / 2), (distinct[-1] + 1.0) / 2]
    gaps = [distinct[0], *(distinct[1:] - distinct[:-1]), 1.0 - distinct[-1]]
    best = (-1.0, -1.0, 0.5)
    for t, gap in zip(candidates, gaps, strict=True):
        predicted = p < t
        tp = int((predicted & ~y).sum())
        fp = int((predicted & y).sum())
        fn = int((~predicted & ~y).sum())
        f1 = _prf(tp, fp, fn)[2]
        if (f1, gap) > best[:2]:
            best = (f1, float(gap), float(t))
    return best[2], best[0]


def stratified_split(
    answerable: Sequence[bool], *, held_out: float, seed: int
) -> tuple[list[int], list[int]]:
    """Indices (fit, held_out): each class split in the same proportion, at least one of each
    class held out when the class has two or more members."""
    rng = random.Random(seed)
    fit, held = [], []
    for cls in (True, False):
        members = [i for i, a in enumerate(answerable) if bool(a) == cls]
        rng.shuffle(members)
        n = round(len(members) * held_out)
        if len(members) >= 2:
            n = min(max(n, 1), len(members) - 1)
        held += members[:n]
        fit += members[n:]
    return sorted(fit), sorted(held)


def folds(n: int, k: int, *, seed: int, labels: Sequence[bool]) -> list[list[int]]:
    """k stratified folds of range(n)."""
    rng = random.Random(seed)
    out: list[list[int]] = [[] for _ in range(k)]
    for cls in (True, False):
        members = [i for i in range(n) if bool(labels[i]) == cls]
        rng.shuffle(members)
        for j, i in enumerate(members):
            out[j % k].append(i)
    return [sorted(f) for f in out]


# -- the trained model and its scoring -------------------------------------------------------------


@dataclass(frozen=True)
class AnswerabilityScore:
    """The gate's verdict on one question, with the evidence to show on the run page."""

    probability: float  # P(answerable), 0..1
    threshold: float
    answerable: bool
    per_table: list[tuple[str, float]]  # every table, best first, relevance 0..1
    nearest_answerable: tuple[str, float] | None
    nearest_unanswerable: tuple[str, float] | None
    version: str
    features: dict[str, float] = field(default_factory=dict)

    def to_json(self, *, top: int = 8) -> dict[str, Any]:
        def near(n: tuple[str, float] | None) -> dict[str, Any] | None:
            return {"example_id": n[0], "similarity": round(n[1], 4)} if n else None

        return {
            "probability": round(self.probability, 4),
            "threshold": round(self.threshold, 4),
            "answerable": self.answerable,
            "per_table": [{"table": t, "relevance": round(r, 4)} for t, r in self.per_table[:top]],
            "nearest_answerable": near(self.nearest_answerable),
            "nearest_unanswerable": near(self.nearest_unanswerable),
            "version": self.version,
            "features": {k: round(v, 4) for k, v in self.features.items()},
        }


@dataclass
class LibraryIndex:
    """Approved and flagged questions under the fine-tuned encoder, for the nearest features."""

    ids: list[Any]  # Example pks at run time, question ids in training
    vectors: np.ndarray
    answerable: np.ndarray  # bool per row

    @classmethod
    def build(
        cls,
        encoder: Encoder,
        items: Sequence[tuple[Any, str, bool]],
        *,
        cache: dict[str, np.ndarray] | None = None,
    ) -> LibraryIndex:
        """Encode the items' questions; with `cache` (text -> vector) only new texts are encoded."""
        cache = {} if cache is None else cache
        missing = list(dict.fromkeys(t for _, t, _ in items if t not in cache))
        if missing:
            cache.update(zip(missing, encoder.encode_questions(missing), strict=True))
        ids = [i for i, _, _ in items]
        vectors = np.vstack([cache[t] for _, t, _ in items]) if items else np.zeros((0, 1), dtype=np.float32)
        return cls(ids=ids, vectors=vectors, answerable=np.array([a for _, _, a in items], dtype=bool))

    def nearest_pair(
        self, vector: np.ndarray, *, exclude: str | None = None
    ) -> tuple[tuple[str, float] | None, tuple[str, float] | None]:
        result = []
        for wanted in (True, False):
            mask = self.answerable == wanted
            ids = [i for i, m in zip(self.ids, mask, strict=True) if m]
            pool = self.vectors[mask] if mask.any() else np.zeros((0, vector.shape[0]))
            result.append(nearest(vector, pool, ids, exclude=exclude))
        return result[0], result[1]


def question_features(
    encoder: Encoder,
    questions: Sequence[TrainQuestion],
    doc_vectors: np.ndarray,
    library: LibraryIndex,
    *,
    leave_one_out: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(features, relevance matrix) for questions; with leave_one_out a question never counts
    as its own nearest example."""
    if not questions:
        return np.zeros((0, len(FEATURE_NAMES))), np.zeros((0, doc_vectors.shape[0]))
    qvecs = encoder.encode_questions([q.text for q in questions])
    relevance = encoder.relevance(qvecs, doc_vectors)
    rows = []
    for q, vec, rel in zip(questions, qvecs, relevance, strict=True):
        near_a, near_u = library.nearest_pair(vec, exclude=q.id if leave_one_out else None)
        rows.append(
            feature_vector(
                rel,
                nearest_answerable=near_a[1] if near_a else 0.0,
                nearest_unanswerable=near_u[1] if near_u else 0.0,
                n_values=q.n_values,
                best_value=q.best_value,
            )
        )
    return np.vstack(rows), relevance


@dataclass(frozen=True)
class TrainConfig:
    held_out: float = 0.25
    folds: int = 2  # cross-fitting rounds for the combiner's out-of-sample features; 0 = in-sample
    seed: int = 13
    l2: float = 1.0
    min_questions: int = 20
    min_unanswerable: int = 4
    fine_tune: FineTuneConfig = field(default_factory=FineTuneConfig)


@dataclass
class TrainResult:
    encoder: Encoder
    combiner: Combiner
    threshold: float
    metrics: dict[str, Any]  # held-out, at the chosen threshold
    cross_fit_metrics: dict[str, Any] | None
    fit_size: int
    held_out_size: int
    fine_tune_stats: list[dict[str, Any]]
    seconds: float
    relevance_recall: dict[str, float]  # held-out: needed table ranked first / in the top 3


def check_data(questions: Sequence[TrainQuestion], config: TrainConfig) -> None:
    """Refuse data too small to train on, with what to do about it."""
    n_unanswerable = sum(not q.answerable for q in questions)
    n_answerable = len(questions) - n_unanswerable
    if len(questions) < config.min_questions:
        raise TrainingError(
            f"only {len(questions)} labelled questions; the answerability model needs at least "
            f"{config.min_questions} (approve more runs or import examples)"
        )
    if n_unanswerable < config.min_unanswerable:
        raise TrainingError(
            f"only {n_unanswerable} unanswerable questions; flag at least {config.min_unanswerable} "
            "questions as unanswerable so the threshold can be chosen"
        )
    if n_answerable < config.min_unanswerable:
        raise TrainingError(f"only {n_answerable} answerable questions; approve more runs first")


def _relevance_recall(
    relevance: np.ndarray, questions: Sequence[TrainQuestion], tables: Sequence[str]
) -> dict:
    top1 = top3 = n = 0
    for q, rel in zip(questions, relevance, strict=True):
        wanted = set(q.tables) & set(tables)
        if not q.answerable or not wanted:
            continue
        ranked = [tables[i] for i in np.argsort(-rel)]
        n += 1
        top1 += ranked[0] in wanted
        top3 += bool(wanted & set(ranked[:3]))
    return {
        "questions": n,
        "top1": round(top1 / n, 4) if n else 0.0,
        "top3": round(top3 / n, 4) if n else 0.0,
    }


def train(
    questions: Sequence[TrainQuestion],
    tables: Sequence[TableText],
    *,
    encoder_factory: Callable[[], Encoder],
    catalog_questions: Sequence[TrainQuestion] = (),
    config: TrainConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainResult:
    """Fine-tune, fit the combiner on out-of-sample features, choose the threshold on held-out.

    1. Split the labelled questions (stratified, seeded) into fit and held-out.
    2. Cross-fitting: for each of `folds` folds of the fit set, fine-tune a fresh encoder on the
       other folds and compute the fold's features with it, so the combiner learns from scores
       on questions the encoder never saw (in-sample scores are far too confident).
    3. Fine-tune the final encoder on the whole fit set; score the held-out split; choose the
       threshold maximising unanswerable-F1 there and report its metrics.
    Catalog example questions only ever teach the encoder: they are part of the doc text, so
    their scores say nothing about new questions.
    """
    config = config or TrainConfig()
    say = progress or (lambda s: None)
    started = time.monotonic()
    questions = list(questions)
    check_data(questions, config)
    table_names = [t.qualified for t in tables]
    labels = [q.answerable for q in questions]
    fit_idx, held_idx = stratified_split(labels, held_out=config.held_out, seed=config.seed)
    fit = [questions[i] for i in fit_idx]
    held = [questions[i] for i in held_idx]
    say(f"{len(fit)} questions to fit, {len(held)} held out, {len(tables)} tables")
    all_items = [(q.id, q.text, q.answerable) for q in questions]
    stats: list[dict[str, Any]] = []

    oof_X = np.zeros((len(fit), len(FEATURE_NAMES)))
    if config.folds >= 2:
        for k, fold in enumerate(
            folds(len(fit), config.folds, seed=config.seed, labels=[q.answerable for q in fit])
        ):
            inside = set(fold)
            train_on = [q for i, q in enumerate(fit) if i not in inside]
            say(f"cross-fit {k + 1}/{config.folds}: fine-tuning on {len(train_on)} questions")
            encoder = encoder_factory()
            stats.append(encoder.fine_tune([*train_on, *catalog_questions], tables, config.fine_tune, say))
            docs = encoder.encode_docs([t.text for t in tables])
            library = LibraryIndex.build(encoder, all_items)
            X, _ = question_features(encoder, [fit[i] for i in fold], docs, library)
            oof_X[fold] = X

    say(f"final encoder: fine-tuning on {len(fit)} questions")
    encoder = encoder_factory()
    stats.append(encoder.fine_tune([*fit, *catalog_questions], tables, config.fine_tune, say))
    docs = encoder.encode_docs([t.text for t in tables])
    library = LibraryIndex.build(encoder, all_items)
    if config.folds < 2:
        oof_X, _ = question_features(encoder, fit, docs, library)
    fit_y = np.array([q.answerable for q in fit], dtype=float)
    combiner = Combiner.fit(oof_X, fit_y, l2=config.l2)
    held_X, held_rel = question_features(encoder, held, docs, library)
    held_p = combiner.predict(held_X)
    held_y = [q.answerable for q in held]
    threshold, _ = choose_threshold(held_p, held_y)
    metrics = classification_metrics(held_p, held_y, threshold)
    cross = None
    if config.folds >= 2:
        cross = classification_metrics(combiner.predict(oof_X), [q.answerable for q in fit], threshold)
    return TrainResult(
        encoder=encoder,
        combiner=combiner,
        threshold=threshold,
        metrics=metrics,
        cross_fit_metrics=cross,
        fit_size=len(fit),
        held_out_size=len(held),
        fine_tune_stats=stats,
        seconds=round(time.monotonic() - started, 1),
        relevance_recall=_relevance_recall(held_rel, held, table_names),
    )


class AnswerabilityModel:
    """A trained model bound to the current tables and library: scores one question fast."""

    def __init__(
        self,
        encoder: Encoder,
        combiner: Combiner,
        threshold: float,
        tables: Sequence[TableText],
        library: Sequence[tuple[Any, str, bool]],
        *,
        version: str,
    ) -> None:
        self.encoder = encoder
        self.combiner = combiner
        self.threshold = float(threshold)
        self.version = version
        self._question_cache: dict[str, np.ndarray] = {}
        self.set_tables(tables)
        self.set_library(library)

    def set_tables(self, tables: Sequence[TableText]) -> None:
        """Precompute the doc vectors under this model's encoder (once per load or catalog edit)."""
        self.table_names = [t.qualified for t in tables]
        self.doc_vectors = self.encoder.encode_docs([t.text for t in tables])

    def set_library(self, library: Sequence[tuple[Any, str, bool]]) -> None:
        """Index the library's questions; questions seen before are not encoded again."""
        self.library = LibraryIndex.build(self.encoder, library, cache=self._question_cache)

    def score(self, question: str, *, n_values: int = 0, best_value: float = 0.0) -> AnswerabilityScore:
        vec = self.encoder.encode_questions([question])[0]
        relevance = self.encoder.relevance(vec[None, :], self.doc_vectors)[0]
        near_a, near_u = self.library.nearest_pair(vec)
        x = feature_vector(
            relevance,
            nearest_answerable=near_a[1] if near_a else 0.0,
            nearest_unanswerable=near_u[1] if near_u else 0.0,
            n_values=n_values,
            best_value=best_value,
        )
        probability = float(self.combiner.predict(x)[0])
        order = np.argsort(-relevance)
        return AnswerabilityScore(
            probability=probability,
            threshold=self.threshold,
            answerable=probability >= self.threshold,
            per_table=[(self.table_names[i], float(relevance[i])) for i in order],
            nearest_answerable=near_a,
            nearest_unanswerable=near_u,
            version=self.version,
            features=dict(zip(FEATURE_NAMES, (float(v) for v in x), strict=True)),
        )


def linked_value_stats(scores: Sequence[float]) -> tuple[int, float]:
    """(how many linked values clear the noise floor, the best score) from their scores."""
    kept = [s for s in scores if s >= VALUE_FLOOR]
    return len(kept), max(scores, default=0.0)
