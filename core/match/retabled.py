"""The table swap: a verified template's item tables swapped for the ones the library uses alike in
other shapes (procedures for diagnoses: procedures_icd / d_icd_procedures for diagnoses_icd /
d_icd_diagnoses), on the SQL tree, where the question names an item of the other table.

Why: items.py swaps an item's tables only where the library holds the base template's own shape over
the other tables too; a template whose sibling the library lacks ("the cost of a procedure" beside a
verified "the cost of a diagnosis") stays out of reach, though the library shows in other shapes that
the two table sets are used alike. Here the renaming is learned across shapes: two library templates
whose SQL is the same tree once tables, aliases and literals are masked (items.shape_of), over table
sets that differ by one consistent renaming, show that renaming; one shown in RENAME_SUPPORT shapes
at least may be applied to a base template of any shape. The words the library ties to each side
(its subjects: the core words of templates over one side that their siblings over the other side
never say, "diagnos" and "procedur") must agree with the question: a question that says a subject of
the old side is refused (it names the old table: "the cost of the diagnosis <a procedure title>"),
and a base paraphrase that says one is composed with the question's own word for the new side in its
place, or without it where the question says no side: the composed wording says what the question
says, and the item it names is the new table's alone (a value of the old column is binding's).

The role swap is the same learning with column names masked too: two templates of one role shape
over an event table each with its own columns (transfers.careunit / intime, prescriptions.drug /
starttime: "present in the SICU" and "given heparin") show a renaming of the tables and of their
columns one to one; kept where no plain renaming renames the same tables and one column renaming
alone is shown; never applied to a base that reads a column of the old table it does not rename.

The path renaming is the same learning with each template's path read plain (paths.py): a chart
value read through its ICU stay and its dictionary's link, a lab value by the visit, one shape once
the hop is collapsed and the link left out; the renamed SQL is written back the way the library reads
the new side. A role renaming whose item dictionary both sides share (d_items: an input's and an
output's items) swaps the event table for the item the question names where the library links that
item to the new table alone.

The subject swap is the same renaming for a template that names no item ("was patient N given any
procedure on the first visit?"): nothing to bind, so the question's subject word says the side (it must
say one of the new side and none of the old, and name no value at all: an item would be a condition
the base's SQL lacks), and the renaming is restricted to the tables the base reads (the yes/no reads
procedures_icd alone; the shapes that show the renaming read d_icd_procedures too).

Refused before anything is built: no renaming learned for the base's tables, the base reading a table
of the new side already (both tables), a negation, a value slot binding fills (the question names a
value of its own column), not exactly one value of the renamed column in the question, or that value
inside a longer one the question names. The composed question and SQL then go through the same rules,
binding, validation and risk as any composition.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import Entry, LibraryIndex
from core.match.items import SHAPES_KEPT, ItemSwap, _name, _renamed, _renaming, _shape, shape_of
from core.match.paths import Paths, library_paths
from core.match.reading import Reading
from core.match.spans import VALUE
from core.match.template import Slot, Template, parsed_sql, written
from core.match.values import bare_column
from core.match.words import canonical, stem, tokenize

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

RENAME_SUPPORT = 2  # shapes the library must show one renaming in (one pair may be an accident)
SUBJECT_SUPPORT = 2  # …and shape pairs a word must tell the two sides apart in to be a side's subject
SUBJECT_SHARE = 0.2  # …and the share of the renaming's shape pairs it must tell them apart in
# Table swaps planned per question, on its best voted base: each composes and matches three
# paraphrases (a train-size calibration's CPU), and the nearest base is the one the question asks of.
PLANS_PER_QUESTION = 1
SUBJECT_STEM = 5  # letters a subject's stem and a word's share at least to be one word in two forms

Renaming = tuple[tuple[str, str], ...]  # sorted (old table, new table) pairs, changed tables only


@dataclass(frozen=True)
class TableSwap(ItemSwap):
    """An item swap (items.ItemSwap) whose renaming comes from other shapes, with the base wording's
    subject words of the old side (`old_subjects`, stems) replaced by the question's word for the new
    side (`new_word`; "" where the question says no side: the word is left out, "the cost of a
    diagnosis of X" read as "the cost of a of X", which says no side either)."""

    old_subjects: frozenset[str] = frozenset()
    new_word: str = ""
    paths: Paths | None = dataclasses.field(default=None, compare=False)  # a renaming across paths
    # The item is one of a dictionary both sides share (d_items): a paraphrase that says an old side's
    # word the question does not replace is left out, never reworded without it ("the daily average
    # input" says its GROUP BY in "daily", a word the library also ties to the input side).
    shared: bool = False

    def apply(self, template: Template) -> tuple[str, str] | None:
        """The item swap, its wording outside the item said of the new side, or None."""
        slots = [s for s in template.slots if s.type == VALUE and bare_column(s.column) == self.old_column]
        if len(slots) != 1:
            return None
        if self.shared and not self.new_word and _subject_words(template.question, self.old_subjects):
            return None
        made = self.swapped(template)
        if made is None:
            return None
        # A renaming across paths is rerouted on the swapped tree itself, never on its SQL written and
        # parsed again (a parse per composed paraphrase): the same SQL either way (test_paths, over
        # every template of the EHRSQL train library under both path renamings it learns).
        tree = made[1] if self.paths is None else self.paths.rerouted(made[1], self._new_tables())
        if tree is None:
            return None
        before = self._reworded(template.question[: slots[0].start])
        sql = written(tree, template.dialect)
        return before + self.text + self._reworded(template.question[slots[0].end :]), sql

    def _new_tables(self) -> set[str]:
        return {n.rpartition(".")[2] for _, n in self.rename}

    def _reworded(self, text: str) -> str:
        return _reworded(text, self.old_subjects, self.new_word)


def _reworded(text: str, old_subjects: frozenset[str], new_word: str) -> str:
    """`text` with each subject word of the old side replaced by the question's word for the new side
    (or left out)."""
    out, end = [], 0
    for token in tokenize(text):
        if _says(_word(token.text), old_subjects):
            out += [text[end : token.start], new_word]
            end = token.end
    return re.sub(r" {2,}", " ", "".join(out) + text[end:])


@dataclass(frozen=True)
class SubjectSwap:
    """A template that names no item (a yes/no or a count of a visit's events: "was patient N given
    any procedure on the first visit?") over the renamed tables (`rename`, the pairs of a learned
    renaming the base reads), its old side's subject words replaced by the question's (`new_word`)."""

    rename: Renaming
    old_subjects: frozenset[str]
    new_word: str
    old_text: str  # the base question's subject words, for the answer's wording

    @property
    def phrase(self) -> str:
        return f"{self.new_word} instead of {self.old_text}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL over the new side, or None where it names an item or says
        no subject of the old side (its wording would not say which side it asks of)."""
        if any(s.type == VALUE for s in template.slots) or not _subject_words(
            template.question, self.old_subjects
        ):
            return None
        try:
            tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
        except (SqlglotError, ValueError, RecursionError):
            return None
        renamed = _renamed(tree, dict(self.rename))
        question = _reworded(template.question, self.old_subjects, self.new_word)
        return question, written(renamed, template.dialect)


def _subject_words(text: str, subjects: frozenset[str]) -> list[str]:
    return [t.text.lower() for t in tokenize(text) if _says(_word(t.text), subjects)]


@dataclass(frozen=True)
class LibraryTables:
    """What the library shows: renamings -> the entries over their new side, each renaming's
    subject stems (old side's, new side's), and the columns a role renaming renames too."""

    sources: dict[Renaming, tuple[int, ...]]
    subjects: dict[Renaming, tuple[frozenset[str], frozenset[str]]]
    columns: dict[Renaming, Renaming] = dataclasses.field(default_factory=dict)
    paths: dict[Renaming, Paths] = dataclasses.field(default_factory=dict)  # renamings across paths
    routes: Paths | None = None  # the library's paths (its items' links, for a shared dictionary)


def library_tables(index: LibraryIndex) -> LibraryTables:
    """Read once per library (cached on the index, as compose.py caches its conditions).

    Two readings of the same pairs: tables renamed alone (the masked SQL the same: diagnoses and
    procedures), and tables renamed with their own columns (the SQL the same once column names are
    masked too, the columns renamed one to one with their tables: a stay in a care unit and an order
    of a drug, transfers.careunit / intime for prescriptions.drug / starttime). A role renaming is
    kept only where no plain one renames the same tables and its shapes show one column renaming
    (each shape the columns it reads: an input's amount alone, or its amount and its start time)."""
    cached = getattr(index, "_compose_tables", None)
    if cached is not None:
        return cached
    support, sources, said = _pairs(index, roles=False)
    kept = [key for key, n in support.items() if n >= RENAME_SUPPORT]
    out = LibraryTables(
        {key: tuple(sources[key]) for key in kept},
        {key: _subjects(*said[key], support[key]) for key in kept},
        routes=library_paths([e.template for e in index.entries if e.template is not None]),
    )
    support, sources, said = _pairs(index, roles=True)
    by_tables: dict[Renaming, list[Renaming]] = defaultdict(list)
    for key in support:
        tables = tuple(p for p in key if not _is_column(p))
        if tables and tables not in out.sources:
            by_tables[tables].append(key)
    for tables, keys in by_tables.items():
        # every shape's part of one renaming (an input's amount alone, or with its time), else the one
        # renaming shown in RENAME_SUPPORT shapes
        for group in (keys, [key for key in keys if support[key] >= RENAME_SUPPORT]):
            columns = _one_renaming([p for key in group for p in key if _is_column(p)])
            if columns is not None and sum(support[key] for key in group) >= RENAME_SUPPORT:
                _keep_role(out, tables, columns, [(support[key], sources[key], said[key]) for key in group])
                break
    _routed(index, out)
    index._compose_tables = out  # type: ignore[attr-defined]
    return out


def _routed(index: LibraryIndex, out: LibraryTables) -> None:
    """The third reading: the same pairs with each template's path read plain (paths.py: a chart value
    read through its ICU stay and its dictionary's link, a lab value by the visit), kept where no
    plain or role renaming renames the same tables (a lab value and a chart value)."""
    paths = out.routes
    if paths is None or (not paths.hops and not paths.links):
        return
    token = repr((sorted(paths.hops.items()), sorted(paths.links.items())))
    support, sources, said = _pairs(index, roles=False, shape=lambda e: _plain_shape(e, paths, token))
    for key, n in support.items():
        if n >= RENAME_SUPPORT and key not in out.sources:
            out.sources[key] = tuple(sources[key])
            out.subjects[key] = _subjects(*said[key], n)
            out.paths[key] = paths


def _plain_shape(entry: Entry, paths: Paths, token: str) -> tuple[str, tuple[str, ...]]:
    """The entry's shape with its path read plain, once per template key and library paths (a
    calibration's folds learn the same paths); the plain shape where its SQL has no path to read."""
    found = shape_of(entry.template, entry.key)
    template = entry.template
    if not found[0] or template is None or not _has_path(template.sql_template, paths):
        return found
    memo = (entry.key, template.dialect, token)
    if memo not in _PLAIN:
        if len(_PLAIN) >= SHAPES_KEPT:
            _PLAIN.clear()
        tree = paths.plain(parsed_sql(template.sql_template, template.dialect).copy())
        _PLAIN[memo] = _shape.__wrapped__(tree.sql(dialect=template.dialect), template.dialect)
    return _PLAIN[memo]


_PLAIN: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}


def _has_path(sql: str, paths: Paths) -> bool:
    lowered = sql.lower()
    return any(f"{hop[1]}." in lowered for hop in paths.hops.values()) or any(
        f"{column} =" in lowered for column in paths.links.values()
    )


def _keep_role(
    out: LibraryTables, tables: Renaming, columns: Renaming, shown: list[tuple[int, list, tuple]]
) -> None:
    """One role renaming kept, its shapes' entries and words together."""
    old, new = Counter[str](), Counter[str]()
    for _, _, (said_old, said_new) in shown:
        old.update(said_old)
        new.update(said_new)
    out.sources[tables] = tuple(i for _, entries, _ in shown for i in entries)
    out.subjects[tables] = _subjects(old, new, sum(n for n, _, _ in shown))
    out.columns[tables] = columns


def _one_renaming(pairs: list[tuple[str, str]]) -> Renaming | None:
    """The column pairs of several role renamings of one table pair as one renaming, or None where
    two of them rename one column two ways (or two columns onto one): two renamings, no answer."""
    merged = dict(pairs)
    if len(merged) != len(set(pairs)) or len(set(merged.values())) != len(merged):
        return None
    return tuple(sorted(merged.items()))


def _is_column(pair: tuple[str, str]) -> bool:
    return pair[0].startswith(COLUMN)


COLUMN = "column:"  # a role renaming's column pairs, told from its table pairs in one key


def _pairs(
    index: LibraryIndex, *, roles: bool, shape: Callable[[Entry], tuple] | None = None
) -> tuple[Counter, dict, dict]:
    """Per renaming shown by two templates of one (role) shape: its shape pairs, the entries over
    its new side, and the core words each side says that the other does not. With `roles`, only
    pairs whose plain shapes differ (a column renamed), column pairs marked COLUMN."""
    by_shape: dict[str, dict[tuple[str, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, entry in enumerate(index.entries):
        masked, names = shape(entry) if shape else shape_of(entry.template, entry.key, roles=roles)
        if masked:
            by_shape[masked][names].append(i)
    support: Counter[Renaming] = Counter()
    sources: dict[Renaming, list[int]] = defaultdict(list)
    said: dict[Renaming, tuple[Counter[str], Counter[str]]] = defaultdict(lambda: (Counter(), Counter()))
    for sets in by_shape.values():
        for a, at in sets.items():
            for b, bt in sets.items():
                key = _key(index, a, b, at[0], bt[0]) if roles else _plain_key(a, b)
                if not key:
                    continue
                support[key] += 1
                sources[key] += bt
                old, new = _core(index, at), _core(index, bt)
                said[key][0].update(old - new)
                said[key][1].update(new - old)
    return support, sources, said


def _plain_key(a: tuple[str, ...], b: tuple[str, ...]) -> Renaming | None:
    rename = _renaming(a, b) if a != b and len(a) == len(b) else None
    return tuple(sorted(rename.items())) if rename else None


def _key(index: LibraryIndex, a: tuple[str, ...], b: tuple[str, ...], i: int, j: int) -> Renaming | None:
    """A role renaming from names `a` to `b` (tables, then "table.column"), or None: its tables
    renamed one to one, each column onto a column of its table's new table, a column name changed."""
    if a == b or len(a) != len(b):
        return None
    (plain, tables_a), (other, _) = (
        shape_of(index.entries[k].template, index.entries[k].key) for k in (i, j)
    )
    if plain == other:
        return None  # the same SQL but for its tables: a plain renaming's
    n = len(tables_a)
    tables, columns = _renaming(a[:n], b[:n]), _renaming(a[n:], b[n:])
    if not tables or columns is None:
        return None
    bare = {o.rpartition(".")[2]: t.rpartition(".")[2] for o, t in tables.items()}
    if any(
        bare.get(o.partition(".")[0], o.partition(".")[0]) != t.partition(".")[0] for o, t in columns.items()
    ):
        return None
    if all(o.partition(".")[2] == t.partition(".")[2] for o, t in columns.items()):
        return None  # no column name changed: a plain renaming's
    return tuple(sorted(tables.items())) + tuple(sorted((COLUMN + o, COLUMN + t) for o, t in columns.items()))


def _contained(reading: Reading, column: str) -> list[tuple[int, int, str]]:
    """The question's values of one column, read once per question (memo on the reading: a question
    is asked of five bases, and the value index's own cache is emptied by composed questions)."""
    memo = reading.__dict__.setdefault("_retabled", {})
    if column not in memo:
        memo[column] = reading.values.contained(reading.question, column) if reading.values else []
    return memo[column]


def _subjects(old: Counter[str], new: Counter[str], shapes: int) -> tuple[frozenset[str], frozenset[str]]:
    """Each side's subjects: words that tell it from the other side in SUBJECT_SHARE of the shape
    pairs showing the renaming (SUBJECT_SUPPORT at least) and never tell the other side from it
    ("patient" or "test", said on either side by some template, is no side's word)."""
    floor = max(SUBJECT_SUPPORT, SUBJECT_SHARE * shapes)
    return (
        frozenset(w for w, n in old.items() if n >= floor and not new[w]),
        frozenset(w for w, n in new.items() if n >= floor and not old[w]),
    )


def _core(index: LibraryIndex, entries: list[int]) -> set[str]:
    """The words every template of these entries says (its family's core), together."""
    cores = [index.families[k].core for k in {index.entries[i].key for i in entries} if k in index.families]
    return set.intersection(*map(set, cores)) if cores else set()


def _word(text: str) -> str:
    return canonical(stem(text))


def _says(word: str, subjects: frozenset[str]) -> bool:
    """Whether the word is one of the subjects in another form: the crude stem leaves "diagnosi"
    (diagnosis), "diagnos" (diagnosed) and "diagnostic" apart, one subject in three forms."""
    return any(
        word.startswith(s) or s.startswith(word) for s in subjects if min(len(word), len(s)) >= SUBJECT_STEM
    )


def table_plans(reading: Reading, index: LibraryIndex, base: int, vote: Vote) -> list[tuple[int, TableSwap]]:
    """The table swaps the question asks of the base entry's template (with the nearest entry over
    the new side, whose use shows the renaming), or []."""
    template = index.entries[base].template
    planned = vote.__dict__.setdefault("_table_swaps", [0])  # one question: its best voted base only
    if reading.values is None or template is None or reading.ops.get("negation"):
        return []
    if planned[0] >= PLANS_PER_QUESTION:  # before the library's renamings are read
        return []
    if not any(s.type == VALUE for s in template.slots):
        return _subject_plans(reading, index, base, vote)
    _, tables = shape_of(template, index.entries[base].key)
    learned = library_tables(index)
    plans = [  # not where the base reads the new side already: both tables
        key
        for key in learned.sources
        if {o for o, _ in key} <= set(tables)
        and not {n for _, n in key} & set(tables)
        and _covered(index.entries[base], key, learned.columns.get(key, ()))
    ]
    if not plans:
        return []
    slot, named = _slot(reading, template)
    if slot is None:
        return []
    out = []
    for key in plans:
        renamed = learned.columns.get(key, ())
        swap = _swap(
            reading, key, slot.column, slot.text, learned.subjects[key], renamed, learned.routes, named
        )
        if swap is not None:
            swap = dataclasses.replace(swap, paths=learned.paths.get(key))
            sources = learned.sources[key]
            out.append((sources[int(np.argmax(vote.sims[np.asarray(sources)]))], swap))
    planned[0] += len(out)
    return out


def _slot(reading: Reading, template: Template) -> tuple[Slot | None, bool]:
    """The template's one value slot the question names nothing of its column for (binding fills a
    slot whose own column the question names), or its one value slot, named (an item of a dictionary
    both sides share: d_items, for an input's and an output's items); (None, False) for neither."""
    unnamed = [
        s
        for s in template.slots
        if s.type == VALUE
        and not _contained(reading, s.column)
        and s.text.strip().lower() not in reading.lowered
    ]
    named = [s for s in template.slots if s.type == VALUE] if not unnamed else []
    if len(unnamed or named) != 1:
        return None, False
    return (unnamed or named)[0], bool(named)


def _subject_plans(
    reading: Reading, index: LibraryIndex, base: int, vote: Vote
) -> list[tuple[int, SubjectSwap]]:
    """The subject swaps the question asks of a base that names no item: a plain renaming (no column
    renamed) of tables it reads, restricted to those (the yes/no of any procedure reads
    procedures_icd alone, the renaming's shapes read d_icd_procedures too), where the base question
    says a subject of the old side, the question one of the new side and none of the old, and the
    question names no value at all (an item would be a condition this SQL lacks)."""
    template = index.entries[base].template
    assert template is not None and reading.values is not None
    if reading.values.spans(reading.question):
        return []
    tables = set(_tables(template.sql_template, template.dialect))
    learned = library_tables(index)
    words = [_word(t.text) for t in tokenize(reading.question)]
    out = []
    for key, sources in learned.sources.items():
        rename = tuple((o, n) for o, n in key if o in tables)
        if key in learned.columns or key in learned.paths or not rename or {n for _, n in key} & tables:
            continue
        old_subjects, new_subjects = learned.subjects[key]
        said_new = dict.fromkeys(t for t in _subject_words(reading.question, new_subjects))
        said_old = _subject_words(template.question, old_subjects)
        if not said_new or not said_old or any(_says(w, old_subjects) for w in words):
            continue
        source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
        out.append((source, SubjectSwap(rename, old_subjects, " ".join(said_new), " ".join(said_old))))
        break  # one renaming of the base's tables: two would be two answers
    vote.__dict__["_table_swaps"][0] += len(out)
    return out


@functools.lru_cache(maxsize=16384)
def _tables(sql: str, dialect: str) -> tuple[str, ...]:
    """The tables a template's SQL reads ("db.table" or "table"), once per SQL."""
    try:
        return tuple(_name(t) for t in parsed_sql(sql, dialect).find_all(exp.Table))
    except (SqlglotError, ValueError, RecursionError):
        return ()


def _covered(entry: Entry, key: Renaming, renamed: Renaming) -> bool:
    """Whether a role renaming renames every column the base reads of its renamed tables (another
    column, `transfers.dose_val_rx` for a prescriptions base, is no column of the new table)."""
    if not renamed:
        return True
    _, names = shape_of(entry.template, entry.key, roles=True)
    old = {o.rpartition(".")[2] for o, _ in key if not _is_column((o, ""))}
    columns = {o.removeprefix(COLUMN) for o, _ in renamed}
    return all(name in columns for name in names if "." in name and name.partition(".")[0] in old)


def _served(routes: Paths | None, key: Renaming, dictionary: str, value: str) -> bool:
    """Whether the library links this item of a shared dictionary to a new table of the renaming and
    to none of its old ones ("foley": outputevents only; an item it never shows: unknown, refused)."""
    served = routes.served.get((dictionary, value.lower()), frozenset()) if routes else frozenset()
    return any(n.rpartition(".")[2] in served for _, n in key) and not any(
        o.rpartition(".")[2] in served for o, _ in key
    )


def _swap(
    reading: Reading,
    key: Renaming,
    column: str,
    old_text: str,
    subjects: tuple[frozenset[str], frozenset[str]],
    renamed: Renaming = (),
    routes: Paths | None = None,
    shared: bool = False,
) -> TableSwap | None:
    """The swap of the slot's column onto the renamed table (or the column a role renaming renames
    it to), if the question names one value of it and says no subject of the old side (its words for
    the new side, in order, replace the base's). `shared`: the slot's column is a dictionary the
    renaming keeps (d_items, for an input's and an output's items), and the question names its
    item, which the library must link to the new side's table alone (`routes`: paths.Paths.served)."""
    old_column = bare_column(column)
    table, _, name = old_column.rpartition(".")
    new_table = next((n for o, n in key if o.rpartition(".")[2] == table), "")
    if bool(new_table) == bool(shared) or reading.values is None:
        return None
    columns = {o.removeprefix(COLUMN): n.removeprefix(COLUMN) for o, n in renamed}
    new_column = (
        columns.get(old_column, f"{new_table.rpartition('.')[2]}.{name}") if new_table else old_column
    )
    found = _contained(reading, new_column)
    longest = max(found, key=lambda f: f[1] - f[0], default=None)
    if longest is None or len({v for a, b, v in found if b - a == longest[1] - longest[0]}) != 1:
        return None
    a, b, value = longest
    if (a, b) not in reading.values.spans(reading.question):
        return None  # a part of a longer value ("vascular" in a procedure's title): not the item named
    if shared and not _served(routes, key, table, value):
        return None
    rest = reading.question[:a] + " " + reading.question[b:]  # the value's own words say no side
    words = [(t.text, _word(t.text)) for t in tokenize(rest)]
    old_subjects, new_subjects = subjects
    said_new = dict.fromkeys(text.lower() for text, w in words if _says(w, new_subjects))
    if any(_says(w, old_subjects) for _, w in words):
        return None
    base = ItemSwap(
        key, old_column, new_column, reading.question[a:b], value, old_text, tuple(columns.items())
    )
    return TableSwap(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                     old_subjects=old_subjects, new_word=" ".join(said_new), shared=shared)  # fmt: skip
