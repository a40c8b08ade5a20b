"""Shared helpers for the test suite."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.core.snapshot import SignalSpec
from guardian.plugin.registry import default_registry
from tests.support.checkout import FIXTURES, STALE_MODULE, TARGET_PYTHON, copy_checkout, write


@pytest.fixture(scope="session")
def catalogue() -> dict[str, SignalSpec]:
    return default_registry().catalogue()


@pytest.fixture(scope="session")
def procfs_fixtures() -> Path:
    """Recorded /proc files from real hosts (a copy of shared/fixtures/procfs, from the
    Prometheus procfs test data; see its README)."""
    return FIXTURES / "procfs"


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """packaging/build's packages of this checkout, built once per run, from a copy of it
    where another install left a stale ``build/`` and ``*.egg-info`` behind (the package
    must not carry them: see ``STALE_MODULE``)."""
    import shutil
    import subprocess
    if shutil.which("dpkg-deb") is None or not TARGET_PYTHON.exists():
        pytest.skip("packaging/build needs dpkg-deb and /usr/bin/python3.11 (Debian 12)")
    out = tmp_path_factory.mktemp("dist")
    tree = copy_checkout(tmp_path_factory.mktemp("checkout") / "guardian")
    write(tree / "build" / "lib" / "guardian", f"{STALE_MODULE}.py", "raise SystemExit(1)\n")
    write(tree / "src" / "node_guardian.egg-info", "SOURCES.txt",
          f"src/guardian/{STALE_MODULE}.py\n")
    proc = subprocess.run([str(tree / "packaging" / "build")], env={
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(out), "OUT": str(out),
        "TARGET_PYTHON": str(TARGET_PYTHON)}, cwd=tree, capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


# A test's id is in PYTEST_CURRENT_TEST, which every process a test starts inherits: a
# parameter's text as its id (pytest before 9.2 uses a string of any length) once made an
# environment past the kernel's limit ("Argument list too long"). Ids are short, on every
# pytest: a long string parameter needs ``ids=`` or ``pytest.param(..., id=...)``.
MAX_PARAM_ID = 100


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    if isinstance(val, str | bytes) and len(val) > MAX_PARAM_ID:
        pytest.fail(f"parameter {argname!r} is a {len(val)}-character string with no id: give "
                    f"it one (ids=... or pytest.param(..., id=...)) of at most {MAX_PARAM_ID}",
                    pytrace=False)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long = [item.nodeid for item in items if len(_param_id(item)) > MAX_PARAM_ID]
    if long:
        raise pytest.UsageError(
            f"test ids longer than {MAX_PARAM_ID} characters in brackets (give them ids=):\n" +
            "\n".join(n[:200] for n in long))


def _param_id(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec is not None else ""


@pytest.fixture
def default_recursion_limit() -> Iterator[None]:
    """The recursion limit of a fresh interpreter, which `guardian check` and the daemon
    load rules under: a test before this one may have raised it (hypothesis does), and
    then input nested too deeply for guardian parses here."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)
