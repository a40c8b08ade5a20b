"""The tests are laid out like the code: unit tests (no root, no processes of guardian's,
no stand-in servers, fast) under tests/unit/, one folder per package; system tests under
tests/system/; what they share under tests/support/. No test module imports another, and
the benchmarks import nothing of the tests."""

from __future__ import annotations

import ast
from pathlib import Path

from guardian.core import tomlread
from tests.support.checkout import REPO, TESTS

SRC = REPO / "src" / "guardian"


def _imported(path: Path) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def test_every_test_module_is_a_unit_or_a_system_test() -> None:
    stray = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                   if p.relative_to(TESTS).parts[0] not in ("unit", "system"))
    assert not stray, f"put these under tests/unit/<package>/ or tests/system/: {stray}"


def test_unit_folders_are_packages_of_guardian() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (TESTS / "unit").iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    assert folders <= packages, f"tests/unit folders that are no package: {folders - packages}"


def test_no_test_module_imports_another() -> None:
    wrong = []
    for path in sorted(TESTS.rglob("*.py")):
        for name in _imported(path):
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("test_") or name.startswith(("tests.unit", "tests.system")):
                wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert not wrong, "shared helpers go to tests/support/:\n" + "\n".join(wrong)


def test_benchmarks_import_nothing_of_the_tests() -> None:
    wrong = [f"{p.relative_to(REPO)} imports {n}" for p in sorted((REPO / "bench").rglob("*.py"))
             for n in _imported(p) if n == "tests" or n.startswith("tests.")]
    assert not wrong, "\n".join(wrong)


def test_unit_tests_carry_no_system_marker() -> None:
    config = tomlread.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]
    assert "--strict-markers" in config["ini_options"]["addopts"]
    system = {m.split(":", 1)[0] for m in config["ini_options"]["markers"]}
    wrong = [f"{p.relative_to(REPO)}: {m}" for p in sorted((TESTS / "unit").rglob("*.py"))
             for m in system if f"mark.{m}" in p.read_text()]
    assert not wrong, "\n".join(wrong)
