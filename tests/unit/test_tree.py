"""The tests are laid out like the code: unit tests (no root, no process the test starts, no
stand-in API server; at most a loopback socket the test serves itself; fast) under
tests/unit/, one folder per package; system tests under
tests/system/; what they share under tests/support/. No test module imports another, and
the benchmarks import nothing of the tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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


# What starts a program from Python (or checks for root, or runs mypy): modules whose import
# is enough, and os/asyncio functions by name.
PROCESS_MODULES = ("subprocess", "multiprocessing", "pty", "mypy")
PROCESS_CALLS = re.compile(r"system|popen|exec\w*|spawn\w*|posix_spawn\w*|fork\w*"
                           r"|create_subprocess_\w+|geteuid|getuid")
GUARDIAN = "guardian"  # a name: the literal pair below would be flagged itself


def _starts_processes(node: ast.AST) -> list[str]:
    """What in ``node`` starts a process, needs root or runs mypy."""
    found = []
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            found += [f"import {a.name}" for a in n.names
                      if a.name.split(".")[0] in PROCESS_MODULES]
        elif isinstance(n, ast.ImportFrom) and not n.level and \
                (n.module or "").split(".")[0] in PROCESS_MODULES:
            found.append(f"from {n.module} import ...")
        elif isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) and \
                isinstance(n.args[0].value, str) and \
                n.args[0].value.split(".")[0] in PROCESS_MODULES and \
                getattr(n.func, "attr", getattr(n.func, "id", "")) in ("importorskip",
                                                                       "import_module"):
            found.append(f"import {n.args[0].value}")
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                n.value.id in ("os", "asyncio") and PROCESS_CALLS.fullmatch(n.attr):
            found.append(f"{n.value.id}.{n.attr}")
        elif isinstance(n, ast.List | ast.Tuple):
            argv = [e.value if isinstance(e, ast.Constant) else None for e in n.elts]
            if any(argv[i:i + 2] == ["-m", GUARDIAN] for i in range(len(argv) - 1)):
                found.append('an argv of "-m", "guardian"')
    return found


def _process_helpers(support: Path) -> dict[str, set[str]]:
    """tests/support's functions and classes that start a process or need root, by module."""
    helpers: dict[str, set[str]] = {}
    for path in sorted(support.glob("*.py")):
        module = "tests.support." + path.stem
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and _starts_processes(node):
                helpers.setdefault(module, set()).add(node.name)
    return helpers


def _unit_modules_that_start_processes(tests: Path) -> list[str]:
    """Each module under ``tests/unit`` that starts a process (of guardian's or a tool's),
    needs root or runs mypy, itself or through a helper of tests/support."""
    helpers = _process_helpers(tests / "support")
    wrong = []
    for path in sorted((tests / "unit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        found = _starts_processes(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module in helpers:
                found += [f"{n.module}.{a.name}" for a in n.names
                          if a.name in helpers[n.module] or a.name == "*"]
            elif isinstance(n, ast.Import):
                found += [a.name for a in n.names if a.name in helpers]
        wrong += [f"{path.relative_to(tests.parent)}: {f}" for f in sorted(set(found))]
    return wrong


def test_unit_tests_start_no_process_and_need_no_root() -> None:
    """No module under tests/unit starts a process of guardian's (`python -m guardian`)
    or a tool's (mypy, systemd-analyze), or needs root: those are system tests. The scan
    is of what could start one at all rather than of guardian's argv alone, which a helper
    or a variable would hide: importing subprocess, multiprocessing, pty or mypy, calling
    os.system/popen/exec*/spawn*/fork* or asyncio.create_subprocess_*, asking os.geteuid,
    or importing a tests/support helper that does any of these. An argv of "-m",
    "guardian" is refused wherever it appears. A program the code under test starts
    itself (the journal source's stand-in journalctl, a script check) is the unit's own
    behaviour and allowed."""
    wrong = _unit_modules_that_start_processes(TESTS)
    assert not wrong, "move these tests to tests/system/:\n" + "\n".join(wrong)


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


# Elapsed wall-clock time is no claim a unit test makes: a loaded machine fails it, a fast
# one makes it vacuous. What "fast" stood for is checked as what it means (an event, a
# count, a call that returns while what it must not wait on is pending: tests/support/wait).
CLOCKS = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
SLEEPS = {"sleep"}


def _calls(node: ast.AST, names: set[str]) -> list[ast.Call]:
    """Calls in ``node`` of ``time.NAME`` (or ``asyncio.sleep``), or of a bare NAME that
    is no builtin (``from time import monotonic``)."""
    found = []
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        by_module = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
            f.value.id in ("time", "asyncio") and f.attr in names
        if by_module or (isinstance(f, ast.Name) and f.id in names and f.id != "time"):
            found.append(n)
    return found


def elapsed_time_asserts(source: str) -> list[int]:
    """Lines of asserts that read a clock, or subtract from each other names that hold a
    clock's reading (``took = time.perf_counter() - t0``: an assert on ``took``)."""
    tree = ast.parse(source)
    clocked: set[str] = set()
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)]
    for _ in range(3):  # t0 = clock(); took = clock() - t0; slow = took > 1
        for a in assigns:
            if a.value is not None and (_calls(a.value, CLOCKS) or any(
                    isinstance(n, ast.Name) and n.id in clocked for n in ast.walk(a.value))):
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                clocked |= {n.id for t in targets for n in ast.walk(t)
                            if isinstance(n, ast.Name)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        subtracts = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and
                        {m.id for m in ast.walk(n) if isinstance(m, ast.Name)} & clocked
                        for n in ast.walk(node.test))
        if _calls(node.test, CLOCKS) or subtracts or names & {"took", "elapsed"}:
            lines.append(node.lineno)
    return lines


def test_elapsed_time_asserts_are_found() -> None:
    assert elapsed_time_asserts("t0 = time.perf_counter()\nf()\n"
                                "assert time.perf_counter() - t0 < 0.5\n") == [3]
    assert elapsed_time_asserts("t0 = monotonic()\nf()\ntook = monotonic() - t0\n"
                                "assert took < 1, took\n") == [4]
    assert elapsed_time_asserts("start = time.time()\nend = time.time()\n"
                                "assert end - start < 3\n") == [3]
    assert elapsed_time_asserts("deadline = time.monotonic() + 5\n"
                                "assert time.monotonic() < deadline\n") == [2]
    # a reading of the clock as a time, not a duration
    assert elapsed_time_asserts("now = time.monotonic()\nassert loaded == now\n"
                                "assert f(now + 3600) == ['retry']\n") == []


def test_no_unit_test_asserts_on_elapsed_time_or_sleeps() -> None:
    """No module under tests/unit asserts on elapsed time (see above) or sleeps: a wait
    for something is on an event, or tests/support/wait's bounded poll of a condition."""
    wrong = []
    for path in sorted((TESTS / "unit").rglob("*.py")):
        source = path.read_text()
        rel = path.relative_to(REPO)
        wrong += [f"{rel}:{line}: asserts on elapsed time"
                  for line in elapsed_time_asserts(source)]
        wrong += [f"{rel}:{c.lineno}: sleeps" for c in _calls(ast.parse(source), SLEEPS)]
    assert not wrong, "\n".join(wrong)


def test_a_long_test_id_fails_collection() -> None:
    """tests/conftest.py: a parameter's long text as its id made PYTEST_CURRENT_TEST, which
    every process a test starts inherits, too long for the kernel (pytest 9.0.3)."""
    from tests import conftest
    assert conftest.pytest_make_parametrize_id(None, "x" * 100, "a") is None  # type: ignore[arg-type]
    with pytest.raises(pytest.fail.Exception, match="101-character string"):
        conftest.pytest_make_parametrize_id(None, "x" * 101, "a")  # type: ignore[arg-type]
