"""The caches that make a calibration cheaper must not change a decision: the remembered validation
verdict is validate_sql's (a refused SQL stays refused when asked again, and a verdict is never
carried to another catalog), a composition's one-parse template is the two-parse one, the
operators rule's remembered verdict is the fresh one (never carried to another family), a part's
votes are each question's own, binding's remembered fixed words are each family's own, and the
value index's caches survive another thread's clear."""

from __future__ import annotations

import dataclasses
import pickle
from types import SimpleNamespace

import numpy as np
import pytest

from core.match.binding import family_fixed_words, leftover_runs
from core.match.build import build_template
from core.match.checked import validation_error
from core.match.composing import _template
from core.match.index import Family
from core.match.library import Vote
from core.match.operators import operator_signature
from core.match.rules.operators import _reasons, operator_reasons
from core.match.values import ValueIndex
from core.match.words import tokenize
from core.types import CatalogSchema, TableSchema
from core.validation import SqlValidationError, validate_sql

PATIENTS = TableSchema("mimiciv_hosp", "patients", ("subject_id", "gender", "anchor_age"))
ADMISSIONS = TableSchema("mimiciv_hosp", "admissions", ("subject_id", "hadm_id", "admission_type"))
GOOD = "SELECT COUNT(*) FROM mimiciv_hosp.patients WHERE gender = 'F'"
NO_TABLE = "SELECT COUNT(*) FROM mimiciv_hosp.admissions WHERE admission_type = 'URGENT'"
WRITES = "DELETE FROM mimiciv_hosp.patients"


def _refusal(sql: str, catalog: CatalogSchema) -> str | None:
    try:
        validate_sql(sql, catalog)
    except SqlValidationError as error:
        return error.message
    return None


@pytest.mark.parametrize("sql", [GOOD, NO_TABLE, WRITES, "SELECT FROM WHERE", "SELECT 1; SELECT 2"])
def test_the_remembered_verdict_is_validate_sqls_every_time(sql):
    catalog = CatalogSchema(tables=(PATIENTS,))
    expected = _refusal(sql, catalog)
    assert validation_error(sql, catalog) == expected
    assert validation_error(sql, catalog) == expected  # asked again: remembered, the same
    assert (expected is None) == (sql == GOOD)


def test_a_verdict_is_never_carried_to_another_catalog():
    """Attack: a SQL accepted on a catalog that has the table must still be refused on one that
    lacks it (a source whose tables changed gets a new catalog), and the other way round."""
    wide, narrow = CatalogSchema(tables=(PATIENTS, ADMISSIONS)), CatalogSchema(tables=(PATIENTS,))
    assert validation_error(NO_TABLE, wide) is None
    assert validation_error(NO_TABLE, narrow) is not None
    assert validation_error(NO_TABLE, CatalogSchema(tables=(PATIENTS, ADMISSIONS))) is None
    assert wide == CatalogSchema(tables=(PATIENTS, ADMISSIONS))  # the memo is no field: equality holds


def test_a_catalog_with_verdicts_pickles_and_keeps_them_right():
    """A calibration hands its catalog to worker processes by pickle."""
    catalog = CatalogSchema(tables=(PATIENTS,))
    validation_error(NO_TABLE, catalog)
    copy = pickle.loads(pickle.dumps(catalog))
    assert validation_error(NO_TABLE, copy) == _refusal(NO_TABLE, copy)
    assert validation_error(GOOD, copy) is None


@pytest.mark.parametrize(
    ("question", "sql"),
    [
        ("how many female patients older than 65?",
         "SELECT COUNT(*) FROM mimiciv_hosp.patients AS p WHERE p.gender = 'F' AND p.anchor_age > 65"),
        # not sqlglot's own writing (case, spacing, a trailing semicolon): the two-parse path decides
        ("how many female patients older than 65?",
         "select count(*) from mimiciv_hosp.patients p where p.gender='F' and p.anchor_age>65;"),
        ("how many urgent admissions in 2150?",
         "SELECT COUNT(*) FROM mimiciv_hosp.admissions AS a WHERE a.admission_type = 'URGENT' "
         "AND STRFTIME('%Y', a.admittime) = '2150'"),
        ("what is it?", "SELECT FROM WHERE"),  # unusable either way, with the same error
    ],
)  # fmt: skip
@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_a_compositions_template_is_the_one_the_general_path_builds(question, sql, dialect):
    general = build_template(question, sql, dialect=dialect)
    assert build_template(question, sql, dialect=dialect, generated=True) == general
    assert _template(question, sql, dialect) == general


# --- the operators rule's verdicts, remembered per family (rules.operators.operator_reasons) ---------

FIRST_SQL = "SELECT a.admittime FROM mimiciv_hosp.admissions AS a WHERE a.subject_id = 1 ORDER BY 1 LIMIT 1"
TEMPLATE = build_template("when was patient 1 first admitted?", FIRST_SQL, dialect="postgres")


def _said(**words) -> dict:
    """A question's operator words: the template's, with `words` in their place."""
    return {**TEMPLATE.operators, **words}


def _family(orders: set[str]) -> Family:
    """The family of TEMPLATE whose paraphrases say each of `orders`."""
    said = [_said(order=o) for o in orders]
    operators = {k: frozenset(s[k] for s in said) for k in said[0]}
    return Family("k", operators, frozenset(), signatures=frozenset(operator_signature(s) for s in said))


def test_a_remembered_operator_verdict_is_the_fresh_one_each_time():
    family = _family({"first"})
    for ops in (_said(order="last"), _said(order="first"), {}, _said(order="first", negation=True)):
        expected = _reasons(ops, TEMPLATE, family)  # judged afresh
        assert operator_reasons(ops, TEMPLATE, family) == expected
        assert operator_reasons(ops, TEMPLATE, family) == expected  # asked again: remembered, the same
    assert operator_reasons(_said(order="last"), TEMPLATE, family)  # "last" for a "first" family: refused
    assert not operator_reasons(_said(order="first"), TEMPLATE, family)


def test_a_remembered_operator_verdict_is_never_carried_to_another_family():
    """Attack: a library that changed (a paraphrase saying "last" approved) builds its families anew;
    the old family's refusal must not follow the template there, nor the new one's acceptance back."""
    old, new = _family({"first"}), _family({"first", "last"})
    assert operator_reasons(_said(order="last"), TEMPLATE, old)
    assert not operator_reasons(_said(order="last"), TEMPLATE, new)
    assert operator_reasons(_said(order="last"), TEMPLATE, old)
    assert old == _family({"first"})  # the memo is no field: equality holds


def test_a_remembered_operator_verdict_reads_the_templates_operator_keys():
    """Attack: two templates of one family (a composition keeps its base's family) whose operator
    keys differ must not share a verdict: a key the template has and the family never says refuses."""
    other = dataclasses.replace(TEMPLATE, operators={**TEMPLATE.operators, "threshold": "above"})
    family, ops = _family({"first"}), _said(order="first")
    assert not operator_reasons(ops, TEMPLATE, family)
    assert operator_reasons(ops, other, family) == _reasons(ops, other, family) != []
    assert not operator_reasons(ops, TEMPLATE, family)


def test_a_caller_changing_a_remembered_verdict_changes_nothing_after():
    family = _family({"first"})
    reasons = operator_reasons(_said(order="last"), TEMPLATE, family)
    reasons.clear()
    assert operator_reasons(_said(order="last"), TEMPLATE, family) == _reasons(
        _said(order="last"), TEMPLATE, family
    )


# --- a calibration part's votes made together (library.Vote.each) ------------------------------------


def _voting_library(entries: int = 400, dims: int = 24, seed: int = 3) -> SimpleNamespace:
    """What a vote reads of a library: its normalised matrix and each entry's template key."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((entries, dims)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return SimpleNamespace(matrix=matrix, entries=[SimpleNamespace(key=f"t{i % 37}") for i in range(entries)])


def test_a_parts_votes_are_each_questions_own_vote_to_the_last_bit():
    """The report must not move: each vote of Vote.each is Vote.of's, bit for bit (a batched
    matrix product sums in another order and differed by 7.8e-5 on train)."""
    library = _voting_library()
    questions = np.random.default_rng(4).standard_normal((60, 24)).astype(np.float32)
    for together, vector in zip(Vote.each(questions, library), questions, strict=True):
        alone = Vote.of(vector, library)
        assert together.sims.tobytes() == alone.sims.tobytes()
        assert together.top.tolist() == alone.top.tolist()
        assert together.ranked == alone.ranked


# --- the words binding leaves out of value runs, remembered per family (binding) ---------------------


def _words_family(words: set[str], synonyms: dict | None = None) -> Family:
    return Family("k", {}, frozenset(words), synonyms=synonyms or {})


def test_a_familys_fixed_words_are_the_fresh_ones_and_made_once():
    family = _words_family(
        {"prescrib", "drug"}, {"medic": frozenset({"drug"}), "dose": frozenset({"amount"})}
    )
    fixed = family_fixed_words(family)
    assert fixed == {"prescrib", "drug", "medic"}  # a synonym of a family word, not of another
    assert family_fixed_words(family) is fixed  # remembered
    assert family == _words_family(
        {"prescrib", "drug"}, {"medic": frozenset({"drug"}), "dose": frozenset({"amount"})}
    )


def test_remembered_fixed_words_are_never_carried_to_another_family():
    """Attack: a library that changed (a paraphrase saying "aspirin" approved) builds its families
    anew, under the same template key: the old family's words must not decide the new one's runs,
    nor the new one's the old one's (a memo by template key, or a word's status remembered without
    the family's words, fails here)."""
    question = "how many patients were prescribed aspirin?"
    tokens = tokenize(question)
    template = build_template("how many patients were prescribed heparin?",
                              "SELECT COUNT(*) FROM p WHERE p.drug = 'heparin'", dialect="postgres")  # fmt: skip
    old, new = _words_family({"patient", "prescrib"}), _words_family({"patient", "prescrib", "aspirin"})

    def runs(family: Family) -> list[str]:
        return [r.text for r in leftover_runs(question, tokens, [], template, family_fixed_words(family))]

    assert runs(old) == ["aspirin"]
    assert runs(new) == []
    assert runs(old) == ["aspirin"]


# --- the value index's caches read once (values.ValueIndex) -----------------------------------------


class _ClearedBetween(dict):
    """A cache another thread of a web worker clears between a check and a read: `in` finds the
    key, and the cache is empty by the time it is read."""

    def __contains__(self, key) -> bool:
        found = super().__contains__(key)
        self.clear()
        return found


def test_a_value_cache_cleared_by_another_thread_never_fails_a_question():
    """Attack: the check-then-read the values' caches did (`if key in cache: return cache[key]`)
    raised KeyError when another thread cleared the cache in between."""
    values = ValueIndex({"d_labitems.label": ["potassium", "potassium, whole blood"]})
    question = "the last potassium value of patient 1"
    found, longer = values._all(question), values.longer("d_labitems.label", "potassium")
    assert longer == ["potassium, whole blood"]
    values._cache = _ClearedBetween(values._cache)
    values._longer = _ClearedBetween(values._longer)
    assert values._all(question) == found
    assert values.longer("d_labitems.label", "potassium") == longer


def test_an_empty_fold_library_has_no_votes():
    """A small library's fold may keep nothing to match against (its matrix has no columns to
    multiply): no vote, and match_library answers nothing, as it did when it voted itself."""
    empty = SimpleNamespace(matrix=np.zeros((0, 1), dtype=np.float32), entries=[])
    assert Vote.each([np.ones(24, dtype=np.float32)] * 2, empty) == [None, None]
