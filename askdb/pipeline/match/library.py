"""The library search: nearest masked paraphrases vote for templates, the best few are tried."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from askdb.pipeline.match.candidate import MatchResult, TemplateCandidate
from askdb.pipeline.match.index import UNANSWERABLE, LibraryIndex
from askdb.pipeline.match.matcher import match_one
from askdb.pipeline.match.reading import cached_lookup, read_question
from askdb.pipeline.match.risk import DEFAULT_RISK, Calibration
from askdb.pipeline.match.rules.operators import operator_reasons
from askdb.pipeline.match.rules.value_ambiguous import refuse_ambiguous_values, refuse_unlike_library
from askdb.pipeline.match.spans import blank, periods
from askdb.pipeline.match.values import ValueIndex, ValueLookup
from askdb.pipeline.types import CatalogSchema

NEIGHBOURS = 50  # masked paraphrases that vote
TEMPLATES_TRIED = 5  # templates (best voted first) whose binding is tried
MEMBERS_TRIED = 3  # paraphrases per template whose wording is tried for binding
VOTE_TEMPERATURE = 0.03  # softmax temperature of the vote over cosine similarities


@dataclass(frozen=True)
class LibraryMatch:
    """The templates tried for a question, best first, and what the vote looked like."""

    results: list[MatchResult]
    masked_question: str
    votes: list[tuple[str, float]]  # (template key, share), best first

    @property
    def best(self) -> MatchResult | None:
        return self.results[0] if self.results else None


def match_library(
    question: str,
    vector: Sequence[float] | np.ndarray,
    index: LibraryIndex,
    *,
    lookup: ValueLookup,
    values: ValueIndex | None = None,
    catalog: CatalogSchema | None = None,
    risk: Calibration | None = None,
    masked_question: str = "",
    probe: Callable[[str], bool] | None = None,
) -> LibraryMatch:
    """Rank templates for `question` by a vote of its nearest masked paraphrases, bind the best few.

    `vector` embeds `reading.mask_question(question, values)`. Each result's confidence is P(correct)
    from `risk`; results that fail a rule (operators, the meaning guard, binding) have confidence 0.
    The first result is the one to answer with if its confidence clears the threshold.
    """
    risk = risk or DEFAULT_RISK
    if not index.entries:
        return LibraryMatch([], masked_question, [])
    values = values.with_names(index.names) if values is not None else None
    v = np.asarray(vector, dtype=np.float32)
    v = v / (np.linalg.norm(v) or 1.0)
    sims = index.matrix @ v
    k = min(NEIGHBOURS, len(sims))
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.argsort(-sims[top])]
    weights = np.exp((sims[top] - sims[top[0]]) / VOTE_TEMPERATURE)
    votes: dict[str, float] = defaultdict(float)
    for i, w in zip(top, weights, strict=True):
        votes[index.entries[i].key] += float(w)
    total = sum(votes.values())
    ranked = sorted(((key, w / total) for key, w in votes.items()), key=lambda p: -p[1])
    unanswerable_share = dict(ranked).get(UNANSWERABLE, 0.0)

    reading = read_question(
        question,
        values,
        operator_text=blank(question, (values.spans(question) if values else []) + periods(question)),
    )
    lookup = cached_lookup(lookup)

    results: list[MatchResult] = []
    voted = [
        (rank, key, share) for rank, (key, share) in enumerate((k, s) for k, s in ranked if k != UNANSWERABLE)
    ]
    # Re-ranked by whether the question's operator words fit: "since 2100" and "in 2100" embed alike,
    # so the template that fits may be voted below several that cannot apply.
    fits = [
        v
        for v in voted
        if not operator_reasons(
            reading.ops, index.entries[index.members[v[1]][0]].template, index.families[v[1]]
        )
    ]
    answerable = (fits + [v for v in voted if v not in fits])[:TEMPLATES_TRIED]
    for rank, key, share in answerable:
        family = index.families[key]
        members = sorted(index.members[key], key=lambda i: -sims[i])[:MEMBERS_TRIED]
        tried: list[MatchResult] = []
        for i in members:
            entry = index.entries[i]
            assert entry.template is not None
            candidate = TemplateCandidate(
                entry.example_id, entry.template, float(sims[i]), entry.question, family
            )
            result = match_one(reading, candidate, lookup=lookup, catalog=catalog, values=values, probe=probe)
            tried.append(result)
            if result.hard_ok:
                break
        result = next((r for r in tried if r.hard_ok), tried[0])
        others = [s for k2, s in ranked if k2 != key]
        features = {
            **result.features,
            "vote_share": round(share, 4),
            "vote_margin": round(share - (others[0] if others else 0.0), 4),
            "vote_rank": float(rank),
            "top_similarity": round(float(sims[top[0]]), 4),
            "member_similarity": round(float(sims[members[0]]), 4),
            "unanswerable_share": round(unanswerable_share, 4),
            "family_size": round(math.log1p(family.size), 4),
        }
        confidence = round(risk.predict(features), 4) if result.hard_ok else 0.0
        results.append(dataclasses.replace(result, features=features, confidence=confidence))
    results = refuse_ambiguous_values(results)
    if isinstance(values, ValueIndex):
        results = refuse_unlike_library(results, index, values)
    results.sort(key=lambda r: (-int(r.hard_ok), -r.confidence, r.features.get("vote_rank", 0)))
    return LibraryMatch(results, masked_question, ranked[:5])
