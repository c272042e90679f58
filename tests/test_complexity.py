"""No function of the product above cyclomatic complexity 25, as `radon cc` counts it: a function
past that is a decision nobody can read whole; split it into named steps."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("askdb", "core", "infra", "metadata_admin", "phenotypes", "evaluation", "config", "benchmarks")
LIMIT = 25
MATCH_STAGE = ROOT / "core" / "match"
MAX_MODULE_LINES = 600  # no module of the match stage longer: past that it is read as a tangle
# Generated migrations and the synthetic-data generator (one long table of MIMIC's shapes).
NOT_PRODUCT = ("/migrations/", "metadata_admin/clinical/synthetic.py")


def too_complex(root: Path, exempt: tuple[str, ...] = ()) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if any(part in f"/{name}" for part in NOT_PRODUCT) or name in exempt:
                continue
            for block in cc_visit(path.read_text()):
                for item in [block, *getattr(block, "methods", []), *getattr(block, "closures", [])]:
                    if item.complexity > LIMIT:
                        found.append(f"{name}:{item.lineno} {item.fullname} {item.complexity}")
    return found


def test_no_function_of_the_product_is_too_complex():
    assert too_complex(ROOT) == []


def test_no_module_of_the_match_stage_is_too_long():
    assert any(MATCH_STAGE.rglob("matcher.py"))
    long = {p.relative_to(ROOT).as_posix(): n for p in MATCH_STAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert not long


def test_the_check_finds_a_tangle(tmp_path):
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(30))
    (tmp_path / "askdb").mkdir()
    (tmp_path / "askdb/tangle.py").write_text(f"def tangle(x):\n{branches}\n    return -1\n")
    (tmp_path / "askdb/migrations").mkdir()
    (tmp_path / "askdb/migrations/0001.py").write_text(f"def generated(x):\n{branches}\n")
    assert too_complex(tmp_path) == ["askdb/tangle.py:1 tangle 31"]
