"""Match features: how close the question is to the template's wording, what the risk model reads."""

from __future__ import annotations

from typing import Any

from rapidfuzz import fuzz

from core.match.binding import Bound
from core.match.candidate import TemplateCandidate
from core.match.index import Family
from core.match.operators import VISIT_NOUNS, ops_key, same_visit
from core.match.spans import TEXT, VALUE, Span
from core.match.template import Template
from core.match.words import content_words, guard_words, plain, same_stem, same_word, stem

# A visit's nouns as the guard reads them ("encounter" is "visit") and as stems (operators.VISIT_NOUNS).
_VISIT_WORDS = frozenset(guard_words(" ".join(VISIT_NOUNS))) | frozenset(stem(w) for w in VISIT_NOUNS)


def visit_words_compared(ops: dict[str, Any], family: Family | None) -> frozenset[str]:
    """The visit's nouns a question need not say for this template ("the first discharge" beside "the
    first hospital visit"): where it reads the visit every paraphrase reads, the visit operator has
    compared them (operators.same_visit). The words rule and the features read them alike."""
    if family is None or not same_visit(ops, family.operators.get("visit", frozenset())):
        return frozenset()
    return _VISIT_WORDS


def masked_with(question: str, template: Template, work: Bound) -> str:
    slot_of = {s.name: s for s in template.slots}
    by_span = {
        (p.start, p.end): slot_of[name].placeholder for name, p in work.placed.items() if name in slot_of
    }
    out, cursor = [], 0
    for (start, end), placeholder in sorted(by_span.items()):
        if start < cursor:
            continue
        out.append(question[cursor:start])
        out.append(placeholder)
        cursor = end
    out.append(question[cursor:])
    return "".join(out)


def match_features(
    question: str,
    candidate: TemplateCandidate,
    template: Template,
    work: Bound,
    runs: list[Span],
    quoted: list[Span],
    compared: frozenset[str] = frozenset(),
) -> dict[str, float]:
    """What the risk model reads of one bound template; `compared`: words the question need not say
    (visit_words_compared)."""
    masked = masked_with(question, template, work)
    masked_similarity = fuzz.token_sort_ratio(plain(masked), plain(template.masked_question)) / 100
    new_words = set(content_words(masked))
    old_words = set(content_words(template.masked_question))
    union = new_words | old_words
    overlap = len(new_words & old_words) / len(union) if union else 1.0
    placed_words = sum(len(content_words(p.text)) for p in work.placed.values() if p.type == TEXT)
    leftover = sum(len(content_words(r.text)) for r in runs) + sum(len(content_words(q.text)) for q in quoted)
    extra = max(0, leftover - placed_words)
    missing = sum(1 for w in old_words - compared if not any(same_word(w, n) for n in new_words))
    value_scores = [b.score for b in work.bindings.values() if b.type == VALUE]
    similarity = candidate.similarity if candidate.similarity is not None else masked_similarity
    slots_bound = all(s.name in work.bindings for s in template.slots)
    return {
        "similarity": round(float(similarity), 4),
        "masked_similarity": round(masked_similarity, 4),
        "lexical_overlap": round(overlap, 4),
        "operators_agree": 1.0,
        "all_slots_bound": float(slots_bound),
        "unplaced_values": float(len(work.unplaced)),
        "extra_words": float(extra),
        "missing_words": float(missing),
        "fuzzy_penalty": round(sum(1 - s for s in value_scores), 4),
        "min_value_score": round(min(value_scores), 4) if value_scores else 1.0,
        "slots": float(len(template.slots)),
    }


def refused_features(template: Template, work: Bound) -> dict[str, float]:
    """The features of a template the rules refused: what says why (values it could not place, slots
    left unbound), without the risk model's similarities, overlaps and missing words. Why: a refused
    result's confidence is 0 whatever they say, and nothing reads them (the library and composition
    score only hard_ok results; calibration samples only answers); they were most of the feature
    work, as most tried templates are refused."""
    return {
        "all_slots_bound": float(all(s.name in work.bindings for s in template.slots)),
        "unplaced_values": float(len(work.unplaced)),
        "slots": float(len(template.slots)),
    }


def paraphrase_missing(said: set[str], family: Family, ops: dict[str, Any] | None = None) -> int:
    """How many content words the paraphrase nearest to the question says and the question does not,
    plus one when its operator words are not the question's (`ops`).

    Zero when some paraphrase says nothing the question leaves out; a question of a sibling template
    ("the admission type" for "how old … at admission") leaves out a word of every paraphrase, even
    when no single word is in all of them (the template's `core`).
    """
    mine = ops_key(ops) if ops is not None else None
    compared = visit_words_compared(ops, family) if ops is not None else frozenset()
    known: dict[str, bool] = {}  # paraphrases share most words: each is judged once

    def is_said(w: str) -> bool:
        if w not in known:
            known[w] = (
                w in said
                or w in family.neutral
                or w in compared
                or any(same_stem(w, x) or x in family.synonyms.get(w, ()) for x in said)
            )
        return known[w]

    best = None
    for words, theirs in family.paraphrases:
        n = sum(1 for w in words if not is_said(w)) + int(mine is not None and theirs != mine)
        best = n if best is None else min(best, n)
        if best == 0:
            break
    return best or 0
