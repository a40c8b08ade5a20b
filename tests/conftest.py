"""Shared helpers for the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.plugins import default_registry
from guardian.snapshot import SignalSpec

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "rules"


@pytest.fixture(scope="session")
def catalogue() -> dict[str, SignalSpec]:
    return default_registry().catalogue()


@pytest.fixture(scope="session")
def procfs_fixtures() -> Path:
    """Recorded /proc files from real hosts (shared/fixtures/procfs, beside the repo)."""
    for base in (REPO.parent / "shared", REPO / ".." / ".." / "shared"):
        p = base / "fixtures" / "procfs"
        if (p / "proc").is_dir():
            return p
    pytest.skip("shared/fixtures/procfs is not beside this checkout")


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p
