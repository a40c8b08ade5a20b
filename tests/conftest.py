"""Shared helpers for the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.snapshot import SignalSpec
from guardian.plugin.registry import default_registry

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "rules"


@pytest.fixture(scope="session")
def catalogue() -> dict[str, SignalSpec]:
    return default_registry().catalogue()


@pytest.fixture(scope="session")
def procfs_fixtures() -> Path:
    """Recorded /proc files from real hosts (a copy of shared/fixtures/procfs, from the
    Prometheus procfs test data; see its README)."""
    return Path(__file__).parent / "fixtures" / "procfs"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def copy_checkout(dest: Path) -> Path:
    """A copy of this checkout without what builds and installs leave at its top
    (``.git``, ``build/``, ``dist/``, venvs, ``*.egg-info``, caches)."""
    import shutil
    leftovers = {".git", "build", "dist", ".venv", ".mypy_cache", ".ruff_cache",
                 ".pytest_cache", ".hypothesis"}

    def ignore(where: str, names: list[str]) -> set[str]:
        top = leftovers if Path(where) == REPO else set()
        return {n for n in names if n in top or n.endswith(".egg-info") or
                n == "__pycache__"}

    shutil.copytree(REPO, dest, symlinks=True, ignore=ignore)
    return dest


def shipped_rule_count() -> int:
    """How many rules rules/ ships (tests that see the count follow the pack)."""
    from guardian.policy.loader import load_rules
    return len(load_rules([RULES]).rules)


TARGET_PYTHON = Path("/usr/bin/python3.11")  # Debian 12's: what the .deb depends on
STALE_MODULE = "left_by_an_older_build"  # planted in build/ of the tree dist is built from


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
