"""Where things are in this checkout, and copies of it."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = TESTS / "fixtures"
DATA = TESTS / "data"
PROMETHEUS = TESTS / "support" / "prometheus"

REPO = TESTS.parent


RULES = REPO / "rules"


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

