"""The unit's sandbox matches each memcg.release method (issue 26): the shipped unit's
ProtectControlGroups=yes makes /sys/fs/cgroup read-only, so `method = "reclaim"` failed
when the unit ran it while dry runs and `guardian check` said nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from guardian.actions.memcg import MemcgParams, MemcgRelease, sandbox_problem
from guardian.core.snapshot import Snapshot
from guardian.hostio.host import Host
from guardian.hostio.sandbox import cgroupfs_read_only, unit_texts
from guardian.plugin.contract import ActionContext
from tests.support.checkout import FIXTURES, RULES, write
from tests.support.kernel import need_root

RECLAIM = MemcgParams(method="reclaim", cgroup="system.slice")


def test_check_warns_when_the_unit_forbids_reclaim(tmp_path: Path) -> None:
    text = (RULES / "memcg.toml").read_text().replace(
        'method = "drop_caches"', 'method = "reclaim"\n  cgroup = "system.slice"')
    assert 'method = "reclaim"' in text
    write(tmp_path, "memcg.toml", text)
    shutil.copy(RULES / "systemd.toml", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "guardian", "check", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "memcg.release" in proc.stderr and "ProtectControlGroups=yes" in proc.stderr
    shipped = subprocess.run([sys.executable, "-m", "guardian", "check", str(RULES)],
                             capture_output=True, text=True, timeout=60)
    assert shipped.returncode == 0 and "ProtectControlGroups" not in shipped.stderr


def test_a_drop_in_that_allows_cgroupfs_writes_silences_it(tmp_path: Path) -> None:
    shipped = unit_texts(tmp_path)  # nothing installed under tmp_path: the package's
    assert cgroupfs_read_only(shipped) and sandbox_problem(RECLAIM, shipped)
    assert sandbox_problem(MemcgParams(), shipped) is None  # drop_caches: writable
    write(tmp_path, "etc/systemd/system/guardian.service.d/reclaim.conf",
          "[Service]\nProtectControlGroups=no\n")
    assert sandbox_problem(RECLAIM, unit_texts(tmp_path)) is None


def test_a_read_only_cgroupfs_is_refused_at_plan_time(tmp_path: Path) -> None:
    """What the unit's sandbox does, for real: the cgroup2 tree on a read-only mount.
    A dry run plans, so it now says why the write would fail."""
    need_root()
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "cgroup2", root)
    write(root, "sys/fs/cgroup/system.slice/memory.reclaim", "")
    cg = root / "sys/fs/cgroup"
    subprocess.run(["mount", "--bind", "-o", "ro", str(cg), str(cg)], check=True)
    try:
        ctx = ActionContext("r", Snapshot(0.0, {}), Host(root), dry_run=True)
        plan = MemcgRelease(RECLAIM).plan(ctx)
        assert plan.refused and "read-only file system" in plan.refused[0], plan.refused
    finally:
        subprocess.run(["umount", str(cg)], check=True)
