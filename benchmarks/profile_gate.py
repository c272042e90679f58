"""Time the answerability gate per question, the way a run meets it, on EHRSQL train questions
scored against the whole train library (the model `benchmarks/gate_causes.py` fitted and cached).

    .venv/bin/python benchmarks/profile_gate.py [--n 300] [--profile]

Two conditions, one process, one thread: `embedded` — the embed stage has embedded the question
(the local numpy MiniLM the product uses), then the gate scores it (given the vector when
`score` takes one, else through the embedder's cache, as before); `cold` — the gate encodes the
question itself (a question nobody embedded before). `--profile` prints cProfile's top entries
of the embedded condition.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import pickle
import pstats
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def _p(xs: list[float], q: float) -> float:
    return round(1000 * sorted(xs)[int(q * (len(xs) - 1))], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    from gate_causes import AS_OF_YEAR, CACHE, _catalog

    from askdb.answerability.model import AnswerabilityModel, LocalEncoder
    from infra.providers.embeddings import LocalEmbedder

    cv = pickle.loads(CACHE.read_bytes())
    tables, columns = _catalog()
    questions = cv["questions"]
    embedder = LocalEmbedder()
    embedder.warm_up()
    model = AnswerabilityModel(
        LocalEncoder(embedder), cv["combiner"], cv["threshold"], tables, columns,
        [(q.id, q.text, q.answerable) for q in questions], version="profile", as_of_year=AS_OF_YEAR,
        vector_cache=dict(zip([q.text for q in questions], cv["vectors"], strict=True)), values=cv["values"],
    )  # fmt: skip
    takes_vector = "vector" in inspect.signature(model.score).parameters
    sample = random.Random(7).sample([q.text for q in questions], args.n)
    # Reworded so that no vector of the library (cached at load) is reused: a new question.
    asked = [f"{t} please" for t in sample]
    embedded, cold = [], []
    profiler = cProfile.Profile()
    for n, text in enumerate(asked):
        if n % 2:  # cold: the gate encodes a question never embedded
            t0 = time.perf_counter()
            model.score(text + " now")
            cold.append(time.perf_counter() - t0)
        vector = embedder.embed([text])[0]  # the embed stage
        t0 = time.perf_counter()
        if args.profile:
            profiler.enable()
        model.score(text, vector=vector) if takes_vector else model.score(text)
        if args.profile:
            profiler.disable()
        embedded.append(time.perf_counter() - t0)
    print(
        f"{len(questions)}-question library, {args.n} questions, score(vector=) {'yes' if takes_vector else 'no'}"
    )
    print(f"gate, question already embedded: p50 {_p(embedded, 0.5)} ms, p95 {_p(embedded, 0.95)} ms")
    print(f"gate encoding the question itself: p50 {_p(cold, 0.5)} ms, p95 {_p(cold, 0.95)} ms")
    if args.profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
