"""Run the coverage-guided fuzz target (tests/support/fuzz_atheris.py) for a bounded time."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.checkout import TESTS

SECONDS = 20


def test_atheris_finds_no_crash(tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="atheris has no wheel for this platform")
    target = TESTS / "support" / "fuzz_atheris.py"
    proc = subprocess.run([sys.executable, str(target), f"-max_total_time={SECONDS}",
                           "-rss_limit_mb=2048"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=SECONDS + 120)
    tail = proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    runs = re.search(r"Done (\d+) runs in", proc.stderr)
    assert runs and int(runs.group(1)) > 10_000, tail
    assert not list(tmp_path.glob("crash-*"))
    print(f"atheris: {runs.group(1)} inputs in {SECONDS}s, no crash")
