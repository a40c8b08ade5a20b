"""`guardian run --once --audit` and `guardian record -o` never follow a planted symlink:
the commands as processes, on the real host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.checkout import write
from tests.support.daemon import RULE

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def test_audit_and_recording_never_follow_a_planted_symlink(tmp_path: Path) -> None:
    """Before: `--audit` and `record -o` followed a symlink in a world-writable directory
    and overwrote its target as root."""
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    for name in ("audit.jsonl", "rec.gz"):
        (tmp_path / name).symlink_to(target)
    rules = write(tmp_path, "r.toml", RULE.format(name="r"))
    run = subprocess.run([sys.executable, "-m", "guardian", "run", "--once", "--dry-run",
                          "--warmup", "0s", "--rules", str(rules), "--audit",
                          str(tmp_path / "audit.jsonl")], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "it is a symlink" in run.stderr, run.stderr
    rec = subprocess.run([sys.executable, "-m", "guardian", "record", "-o",
                          str(tmp_path / "rec.gz"), "--duration", "1s"], capture_output=True,
                         text=True, timeout=60)
    assert rec.returncode == 2 and "exists" in rec.stderr, rec.stderr
    assert target.read_text() == "keep me\n"
    assert "Traceback" not in run.stderr + rec.stderr


