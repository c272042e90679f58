"""The verified library as templates with many paraphrases: question -> template -> bound SQL -> risk.

Why: one example's wording is a poor yardstick. "count the number of patients older than 65" does not
say "died in the hospital", so a question that adds it must not reuse that SQL, however close its
embedding; and "total" in one paraphrase and "maximum" in another may be the very same SQL. So:

- Identity: examples whose SQL differs only in the values their questions name share a template key
  (templates.template_key); together they are one template, a `Family` of paraphrases.
- Retrieval: questions are compared with their values masked by type (ids, numbers, calendar
  pieces, database values), and the nearest masked paraphrases vote for templates, not examples.
- Meaning guard: a template may answer only if every content word of the question is explained by
  some paraphrase of it, a bound value, or a word paraphrases leave out across the library, and every
  operator word (first/last, min/max/…) is one its paraphrases use (offline._match_one with a family).
- Risk: P(correct) from a logistic model over match features, fitted by cross-validation over the
  library that holds out whole paraphrase groups (`grouped_folds`); askdb answers only when
  P(correct) ≥ c / (c + 1), c being the cost of a wrong answer relative to a right one.

Pure: no Django, no database. The caller supplies embeddings, the value finder and the value lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlglot.expressions as sx

from askdb.pipeline import match_reasons as R
from askdb.pipeline.offline import (
    DEFAULT_CALIBRATION,
    MIN_VALUE_SCORE,
    Calibration,
    Family,
    MatchResult,
    TemplateCandidate,
    ValueLookup,
    _match_one,
    _same_stem,
    bare_column,
    fit_calibration,
    operator_reasons,
    operator_signature,
    opposite,
    ops_key,
    question_context,
    refuse_ambiguous_values,
)
from askdb.pipeline.templates import (
    DEFAULT_VALUE_COLUMNS,
    FUNCTION_WORDS,
    GUARD_FILLER,
    NEUTRAL_WORDS,
    VALUE,
    Template,
    canonical,
    content_words,
    period_spans,
    question_operators,
    stem,
    template_key,
    tokenize,
)
from askdb.pipeline.types import CatalogSchema

UNANSWERABLE = "unanswerable"  # the key of the library's unanswerable examples
NEIGHBOURS = 50  # masked paraphrases that vote
TEMPLATES_TRIED = 5  # templates (best voted first) whose binding is tried
MEMBERS_TRIED = 3  # paraphrases per template whose wording is tried for binding
VOTE_TEMPERATURE = 0.03  # softmax temperature of the vote over cosine similarities
# Number words are values ("top three" vs "top five"), never mere wording.
NEUTRAL_STEMS = frozenset(map(stem, NEUTRAL_WORDS))
NEVER_NEUTRAL = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve twenty hundred".split()
)
CORE_SHARE = 1.0  # a word this share of a template's paraphrases say is its subject: the question must say it
CV_FOLDS = 5  # folds of the grouped cross-validation
TEMPLATE_HOLDOUT = 0.3  # share of templates held out whole in cross-validation (questions of unseen kinds)
OPTIONAL_TEMPLATES = 3  # a word some paraphrases leave out, in this many templates, is only wording
SUBJECT_SHARE = 0.8  # a word this share of a template's paraphrases say is what it is about…
SUBJECT_MEMBERS = 3  # …when it has this many paraphrases
SYNONYM_TEMPLATES = 2  # two words paraphrases swap for one another in this many templates are synonyms
SYNONYM_MEMBERS = 40  # paraphrases per template compared pairwise when mining synonyms


def mine_synonyms(paraphrases: Iterable[Sequence[Sequence[str]]]) -> dict[str, frozenset[str]]:
    """Words the library's paraphrases use for one another: "sex" for "gender", "dose" for "dosage".

    Two paraphrases of one template (the same SQL, the same operator words) that read the same but
    for one word in the same place ("the total {value} dose of" / "the total {value} amount of")
    swap those words without changing the answer. A swap seen in at least SYNONYM_TEMPLATES
    templates is a synonym for the meaning guard; one template alone may be an accident of its
    wording. `paraphrases` is, per template and operator signature, each paraphrase's words in order
    (guard_sequence).
    """
    seen: Counter[tuple[str, str]] = Counter()
    for group in paraphrases:
        pairs: set[tuple[str, str]] = set()
        members = list(group)[:SYNONYM_MEMBERS]
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                swap = _swap(a, b)
                if swap and not set(swap) & NEVER_NEUTRAL:
                    pairs.add(swap)
        seen.update(pairs)
    out: dict[str, set[str]] = defaultdict(set)
    for (x, y), n in seen.items():
        if n >= SYNONYM_TEMPLATES:
            out[x].add(y)
            out[y].add(x)
    return {w: frozenset(v) for w, v in out.items()}


def _swap(a: Sequence[str], b: Sequence[str]) -> tuple[str, str] | None:
    """The one word two word sequences differ by, in the same place, or None."""
    if len(a) != len(b):
        return None
    differ = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    if len(differ) != 1:
        return None
    x, y = differ[0]
    if x in NEUTRAL_STEMS or y in NEUTRAL_STEMS or x.startswith("slot") or y.startswith("slot"):
        return None
    return (min(x, y), max(x, y))


def _core(words: Iterable[str], said: Sequence[set[str]]) -> frozenset[str]:
    """The words (nearly) every paraphrase says, each in some form: "diagnosed", "diagnosis" and
    "diagnoses" are three stems, yet a template whose paraphrases say one of them in each is about
    diagnoses, and a question that says none of them ("… any procedure …") is about something else."""
    out = set()
    for w in words:
        n = sum(1 for s in said if w in s or any(_same_stem(w, x) for x in s))
        if n >= CORE_SHARE * len(said):
            out.add(w)
    return frozenset(out)


def guard_sequence(text: str) -> list[str]:
    """The question's words in order as the guard reads them (synonyms folded), function words out,
    operator words and placeholders kept as the context a swapped word must share, request words
    ("tell", "show") out."""
    text = re.sub(r"\{([^}:]*)(?::[^}]*)?\}", lambda m: f" slot{m.group(1)} ", text.lower())
    words = (canonical(stem(t.text)) for t in tokenize(text) if t.lower not in FUNCTION_WORDS)
    return [w for w in words if w not in GUARD_FILLER]


def guard_words(text: str) -> list[str]:
    """Content words as the meaning guard compares them: stems, synonyms folded."""
    return [w for w in map(canonical, content_words(text)) if w not in GUARD_FILLER]


@functools.lru_cache(maxsize=1 << 15)
def _reading(
    masked: str, question: str, value_spans: tuple[tuple[int, int], ...]
) -> tuple[tuple[str, ...], frozenset[str], dict[str, Any]]:
    """How the guard reads one library question (its word sequence, its words, its operator words
    with values and periods blanked): the same in every library a cross-validation builds from
    subsets, so read once (a calibration builds ten). Callers must not change what it returns."""
    ops = question_operators(blank(question, [*value_spans, *periods(question)]))
    return tuple(guard_sequence(masked)), frozenset(guard_words(masked)), ops


def answer_threshold(wrong_answer_cost: float) -> float:
    """The P(correct) above which answering beats abstaining: c / (c + 1) for a wrong answer costing c."""
    c = max(0.0, float(wrong_answer_cost))
    return c / (c + 1.0)


def blank(question: str, spans: Iterable[tuple[int, int]]) -> str:
    """The question with named values blanked, so that "not elsewhere classified" or "first" inside
    a diagnosis or drug name is not read as an operator word."""
    out, cursor = [], 0
    for start, end in sorted(spans):
        if start < cursor:
            continue
        out += [question[cursor:start], "X"]
        cursor = end
    out.append(question[cursor:])
    return "".join(out)


def periods(question: str) -> list[tuple[int, int]]:
    """Where a question names a period back from now ("last year"): a value to bind, blanked for the
    operator words (on both sides, so a period the template keeps fixed is compared as a fixed value)."""
    return [(s.start, s.end) for s in period_spans(question)]


def key_hash(key: str) -> str:
    """The stored, indexed form of a template key (Example.template_key)."""
    return hashlib.sha1(key.encode()).hexdigest()[:16] if key else ""


def sql_group(sql: str) -> str:
    """A paraphrase group for SQL: the same query, spacing and case aside."""
    return hashlib.sha1(" ".join(sql.lower().split()).rstrip(";").encode()).hexdigest()[:16]


# --- database values a question names ------------------------------------------------------------


MAX_VALUE_CHARS = 300  # ICD titles run to 230 characters ("surgical operation with anastomosis, …")


class ValueIndex:
    """Every value of the linkable columns, to find the longest ones a question contains.

    Exact containment, case-insensitive, on word boundaries: a drug is named as it is written.
    Values with fewer than two letters or that are plain function words are left out. A value may
    end in a bracket ("fibromatosis [dupuytren]") and start with "%" ("% hemoglobin a1c"); one glued
    to a word by a hyphen is not read ("non-invasive" is not the value 'non').
    """

    _START = re.compile(r"(?:^|(?<=[\s(\"'/]))(?=[A-Za-z0-9(%\[])")
    _END = re.compile(r"(?<=[A-Za-z0-9)%.\]])(?=$|[\s?,;:!\"')\]]|\.(?:\s|$)|'s\b)")

    def __init__(self, values: dict[str, Iterable[str]], *, names: dict[str, dict[str, str]] | None = None):
        """`values`: column -> its values. `names`: column -> {another name: the value it names}."""
        self._by_text: dict[str, dict[str, str]] = defaultdict(dict)
        pairs = [(c, v, v) for c, vs in values.items() for v in vs]
        pairs += [(c, n, v) for c, ns in (names or {}).items() for n, v in ns.items()]
        for column, name, value in pairs:
            if not isinstance(name, str) or not isinstance(value, str):
                continue
            text = " ".join(name.lower().split())
            if len(re.sub(r"[^a-z]", "", text)) < 2 or text in NEUTRAL_WORDS or len(text) > MAX_VALUE_CHARS:
                continue
            self._by_text[text].setdefault(bare_column(column), value)
        self.max_len = max((len(t) for t in self._by_text), default=0)
        self.columns = {c for d in self._by_text.values() for c in d}
        self._cache: dict[str, list[tuple[int, int, dict[str, str]]]] = {}

    def __len__(self) -> int:
        return len(self._by_text)

    def _all(self, question: str) -> list[tuple[int, int, dict[str, str]]]:
        if question in self._cache:
            return self._cache[question]
        lowered = question.lower()
        starts = [m.start() for m in self._START.finditer(lowered)]
        ends = [m.start() for m in self._END.finditer(lowered)]
        found = []
        for a in starts:
            for b in ends:
                if b <= a:
                    continue
                if b - a > self.max_len:
                    break
                hit = self._by_text.get(" ".join(lowered[a:b].split()))
                if hit:
                    found.append((a, b, hit))
        if len(self._cache) > 20000:
            self._cache.clear()
        self._cache[question] = found
        return found

    def contained(self, question: str, column: str) -> list[tuple[int, int, str]]:
        col = bare_column(column)
        return [(a, b, hit[col]) for a, b, hit in self._all(question) if col in hit]

    def covers(self, column: str) -> bool:
        return bare_column(column) in self.columns

    def spans(self, question: str) -> list[tuple[int, int]]:
        """The longest non-overlapping values the question contains (any column)."""
        out: list[tuple[int, int]] = []
        for a, b, _ in sorted(self._all(question), key=lambda f: (f[0] - f[1], f[0])):
            if not any(a < y and x < b for x, y in out):
                out.append((a, b))
        return sorted(out)

    def with_names(self, names: ValueIndex) -> ValueIndex:
        """This index and the other names of its values the library's questions use (value_names)."""
        return _NamedValues(self, names) if len(names) else self


class _NamedValues(ValueIndex):
    """A value index and a small one of other names for its values, read as one; a database
    value's own spelling wins over another name spelled the same."""

    def __init__(self, values: ValueIndex, names: ValueIndex):
        self.base, self.names = values, names
        self.max_len = max(values.max_len, names.max_len)
        self.columns = values.columns

    def __len__(self) -> int:
        return len(self.base)

    def _all(self, question: str) -> list[tuple[int, int, dict[str, str]]]:
        own = self.base._all(question)
        spans = {(a, b): hit for a, b, hit in own}
        other = [
            (a, b, {c: v for c, v in hit.items() if c not in spans.get((a, b), {})})
            for a, b, hit in self.names._all(question)
        ]
        return own + [(a, b, hit) for a, b, hit in other if hit]


NAME_EXAMPLES = 2  # approved questions that must name a value the same other way before it is a name


def value_names(templates: Iterable[Template]) -> ValueIndex:
    """Other names the library's approved questions give database values: "systolic blood pressure"
    for 'arterial blood pressure systolic', "weigh" for 'daily weight'.

    A named-value slot whose question words are not the value's spelling is a reviewer-approved
    reading of those words. A name counts when NAME_EXAMPLES questions use it for one value of a
    column and none for another; LIKE patterns are written from the question's own words, so they
    name nothing else.
    """
    seen: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for template in templates:
        for slot in template.slots:
            if slot.type != VALUE or not slot.column or any(u.like for u in slot.uses):
                continue
            name = " ".join(slot.text.lower().split())
            if name != " ".join(slot.value.lower().split()):
                seen[(bare_column(slot.column), name)][slot.value].add(template.question.lower())
    names: dict[str, dict[str, str]] = defaultdict(dict)
    for (column, name), by_value in seen.items():
        if len(by_value) == 1:
            value, questions = next(iter(by_value.items()))
            if len(questions) >= NAME_EXAMPLES:
                names[column][name] = value
    return ValueIndex({}, names=names)


def load_values(executor, tables: dict[str, str], dialect: str) -> ValueIndex:
    """A ValueIndex over the linkable columns (templates.DEFAULT_VALUE_COLUMNS) of these tables.

    `tables` maps a bare table name to the name to query ("d_items" -> "mimiciv_icu.d_items"); one
    DISTINCT query per column through `executor` (read-only). A column that cannot be read is skipped.
    """
    found: dict[str, list[str]] = {}
    for table, column in sorted(DEFAULT_VALUE_COLUMNS):
        if table not in tables:
            continue
        query = sx.select(sx.column(column, quoted=True)).distinct().from_(sx.to_table(tables[table]))
        try:
            rows = executor.execute(query.sql(dialect=dialect), timeout_s=60, row_cap=500_000).rows
        except Exception:  # a column this database lacks or cannot read: no values to link
            continue
        found[f"{tables[table]}.{column}"] = [r[0] for r in rows if isinstance(r[0], str)]
    return ValueIndex(found)


# --- the library ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One library example as the matcher sees it."""

    example_id: int | None
    question: str
    template: Template | None  # None for an unanswerable example
    key: str  # template_key, or UNANSWERABLE
    group: str  # paraphrase group: same SQL (answerable) or same question (unanswerable)


def entry_for(
    example_id: int | None, question: str, sql: str, template: Template | None, key: str | None = None
) -> Entry | None:
    """The entry of one example, or None when its SQL could not be templated (it cannot answer).
    `key`: its template_key when stored with the template (computing it parses the SQL)."""
    if not sql:
        return Entry(example_id, question, None, UNANSWERABLE, "q:" + " ".join(question.lower().split()))
    if template is None or not template.usable:
        return None
    return Entry(example_id, question, template, key or template_key(template), sql_group(sql))


class LibraryIndex:
    """Entries, their masked-question vectors (unit length) and their families, for one source."""

    def __init__(self, entries: Sequence[Entry], vectors: np.ndarray | Sequence[Sequence[float]]):
        self.entries = list(entries)
        matrix = np.asarray(vectors, dtype=np.float32)
        matrix = matrix.reshape(len(self.entries), -1) if self.entries else np.zeros((0, 1), dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self.matrix = matrix / norms
        self.members: dict[str, list[int]] = defaultdict(list)
        for i, entry in enumerate(self.entries):
            self.members[entry.key].append(i)
        self.families = self._families()
        self.names = value_names(e.template for e in self.entries if e.template)

    def _families(self) -> dict[str, Family]:
        words_of: dict[str, set[str]] = {}
        ops_of: dict[str, dict[str, set]] = {}
        signatures_of: dict[str, set[tuple]] = {}
        signature_words_of: dict[str, dict[tuple, frozenset]] = {}
        core_of: dict[str, frozenset[str]] = {}
        readings = {i: _reading(e.template.masked_question, e.template.question,
                                tuple((x.start, x.end) for x in e.template.slots if x.type == VALUE))
                    for i, e in enumerate(self.entries) if e.template}  # fmt: skip
        sequence_of = {i: r[0] for i, r in readings.items()}
        said_by = {i: set(r[1]) for i, r in readings.items()}
        ops_by = {i: r[2] for i, r in readings.items()}
        for key, idx in self.members.items():
            if key == UNANSWERABLE:
                continue
            words: set[str] = set()
            ops: dict[str, set] = defaultdict(set)
            signatures = set()
            by_signature: dict[tuple, set[str]] = defaultdict(set)
            for i in idx:
                words.update(said_by[i])
                signatures.add(operator_signature(ops_by[i]))
                by_signature[operator_signature(ops_by[i])].update(said_by[i])
                for name, value in ops_by[i].items():
                    ops[name].add(value)
            words_of[key], ops_of[key], signatures_of[key] = words, ops, signatures
            signature_words_of[key] = {k: frozenset(v) for k, v in by_signature.items()}
            core_of[key] = _core(words, [said_by[i] for i in idx])
        synonyms = mine_synonyms(
            [sequence_of[i] for i in idx if operator_signature(ops_by[i]) == sig]
            for key, idx in self.members.items()
            if key != UNANSWERABLE and len(idx) > 1
            for sig in {operator_signature(ops_by[i]) for i in idx}
        )
        self.synonyms = synonyms
        neutral: set[str] = set()
        # A word that some paraphrases of a template use and others leave out, in several templates,
        # is wording ("documented", "exactly"), not a condition: a condition is in every paraphrase.
        optional: Counter[str] = Counter()
        present: Counter[str] = Counter()
        for key, idx in self.members.items():
            if key == UNANSWERABLE or len(idx) < 2:
                continue
            # A word counts as said where a synonym is ("diagnosis" where "diagnosed" is).
            each = [said_by[i] | {x for w in said_by[i] for x in synonyms.get(w, ())} for i in idx]
            optional.update(set.union(*each) - set.intersection(*each))
            present.update(set.union(*each))
        # …and left out in at least half the templates that use it ("input" is said wherever it matters).
        neutral |= {w for w, n in optional.items() if n >= OPTIONAL_TEMPLATES and n >= 0.5 * present[w]}
        # A word that goes with one operator in a template ("survival" with "lowest" where "mortality"
        # goes with "highest") carries meaning, however often paraphrases leave it out.
        polarity: set[str] = set()
        for by_sig in signature_words_of.values():
            for sig, words in by_sig.items():
                against = [v for k, v in by_sig.items() if opposite(k, sig)]
                if against:
                    polarity |= words - frozenset().union(*against)
        neutral = frozenset(neutral - NEVER_NEUTRAL - polarity)
        # …but a word that is what some template is about ("age", "route", "discharged": said by
        # nearly all its paraphrases) says that subject when a question says it: wording for the
        # templates that leave it out, yet no question about it may be answered by a sibling that
        # never says it ("what age was …" by the admission type's template).
        subjects = frozenset(
            w
            for key, idx in self.members.items()
            if key != UNANSWERABLE and len(idx) >= SUBJECT_MEMBERS
            for w, n in Counter(w for i in idx for w in said_by[i]).items()
            if w in neutral and n >= SUBJECT_SHARE * len(idx)
        )
        return {
            key: Family(
                key,
                {k: frozenset(v) for k, v in ops_of[key].items()},
                frozenset(words_of[key]),
                neutral,
                len(self.members[key]),
                frozenset(signatures_of[key]),
                signature_words_of[key],
                core_of[key] - neutral,  # wording is no subject
                synonyms,
                tuple(
                    dict.fromkeys(
                        (frozenset(said_by[i] - neutral), ops_key(ops_by[i])) for i in self.members[key]
                    )
                ),
                subjects,
            )
            for key in words_of
        }

    def subset(self, keep: Sequence[int]) -> LibraryIndex:
        """The library with only these entries (cross-validation leaves whole groups out)."""
        return LibraryIndex([self.entries[i] for i in keep], self.matrix[list(keep)])


# --- matching --------------------------------------------------------------------------------------

RISK_FEATURES = (
    "vote_share",
    "vote_margin",
    "vote_rank",
    "top_similarity",
    "member_similarity",
    "unanswerable_share",
    "family_size",
    "masked_similarity",
    "lexical_overlap",
    "missing_words",
    "fuzzy_penalty",
    "slots",
    "paraphrase_missing",
)

# Hand-set until calibrate: a clear vote, a close paraphrase and clean values score high.
DEFAULT_RISK = Calibration(
    weights={
        "vote_share": 4.0,
        "vote_margin": 2.0,
        "vote_rank": -2.0,
        "top_similarity": 4.0,
        "member_similarity": 6.0,
        "unanswerable_share": -6.0,
        "masked_similarity": 2.0,
        "fuzzy_penalty": -6.0,
        "paraphrase_missing": -2.0,
        **{k: v for k, v in DEFAULT_CALIBRATION.weights.items() if k == "missing_words"},
    },
    intercept=-11.0,
    threshold=answer_threshold(10),
)


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

    `vector` embeds `offline.mask_question(question, values)`. Each result's confidence is P(correct)
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

    ops, typed, quoted, cached_lookup = question_context(
        question,
        lookup,
        values,
        operator_text=blank(question, (values.spans(question) if values else []) + periods(question)),
    )

    results: list[MatchResult] = []
    voted = [
        (rank, key, share) for rank, (key, share) in enumerate((k, s) for k, s in ranked if k != UNANSWERABLE)
    ]
    # Re-ranked by whether the question's operator words fit: "since 2100" and "in 2100" embed alike,
    # so the template that fits may be voted below several that cannot apply.
    fits = [
        v
        for v in voted
        if not operator_reasons(ops, index.entries[index.members[v[1]][0]].template, index.families[v[1]])
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
            result = _match_one(
                question, ops, typed, quoted, candidate, cached_lookup, catalog, DEFAULT_CALIBRATION,
                MIN_VALUE_SCORE, values, probe,
            )  # fmt: skip
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


def column_readings(index: LibraryIndex, values: ValueIndex) -> dict[frozenset[str], Counter[str]]:
    """How the library reads values that name items of two columns: per pair of columns, which one its
    examples bind such a value to ("anion gap" is a chart label and a lab label; the library's
    questions that name it, with "lab" or not, mean the lab test). Computed once per library and
    database value index: the per-question wrapper that adds the library's other names is not a new
    index (keyed on it, this ran for every question, 16 ms each at 5,000 examples)."""
    values = getattr(values, "base", values)
    cached = getattr(index, "_column_readings", None)
    if cached is not None and cached[0] is values:
        return cached[1]
    readings: dict[frozenset[str], Counter[str]] = defaultdict(Counter)
    for entry in index.entries:
        for slot in entry.template.slots if entry.template else ():
            if slot.type != VALUE:
                continue
            column = bare_column(slot.column)
            for other in _columns_naming(values, slot.value) - {column}:
                readings[frozenset((column, other))][column] += 1
    index._column_readings = (values, readings)  # type: ignore[attr-defined]
    return readings


def _columns_naming(values: ValueIndex, text: str) -> set[str]:
    """The columns of which `text`, as a whole, is a value."""
    return {col for a, b, hit in values._all(text) if a == 0 and b == len(text) for col in hit}


def refuse_unlike_library(
    results: Sequence[MatchResult], index: LibraryIndex, values: ValueIndex
) -> list[MatchResult]:
    """Results that bind a value naming items of two columns to the column the library never reads it as.

    "Is the anion gap value … less than …" matched to a chart template binds 'anion gap' as a chart
    item; every library question that names a value of both columns means the lab one, so a chart
    reading would answer another question than the one the library's wording asks. The reading the
    library does use (or a pair of columns it has no example of) is left alone; refuse_ambiguous_values
    still refuses two readings competing for one question.
    """
    readings = column_readings(index, values)
    if not readings:
        return list(results)
    out = []
    for r in results:
        reason = None
        for b in r.bindings if r.hard_ok else ():
            if b.type != VALUE or not b.column:
                continue
            column = bare_column(b.column)
            for other in _columns_naming(values, b.value) - {column}:
                seen = readings.get(frozenset((column, other)))
                if seen and seen[other] and not seen[column]:
                    reason = (
                        f"'{b.new}' is a {other.split('.')[-1]} in {other.split('.')[0]} too, and the library's "
                        f"questions that name such values always mean that one, not the {column.split('.')[0]} one."
                    )
        if reason is None:
            out.append(r)
        else:
            out.append(dataclasses.replace(
                r, sql=None, confidence=0.0, features={**r.features, "hard_ok": 0.0},
                reasons=(*r.reasons, reason), reason_codes=(*r.reason_codes, R.VALUE_AMBIGUOUS),
            ))  # fmt: skip
    return out


# --- calibration -------------------------------------------------------------------------------------


def grouped_folds(
    entries: Sequence[Entry], folds: int = CV_FOLDS, *, siblings: bool = False
) -> list[list[int]]:
    """Entry indices split into folds so that a paraphrase group never straddles two folds.

    A group is the same SQL (the same template with the same values) or, for unanswerable examples,
    the same question: holding out single paraphrases would let their twins answer for them. For a
    share of templates (TEMPLATE_HOLDOUT) the group is the whole template, because real questions
    often have no template in the library at all, and the risk must be learnt on those too.
    `siblings`: the folds of the sibling pass (see cross_validate), every template held out whole.
    """
    out: list[list[int]] = [[] for _ in range(folds)]
    for i, entry in enumerate(entries):
        group = entry.group
        if entry.key != UNANSWERABLE and (siblings or _whole_template(entry.key)):
            group = entry.key  # the whole template out: a question of a kind the library has never seen
        out[int(hashlib.sha1(group.encode()).hexdigest(), 16) % folds].append(i)
    return out


def _whole_template(key: str) -> bool:
    """Whether the ordinary cross-validation holds this template out whole."""
    return _share(key) < TEMPLATE_HOLDOUT


def _share(text: str) -> float:
    return int(hashlib.sha1(("share:" + text).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def fit_risk(
    samples: Sequence[tuple[dict[str, float], bool]], *, wrong_answer_cost: float = 10
) -> Calibration:
    """The logistic P(correct) over RISK_FEATURES, with the cost's threshold. Defaults without data."""
    fitted = fit_calibration(samples, features=RISK_FEATURES, threshold=answer_threshold(wrong_answer_cost))
    if not fitted.samples:
        return Calibration(
            dict(DEFAULT_RISK.weights), DEFAULT_RISK.intercept, answer_threshold(wrong_answer_cost)
        )
    return fitted


def fold_risks(
    samples: Sequence[tuple[dict[str, float], bool]], folds: Sequence[int], *, wrong_answer_cost: float = 10
) -> dict[int, Calibration]:
    """Per fold, the risk model fitted on the other folds' held-out samples only (see `out_of_fold`)."""
    return {
        fold: fit_risk(
            [s for s, f in zip(samples, folds, strict=True) if f != fold], wrong_answer_cost=wrong_answer_cost
        )
        for fold in sorted(set(folds))
    }


def out_of_fold(
    samples: Sequence[tuple[dict[str, float], bool]], folds: Sequence[int], *, wrong_answer_cost: float = 10
) -> list[tuple[float, bool]]:
    """(P(correct), correct) of every held-out sample from a risk model fitted on the other folds only.

    Why: the risk model fitted on all held-out samples and scored on those same samples learns the
    few wrong answers it is then asked about, so the coverage and precision it reports are its
    training fit. Scored by a model that never saw its fold, a sample is as new to the risk as a
    real question is. `folds`: each sample's fold (cross_validate's `folds_out`).
    """
    risks = fold_risks(samples, folds, wrong_answer_cost=wrong_answer_cost)
    return [(risks[f].predict(features), ok) for (features, ok), f in zip(samples, folds, strict=True)]


def expected(
    scored: Sequence[tuple[float, bool]], threshold: float, total: int
) -> dict[str, float | int | None]:
    """Coverage and precision at a threshold, from held-out (P(correct), was it correct) pairs."""
    answered = [ok for p, ok in scored if p >= threshold]
    return {
        "answered": len(answered),
        "coverage": round(len(answered) / total, 4) if total else None,
        "precision": round(sum(answered) / len(answered), 4) if answered else None,
    }


def cross_validate(
    index: LibraryIndex,
    vectors_of: Callable[[list[int]], np.ndarray],
    *,
    is_correct: Callable[[Entry, MatchResult], bool],
    lookup: ValueLookup,
    values: ValueIndex | None = None,
    catalog: CatalogSchema | None = None,
    folds: int = CV_FOLDS,
    progress: Callable[[int], None] | None = None,
    details: list | None = None,
    probe: Callable[[str], bool] | None = None,
    only: Sequence[int] | None = None,
    observe: Callable[[Entry, LibraryMatch, LibraryIndex], None] | None = None,
    folds_out: list[int] | None = None,
    siblings: bool = False,
) -> list[tuple[dict[str, float], bool]]:
    """Held-out (features, correct) for the best hard-rule-passing match of every library question.

    Unanswerable library questions are asked too: any answer to one is a wrong answer. `only`:
    these folds alone (the caller runs the folds in parallel). `observe` sees every held-out
    question's whole match and the library it was matched against, for error analysis on the
    library (why a question was missed), never on the questions one reports. `folds_out` gets
    each sample's fold, for scoring it by a risk model fitted without that fold (`out_of_fold`).

    `siblings`: the sibling pass. A new question whose template the library lacks is often a sibling
    of one it has (the admission type for the age, procedures for diagnoses, discharged for still in
    hospital), and the few such questions the ordinary folds make leave the risk model almost no wrong
    answers to learn from. This pass asks every answerable question whose template the ordinary
    folds keep against the library without its whole template: what passes the guard is (nearly
    always) a sibling's wrong answer, and its samples go with the ordinary ones into fit_risk, never
    into the reported coverage or precision. Their folds are numbered after the ordinary ones.
    """
    samples: list[tuple[dict[str, float], bool]] = []
    done = 0
    for fold, held in enumerate(grouped_folds(index.entries, folds, siblings=siblings)):
        if only is not None and fold not in only:
            continue
        held_set = set(held)
        train = index.subset([i for i in range(len(index.entries)) if i not in held_set])
        if siblings:  # the ordinary folds already ask the rest without their template
            held = [
                i for i in held if index.entries[i].template and not _whole_template(index.entries[i].key)
            ]
        vectors = vectors_of(held)
        for i, vector in zip(held, vectors, strict=True):
            entry = index.entries[i]
            found = match_library(
                entry.question, vector, train, lookup=lookup, values=values, catalog=catalog, probe=probe
            )
            if observe is not None:
                observe(entry, found, train)
            best = found.best
            if best is not None and best.hard_ok and best.sql:
                ok = entry.template is not None and is_correct(entry, best)
                samples.append((best.features, ok))
                if folds_out is not None:
                    folds_out.append(fold + (folds if siblings else 0))
                if details is not None:  # for tuning on the library: what answered what
                    details.append((entry, best, ok))
            done += 1
            if progress:
                progress(done)
    return samples


__all__ = [
    "DEFAULT_RISK",
    "FUNCTION_WORDS",
    "RISK_FEATURES",
    "UNANSWERABLE",
    "Entry",
    "LibraryIndex",
    "LibraryMatch",
    "ValueIndex",
    "answer_threshold",
    "cross_validate",
    "entry_for",
    "expected",
    "fit_risk",
    "fold_risks",
    "grouped_folds",
    "key_hash",
    "load_values",
    "match_library",
    "out_of_fold",
    "sql_group",
]
