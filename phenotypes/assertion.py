"""ConText assertions with medspaCy: is a mention affirmed, negated, historical, about a family
member, hypothetical or uncertain? The judge that needs no LLM.

Framework-free (no Django): a classifier is built from a phenotype's terms and judges chunks,
each a sentence with the section it came from. medspaCy's defaults do the work -- its target
matcher finds the terms, its ConText rules (NegEx's descendants: "no evidence of", "denies",
"ruled out", "mother", "return if", "possible" …) set the modifiers, and its sectionizer reads the
section header we put back in front of the sentence ("Family History:" makes a mention a family
member's). medspaCy runs on a blank spaCy tokenizer, so nothing is downloaded at run time.

One word list is ours (in `_rules`): phrasings MIMIC notes use that the default rules miss.
Each one is in the annotated sentences the tests and the benchmark read.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

ASSERTIONS = ("affirmed", "negated", "historical", "family", "hypothetical", "uncertain")

# When several modifiers hold, the first in this order names the mention: a family member's
# negated condition is still about the family, a hypothetical one never happened.
_PRECEDENCE = ("family", "hypothetical", "negated", "uncertain", "historical")

# Sections whose mentions are not the patient's current condition, by medspaCy's categories.
_SECTION_ASSERTION = {
    "family_history": "family",
    "past_medical_history": "historical",
    "patient_instructions": "hypothetical",
}


@dataclass(frozen=True)
class Judged:
    text: str
    section: str
    assertion: str  # one of ASSERTIONS; "" when no term was found in the text
    term_start: int = 0
    term_end: int = 0


# medspaCy's defaults that MIMIC's usage contradicts: "evaluate for pneumonia" (a radiology
# indication) asks a question, it does not deny the finding; ours replace them.
_REPLACED_DEFAULTS = frozenset({"evaluate for"})


def _rules():
    """medspaCy's English ConText rules, minus _REPLACED_DEFAULTS, plus ours."""
    from pathlib import Path

    import medspacy
    from medspacy.context import ConTextRule

    path = Path(medspacy.__file__).resolve().parents[1] / "resources" / "en" / "context_rules.json"
    defaults = [r for r in ConTextRule.from_json(str(path)) if r.literal.lower() not in _REPLACED_DEFAULTS]
    F, B, BI, T = "FORWARD", "BACKWARD", "BIDIRECTIONAL", "TERMINATE"
    rules = [
        ("evaluate for", "HYPOTHETICAL", F),
        ("was negative for", "NEGATED_EXISTENCE", F),
        ("were negative for", "NEGATED_EXISTENCE", F),
        ("ruling out", "NEGATED_EXISTENCE", F),
        ("no source of", "NEGATED_EXISTENCE", F),
        ("without", "NEGATED_EXISTENCE", F),
        ("without evidence of", "NEGATED_EXISTENCE", F),
        ("negative for", "NEGATED_EXISTENCE", F),
        ("no signs of", "NEGATED_EXISTENCE", F),
        ("no sign of", "NEGATED_EXISTENCE", F),
        ("not consistent with", "NEGATED_EXISTENCE", F),
        ("not felt to be consistent with", "NEGATED_EXISTENCE", F),
        ("was ruled out", "NEGATED_EXISTENCE", B),
        ("were ruled out", "NEGATED_EXISTENCE", B),
        ("has been ruled out", "NEGATED_EXISTENCE", B),
        ("resolved", "HISTORICAL", B),
        ("status post", "HISTORICAL", BI),
        ("prior admission", "HISTORICAL", F),
        ("in the past", "HISTORICAL", BI),
        ("history of", "HISTORICAL", F),
        ("years ago", "HISTORICAL", B),
        ("diagnosed in", "HISTORICAL", B),
        ("brother", "FAMILY", F),
        ("sister", "FAMILY", F),
        ("aunt", "FAMILY", F),
        ("uncle", "FAMILY", F),
        ("grandmother", "FAMILY", F),
        ("grandfather", "FAMILY", F),
        ("family history", "FAMILY", F),
        ("return if", "HYPOTHETICAL", F),
        ("return to the emergency department if", "HYPOTHETICAL", F),
        ("call your doctor if", "HYPOTHETICAL", F),
        ("if you develop", "HYPOTHETICAL", F),
        ("signs of", "HYPOTHETICAL", F),
        ("to rule out", "HYPOTHETICAL", F),
        ("rule out", "HYPOTHETICAL", F),
        ("r/o", "HYPOTHETICAL", F),
        ("evaluate for", "HYPOTHETICAL", F),
        ("could be", "POSSIBLE_EXISTENCE", F),
        ("possible", "POSSIBLE_EXISTENCE", F),
        ("possibly", "POSSIBLE_EXISTENCE", F),
        ("questionable", "POSSIBLE_EXISTENCE", F),
        ("concern for", "POSSIBLE_EXISTENCE", F),
        ("suspicious for", "POSSIBLE_EXISTENCE", F),
        ("cannot exclude", "POSSIBLE_EXISTENCE", BI),
        ("may represent", "POSSIBLE_EXISTENCE", F),
        ("likely", "POSSIBLE_EXISTENCE", F),
        ("versus", "POSSIBLE_EXISTENCE", BI),
        ("but", "CONJ", T),
        ("however", "CONJ", T),
        ("although", "CONJ", T),
        ("which", "CONJ", T),
    ]
    return defaults + [ConTextRule(literal, category, direction=d) for literal, category, d in rules]


@lru_cache(maxsize=1)
def _base_nlp():
    """medspaCy's pipeline with sectionizer and ConText; the expensive part, built once."""
    import medspacy

    nlp = medspacy.load(medspacy_enable=["medspacy_target_matcher", "medspacy_sectionizer"])
    # Chunks are single sentences already: spaCy's rule sentencizer (no model) marks the
    # boundary ConText scopes by, instead of PyRuSH, which logs every token at DEBUG.
    nlp.add_pipe("sentencizer", first=True)
    context = nlp.add_pipe("medspacy_context", before="medspacy_sectionizer", config={"rules": None})
    context.add(_rules())
    return nlp


def _modifiers(ent) -> set[str]:
    found = set()
    if ent._.is_family:
        found.add("family")
    if ent._.is_hypothetical:
        found.add("hypothetical")
    if ent._.is_negated:
        found.add("negated")
    if ent._.is_uncertain:
        found.add("uncertain")
    if ent._.is_historical:
        found.add("historical")
    section = _SECTION_ASSERTION.get(getattr(ent._, "section_category", None) or "")
    if section:
        found.add(section)
    return found


class AssertionClassifier:
    """Judges sentences for one set of terms. Not thread-safe: one per worker process or task."""

    def __init__(self, terms: Iterable[str]):
        from medspacy.target_matcher import TargetRule

        self.terms = tuple(dict.fromkeys(t.strip() for t in terms if t.strip()))
        if not self.terms:
            raise ValueError("a phenotype needs at least one term")
        self._nlp = _base_nlp()
        matcher = self._nlp.get_pipe("medspacy_target_matcher")
        # The shared pipeline's matcher holds the terms of the last classifier: reset it.
        matcher.__init__(self._nlp, name="medspacy_target_matcher")
        matcher.add([TargetRule(t, "PHENOTYPE") for t in self.terms])

    def judge(self, chunks: Sequence[tuple[str, str]]) -> list[Judged]:
        """(sentence, section) pairs -> one Judged each, the first mention of a term deciding."""
        texts = [f"{section}:\n{text}" if section else text for text, section in chunks]
        out = []
        with warnings.catch_warnings():
            # W036: the target matcher's unused sub-matcher (phrases or regexes) has no patterns.
            warnings.filterwarnings("ignore", message=r"\[W036\]")
            docs = list(self._nlp.pipe(texts, batch_size=256))
        for (text, section), doc in zip(chunks, docs, strict=True):
            offset = len(section) + 2 if section else 0
            ents = [e for e in doc.ents if e.start_char >= offset]
            if not ents:
                out.append(Judged(text, section, ""))
                continue
            # A sentence naming the condition twice ("no afib; history of afib") counts its most
            # affirming mention: the reduce step looks for any affirmed mention anyway.
            best = min(ents, key=lambda e: _rank(_modifiers(e)))
            mods = _modifiers(best)
            assertion = next((a for a in _PRECEDENCE if a in mods), "affirmed")
            out.append(Judged(text, section, assertion, best.start_char - offset, best.end_char - offset))
        return out


def _rank(mods: set[str]) -> int:
    return 0 if not mods else 1 + min(_PRECEDENCE[::-1].index(m) for m in mods if m in _PRECEDENCE)
