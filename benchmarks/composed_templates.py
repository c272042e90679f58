"""Every composition's template made both ways, compared: `python benchmarks/composed_templates.py
[--home DIR]`.

Runs a train-size calibration (calibration.library_cross_validate on library_scale.py's `ehrsql`
source, one process, nothing reused: import it first with `library_scale.py --parts import`) with
composing.py's template maker wrapped: each composed (question, SQL) is built by build_template (which
takes a composition's SQL text as its normal form when its self-check proves it, build._as_written)
and by the general path (build._built: the parse written again first), and the two templates must
be equal (`to_dict()` and `==`). And each tree a composition keeps as its SQL's parse
(template.written) must be the tree sqlglot parses that SQL to (the same nodes in the same walk
order, names, quoting, literals: `same_tree`). Prints how many were taken as written, how many fell
back, how many kept trees were compared, and the differences (the first few in full); exit status 1
on any difference. `--library`: instead, every
train pair (question, gold SQL) both ways as the library builds it with `generated` (library_cache
passes validate_sql's text, sqlglot's writing): the gold SQL as it is (mostly not sqlglot's writing)
and as sqlglot writes it; no calibration, no database.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import library_scale
import pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=pipeline.DEFAULT_HOME)
    parser.add_argument(
        "--library", action="store_true", help="the train pairs, not a calibration's compositions"
    )
    args = parser.parse_args(argv)
    if not library_scale.available():
        print(f"{library_scale.DATA} is not there: nothing to compare")
        return 1
    if args.library:
        return _library()
    started = pipeline.prepare(args.home.resolve())
    try:
        from askdb.services.calibration import library_cross_validate
        from core.match import build, composing
        from core.match.operators import question_operators

        counts = {"as written": 0, "fell back": 0, "differ": 0}
        shown: list[str] = []
        seen: set[tuple[str, str, str]] = set()
        made = composing._template

        def both(question: str, sql: str, dialect: str):
            template = made(question, sql, dialect)
            counts["asked"] = counts.get("asked", 0) + 1
            if (question, sql, dialect) in seen:
                return template
            seen.add((question, sql, dialect))
            ops = question_operators(question)
            written = build._as_written(question, sql, dialect, None, ops)
            general = build._built(question, sql, dialect, None, ops, True)
            counts["as written" if written is not None else "fell back"] += 1
            if template.to_dict() != general.to_dict() or template != general:
                counts["differ"] += 1
                if len(shown) < 5:
                    shown.append(f"{question!r}\n  {sql}\n  {template.to_dict()}\n  {general.to_dict()}")
            return template

        from core.match import template as template_module

        class Checked(dict):
            """template._WRITTEN comparing each kept tree with the parse of its SQL."""

            def __setitem__(self, key: tuple[str, str], tree) -> None:
                parsed = template_module.without_positions(template_module.parse_sql(*key))
                counts["kept trees"] = counts.get("kept trees", 0) + 1
                if not same_tree(tree, parsed):
                    counts["differ"] += 1
                    if len(shown) < 5:
                        shown.append(f"kept tree differs from the parse of\n  {key[0]}")
                super().__setitem__(key, tree)

        kept = template_module._WRITTEN
        composing._template = both  # type: ignore[assignment]
        template_module._WRITTEN = Checked()
        try:
            library_cross_validate(source=library_scale.ensure_source(), processes=1, reuse=False)
        finally:
            composing._template = made  # type: ignore[assignment]
            template_module._WRITTEN = kept
    finally:
        from infra import embedded

        embedded.release(started)
    print(f"distinct composed templates: {counts}")
    print("\n".join(shown))
    return 1 if counts["differ"] else 0


def same_tree(a, b) -> bool:
    """Whether two sqlglot trees are the same to every reader: node by node in walk order, its type,
    where it hangs (arg key, list index, parent's type), its plain arguments and comments."""
    from sqlglot import exp

    def shape(tree) -> list:
        return [
            (type(n).__name__, n.arg_key, n.index, type(n.parent).__name__, n.comments,
             sorted((k, v) for k, v in n.args.items() if not isinstance(v, (exp.Expr, list)) and v is not None))
            for n in tree.walk()
        ]  # fmt: skip

    return repr(a) == repr(b) and shape(a) == shape(b)


def _library() -> int:
    """The train pairs both ways, as written and as sqlglot writes them."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from core.match import build
    from core.match.operators import question_operators
    from core.match.template import parse_sql
    from infra.formats import load_items

    train = library_scale.DATA / "train"
    counts = {"as written": 0, "fell back": 0, "differ": 0}
    for item in load_items(train / "data.json", train / "label.json"):
        if not item.gold_sql:
            continue
        try:
            texts = [item.gold_sql, parse_sql(item.gold_sql, "sqlite").sql(dialect="sqlite")]
        except Exception:
            texts = [item.gold_sql]
        for sql in texts:
            ops = question_operators(item.question)
            written = build._as_written(item.question, sql, "sqlite", None, ops)
            general = build._built(item.question, sql, "sqlite", None, ops, True)
            counts["as written" if written is not None else "fell back"] += 1
            if written is not None and (written.to_dict() != general.to_dict() or written != general):
                counts["differ"] += 1
                print(f"{item.question!r}\n  {sql}")
    print(f"train pairs (as written, and as sqlglot writes them): {counts}")
    return 1 if counts["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
