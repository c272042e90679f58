"""Which tables a question needs: combine several weak signals, then follow joins.

Doc similarity alone misses a needed table in most multi-table questions (questions rarely
name tables), so a table's score adds: how similar its documentation is, whether the question
mentions one of its values ("sepsis" is a d_icd_diagnoses title), whether it uses one of the
table's synonyms, and whether similar approved questions used it. The top tables are then
expanded along relationships to the dictionary tables that turn codes into names and to the
tables that connect otherwise unjoinable picks.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from core.types import LinkedValue

STOPWORDS = frozenset(
    """a about above after again all also am an and any are as at be been before being below between both but by
    can could did do does doing down during each ever few for from further had has have having he her here hers
    him his how i if in into is it its itself just me more most my no nor not now of off on once only or other
    our out over own same she should so some such than that the their them then there these they this those
    through to too under until up very was we were what when where which while who whom why will with would you
    your yours give show list tell find get number many much value values total record recorded records
    patient patients person people did does done first last latest earliest daily per each time times
    average mean max min maximum minimum count counts highest lowest top ever since during within year years
    month months day days week weeks hour hours today current
    hospital hospitals admission admissions admitted discharge discharged died death deaths dead diagnosed
    diagnosis diagnoses given received receiving prescribed stay stays icu unit ward test tests lab labs
    result results level levels measured measurement measurements ordered order orders event events
    type types name names code codes id ids date dates""".split()
)

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-/%.]*[A-Za-z0-9%]|[A-Za-z]")


def question_terms(question: str, *, max_terms: int = 24) -> list[str]:
    """Content phrases (1–3 consecutive non-stopwords) to look up in the value index."""
    runs: list[list[str]] = [[]]
    for match in _WORD.finditer(question):
        word = match.group(0).strip(".").lower()
        if len(word) < 2 or word in STOPWORDS or word.isdigit():
            runs.append([])
        else:
            runs[-1].append(word)
    terms: list[str] = []
    for run in runs:
        for n in (3, 2, 1):
            for i in range(len(run) - n + 1):
                term = " ".join(run[i : i + n])
                if term not in terms and (n > 1 or len(term) >= 3):
                    terms.append(term)
    return terms[:max_terms]


@dataclass(frozen=True)
class TableProfile:
    """What ranking needs to know about a table besides its doc vector."""

    qualified: str
    synonyms: tuple[str, ...] = ()
    is_dictionary: bool = False  # a code table: d_icd_diagnoses, d_labitems, d_items, …


@dataclass(frozen=True)
class Edge:
    a: str
    b: str
    on: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Weights:
    doc: float = 1.0
    value: float = 0.45
    lexical: float = 0.25
    example: float = 0.35
    value_floor: float = 0.55  # linked values below this score are noise


@dataclass(frozen=True)
class RankedTable:
    qualified: str
    score: float
    doc_score: float
    reasons: tuple[str, ...] = field(default=())
    via: str = ""  # "" when ranked on its own, else why it was added ("join", "dictionary")


def lexical_score(question: str, profile: TableProfile) -> float:
    """1.0 when the question uses a synonym or the table's own name, graded by phrase length."""
    text = " " + re.sub(r"[^a-z0-9]+", " ", question.lower()) + " "
    best = 0.0
    name = profile.qualified.rsplit(".", 1)[-1]
    for phrase in (*profile.synonyms, name, name.replace("_", " ")):
        p = " " + re.sub(r"[^a-z0-9]+", " ", phrase.lower()).strip() + " "
        if len(p.strip()) >= 2 and p in text:
            best = max(best, min(1.0, 0.6 + 0.1 * len(p.split())))
    return best


def rank_tables(
    question: str,
    doc_scores: dict[str, float],
    profiles: dict[str, TableProfile],
    *,
    linked_values: list[LinkedValue] = (),
    example_tables: dict[str, float] | None = None,
    edges: list[Edge] = (),
    k: int = 5,
    weights: Weights | None = None,
) -> list[RankedTable]:
    """The top-k tables by combined score, then the tables their joins need."""
    weights = weights or Weights()
    value_best: dict[str, LinkedValue] = {}
    for lv in linked_values:
        if lv.score >= weights.value_floor and (
            lv.table not in value_best or lv.score > value_best[lv.table].score
        ):
            value_best[lv.table] = lv
    example_tables = example_tables or {}
    scored: list[RankedTable] = []
    for table, profile in profiles.items():
        doc = doc_scores.get(table, 0.0)
        lex = lexical_score(question, profile)
        val = value_best[table].score if table in value_best else 0.0
        ex = example_tables.get(table, 0.0)
        reasons = [f"doc {doc:.2f}"]
        if lex:
            reasons.append("question uses its vocabulary")
        if val:
            lv = value_best[table]
            reasons.append(f"mentions {lv.column} {lv.value!r}")
        if ex:
            reasons.append(f"used by similar approved questions ({ex:.2f})")
        score = weights.doc * doc + weights.lexical * lex + weights.value * val + weights.example * ex
        scored.append(RankedTable(table, round(score, 4), round(doc, 4), tuple(reasons)))
    scored.sort(key=lambda r: (-r.score, r.qualified))
    picked = scored[:k]
    return picked + expand(picked, profiles, edges, value_tables=set(value_best), doc_scores=doc_scores)


def expand(
    picked: list[RankedTable],
    profiles: dict[str, TableProfile],
    edges: list[Edge],
    *,
    value_tables: set[str] = frozenset(),
    doc_scores: dict[str, float] | None = None,
) -> list[RankedTable]:
    """Add dictionary tables the picks join to, event tables for named codes, and bridges."""
    doc_scores = doc_scores or {}
    chosen = [r.qualified for r in picked]
    added: list[RankedTable] = []
    neighbours: dict[str, set[str]] = {}
    for e in edges:
        if e.a in profiles and e.b in profiles:
            neighbours.setdefault(e.a, set()).add(e.b)
            neighbours.setdefault(e.b, set()).add(e.a)

    def is_dict(table: str) -> bool:
        return profiles.get(table, TableProfile(table)).is_dictionary

    def add(table: str, via: str, reason: str) -> None:
        if table not in chosen and table in profiles:
            chosen.append(table)
            added.append(RankedTable(table, 0.0, round(doc_scores.get(table, 0.0), 4), (reason,), via=via))

    # 1. A dictionary whose values the question names brings the event table that records those
    #    codes (the most similar one), unless a pick already uses it.
    for r in picked:
        if is_dict(r.qualified) and r.qualified in value_tables:
            users = [n for n in sorted(neighbours.get(r.qualified, ())) if not is_dict(n)]
            if users and not any(u in chosen for u in users):
                best = max(users, key=lambda u: (doc_scores.get(u, 0.0), u))
                add(best, "join", f"records the {r.qualified.split('.')[-1]} codes the question names")
    # 2. Codes need their dictionary: each chosen event table brings the code tables it joins to.
    for table in list(chosen):
        if not is_dict(table):
            for n in sorted(neighbours.get(table, ())):
                if is_dict(n):
                    add(n, "dictionary", f"names the codes of {table.split('.')[-1]}")
    # 3. Bridge event tables that no join connects within the chosen set (shortest path).
    events = [t for t in chosen if not is_dict(t)]
    for target in events[1:]:
        if target not in _reachable(events[0], neighbours, set(chosen)):
            for hop in _shortest_path(events[0], target, neighbours)[1:-1]:
                add(hop, "join", f"connects {events[0].split('.')[-1]} and {target.split('.')[-1]}")
    return added


def _reachable(start: str, neighbours: dict[str, set[str]], within: set[str]) -> set[str]:
    seen, queue = {start}, deque([start])
    while queue:
        for n in neighbours.get(queue.popleft(), ()):
            if n in within and n not in seen:
                seen.add(n)
                queue.append(n)
    return seen


def _shortest_path(a: str, b: str, neighbours: dict[str, set[str]]) -> list[str]:
    prev: dict[str, str | None] = {a: None}
    queue = deque([a])
    while queue:
        node = queue.popleft()
        if node == b:
            path = [b]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])
            return path[::-1]
        for n in sorted(neighbours.get(node, ())):
            if n not in prev:
                prev[n] = node
                queue.append(n)
    return []


# --------------------------------------------------------------------------- value linking: what a question says

_VALUE_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> list[str]:
    """The words of a text that can name a value: lower case, no stopwords, no one-letter words."""
    return [w for w in _VALUE_WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS]


def _same_word(a: str, b: str) -> bool:
    """One word, allowing a plural and a typo in a long word ("hemoglobn" is "hemoglobin")."""
    if a == b or a.rstrip("s") == b.rstrip("s"):
        return True
    if min(len(a), len(b)) < 6 or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) <= 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))  # one letter left out


def value_is_mentioned(question: str, linked: LinkedValue, common: frozenset[str]) -> bool:
    """Whether the question says this value, not just brushes against it.

    `common` is the catalog's vocabulary: the words its table and column documentation uses
    ("care", "length", "unit", "height"). A value is linked when the question says all of its
    words, more than one of them, or its head term (its first word) when that is not an everyday
    word of the catalog ("sepsis" → "Sepsis, unspecified organism", "sodium" → "Sodium, Whole
    Blood", not "Docusate Sodium"); a semantic match that shares no word is linked only for a word
    outside that vocabulary (an abbreviation: "hgb" → Hemoglobin). One word inside a long title
    ("care" in "Encounter for palliative care", "via" in "Drainage … Via Natural Opening") or a
    near word ("length" ~ "Height") is not a mention.
    """
    asked = content_words(question)
    words = content_words(linked.value)
    if not words:
        return linked.value.strip().lower() in question.lower()
    said = {w for w in words if any(_same_word(w, q) for q in asked)}
    if said == set(words) or len(said) > 1:
        return True
    if said == {words[0]} and words[0] not in common:  # the value's head term: "Sepsis, unspecified organism"
        return True
    if said:
        return False
    term = linked.term.strip().lower()
    return linked.method == "semantic" and " " not in term and term not in common | STOPWORDS
