"""The unit's sandbox for real (issue 26): on a read-only bind mount of a cgroup2 tree,
`memcg.release` with `method = "reclaim"` is refused at plan time. Needs root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from guardian.actions.memcg import MemcgParams, MemcgRelease
from guardian.core.snapshot import Snapshot
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext
from tests.support.checkout import FIXTURES, write
from tests.support.kernel import need_root

RECLAIM = MemcgParams(method="reclaim", cgroup="system.slice")


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
