"""The item swap: a verified template's named item swapped for one of the same role in tables the
library uses alike (a lab value for a chart value: labevents / d_labitems for chartevents / d_items),
on the SQL tree, worded as the base question words its own item.

Why: binding already fills a value slot with any value of the slot's own column ("the last sodium
value" for a verified "the last potassium value"); what it cannot fill is a value of another column
("the last heart rate value", a d_items label, beside a d_labitems template). The library shows which
tables are used alike: two of its templates whose SQL is the same tree once table names, aliases and
literals are masked, over different tables (SHAPE_SUPPORT such shapes at least). The swap renames
those tables in the base template's SQL, puts the question's value (read from the other column, as
the question names it) into the slot's literal, and puts the question's words for it into the base
question; the composition then goes through the same rules, binding, SQL validation (the catalog
checks every renamed column exists) and risk as any other (compose.py, feature `composed`).

Planned only for a value slot the question names nothing of its own column for (else binding does
it) and only where the renamed column holds exactly one value the question names; a LIKE slot (a
pattern written from the question's words) is never swapped.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from core.match.index import LibraryIndex
from core.match.spans import VALUE
from core.match.template import Slot, Template, parsed_sql, written
from core.match.values import ValueFinder, bare_column

if TYPE_CHECKING:  # the vote is library.py's, and library.py calls compose.py, which calls this module
    from core.match.library import Vote

SHAPE_SUPPORT = 1  # shapes the library must show two table sets used alike in


@dataclass(frozen=True)
class ItemSwap:
    """Rename tables (`rename`: "db.table" -> "db.table") and bind the slot of `old_column` to `value`."""

    rename: tuple[tuple[str, str], ...]
    old_column: str  # bare: "d_labitems.label"
    new_column: str  # bare: "d_items.label"
    text: str  # the question's words for the item: "heart rate"
    value: str  # the database value: "Heart Rate"
    old_text: str  # the base question's words for its item, for the wording
    columns: tuple[tuple[str, str], ...] = ()  # renamed columns ("table.column" -> "table.column")

    @property
    def phrase(self) -> str:
        return f"{self.text} instead of {self.old_text}"

    def apply(self, template: Template) -> tuple[str, str] | None:
        """One paraphrase's question and SQL with its item swapped, or None where it has no plain
        value slot of the old column."""
        made = self.swapped(template)
        return None if made is None else (made[0], written(made[1], template.dialect))

    def swapped(self, template: Template) -> tuple[str, exp.Expr] | None:
        """`apply`'s question and its SQL as a tree (a copy, the caller's to change) before it is
        written: a swap that changes the SQL further (retabled.TableSwap's path) changes this tree
        rather than parsing the written text again."""
        slots = [s for s in template.slots if s.type == VALUE and bare_column(s.column) == self.old_column]
        if len(slots) != 1 or any(u.like or not u.is_string for u in slots[0].uses):
            return None
        slot = slots[0]
        question = template.question[: slot.start] + self.text + template.question[slot.end :]
        try:
            tree = parsed_sql(template.sql_template, template.dialect).copy()  # changed below: a copy
        except (SqlglotError, ValueError):
            return None
        literals = list(tree.find_all(exp.Literal))
        for use in slot.uses:
            literals[use.index].replace(exp.Literal.string(use.prefix + self.value + use.suffix))
        return question, _renamed(tree, dict(self.rename), dict(self.columns))


def _renamed(tree: exp.Expr, rename: dict[str, str], columns: dict[str, str] | None = None) -> exp.Expr:
    """Every reference to a renamed table renamed: the table, a column qualified by the table's own
    name (EHRSQL writes `diagnoses_icd.icd_code`, no alias), and a string naming the table
    (`cost.event_type = 'diagnoses_icd'`); a column qualified by an alias keeps its alias. `columns`:
    columns renamed too, as the table qualifies them ("transfers.careunit" -> "prescriptions.drug")."""
    bare = {old.rpartition(".")[2]: new.rpartition(".")[2] for old, new in rename.items()}
    for column in tree.find_all(exp.Column) if columns else ():
        new_name = columns.get(f"{column.table}.{column.name}".lower())
        if new_name is not None:
            column.set("this", exp.to_identifier(new_name.rpartition(".")[2]))
    for table in tree.find_all(exp.Table):
        new = rename.get(_name(table))
        if new is not None:
            db, _, name = new.rpartition(".")
            table.set("this", exp.to_identifier(name))
            table.set("db", exp.to_identifier(db) if db else None)
    for column in tree.find_all(exp.Column):
        if column.table.lower() in bare:
            column.set("table", exp.to_identifier(bare[column.table.lower()]))
    for literal in list(tree.find_all(exp.Literal)):
        if literal.is_string and literal.this.lower() in bare:
            literal.replace(exp.Literal.string(bare[literal.this.lower()]))
    return tree


def _name(table: exp.Table) -> str:
    return f"{table.db}.{table.name}".lower() if table.db else table.name.lower()


def shape_of(template: Template | None, key: str = "", *, roles: bool = False) -> tuple[str, tuple[str, ...]]:
    """The template's SQL with table names, aliases and literals masked, and its tables in order;
    ("", ()) for a template with no value slot (nothing to swap) or SQL that does not parse.
    `roles`: column names masked too, and the names are its tables then its columns ("table.column",
    as the SQL qualifies them), in order: two event tables read alike with their own columns
    (transfers.careunit / intime, prescriptions.drug / starttime) have one role shape.

    `key`: the template's key (index.Entry.key), where the caller has it. Paraphrases of one template
    differ only in their slot literals, which the key replaces and the shape masks: one shape per key
    (1,055 keys for 4,095 distinct SQL texts in EHRSQL train), so each is read once per process
    however many folds' libraries, libraries or paraphrases ask (a train calibration's CPU)."""
    if template is None or not template.usable or not any(s.type == VALUE for s in template.slots):
        return "", ()
    if not key:
        return _shape(template.sql_template, template.dialect, roles)
    found = _BY_KEY.get((key, template.dialect, roles))
    if found is None:
        if len(_BY_KEY) >= SHAPES_KEPT:  # a web process that sees many libraries stays small
            _BY_KEY.clear()
        found = _shape.__wrapped__(template.sql_template, template.dialect, roles)
        _BY_KEY[(key, template.dialect, roles)] = found
    return found


SHAPES_KEPT = 16384
_BY_KEY: dict[tuple[str, str, bool], tuple[str, tuple[str, ...]]] = {}


@functools.lru_cache(maxsize=SHAPES_KEPT)
def _shape(sql: str, dialect: str, roles: bool = False) -> tuple[str, tuple[str, ...]]:
    """Once per SQL, for a template read without its key (a composed one)."""
    try:
        tree = parsed_sql(sql, dialect).copy()
    except (SqlglotError, ValueError, RecursionError):
        return "", ()
    names = tuple(_name(t) for t in tree.find_all(exp.Table))
    for table in list(tree.find_all(exp.Table)):
        table.replace(exp.to_table("_t"))
    for column in tree.find_all(exp.Column):
        if roles:
            names += (f"{column.table}.{column.name}".lower(),)
            column.set("this", exp.to_identifier("_c"))
        column.set("table", None)
    for literal in list(tree.find_all(exp.Literal)):
        literal.replace(exp.var("_v"))
    return tree.sql(dialect=dialect, copy=False), names


@dataclass(frozen=True)
class LibraryItems:
    """Table sets the library uses alike: tables -> {other tables: the entries over the other tables}."""

    alike: dict[tuple[str, ...], dict[tuple[str, ...], tuple[int, ...]]]


def library_items(index: LibraryIndex) -> LibraryItems:
    """Read once per library (cached on the index, as compose.py caches its conditions)."""
    cached = getattr(index, "_compose_items", None)
    if cached is not None:
        return cached
    by_shape: dict[str, dict[tuple[str, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, entry in enumerate(index.entries):
        shape, tables = shape_of(entry.template, entry.key)
        if shape:
            by_shape[shape][tables].append(i)
    support: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = defaultdict(int)
    entries: dict[tuple[tuple[str, ...], tuple[str, ...]], list[int]] = defaultdict(list)
    for sets in by_shape.values():
        for a in sets:
            for b, at in sets.items():
                if a != b and len(a) == len(b):
                    support[(a, b)] += 1
                    entries[(a, b)] += at
    alike: dict[tuple[str, ...], dict[tuple[str, ...], tuple[int, ...]]] = defaultdict(dict)
    for (a, b), n in support.items():
        if n >= SHAPE_SUPPORT:
            alike[a][b] = tuple(entries[(a, b)])
    out = LibraryItems(dict(alike))
    index._compose_items = out  # type: ignore[attr-defined]
    return out


def item_plans(
    question: str, values: ValueFinder | None, index: LibraryIndex, base: int, vote: Vote
) -> list[tuple[int, ItemSwap]]:
    """The item swaps the question asks of the base entry's template (with the nearest entry over
    the other tables, whose use shows the swap), or []."""
    template = index.entries[base].template
    if values is None or template is None:
        return []
    _, tables = shape_of(template, index.entries[base].key)
    others = library_items(index).alike.get(tables, {})
    if not others:
        return []
    slot = _unnamed_slot(template, question, values)
    if slot is None:
        return []
    out = []
    for other, sources in others.items():
        rename = _renaming(tables, other)
        if rename is None:
            continue
        old_column = bare_column(slot.column)
        table, _, column = old_column.rpartition(".")
        new_table = next((n for o, n in rename.items() if o.rpartition(".")[2] == table), "")
        if not new_table:
            continue
        new_column = f"{new_table.rpartition('.')[2]}.{column}"
        found = values.contained(question, new_column)
        longest = max(found, key=lambda f: f[1] - f[0], default=None)
        if longest is None or len({v for a, b, v in found if b - a == longest[1] - longest[0]}) != 1:
            continue
        a, b, value = longest
        source = sources[int(np.argmax(vote.sims[np.asarray(sources)]))]
        swap = ItemSwap(
            tuple(sorted(rename.items())), old_column, new_column, question[a:b], value, slot.text
        )
        out.append((source, swap))
    return out


def _unnamed_slot(template: Template, question: str, values: ValueFinder) -> Slot | None:
    """The template's one value slot the question names nothing of its column for, or None."""
    unnamed = [
        s
        for s in template.slots
        if s.type == VALUE
        and not values.contained(question, s.column)
        and s.text.strip().lower() not in question.lower()
    ]
    return unnamed[0] if len(unnamed) == 1 else None


def _renaming(old: tuple[str, ...], new: tuple[str, ...]) -> dict[str, str] | None:
    """old[i] -> new[i] for every place, or None where one table would become two."""
    rename: dict[str, str] = {}
    for a, b in zip(old, new, strict=True):
        if rename.setdefault(a, b) != b:
            return None
    if len(set(rename.values())) != len(rename):
        return None
    return {a: b for a, b in rename.items() if a != b}
