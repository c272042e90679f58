"""The verified library as templates with many paraphrases: question -> template -> bound SQL -> risk.

Why: one example's wording is a poor yardstick. "count the number of patients older than 65" does not
say "died in the hospital", so a question that adds it must not reuse that SQL, however close its
embedding; and "total" in one paraphrase and "maximum" in another may be the very same SQL. So:

- Identity: examples whose SQL differs only in the values their questions name share a template key
  (template.template_key); together they are one template, a `Family` of paraphrases.
- Retrieval: questions are compared with their values masked by type (ids, numbers, calendar
  pieces, database values), and the nearest masked paraphrases vote for templates, not examples.
- Meaning guard: a template may answer only if every content word of the question is explained by
  some paraphrase of it, a bound value, or a word paraphrases leave out across the library, and every
  operator word (first/last, min/max/…) is one its paraphrases use (matcher.match_one with a family; the rules in rules.RULES).
- Risk: P(correct) from a logistic model over match features, fitted by cross-validation over the
  library that holds out whole paraphrase groups (`grouped_folds`); askdb answers only when
  P(correct) ≥ c / (c + 1), c being the cost of a wrong answer relative to a right one.

Pure: no Django, no database. The caller supplies embeddings, the value finder and the value lookup.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.match import reasons as R
from core.match.build import build_template
from core.match.candidate import MatchResult, TemplateCandidate
from core.match.chained import chain_results
from core.match.compose import BASES_TRIED, compose_follow_up, compose_results, match_composed
from core.match.index import UNANSWERABLE, LibraryIndex, entry_for
from core.match.matcher import match_one
from core.match.reading import Reading, cached_lookup, read_question
from core.match.risk import DEFAULT_RISK, Calibration
from core.match.rules.operators import operator_reasons
from core.match.rules.value_ambiguous import refuse_ambiguous_values, refuse_unlike_library
from core.match.spans import blank, periods
from core.match.swapped import compose_swaps
from core.match.values import ValueIndex, ValueLookup
from core.types import CatalogSchema

NEIGHBOURS = 50  # masked paraphrases that vote
TEMPLATES_TRIED = 5  # templates (best voted first) whose binding is tried
COMPOSE_VOTED = 2  # best voted templates a swap is tried on, whether or not their operator words fit
MEMBERS_TRIED = 3  # paraphrases per template whose wording is tried for binding
ONE_APART_TRIED = 3  # voted templates past those a swap is asked of, one operator word apart (_one_apart)
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
    vote: Vote | None = None,
) -> LibraryMatch:
    """Rank templates for `question` by a vote of its nearest masked paraphrases, bind the best few.

    `vector` embeds `reading.mask_question(question, values)`; `vote`: its vote on `index` when the
    caller made it (Vote.each: a calibration part votes for all its questions at once). Each result's confidence is P(correct)
    from `risk`; results that fail a rule (operators, the meaning guard, binding) have confidence 0.
    The first result is the one to answer with if its confidence clears the threshold.
    """
    risk = risk or DEFAULT_RISK
    if not index.entries:
        return LibraryMatch([], masked_question, [])
    values = values.with_names(index.names) if values is not None else None
    vote = vote or Vote.of(vector, index)
    reading = read_question(
        question,
        values,
        operator_text=blank(question, (values.spans(question) if values else []) + periods(question)),
    )
    lookup = cached_lookup(lookup)
    results: list[MatchResult] = []
    tried = _templates_to_try(reading, vote, index)
    for rank, key, share in tried:
        members = sorted(index.members[key], key=lambda i: -vote.sims[i])[:MEMBERS_TRIED]
        result = _try_members(
            reading, index, key, members, vote, lookup=lookup, catalog=catalog, values=values, probe=probe
        )
        features = {
            **result.features,
            **vote.features(key, rank, share, members[0], index.families[key].size),
        }
        confidence = round(risk.predict(features), 4) if result.hard_ok else 0.0
        results.append(dataclasses.replace(result, features=features, confidence=confidence))
    if not any(r.hard_ok for r in results):  # composed from verified parts only where no template fits
        match = match_composed(reading, lookup=lookup, catalog=catalog, values=values, probe=probe)
        results += compose_results(reading, index, tried, vote, risk=risk, match=match)
        bases = _voted(tried, vote) + _one_apart(reading, index, tried, vote)
        results += compose_swaps(reading, index, bases, vote, risk=risk, match=match)
        if not any(r.hard_ok for r in results):  # two changes at once only where no one change fits
            results += chain_results(reading, index, tried, vote, risk=risk, match=match, swapped=bases)
    results = refuse_ambiguous_values(results)
    if isinstance(values, ValueIndex):
        results = refuse_unlike_library(results, index, values)
    results.sort(key=lambda r: (-int(r.hard_ok), -r.confidence, r.features.get("vote_rank", 0)))
    return LibraryMatch(results, masked_question, vote.ranked[:5])


def match_follow_up(
    question: str,
    earlier_question: str,
    earlier_sql: str,
    vector: Sequence[float] | np.ndarray,
    index: LibraryIndex,
    *,
    lookup: ValueLookup,
    values: ValueIndex | None = None,
    catalog: CatalogSchema | None = None,
    risk: Calibration | None = None,
    probe: Callable[[str], bool] | None = None,
    dialect: str = "postgres",
) -> list[MatchResult]:
    """A follow-up question on an earlier answer ("and how many of them were over 80?"): the earlier
    SQL with the condition the follow-up adds, composed from the library's conditions
    (compose.compose_follow_up), best first; [] when it adds none the library knows.

    `vector` embeds the masked follow-up: it orders the library's conditions by how near their
    questions are to it."""
    earlier = entry_for(
        None, earlier_question, earlier_sql, build_template(earlier_question, earlier_sql, dialect=dialect)
    )
    if earlier is None or not index.entries:
        return []
    values = values.with_names(index.names) if values is not None else None
    together = f"{earlier_question.strip().rstrip('?.!').strip()}; {question.strip()}"
    reading = read_question(
        together, values,
        operator_text=blank(together, (values.spans(together) if values else []) + periods(together)),
    )  # fmt: skip
    lookup = cached_lookup(lookup)
    match = match_composed(reading, lookup=lookup, catalog=catalog, values=values, probe=probe)
    return compose_follow_up(
        reading, index, earlier, Vote.of(vector, index), risk=risk or DEFAULT_RISK, match=match
    )


@dataclass(frozen=True)
class Vote:
    """The nearest masked paraphrases' vote for templates: each one's softmax weight over cosine
    similarities goes to its template; `ranked` is (template key, share), best first."""

    sims: np.ndarray  # cosine similarity of every entry to the question
    top: np.ndarray  # the nearest entries, nearest first
    ranked: list[tuple[str, float]]

    @classmethod
    def of(cls, vector: Sequence[float] | np.ndarray, index: LibraryIndex) -> Vote:
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
        return cls(sims, top, sorted(((key, w / total) for key, w in votes.items()), key=lambda p: -p[1]))

    @classmethod
    def each(cls, vectors: Sequence[Sequence[float] | np.ndarray], index: LibraryIndex) -> list[Vote | None]:
        """Vote.of for each vector, one after another. Why: the product with the library's matrix
        (a few MB) is bound by reading the matrix from memory; made once per question between two
        whole matches, which push it out of the CPU's caches, it was the calibration's fifth most
        costly function of its own. Made for a calibration part's questions together, the matrix is
        read from memory once. The very same products (the same arrays, one by one), so the same
        votes to the last bit: a batched product (one matrix by matrix) sums in another order.
        None for each when the library is empty: it has no vote (match_library finds nothing)."""
        if not index.entries:
            return [None] * len(vectors)
        return [cls.of(vector, index) for vector in vectors]

    def features(self, key: str, rank: int, share: float, nearest: int, family_size: int) -> dict[str, float]:
        """What the risk model reads of the vote for one template."""
        others = [s for k2, s in self.ranked if k2 != key]
        return {
            "vote_share": round(share, 4),
            "vote_margin": round(share - (others[0] if others else 0.0), 4),
            "vote_rank": float(rank),
            "top_similarity": round(float(self.sims[self.top[0]]), 4),
            "member_similarity": round(float(self.sims[nearest]), 4),
            "unanswerable_share": round(dict(self.ranked).get(UNANSWERABLE, 0.0), 4),
            "family_size": round(math.log1p(family_size), 4),
        }


def _templates_to_try(reading: Reading, vote: Vote, index: LibraryIndex) -> list[tuple[int, str, float]]:
    """(vote rank, key, share) of the templates to try, those whose operator words fit first: "since
    2100" and "in 2100" embed alike, so the template that fits may be voted below several that cannot
    apply."""
    voted = [
        (rank, key, share)
        for rank, (key, share) in enumerate((k, s) for k, s in vote.ranked if k != UNANSWERABLE)
    ]
    said = _said_key(reading.ops)  # once per question, not once per voted template
    fits = [v for v in voted if _operators_fit(reading.ops, index, v[1], said)]
    return (fits + [v for v in voted if v not in fits])[:TEMPLATES_TRIED]


def _voted(tried: list[tuple[int, str, float]], vote: Vote) -> list[tuple[int, str, float]]:
    """The best voted templates (COMPOSE_VOTED) that compose_results does not try: a swap (first for
    last, minimum for average) is asked of a template whose operator words differ from the
    question's, which _templates_to_try puts after those that fit."""
    voted = [(r, k, s) for r, (k, s) in enumerate(p for p in vote.ranked if p[0] != UNANSWERABLE)]
    return [v for v in voted[:COMPOSE_VOTED] if v not in tried[:BASES_TRIED]]


def _one_apart(
    reading: Reading, index: LibraryIndex, tried: list[tuple[int, str, float]], vote: Vote
) -> list[tuple[int, str, float]]:
    """Voted templates past the COMPOSE_VOTED best whose operator words differ from the question's in
    one word alone (one operator reason, no combination), ONE_APART_TRIED at most, best voted first:
    the bases a swap (first for last, minimum for average, "greater" for "less") is asked of. Why: a
    small library's vote often puts templates that differ in two or three operator words above the
    one a single swap fits ("the last time the heart rate was greater than …" votes for two
    blood-pressure templates before "the last time … measured …"); the vote order is kept, as the
    composition's risk features read it."""
    done = {k for _, k, _ in tried[:BASES_TRIED]} | {k for _, k, _ in _voted(tried, vote)}
    out = []
    for rank, (key, share) in enumerate(p for p in vote.ranked if p[0] != UNANSWERABLE):
        if key in done:
            continue
        reasons = operator_reasons(
            reading.ops, index.entries[index.members[key][0]].template, index.families[key]
        )
        if len(reasons) == 1 and reasons[0].code == R.OPERATOR:
            out.append((rank, key, share))
            if len(out) >= ONE_APART_TRIED:
                break
    return out


def _said_key(ops: dict[str, Any]) -> tuple | None:
    """The question's operator words as a memo key, or None when one is unhashable."""
    try:
        said = tuple(sorted(ops.items()))
        hash(said)
    except TypeError:
        return None
    return said


def _operators_fit(ops: dict[str, Any], index: LibraryIndex, key: str, said: tuple | None) -> bool:
    """Whether the operator words fit the template (no operator reason), remembered on the index per
    operator words and template: questions share a few operator readings, and every question asks
    it of the ~50 templates its neighbours vote for (a calibration asked it 250,000 times).
    `said`: _said_key(ops); None judges afresh (an unhashable operator value)."""
    if said is None:
        return not operator_reasons(ops, index.entries[index.members[key][0]].template, index.families[key])
    memo_key = (said, key)
    memo = index.__dict__.setdefault("_operators_fit", {})
    fits = memo.get(memo_key)  # one read, as operator_reasons' memo is read
    if fits is None:
        template = index.entries[index.members[key][0]].template
        fits = memo[memo_key] = not operator_reasons(ops, template, index.families[key])
    return fits


def _try_members(
    reading: Reading, index: LibraryIndex, key: str, members: list[int], vote: Vote, **kwargs: Any
) -> MatchResult:
    """The template tried with its nearest paraphrases' wording in turn: the first that no rule
    refuses, else the nearest one's refusal."""
    tried: list[MatchResult] = []
    for i in members:
        entry = index.entries[i]
        assert entry.template is not None
        candidate = TemplateCandidate(
            entry.example_id, entry.template, float(vote.sims[i]), entry.question, index.families[key]
        )
        tried.append(match_one(reading, candidate, **kwargs))
        if tried[-1].hard_ok:
            break
    return next((r for r in tried if r.hard_ok), tried[0])
