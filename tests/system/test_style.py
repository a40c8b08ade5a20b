"""The code stays ruff-clean and mypy-clean (strict)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.checkout import REPO


def test_ruff_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "bench",
                           "examples"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
