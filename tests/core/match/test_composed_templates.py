"""A composition's template (build.build_template with `generated`) takes the composed SQL text as
its normal form where its self-check proves it (build._as_written), without writing its parse again:
it must be the template the general path (build._built) makes, for every composition the corpus
makes, and for SQL that is not its own normal form or does not rebuild itself."""

from __future__ import annotations

import pytest
from sqlglot import exp

from core.match import build, composing, reselected, retimed, untimed
from core.match import template as template_module
from core.match.build import build_template
from core.match.operators import question_operators
from tests.core.match import corpus


def _both(question: str, sql: str, dialect: str) -> tuple:
    ops = question_operators(question)
    return build._as_written(question, sql, dialect, None, ops), build._built(
        question, sql, dialect, None, ops, True
    )


def test_every_composition_of_the_corpus_is_the_template_the_general_path_builds(monkeypatch):
    seen: dict[tuple[str, str, str], tuple] = {}
    made = composing._template.__wrapped__  # not the cache: every composition is built here

    def both(question: str, sql: str, dialect: str):
        seen.setdefault((question, sql, dialect), _both(question, sql, dialect))
        return made(question, sql, dialect)

    monkeypatch.setattr(composing, "_template", both)
    monkeypatch.setattr(composing, "_COMPOSED", {})
    corpus.decisions(corpus.build(), corpus.RISK)
    written = [w for w, _ in seen.values() if w is not None]
    assert len(seen) >= 100 and len(written) >= 0.9 * len(seen)  # most are taken as written
    for (question, sql, dialect), (as_written, general) in seen.items():
        assert build_template(question, sql, dialect=dialect, generated=True) == general
        if as_written is not None:
            assert as_written.to_dict() == general.to_dict(), (question, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "select count(*) from patients as p where p.anchor_age > 65",  # not sqlglot's writing
        "SELECT COUNT(*) FROM patients AS p WHERE p.anchor_age > 65 AND p.anchor_age > 65.0",
        "SELECT COUNT(*) FROM patients AS p WHERE (p.anchor_age > 65)",  # a paren sqlglot keeps
        "SELECT COUNT(*) FROM patients AS p WHERE p.anchor_age > -65",  # a signed number
    ],
)
def test_sql_said_generated_but_not_its_own_normal_form_gets_the_general_paths_template(sql):
    question = "how many patients are older than 65?"
    general = build_template(question, sql)
    assert build_template(question, sql, generated=True) == general
    assert general.sql_template == general.sql_template.strip() and general.usable == (not general.error)


def test_a_composition_that_does_not_rebuild_itself_falls_back_and_says_why():
    # the number is said twice in the SQL but once in the question: the general path decides
    question = "how many patients are older than 65?"
    sql = "SELECT COUNT(*) FROM patients AS p WHERE p.anchor_age > 65 OR p.dod > 'x'"
    as_written, general = _both(question, sql, "postgres")
    assert build_template(question, sql, generated=True) == general
    assert as_written is None or as_written == general


def test_unparsable_generated_sql_is_the_general_paths_unusable_template():
    question = "how many patients?"
    as_written, general = _both(question, "SELECT FROM WHERE (", "postgres")
    assert as_written is None and general.error.startswith("unusable SQL")
    assert build_template(question, "SELECT FROM WHERE (", generated=True) == general


def shape(tree) -> list:
    """Everything about a tree that a reader can see, node by node in walk order: its type, where it
    hangs (arg key, list index, parent's type), its plain arguments (names, quoting, literal text and
    kind) and its comments."""
    return [
        (type(n).__name__, n.arg_key, n.index, type(n.parent).__name__, n.comments,
         sorted((k, v) for k, v in n.args.items() if not isinstance(v, (exp.Expr, list)) and v is not None))
        for n in tree.walk()
    ]  # fmt: skip


class _Checked(dict):
    """template._WRITTEN that compares each tree a composition keeps with the parse of its SQL."""

    def __init__(self) -> None:
        super().__init__()
        self.compared: list[tuple[str, bool]] = []

    def __setitem__(self, key, tree) -> None:
        sql, dialect = key
        parsed = template_module.without_positions(template_module.parse_sql(sql, dialect))
        self.compared.append((sql, repr(tree) == repr(parsed) and shape(tree) == shape(parsed)))
        super().__setitem__(key, tree)


def test_every_composition_of_the_corpus_keeps_the_tree_its_sql_parses_to(monkeypatch):
    """A composition's SQL is its tree as written, kept as the SQL's parse (template.written): every
    composition the corpus makes (every kind) must be the very tree sqlglot parses its SQL to, or
    decisions would depend on whether parsed_sql still held the kept tree or parsed the SQL again."""
    checked = _Checked()
    monkeypatch.setattr(template_module, "_WRITTEN", checked)
    monkeypatch.setattr(composing, "_COMPOSED", {})
    for cached in (composing._template, retimed._rewritten, untimed._dropped, reselected.returning_column):
        cached.cache_clear()
    template_module.parsed_sql.cache_clear()
    corpus.decisions(corpus.build(), corpus.RISK)
    assert len(checked.compared) >= 100, len(checked.compared)
    assert [sql for sql, same in checked.compared if not same] == []


def test_a_tree_kept_for_its_sql_is_what_parsed_sql_hands_out_once():
    tree = template_module.parse_sql("SELECT COUNT(*) FROM patients WHERE patients.gender = 'f'", "sqlite")
    tree.find(exp.Literal).replace(exp.Literal.string("m"))
    sql = template_module.written(tree, "sqlite")
    assert sql == "SELECT COUNT(*) FROM patients WHERE patients.gender = 'm'"
    assert template_module.parsed_sql(sql, "sqlite") is tree
    template_module.parsed_sql.cache_clear()  # let go of it: the SQL is parsed again, the same tree
    again = template_module.parsed_sql(sql, "sqlite")
    assert again is not tree and shape(again) == shape(tree)


def test_a_where_added_after_group_by_is_kept_in_the_parses_walk_order():
    """The attack on the kept tree: a WHERE added to a SELECT with a GROUP BY and HAVING goes last among
    its arguments, so its literal is walked after the HAVING's; kept in text order, the tree walks its
    literals as the parse of its SQL does (a slot's literal index is its position in that walk)."""
    sql = "SELECT p.drug FROM prescriptions AS p GROUP BY p.drug HAVING COUNT(*) > 2 ORDER BY p.drug LIMIT 5"
    tree = template_module.parse_sql(sql, "sqlite")
    tree.where("p.route = 'IV'", copy=False)
    assert [lit.this for lit in tree.find_all(exp.Literal)] == ["5", "2", "IV"]  # as sqlglot leaves it
    made = template_module.written(tree, "sqlite")
    kept = template_module.parsed_sql(made, "sqlite")
    parsed = template_module.without_positions(template_module.parse_sql(made, "sqlite"))
    assert [lit.this for lit in kept.find_all(exp.Literal)] == ["5", "IV", "2"]
    assert shape(kept) == shape(parsed) and repr(kept) == repr(parsed)
