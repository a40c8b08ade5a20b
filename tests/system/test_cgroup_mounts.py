"""Which cgroup mount is the host's, and how memory cgroups are counted there (issue 26).

mountinfo's format (the 4th field is the root of the mount within its filesystem) is
proc(5)'s and Documentation/filesystems/proc.rst's; the cgroup.stat keys are
Documentation/admin-guide/cgroup-v2.rst's (``nr_subsys_<cgroup_subsys>``, "Total number of
live cgroup subsystems (e.g memory cgroup) at and beneath the current cgroup", 6.11+).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.hostio.cgroupfs import cgroup_mounts, detect_layout, locate, memcg_counts
from guardian.hostio.host import Host
from guardian.sources.cgroups import CgroupsSource
from guardian.testing import MEMCG_V1
from tests.support.checkout import write
from tests.support.kernel import need_memcg_v1

ROOT_LINE = "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n"
HOST_V2 = ("30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - "
           "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")


def v2_tree(top: Path, stat: str, *, namespace_root: bool = False) -> None:
    write(top, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    write(top, "cgroup.stat", stat)
    if namespace_root:  # exists on non-root cgroups only (cgroup-v2.rst)
        write(top, "cgroup.events", "populated 1\nfrozen 0\n")


def test_mountinfo_fields_are_unescaped_and_keep_the_root(tmp_path: Path) -> None:
    text = ROOT_LINE + ("41 30 0:38 /kube\\040pods /mnt/my\\040cg rw - cgroup cgroup "
                        "rw,memory\n") + HOST_V2
    v1, v2 = cgroup_mounts(text, tmp_path)
    assert (v1.root, v1.path, "memory" in v1.options) == (
        "/kube pods", tmp_path / "mnt/my cg", True)
    assert (v2.fstype, v2.root, v2.path) == ("cgroup2", "/", tmp_path / "sys/fs/cgroup")


def test_a_bind_mounted_sub_cgroup_after_the_host_mount_is_not_the_host(
        tmp_path: Path) -> None:
    """Issue 26: a bind mount of an empty sub-cgroup, last in mountinfo, made guardian
    report 0 dying while the kernel had 3,851."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + HOST_V2 + (
        "77 22 0:26 /kubepods/pod1 /var/lib/kubelet/pods/cg rw,relatime shared:4 - "
        "cgroup2 cgroup2 rw,nsdelegate\n"))
    v2_tree(tmp_path / "sys/fs/cgroup", "nr_descendants 12\nnr_dying_descendants 3851\n")
    v2_tree(tmp_path / "var/lib/kubelet/pods/cg", "nr_descendants 0\n"
            "nr_dying_descendants 0\n", namespace_root=True)
    layout = detect_layout(tmp_path, tmp_path / "proc")
    assert layout is not None and layout.memory_root == tmp_path / "sys/fs/cgroup"
    assert memcg_counts(Host(tmp_path), layout)[1] == 3851


def test_a_containers_own_cgroup_namespace_is_refused_not_counted(tmp_path: Path) -> None:
    """Issue 26: under podman (a private cgroup namespace) the container's cgroup2 mount
    says root "/" but shows the container's own cgroup: memcg.live was 1. Without the
    host's PID namespace there is nothing else to read: no value, never a false 0."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + (
        "812 811 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"))
    v2_tree(tmp_path / "sys/fs/cgroup", "nr_descendants 0\nnr_dying_descendants 0\n",
            namespace_root=True)
    why = locate(tmp_path, tmp_path / "proc")
    assert isinstance(why, str) and "cgroup namespace" in why, why
    src = CgroupsSource(Host(tmp_path))
    assert src.unavailable() == why
    with pytest.raises(RuntimeError, match="only part of the cgroup hierarchy"):
        src.collect(0.0)


def test_with_the_host_pid_namespace_pid_1s_hierarchy_is_used(tmp_path: Path) -> None:
    """The DaemonSet's case: host PID, privileged. PID 1's mount namespace has the whole
    hierarchy, read through /proc/1/root."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + (
        "812 811 0:26 / /sys/fs/cgroup ro,relatime - cgroup2 cgroup2 rw,nsdelegate\n"))
    v2_tree(tmp_path / "sys/fs/cgroup", "nr_descendants 0\nnr_dying_descendants 0\n",
            namespace_root=True)
    write(tmp_path, "proc/1/mountinfo", ROOT_LINE + HOST_V2)
    host_cg = tmp_path / "proc/1/root/sys/fs/cgroup"
    v2_tree(host_cg, "nr_descendants 3\nnr_dying_descendants 3851\n")
    # as a kernel lays it out: a cgroup has the memory controller only where its parent
    # enables it for its children (cgroup-v2.rst, "Top-down Constraint"), so the slice
    # above the services has memory.current too (the root has none, and counts)
    write(host_cg, "system.slice/memory.current", "0\n")
    for unit in ("a", "b", "c"):
        write(host_cg, f"system.slice/{unit}.service/memory.current", "0\n")
    out = CgroupsSource(Host(tmp_path)).collect(0.0)
    assert (out["memcg.live"], out["memcg.dying"]) == (5, 3851)


def test_host_mounts_hidden_under_the_runtimes_tmpfs_are_not_read(tmp_path: Path) -> None:
    """Issue 26, the image under podman (privileged, host PID): the container's mountinfo
    lists the host's cgroup2 mount (from the /sys it was given) and then the tmpfs podman
    stacks on /sys/fs/cgroup; reading that path reads the empty tmpfs ("cannot read
    .../cgroup.controllers"). A mount covered by a later one is not used; PID 1's is."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + (
        "900 811 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"
        "901 811 0:90 / /sys/fs/cgroup rw,nosuid,nodev,noexec - tmpfs tmpfs rw,mode=755\n"))
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)  # the tmpfs: empty
    [hidden] = cgroup_mounts((tmp_path / "proc/self/mountinfo").read_text(), tmp_path)
    assert hidden.hidden
    why = locate(tmp_path, tmp_path / "proc")
    assert isinstance(why, str) and "hidden by a later mount" in why, why
    write(tmp_path, "proc/1/mountinfo", ROOT_LINE + HOST_V2)
    host_cg = tmp_path / "proc/1/root/sys/fs/cgroup"
    v2_tree(host_cg, "nr_descendants 0\nnr_dying_descendants 42\n")
    out = CgroupsSource(Host(tmp_path)).collect(0.0)
    assert (out["memcg.live"], out["memcg.dying"]) == (1, 42)


def test_the_whole_hierarchy_seen_from_a_cgroup_namespace_below_it_is_the_hosts(
        tmp_path: Path) -> None:
    """A pod in a cgroup namespace of its own (containerd's default on cgroup v2) that
    mounts the host's /sys/fs/cgroup sees the mount's root relative to its namespace:
    "/../../.." (kernfs_path_from_node, kernel/cgroup/cgroup.c cgroup_show_path). The
    top has no cgroup.events: it is the root cgroup, the host's whole hierarchy."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + (
        "812 811 0:26 / /sys/fs/cgroup ro,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
        "813 811 0:26 /../../.. /host/sys/fs/cgroup ro,relatime - cgroup2 cgroup2 "
        "rw,nsdelegate\n"))
    v2_tree(tmp_path / "sys/fs/cgroup", "nr_descendants 0\nnr_dying_descendants 0\n",
            namespace_root=True)
    v2_tree(tmp_path / "host/sys/fs/cgroup", "nr_descendants 0\nnr_dying_descendants 7\n")
    layout = detect_layout(tmp_path, tmp_path / "proc")
    assert layout is not None and layout.memory_root == tmp_path / "host/sys/fs/cgroup"
    assert memcg_counts(Host(tmp_path), layout)[1] == 7


def test_a_mount_below_a_later_mount_point_is_hidden_too(tmp_path: Path) -> None:
    text = ROOT_LINE + (
        "30 22 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "31 22 0:28 / /sys/fs/cgroup/memoryx rw - cgroup cgroup rw,pids\n"
        "40 22 0:90 / /sys/fs/cgroup/ rw - tmpfs tmpfs rw\n"
        "41 40 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        # listed after the cgroup mount below it, but its parent: it covers nothing
        "50 51 0:30 / /run/cg/pids rw - cgroup cgroup rw,pids\n"
        "51 22 0:91 / /run/cg rw - tmpfs tmpfs rw\n")
    assert [m.hidden for m in cgroup_mounts(text, tmp_path)] == [True, True, False, False]


def test_6_11_per_controller_counts_are_used(tmp_path: Path) -> None:
    """6.11+ counts memory cgroups exactly; cgroups without the memory controller (here
    19 of the 60) are not memcgs. The figures are shaped after the sample in the commit
    that added the keys (cgroup: Show # of subsystem CSSes in cgroup.stat)."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + HOST_V2)
    v2_tree(tmp_path / "sys/fs/cgroup", "nr_descendants 60\nnr_dying_descendants 35\n"
            "nr_subsys_cpuset 1\nnr_subsys_cpu 40\nnr_subsys_io 40\nnr_subsys_memory 41\n"
            "nr_subsys_perf_event 61\nnr_subsys_pids 55\nnr_dying_subsys_cpuset 0\n"
            "nr_dying_subsys_cpu 0\nnr_dying_subsys_io 0\nnr_dying_subsys_memory 33\n"
            "nr_dying_subsys_perf_event 35\nnr_dying_subsys_pids 0\n")
    out = CgroupsSource(Host(tmp_path)).collect(0.0)
    assert (out["memcg.live"], out["memcg.dying"]) == (41, 33)


def test_before_6_11_live_memcgs_are_the_cgroups_with_memory_files(tmp_path: Path) -> None:
    """No per-controller keys: the cgroups where the memory controller is enabled (they
    have memory.current; the root has none, and always counts) are the live memcgs."""
    write(tmp_path, "proc/self/mountinfo", ROOT_LINE + HOST_V2)
    top = tmp_path / "sys/fs/cgroup"
    v2_tree(top, "nr_descendants 4\nnr_dying_descendants 7\n")
    write(top, "system.slice/memory.current", "0\n")
    write(top, "system.slice/kubelet.service/memory.current", "0\n")
    write(top, "nomem/cgroup.procs", "")  # memory not enabled in its parent
    write(top, "nomem/inner/cgroup.procs", "")
    out = CgroupsSource(Host(tmp_path)).collect(0.0)
    assert (out["memcg.live"], out["memcg.dying"]) == (3, 7)


def test_this_kernels_cgroup_stat_has_the_per_controller_keys() -> None:
    """This VM (6.18) for real: its cgroup2 root's cgroup.stat carries nr_subsys_<c> for
    the controllers bound to v2 (not memory, which is on v1 here), the root included."""
    stat = Path("/sys/fs/cgroup/unified/cgroup.stat")
    if not stat.exists() or "nr_subsys_" not in stat.read_text():
        pytest.skip("no cgroup2 mount with per-controller counts (kernel before 6.11)")
    from guardian.hostio.cgroupfs import cgroup_stat
    got = cgroup_stat(stat.parent)
    controllers = (stat.parent / "cgroup.controllers").read_text().split()
    for c in controllers:
        assert got[f"nr_subsys_{c}"] >= 1 and f"nr_dying_subsys_{c}" in got


@contextlib.contextmanager
def bind_mounted_sub_cgroup(where: Path) -> Iterator[Path]:
    """A real sub-cgroup of this VM's v1 memory hierarchy, bind-mounted at ``where``."""
    sub = MEMCG_V1 / f"guardian-test-bind-{os.getpid()}-{time.monotonic_ns()}"
    sub.mkdir()
    where.mkdir()
    try:
        subprocess.run(["mount", "--bind", str(sub), str(where)], check=True)
        try:
            yield sub
        finally:
            subprocess.run(["umount", str(where)], check=True)
    finally:
        sub.rmdir()


def test_a_real_bind_mount_of_a_sub_cgroup_is_not_taken_for_the_hierarchy(
        tmp_path: Path) -> None:
    """This VM for real: a sub-cgroup of the v1 memory hierarchy bind-mounted after the
    hierarchy's own mount (mountinfo lists it last, root "/guardian-test-bind-...")."""
    need_memcg_v1()
    with bind_mounted_sub_cgroup(tmp_path / "cg") as sub:
        mine = [m for m in cgroup_mounts(Path("/proc/self/mountinfo").read_text(), Path("/"))
                if m.path == tmp_path / "cg"]
        assert [m.root for m in mine] == [f"/{sub.name}"]
        layout = detect_layout(Path("/"), Path("/proc"))
        assert layout is not None and layout.memory_root == MEMCG_V1
