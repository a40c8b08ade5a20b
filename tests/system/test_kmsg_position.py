"""Kernel-log lines logged while no guardian ran (a restart, a rolling update, the boot
before the pod was scheduled) are read back, against this VM's real /dev/kmsg: from the
position the last run of this boot kept in the state directory (sequence number and boot
id), or, on a first start, from ``lookback`` before it, as node-problem-detector's kernel
monitor does (its ``lookback``, config/kernel-monitor.json). A line is never counted by two
runs. Lines are written into /dev/kmsg, which gives them the user facility
(tests/support/kernel.py), so these sources match that facility too."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

from guardian.hostio.host import Host
from guardian.sources.kmsg import KmsgConfig, KmsgSource
from tests.support.kernel import inject_kmsg

# it writes the host's kernel log, and counts what others write there meanwhile
pytestmark = pytest.mark.host_global

KEY = (("pattern", "fs_readonly"),)


@pytest.fixture(autouse=True)
def _kmsg() -> None:
    if not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("needs to read and write /dev/kmsg (root)")


def _line() -> str:
    # fs_readonly's words (fs/ext4/super.c, ext4_handle_error: "Remounting filesystem
    # read-only"), a device name of this test's own
    return f"EXT4-fs (kp{uuid.uuid4().hex[:6]}): Remounting filesystem read-only"


def _counted(state: Path | None, **cfg: object) -> tuple[float, KmsgSource]:
    src = KmsgSource(Host(), KmsgConfig(facilities=["kern", "user"], **cfg))
    assert src.unavailable() is None
    if state is not None:
        src.keep_state(state)
    # the first collection is the baseline: what is read back comes as an increase after
    # it (`increase(kmsg.matches...)` over a first sample would see none)
    first = src.collect(time.monotonic())["kmsg.matches"]
    matches = src.collect(time.monotonic())["kmsg.matches"]
    assert isinstance(first, dict) and isinstance(matches, dict)
    assert first[KEY] == 0
    return matches[KEY], src


def test_a_line_logged_between_runs_is_read_back_once(tmp_path: Path) -> None:
    """Before: every start read from the end of the ring buffer and kept no position, so
    the line logged while no guardian ran was never seen."""
    n, first = _counted(tmp_path)  # a run that read nothing new still keeps where it was
    first.close()
    assert n == 0 and (tmp_path / "kmsg-position.json").exists()
    inject_kmsg(_line())
    n, second = _counted(tmp_path)
    second.close()
    assert n == 1
    n, third = _counted(tmp_path)  # the same boot: never counted by two runs
    third.close()
    assert n == 0


def test_another_boots_position_is_not_used(tmp_path: Path) -> None:
    """Sequence numbers start over at each boot: a position kept under another boot id
    says nothing about this one."""
    inject_kmsg(_line())
    (tmp_path / "kmsg-position.json").write_text(json.dumps(
        {"boot_id": "00000000-0000-0000-0000-000000000000", "seq": 0}))
    n, src = _counted(tmp_path)
    src.close()
    assert n == 0


def test_a_first_start_reads_back_its_lookback(tmp_path: Path) -> None:
    """The window is measured on the records' own clock (microseconds since boot, the
    kernel's local_clock: Documentation/ABI/testing/dev-kmsg); older records are not read."""
    inject_kmsg(_line())
    n, src = _counted(tmp_path, lookback=1.0)
    src.close()
    assert n >= 1  # this test's line (and any other logged within the last second)
    n, src = _counted(None)  # no lookback, no position: from the end, as before
    src.close()
    assert n == 0
    time.sleep(1.2)
    n, src = _counted(tmp_path / "fresh", lookback=1.0)
    src.close()
    assert n == 0
