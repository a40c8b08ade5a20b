"""The unit's sandbox matches each memcg.release method (issue 26): the shipped unit's
ProtectControlGroups=yes makes /sys/fs/cgroup read-only, so `method = "reclaim"` failed
when the unit ran it while dry runs and `guardian check` said nothing. `guardian check`'s
warning: tests/system/test_sandbox_cli.py; a read-only mount for real:
tests/system/test_sandbox_mount.py."""

from __future__ import annotations

from pathlib import Path

from guardian.actions.memcg import MemcgParams, sandbox_problem
from guardian.hostio.sandbox import cgroupfs_read_only, unit_texts
from tests.support.checkout import write

RECLAIM = MemcgParams(method="reclaim", cgroup="system.slice")


def test_a_drop_in_that_allows_cgroupfs_writes_silences_it(tmp_path: Path) -> None:
    shipped = unit_texts(tmp_path)  # nothing installed under tmp_path: the package's
    assert cgroupfs_read_only(shipped) and sandbox_problem(RECLAIM, shipped)
    assert sandbox_problem(MemcgParams(), shipped) is None  # drop_caches: writable
    write(tmp_path, "etc/systemd/system/guardian.service.d/reclaim.conf",
          "[Service]\nProtectControlGroups=no\n")
    assert sandbox_problem(RECLAIM, unit_texts(tmp_path)) is None
