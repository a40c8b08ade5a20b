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


def test_proc_devices_by_kind_and_major(tmp_path: Path) -> None:
    """fs/char_dev.c chrdev_show prints "%3d %s\\n" per registration, so one major may
    have several names (5: /dev/tty, /dev/console, /dev/ptmx, as this kind of VM lists
    them; 195: the NVIDIA driver's nvidia and nvidiactl from 545); block devices follow
    their own header. Unreadable: nothing."""
    from guardian.hostio.sandbox import proc_devices

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "devices").write_text(
        "Character devices:\n  1 mem\n  5 /dev/tty\n  5 /dev/console\n  5 /dev/ptmx\n"
        "195 nvidia\n195 nvidiactl\n\nBlock devices:\n  7 loop\n259 blkext\n")
    got = proc_devices(tmp_path)
    assert got["char"] == {1: ["mem"], 5: ["/dev/tty", "/dev/console", "/dev/ptmx"],
                           195: ["nvidia", "nvidiactl"]}
    assert got["block"] == {7: ["loop"], 259: ["blkext"]}
    assert proc_devices(tmp_path / "none") == {"char": {}, "block": {}}
