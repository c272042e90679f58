"""A composition's template (build.build_template with `generated`) takes the composed SQL text as
its normal form where its self-check proves it (build._as_written), without writing its parse again:
it must be the template the general path (build._built) makes, for every composition the corpus
makes, and for SQL that is not its own normal form or does not rebuild itself."""

from __future__ import annotations

import pytest

from core.match import build, composing
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
