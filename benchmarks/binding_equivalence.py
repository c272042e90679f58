"""Binding and template keys written from the template's SQL text (template._Skeleton) against the
tree-copying code they replaced: `python benchmarks/binding_equivalence.py [--limit N] [--base REF]`.

For every EHRSQL train pair (library_scale.DATA) the template is built with the new code and with
`--base`'s template.py (git show; default HEAD), and compared; then each usable template is bound
with its own values and with hostile ones for each slot type (quotes, backslashes, comment markers,
line breaks, signed numbers) by both, and the two must give the same text or the same BindError,
and the same template_key. Prints counts and the first differences; exit status 1 on any.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOSTILE = {
    "string": [
        "O'Brien",
        "a\\b",
        "x' OR 1=1 --",
        "line\nbreak\rhere",
        "/* c */ y",
        "%_'%",
        "''",
        "\\'",
        "ab;c",
    ],
    "number": ["5", "12.5", "-3", "+4", "0", "1e3", "7 --", "5'"],
    "year": ["2100", "2099", "-210", "21'0"],
    "date": ["2100-01-31", "2100-13-01", "x'"],
    "gender": ["M", "F", "x'"],
}


def _old_module(base: str):
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{base}:core/match/template.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spec = importlib.util.spec_from_loader("_old_template", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules["_old_template"] = module
    exec(compile(text, "old_template.py", "exec"), module.__dict__)
    return module


def _outcome(fn, *args) -> str:
    try:
        return "ok:" + fn(*args)
    except Exception as error:  # BindError and anything else: the same either way
        return f"{type(error).__name__}:{error}"


def _values(template) -> list[dict[str, str]]:
    own = {s.name: s.value for s in template.slots}
    out = [own]
    for slot in template.slots:
        kind = (
            slot.type
            if slot.type in HOSTILE
            else ("string" if any(u.is_string for u in slot.uses) else "number")
        )
        out += [own | {slot.name: v} for v in HOSTILE.get(kind, []) + HOSTILE["string"][:3]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--base", default="HEAD")
    args = parser.parse_args(argv)
    import library_scale

    from core.match import build
    from core.match import template as new
    from infra.formats import load_items

    old = _old_module(args.base)
    train = library_scale.DATA / "train"
    items = [i for i in load_items(str(train / "data.json"), str(train / "label.json")) if i.gold_sql]
    items = items[: args.limit] if args.limit else items
    counts = {"templates": 0, "usable": 0, "fallback": 0, "bindings": 0, "differ": 0}
    shown = 0
    for item in items:
        made = build.build_template(item.question, item.gold_sql, dialect="sqlite")
        build.bind_sql = old.bind_sql
        try:
            before = build.build_template(item.question, item.gold_sql, dialect="sqlite")
        finally:
            build.bind_sql = new.bind_sql
        counts["templates"] += 1
        pairs = [("template", made.to_dict(), before.to_dict())]
        if made.usable:
            counts["usable"] += 1
            counts["fallback"] += new._skeleton_of(made).parts is None
            pairs.append(("key", new.template_key(made), old.template_key(made)))
            for values in _values(made):
                counts["bindings"] += 1
                pairs.append(
                    (values, _outcome(new.bind_sql, made, values), _outcome(old.bind_sql, made, values))
                )
        for what, a, b in pairs:
            if a != b:
                counts["differ"] += 1
                if shown < 5:
                    shown += 1
                    print(f"DIFFERENT for {item.question!r} ({what!r}):\n  new {a!r}\n  old {b!r}")
    print(counts)
    return 1 if counts["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
