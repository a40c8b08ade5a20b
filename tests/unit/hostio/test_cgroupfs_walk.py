"""guardian.hostio.cgroupfs.count_dirs: the live-memcg count on cgroup2 before 6.11 (and
the memory hierarchy's directories on v1) lists only the cgroups that have children.

On cgroupfs a directory's link count is its subdirectories plus two (kernfs_refresh_inode,
fs/kernfs/inode.c: ``set_nlink(inode, kn->dir.subdirs + 2)``), as on the ext4 and tmpfs
these trees are made on; nothing below a cgroup without the memory controller has it
(cgroup_subtree_control_write refuses a controller not in ``cgroup_control(cgrp)``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from guardian.hostio import cgroupfs

MARKER = "memory.current"


def _cgroup(path: Path, memory: bool = True) -> Path:
    path.mkdir(parents=True)
    for name in ("cgroup.procs", "cgroup.stat", "cpu.stat", "io.stat", "pids.current"):
        (path / name).touch()
    if memory:
        (path / MARKER).write_text("0\n")
    return path


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The directories ``os.scandir`` is asked for while the fixture is in use."""
    seen: list[str] = []
    real = os.scandir

    def spy(path: Any) -> Any:
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", spy)
    yield seen


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node's shape: slices, a pod slice with two containers, a leaf service."""
    top = tmp_path / "cgroup"
    top.mkdir()
    _cgroup(top / "init.scope")
    _cgroup(top / "system.slice" / "kubelet.service")
    _cgroup(top / "kubepods.slice" / "pod1.slice" / "c1.scope")
    _cgroup(top / "kubepods.slice" / "pod1.slice" / "c2.scope")
    for d in ("system.slice", "kubepods.slice", "kubepods.slice/pod1.slice"):
        (top / d / MARKER).write_text("0\n")
    return top


def test_leaf_cgroups_are_counted_without_being_listed(node: Path, listed: list[str]) -> None:
    # the root, init.scope, system.slice, kubelet.service, kubepods.slice, pod1, c1, c2
    assert cgroupfs.count_dirs(node, MARKER) == 8
    assert sorted(listed) == sorted(str(node / d) for d in (
        "", "system.slice", "kubepods.slice", "kubepods.slice/pod1.slice"))


def test_nothing_below_a_cgroup_without_memory_is_listed(node: Path,
                                                        listed: list[str]) -> None:
    plain = _cgroup(node / "plain", memory=False)  # its children get no controller
    _cgroup(plain / "a", memory=False)
    _cgroup(plain / "b", memory=False)
    assert cgroupfs.count_dirs(node, MARKER) == 8
    assert str(plain) not in listed
    assert cgroupfs.count_dirs(node) == 11  # v1: every directory is a memcg


def test_a_link_count_that_says_nothing_lists_every_directory(
        node: Path, listed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # a file system that does not count subdirectories (btrfs) gives a directory 1 link
    real = os.lstat

    def one_link(path: Any) -> Any:
        st = real(path)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, 1, *tuple(st)[4:]))

    monkeypatch.setattr(os, "lstat", one_link)
    assert cgroupfs.count_dirs(node, MARKER) == 8
    assert len(listed) == 8


def _as_kernel_shows(top: Path) -> None:
    """Each cgroup's cgroup.type, cgroup.stat and cgroup.subtree_control as the kernel
    shows them: "domain", its live descendants, and the memory controller enabled for
    the children of a cgroup that has the controller and has children."""
    for d in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        below = sum(1 for p in d.rglob("*") if p.is_dir())
        children = any(p.is_dir() for p in d.iterdir())
        if d != top:
            (d / "cgroup.type").write_text("domain\n")
        (d / "cgroup.stat").write_text(f"nr_descendants {below}\nnr_dying_descendants 0\n")
        (d / "cgroup.subtree_control").write_text(
            "cpu io memory pids\n" if (children and (d / MARKER).exists()) or d == top
            else "\n")


def test_a_cgroup_whose_children_are_leaves_is_counted_from_its_files(
        node: Path, listed: list[str]) -> None:
    _as_kernel_shows(node)
    listed.clear()
    assert cgroupfs.count_memcgs(node) == 8
    # system.slice (one leaf) and the pod's slice (two) are not listed
    assert sorted(listed) == sorted(str(node / d) for d in ("", "kubepods.slice"))


def test_without_the_memory_controller_for_them_its_leaves_are_not_memcgs(
        node: Path, listed: list[str]) -> None:
    _as_kernel_shows(node)
    pod = node / "kubepods.slice" / "pod1.slice"
    (pod / "cgroup.subtree_control").write_text("cpu pids\n")
    for c in ("c1.scope", "c2.scope"):
        (pod / c / MARKER).unlink()  # the kernel shows no memory files there
    listed.clear()
    assert cgroupfs.count_memcgs(node) == 6
    assert str(pod) not in listed


@pytest.mark.parametrize("change", ["threaded", "grandchild", "unreadable"])
def test_otherwise_the_cgroup_is_listed(node: Path, listed: list[str], change: str) -> None:
    _as_kernel_shows(node)
    pod = node / "kubepods.slice" / "pod1.slice"
    if change == "threaded":  # a threaded child gets no domain controller
        (pod / "cgroup.type").write_text("domain threaded\n")
    elif change == "grandchild":  # its cgroup.stat counts one more than its children
        _cgroup(pod / "c1.scope" / "sub")
        _as_kernel_shows(node)
    else:
        (pod / "cgroup.stat").unlink()
    listed.clear()
    assert cgroupfs.count_memcgs(node) == (9 if change == "grandchild" else 8)
    assert str(pod) in listed
