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
    """Recorded /proc files from real hosts (a copy of shared/fixtures/procfs, from the
    Prometheus procfs test data; see its README)."""
    return Path(__file__).parent / "fixtures" / "procfs"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def shipped_rule_count() -> int:
    """How many rules rules/ ships (tests that see the count follow the pack)."""
    from guardian.policy.loader import load_rules
    return len(load_rules([RULES]).rules)
