"""The benchmark scripts as modules a test can call: they live in `benchmarks/` (not a package),
import their siblings by plain name, and some define dataclasses that look their module up in
`sys.modules`, so each is loaded from its file under a name of the test's, with both undone after."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(monkeypatch: pytest.MonkeyPatch, script: str, name: str) -> ModuleType:
    """`benchmarks/<script>` executed as module `name`, its folder on the path for its siblings."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module
