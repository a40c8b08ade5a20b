"""`guardian check` warns when the shipped unit's sandbox (ProtectControlGroups=yes)
forbids a rule's `memcg.release` method, and not for the shipped rules (issue 26; the
unit files read in-process: tests/unit/hostio/test_sandbox.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.checkout import RULES, write
from tests.support.cli import guardian


def test_check_warns_when_the_unit_forbids_reclaim(tmp_path: Path) -> None:
    text = (RULES / "memcg.toml").read_text().replace(
        'method = "drop_caches"', 'method = "reclaim"\n  cgroup = "system.slice"')
    assert 'method = "reclaim"' in text
    write(tmp_path, "memcg.toml", text)
    shutil.copy(RULES / "systemd.toml", tmp_path)
    proc = guardian("check", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "memcg.release" in proc.stderr and "ProtectControlGroups=yes" in proc.stderr
    shipped = guardian("check", str(RULES))
    assert shipped.returncode == 0 and "ProtectControlGroups" not in shipped.stderr
