"""A process that names itself after the node agent while it burns a core in the kernel
is named by its real UID and cgroup: a real dd on a real core."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from guardian import Host

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def test_the_command_burning_a_core_in_the_kernel_is_named() -> None:
    """A real dd pinned to one core, clearing pages from /dev/zero: nearly all of it is
    system time (utime and stime are fields 14 and 15 of /proc/<pid>/stat). Before, the
    signal named the command alone, which a process chooses: a user's dd called
    `kubelet` read as kubelet burning the core. Now its real UID and cgroup say whose."""
    from guardian.core.snapshot import labels_of
    from guardian.hostio.procfs import cgroup_of
    from guardian.sources.processes import ProcessesConfig, ProcessesSource

    home = Path(tempfile.mkdtemp(prefix="guardian-burn-"))
    home.chmod(0o755)
    impostor = home / "kubelet"  # a user's copy of dd, named as the node agent
    shutil.copy(shutil.which("dd") or "/bin/dd", impostor)
    src = ProcessesSource(Host(), ProcessesConfig(top=3))
    burner = subprocess.Popen(["taskset", "-c", "0", str(impostor), "if=/dev/zero",
                               "of=/dev/null", "bs=4M"], stderr=subprocess.DEVNULL,
                              user=65534, group=65534)
    try:
        time.sleep(0.5)
        assert src.collect(time.monotonic())["processes.top_system_cpu_pct"] is None
        time.sleep(1.5)
        top = src.collect(time.monotonic())["processes.top_system_cpu_pct"]
        where = cgroup_of(Path("/proc"), burner.pid)
    finally:
        burner.kill()
        burner.wait()
        shutil.rmtree(home)
    assert isinstance(top, dict) and 0 < len(top) <= 3
    who = labels_of({"comm": "kubelet", "uid": "65534", "cgroup": where})
    assert top[who] >= 50, top
    assert max(top, key=lambda k: top[k]) == who


