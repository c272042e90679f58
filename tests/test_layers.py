"""Dependencies point one way: each layer imports only itself and the layers below it.

A plain `ast` walk over every module of the apps and of infra/, function-local imports included
(an import hidden inside a function is still a dependency). The project's settings and URLconf
(config/) wire the apps together and are the only exception; tests and benchmarks are not checked.
The layers, lowest first, are described in the README's architecture section.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module belongs to the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("askdb.pipeline",)),  # framework-free question answering; imports no Django
    ("infrastructure", ("infra",)),  # providers, adapters, labelled files, the audit log
    ("catalog", ("metadata_admin",)),
    ("phenotypes", ("phenotypes",)),  # phenotypes from clinical notes, and cohorts made of them
    ("questions", ("askdb",)),  # questions, runs, review, the example library
    ("evaluation", ("evaluation",)),
]
CHECKED = ("askdb", "metadata_admin", "phenotypes", "evaluation", "infra")
FRAMEWORK_FREE = ("askdb.pipeline",)


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), index)
    return best[1] if best else None


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every module this file imports, anywhere in it, as absolute names, with its line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # `from askdb import services` imports the module askdb.services, not just askdb
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return found


def layer_violations(root: Path) -> list[str]:
    """Imports that point up a layer (or out of the framework-free core), as readable lines."""
    problems = []
    for top in CHECKED:
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            module = _module_name(path, root)
            own = _layer(module)
            for target, line in _imports(path, module):
                where = f"{path.relative_to(root)}:{line}"
                if module.startswith(FRAMEWORK_FREE) and target.split(".")[0] in (
                    "django",
                    "rest_framework",
                    "celery",
                ):
                    problems.append(f"{where} {module} imports {target}: the core stays framework-free")
                theirs = _layer(target)
                if own is not None and theirs is not None and theirs > own:
                    problems.append(
                        f"{where} {module} ({LAYERS[own][0]}) imports {target} ({LAYERS[theirs][0]}): "
                        "a layer may import only itself and the layers below it"
                    )
    return problems


def test_imports_point_down_the_layers():
    assert layer_violations(ROOT) == []


def test_the_guard_catches_an_import_that_points_up(tmp_path):
    """The old cycle in miniature: the catalog importing askdb's services inside a function."""
    files = {
        "metadata_admin/__init__.py": "",
        "metadata_admin/services.py": "def f():\n    from askdb.services import audit_record\n",
        "askdb/__init__.py": "",
        "askdb/services.py": "from metadata_admin.services import f\n",
        "askdb/pipeline/__init__.py": "",
        "askdb/pipeline/engine.py": "from django.db import connection\n",
        "infra/__init__.py": "",
        "infra/providers.py": "from . import x\nfrom ..askdb import runner\n",
        "evaluation/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    problems = layer_violations(tmp_path)
    assert any(p.startswith("metadata_admin/services.py:2 ") for p in problems), problems
    assert any("framework-free" in p for p in problems), problems
    assert any(p.startswith("infra/providers.py:2 ") for p in problems), problems  # relative, upward
    assert not any(p.startswith("askdb/services.py") for p in problems), problems  # askdb may use the catalog
