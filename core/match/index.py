"""The library index: entries, their masked-question vectors, and each template's family of paraphrases."""

from __future__ import annotations

import difflib
import functools
import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from core.match.operators import operator_signature, opposite, ops_key, question_operators
from core.match.spans import VALUE, blank, periods
from core.match.template import Template, template_key
from core.match.values import ValueIndex, bare_column, columns_naming, value_names
from core.match.words import NEUTRAL_WORDS, NUMBER_WORDS, guard_sequence, guard_words, same_stem, stem

UNANSWERABLE = "unanswerable"  # the key of the library's unanswerable examples
# Number words are values ("top three" vs "top five"), never mere wording.
NEUTRAL_STEMS = frozenset(map(stem, NEUTRAL_WORDS))
NEVER_NEUTRAL = frozenset(NUMBER_WORDS) | {"one", "zero"}
CORE_SHARE = 1.0  # a word this share of a template's paraphrases say is its subject: the question must say it
OPTIONAL_TEMPLATES = 3  # a word some paraphrases leave out, in this many templates, is only wording
SUBJECT_SHARE = 0.8  # a word this share of a template's paraphrases say is what it is about…
SUBJECT_MEMBERS = 3  # …when it has this many paraphrases
SYNONYM_TEMPLATES = 2  # two words paraphrases swap for one another in this many templates are synonyms
SYNONYM_MEMBERS = 40  # paraphrases per template compared pairwise when mining synonyms


@dataclass(frozen=True)
class Family:
    """What all paraphrases of one template say, so one example's wording is not the only yardstick.

    `operators`: per operator key, every value the paraphrases use ("total" in one and "maximum" in
    another is the same SQL). `words`: every content-word stem the paraphrases use. `neutral`:
    words so common across the library's templates that they tell templates apart by nothing.
    """

    key: str
    operators: dict[str, frozenset]
    words: frozenset[str]
    neutral: frozenset[str] = frozenset()
    size: int = 1
    # Each paraphrase's operators together (less SOFT_OPERATORS): "highest mortality" and "lowest
    # survival" may be one SQL, but "highest survival" is neither paraphrase.
    signatures: frozenset = frozenset()
    # The content words of the paraphrases with each signature: "survival" said only where the
    # operator is "lowest" must not be read with "highest".
    signature_words: dict = field(default_factory=dict)
    # Words (nearly) every paraphrase says: the template's subject ("discharged", "specimen"). A
    # question that says none of one is about something else.
    core: frozenset[str] = frozenset()
    # Words the library's own paraphrases use for one another ("sex" for "gender"): mined across
    # templates (library.mine_synonyms), shared by every family of one library.
    synonyms: dict = field(default_factory=dict)
    # Each paraphrase's content words less library wording, and its operator words (ops_key): how far
    # the question is from the nearest one ("what was the admission type …" says none of "age"/"old",
    # whichever paraphrase one takes; "how is X taken?" is neither "how much is X?" nor "the cost of X").
    paraphrases: tuple[tuple[frozenset[str], tuple], ...] = ()
    # Library wording (in `neutral`) that is the subject of some template ("age", "route"): it must be
    # said by this template's paraphrases to be explained.
    subjects: frozenset[str] = frozenset()

    def says(self, word: str) -> bool:
        """Whether some paraphrase says `word` or a word the library uses in its place."""
        return word in self.words or bool(self.synonyms.get(word, frozenset()) & self.words)


def mine_synonyms(paraphrases: Iterable[Sequence[Sequence[str]]]) -> dict[str, frozenset[str]]:
    """Words the library's paraphrases use for one another: "sex" for "gender", "dose" for "dosage".

    Two paraphrases of one template (the same SQL, the same operator words) that read the same but
    for one word in the same place ("the total {value} dose of" / "the total {value} amount of")
    swap those words without changing the answer. A swap seen in at least SYNONYM_TEMPLATES
    templates is a synonym for the meaning guard; one template alone may be an accident of its
    wording. `paraphrases` is, per template and operator signature, each paraphrase's words in order
    (guard_sequence). A pair that tells two templates apart (_contrasts) is none.
    """
    return _mine(paraphrases)[0]


def _mine(paraphrases: Iterable[Sequence[Sequence[str]]]) -> tuple[dict, dict]:
    """(mine_synonyms, the swaps of one word in the same place alone, as mined before swaps with one
    word more and contrasts were read). The second decides what is library wording
    (_library_wording): a synonym makes a word said where its synonym is, so a pair mined more
    loosely would turn wording ("administered") into a subject every paraphrase says; it only
    explains words."""
    groups = [list(group) for group in paraphrases]
    contrasts = _contrasts(groups)
    seen: Counter[tuple[str, str]] = Counter()
    same_place: Counter[tuple[str, str]] = Counter()
    for group in groups:
        pairs: set[tuple[str, str]] = set()
        strict: set[tuple[str, str]] = set()
        members = [tuple(m) for m in group[:SYNONYM_MEMBERS]]  # hashable: _swap is kept per pair
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                swap = _swap(a, b)
                if swap and not set(swap) & NEVER_NEUTRAL:
                    if len(a) == len(b):
                        strict.add(swap)
                    if swap not in contrasts:
                        pairs.add(swap)
        seen.update(pairs)
        same_place.update(strict)
    return _pairs(seen), _pairs(same_place)


def _pairs(seen: Counter[tuple[str, str]]) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for (x, y), n in seen.items():
        if n >= SYNONYM_TEMPLATES:
            out[x].add(y)
            out[y].add(x)
    return {w: frozenset(v) for w, v in out.items()}


def _contrasts(groups: list[list[Sequence[str]]]) -> set[tuple[str, str]]:
    """Word pairs the library tells templates apart by: two questions of different templates that
    read the same but for that word in one place ("the total input of" / "the total output of",
    "the lab tests" / "the microbiology tests"). Such a pair is never a synonym, however often
    paraphrases of one template also swap it (a mining accident is worse than a missed synonym)."""
    words_at: dict[tuple, set[tuple[int, str]]] = defaultdict(set)
    for g, group in enumerate(groups):
        for seq in group:
            for i, w in enumerate(seq):
                if w not in NEUTRAL_STEMS and not w.startswith("slot"):
                    words_at[(tuple(seq[:i]), tuple(seq[i + 1 :]))].add((g, w))
    out: set[tuple[str, str]] = set()
    for found in words_at.values():
        if len(found) > 1:
            out.update((min(x, y), max(x, y)) for g, x in found for h, y in found if g != h and x != y)
    return out


@functools.lru_cache(maxsize=1 << 15)  # a train calibration reads 15,199 distinct pairs
def _swap(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, str] | None:
    """The one word two word sequences differ by, in the same place, or None; also where one of them
    says one word of no content more besides ("how much is the average cost associated with {value}"
    / "the average cost including {value}"): paraphrases seldom differ by one word alone. Not where the
    word said more carries content ("{value} throughout {period}" / "treated with {value} procedure
    {period}" swaps no "throughout" for "procedure").

    Kept per pair: a cross-validation builds ten libraries and thousands of composed families from
    the same paraphrases, and asks the same pairs again in each (a pure function of the two)."""
    if len(a) == len(b):
        differ = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
        return _swapped(*differ[0]) if len(differ) == 1 else None
    if abs(len(a) - len(b)) != 1:
        return None
    edits = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    replaced = [
        (a[i], b[j]) for tag, i, i2, j, j2 in edits if tag == "replace" and i2 - i == 1 and j2 - j == 1
    ]
    said_more = [w for tag, i, i2, j, j2 in edits if tag != "replace" for w in (*a[i:i2], *b[j:j2])]
    if len(edits) != 2 or len(replaced) != 1 or not all(w in NEUTRAL_STEMS for w in said_more):
        return None  # one word swapped and one word of no content said more, nothing else
    x, y = replaced[0]
    # A word said in both sequences was moved, not swapped ("the hospital cost" / "the cost of the
    # hospital visit" swaps nothing).
    return None if x in b or y in a else _swapped(x, y)


def _swapped(x: str, y: str) -> tuple[str, str] | None:
    if x in NEUTRAL_STEMS or y in NEUTRAL_STEMS or x.startswith("slot") or y.startswith("slot"):
        return None
    return (min(x, y), max(x, y))


def _core(words: Iterable[str], said: Sequence[set[str]]) -> frozenset[str]:
    """The words (nearly) every paraphrase says, each in some form: "diagnosed", "diagnosis" and
    "diagnoses" are three stems, yet a template whose paraphrases say one of them in each is about
    diagnoses, and a question that says none of them ("… any procedure …") is about something else."""
    out = set()
    for w in words:
        n = sum(1 for s in said if w in s or any(same_stem(w, x) for x in s))
        if n >= CORE_SHARE * len(said):
            out.add(w)
    return frozenset(out)


@functools.lru_cache(maxsize=1 << 15)
def library_reading(
    masked: str, question: str, value_spans: tuple[tuple[int, int], ...]
) -> tuple[tuple[str, ...], frozenset[str], dict[str, Any]]:
    """How the guard reads one library question (its word sequence, its words, its operator words
    with values and periods blanked): the same in every library a cross-validation builds from
    subsets, so read once (a calibration builds ten). Callers must not change what it returns."""
    ops = library_operators(question, value_spans)
    return tuple(guard_sequence(masked)), frozenset(guard_words(masked)), ops


@functools.lru_cache(maxsize=1 << 15)
def library_operators(question: str, value_spans: tuple[tuple[int, int], ...]) -> dict[str, Any]:
    """library_reading's operator words alone (values and periods blanked). Why apart: the
    composition precheck (precheck.py) reads only these, and the compositions it refuses are never
    read as a family, so their words (two thirds of a reading's cost) were read for nothing.
    Callers must not change what it returns."""
    return question_operators(blank(question, [*value_spans, *periods(question)]))


def key_hash(key: str) -> str:
    """The stored, indexed form of a template key (Example.template_key)."""
    return hashlib.sha1(key.encode()).hexdigest()[:16] if key else ""


def sql_group(sql: str) -> str:
    """A paraphrase group for SQL: the same query, spacing and case aside."""
    return hashlib.sha1(" ".join(sql.lower().split()).rstrip(";").encode()).hexdigest()[:16]


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

    @functools.cached_property
    def names(self) -> ValueIndex:
        """The other names the library's questions use for values (value_names): made when first
        read, so a composition's small index of paraphrases never makes them."""
        return value_names(e.template for e in self.entries if e.template)

    def _families(self) -> dict[str, Family]:
        readings = {i: _reading(e.template) for i, e in enumerate(self.entries) if e.template}
        sequence_of = {i: r[0] for i, r in readings.items()}
        said_by = {i: set(r[1]) for i, r in readings.items()}
        ops_by = {i: r[2] for i, r in readings.items()}
        groups = {key: idx for key, idx in self.members.items() if key != UNANSWERABLE}
        summary = {key: _paraphrases_say(idx, said_by, ops_by) for key, idx in groups.items()}
        signature_of = {i: operator_signature(ops) for i, ops in ops_by.items()}  # once per paraphrase
        synonyms, same_place = _mine(
            [sequence_of[i] for i in idx if signature_of[i] == sig]
            for idx in groups.values()  # one paraphrase swaps nothing, yet tells templates apart
            for sig in {signature_of[i] for i in idx}
        )
        self.synonyms = synonyms
        neutral = _library_wording(
            groups, said_by, same_place, [s["signature_words"] for s in summary.values()]
        )
        subjects = _subjects(groups, said_by, neutral)
        wording = Family("", {}, frozenset(), neutral, synonyms=synonyms, subjects=subjects)
        return {key: _family(key, s, [said_by[i] for i in groups[key]], [ops_by[i] for i in groups[key]], wording)
                for key, s in summary.items()}  # fmt: skip

    def subset(self, keep: Sequence[int]) -> LibraryIndex:
        """The library with only these entries (cross-validation leaves whole groups out)."""
        return LibraryIndex([self.entries[i] for i in keep], self.matrix[list(keep)])


def paraphrase_family(entries: Sequence[Entry], wording: Family) -> Family:
    """The family of one template's paraphrases (`entries`, one key, none unanswerable), read as
    LibraryIndex reads each of its own, with the library-wide wording (`neutral`, `synonyms`,
    `subjects`) of `wording`, one family of that library.

    Why apart from LibraryIndex: a composition's paraphrases are matched as a family of their own
    with the base library's wording, and building a whole LibraryIndex of them (8,957 times in a
    train calibration) mined synonyms and library wording only to throw them away. The same family
    either way: a LibraryIndex of one template's paraphrases finds no wording of its own (a word is
    wording when paraphrases leave it out in OPTIONAL_TEMPLATES = 3 templates; it has one), so its
    core and paraphrases lose only `wording`'s neutral words, as here (tests/core/match/test_index.py
    compares the two over every composition of the corpus)."""
    said, ops, summary = _said_together(tuple(_reading_key(e.template) for e in entries if e.template))
    # The library's synonyms, read only: a caller's change to this family never reaches the library's.
    shared = Family("", {}, frozenset(), wording.neutral, synonyms=MappingProxyType(wording.synonyms),  # type: ignore[arg-type]
                    subjects=wording.subjects)  # fmt: skip
    return _family(entries[0].key, summary, said, ops, shared)


def _reading_key(template: Template) -> tuple[str, str, tuple[tuple[int, int], ...]]:
    """What library_reading reads of a template: its masked question, question and value spans."""
    return (
        template.masked_question,
        template.question,
        tuple((x.start, x.end) for x in template.slots if x.type == VALUE),
    )


def _reading(template: Template) -> tuple[tuple[str, ...], frozenset[str], dict[str, Any]]:
    return library_reading(*_reading_key(template))


@functools.lru_cache(maxsize=1 << 14)
def _said_together(keys: tuple[tuple[str, str, tuple[tuple[int, int], ...]], ...]) -> tuple[list, list, dict]:
    """Each paraphrase's words and operators and what they say together (_paraphrases_say), read once
    per set of paraphrases (`keys`: each one's _reading_key): the same compositions come back question
    after question and fold after fold (13,790 composed families of 9,006 sets in a train calibration).
    Callers must not change what it returns (_family makes its own containers)."""
    readings = [library_reading(*k) for k in keys]
    said, ops = [set(r[1]) for r in readings], [r[2] for r in readings]
    return said, ops, _paraphrases_say(list(range(len(keys))), dict(enumerate(said)), dict(enumerate(ops)))


def _family(key: str, s: dict[str, Any], said: list[set[str]], ops: list[dict], wording: Family) -> Family:
    """One template's Family from what its paraphrases say together (`s`: _paraphrases_say), each
    one's words and operators (`said`, `ops`, in the paraphrases' order) and the library's wording."""
    neutral = wording.neutral
    return Family(
        key,
        {k: frozenset(v) for k, v in s["ops"].items()},
        frozenset(s["words"]),
        neutral,
        len(said),
        frozenset(s["signatures"]),
        dict(s["signature_words"]),  # its own: a summary may be shared (_said_together)
        s["core"] - neutral,  # wording is no subject
        wording.synonyms,
        tuple(dict.fromkeys((frozenset(w - neutral), ops_key(o)) for w, o in zip(said, ops, strict=True))),
        wording.subjects,
    )


def _paraphrases_say(idx: list[int], said_by: dict[int, set[str]], ops_by: dict[int, dict]) -> dict[str, Any]:
    """What one template's paraphrases say together: their words, operator values, operator
    signatures, the words said with each signature, and the words (nearly) all of them say."""
    words: set[str] = set()
    ops: dict[str, set] = defaultdict(set)
    signatures = set()
    by_signature: dict[tuple, set[str]] = defaultdict(set)
    for i in idx:
        words.update(said_by[i])
        signature = operator_signature(ops_by[i])  # one reading: a pure function of the operators
        signatures.add(signature)
        by_signature[signature].update(said_by[i])
        for name, value in ops_by[i].items():
            ops[name].add(value)
    return {
        "words": words, "ops": ops, "signatures": signatures,
        "signature_words": {k: frozenset(v) for k, v in by_signature.items()},
        "core": _core(words, [said_by[i] for i in idx]),
    }  # fmt: skip


def _library_wording(
    groups: dict[str, list[int]],
    said_by: dict[int, set[str]],
    synonyms: dict[str, frozenset[str]],
    signature_words: list[dict[tuple, frozenset]],
) -> frozenset[str]:
    """Words the library's paraphrases leave out across templates: wording, not conditions."""
    # A word that some paraphrases of a template use and others leave out, in several templates,
    # is wording ("documented", "exactly"), not a condition: a condition is in every paraphrase.
    optional: Counter[str] = Counter()
    present: Counter[str] = Counter()
    for idx in groups.values():
        if len(idx) < 2:
            continue
        # A word counts as said where a synonym is ("diagnosis" where "diagnosed" is).
        each = [said_by[i] | {x for w in said_by[i] for x in synonyms.get(w, ())} for i in idx]
        optional.update(set.union(*each) - set.intersection(*each))
        present.update(set.union(*each))
    # …and left out in at least half the templates that use it ("input" is said wherever it matters).
    neutral = {w for w, n in optional.items() if n >= OPTIONAL_TEMPLATES and n >= 0.5 * present[w]}
    # A word that goes with one operator in a template ("survival" with "lowest" where "mortality"
    # goes with "highest") carries meaning, however often paraphrases leave it out.
    polarity: set[str] = set()
    for by_sig in signature_words:
        for sig, words in by_sig.items():
            against = [v for k, v in by_sig.items() if opposite(k, sig)]
            if against:
                polarity |= words - frozenset().union(*against)
    return frozenset(neutral - NEVER_NEUTRAL - polarity)


def _subjects(
    groups: dict[str, list[int]], said_by: dict[int, set[str]], neutral: frozenset[str]
) -> frozenset[str]:
    """Library wording that is what some template is about ("age", "route", "discharged": said by
    nearly all its paraphrases): it says that subject when a question says it, wording for the
    templates that leave it out, yet no question about it may be answered by a sibling that never
    says it ("what age was …" by the admission type's template)."""
    return frozenset(
        w
        for idx in groups.values()
        if len(idx) >= SUBJECT_MEMBERS
        for w, n in Counter(w for i in idx for w in said_by[i]).items()
        if w in neutral and n >= SUBJECT_SHARE * len(idx)
    )


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
            for other in columns_naming(values, slot.value) - {column}:
                readings[frozenset((column, other))][column] += 1
    index._column_readings = (values, readings)  # type: ignore[attr-defined]
    return readings
