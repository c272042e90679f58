"""The README's layers, checked: the import-linter contracts in pyproject.toml hold for the code
(run here, so a broken contract fails `make test`), and each contract catches the import that
would break it (a miniature project with one offending import per contract)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess:
    args = [str(LINT_IMPORTS), "--no-logo", "--no-cache"]
    for contract in contracts:
        args += ["--contract", contract]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_every_layer_of_the_readme_has_a_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    ids = {c["id"] for c in contracts}
    assert {"top-level", "core-framework-free", "core-alone", "askdb-layers", "reads-are-pure",
            "adapters-no-services", "no-cycles"} <= ids  # fmt: skip
    top = next(c for c in contracts if c["id"] == "top-level")
    assert top["layers"][0] == "config"  # only the wiring (manage.py, wsgi, the Celery app) names it
    assert top.get("ignore_imports", []) == []  # the core is its own package: nothing to excuse


# One file per offence, on top of a miniature project that keeps every contract.
MINIATURE = {
    "config/__init__.py": "",
    "config/celery.py": "import askdb.tasks\n",
    "evaluation/__init__.py": "",
    "evaluation/services.py": "import askdb.services.runs\n",
    "evaluation/selectors.py": "",
    "askdb/__init__.py": "",
    "askdb/models.py": "import metadata_admin.models\n",
    "askdb/views.py": "import askdb.services.runs\nimport askdb.selectors\n",
    "askdb/views_library.py": "",
    "askdb/apis.py": "",
    "askdb/tasks.py": "import askdb.services.runs\n",
    "askdb/signals.py": "",
    "askdb/checks.py": "",
    "askdb/management/__init__.py": "",
    "askdb/services/__init__.py": "",
    "askdb/services/runs.py": "import askdb.adapters.ports\nimport infra.queue\n",
    "askdb/selectors.py": "import askdb.models\n",
    "askdb/adapters/__init__.py": "",
    "askdb/adapters/ports.py": "import askdb.models\nimport core.engine\n",
    "askdb/answerability/__init__.py": "",
    "core/__init__.py": "",
    "core/engine.py": "import core.types\n",
    "phenotypes/__init__.py": "",
    "metadata_admin/__init__.py": "",
    "metadata_admin/models.py": "import core.engine\n",
    "metadata_admin/services.py": "",
    "metadata_admin/selectors.py": "",
    "metadata_admin/tasks.py": "",
    "infra/__init__.py": "",
    "infra/queue.py": "import core.types\n",
    "infra/clinical.py": "import core.engine\n",
    "core/types.py": "",
}
OFFENCES = {
    "top-level": {"askdb/checks.py": "def f():\n    from config import celery\n"},  # config is wiring only
    "core-framework-free": {"core/engine.py": "import core.types\nimport openai\n"},
    "core-alone": {"core/types.py": "import askdb.models\n"},
    "askdb-layers": {"askdb/services/runs.py": "def enqueue():\n    from askdb.tasks import x\n"},
    "reads-are-pure": {"askdb/selectors.py": "import askdb.models\nfrom askdb.services.runs import runs_reap\n"},
    "adapters-no-services": {"askdb/adapters/ports.py": "import askdb.services.runs\n"},
    "no-cycles": {"askdb/answerability/scorer.py": "import askdb.answerability.data\n",
                  "askdb/answerability/data.py": "def f():\n    import askdb.answerability.scorer\n"},
}  # fmt: skip


def _miniature(tmp_path: Path, extra: dict[str, str]) -> Path:
    for name, text in {**MINIATURE, **extra}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "openai").mkdir(exist_ok=True)  # an external package the core must not import
    (tmp_path / "openai/__init__.py").write_text("")
    config = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(config[config.index("[tool.importlinter]") :])
    return tmp_path


def test_the_miniature_keeps_every_contract(tmp_path):
    done = lint_imports(_miniature(tmp_path, {}))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.parametrize("contract", sorted(OFFENCES))
def test_each_contract_catches_its_offence(tmp_path, contract):
    done = lint_imports(_miniature(tmp_path, OFFENCES[contract]), contract)
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def test_every_task_a_service_sends_by_name_is_registered():
    """Services send tasks by name (infra.queue.task_send), so a renamed task must fail here."""
    import importlib
    import re

    from config.celery import app

    for name in ("askdb.tasks", "metadata_admin.tasks", "evaluation.tasks"):
        importlib.import_module(name)  # registers their tasks (as the worker's autodiscovery does)
    sent = set()
    for path in [*ROOT.glob("*/services.py"), *ROOT.glob("*/services/*.py")]:
        sent |= set(re.findall(r'task_send\(\s*"([\w.]+)"', path.read_text()))
    assert sent >= {"askdb.run_question", "askdb.run_long_query", "askdb.embed_example", "askdb.revalidate_examples",
                    "metadata_admin.embed_table_doc", "evaluation.run_evaluation"}  # fmt: skip
    assert sent <= set(app.tasks), sent - set(app.tasks)
