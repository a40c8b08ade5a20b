"""/proc/<pid>/stat in a container's PID namespace: a child of PID 2 is no kernel thread."""

from __future__ import annotations

from pathlib import Path

from guardian.hostio.procfs import read_proc_stat
from guardian.testing import FakeHost


def test_parent_pid_2_is_not_a_kernel_thread_outside_the_host_namespace(
        tmp_path: Path) -> None:
    """In a container's PID namespace PID 2 is an ordinary process: only PF_KTHREAD says
    kernel thread."""
    fake = FakeHost(tmp_path)
    fake.process(2, "sh", ppid=1)  # a container's second process
    fake.process(40, "worker", state="Z", ppid=2)
    fake.process(41, "kworker/0:1", ppid=2, flags=0x04208060)
    zombie, kthread = read_proc_stat(fake.host.proc, 40), read_proc_stat(fake.host.proc, 41)
    assert zombie is not None and zombie.is_zombie and not zombie.is_kernel_thread
    assert kthread is not None and kthread.is_kernel_thread
