"""Memory cgroups on this host: where the controller is mounted (v1, v2 or hybrid, from
mountinfo) and how many memcgs are live and dying, counted in O(live) without reading any
per-memcg stat file (walking those is the kernel cost that starved softirqs in the
incident).

cgroup v1: ``/proc/cgroups`` counts live + dying memcgs; live ones are the directories of
the memory hierarchy. cgroup v2: the root's ``cgroup.stat`` has exact per-controller counts
on 6.11+ (``nr_subsys_memory``, ``nr_dying_subsys_memory``); before, ``nr_dying_descendants``
counts the dying cgroups and the live memcgs are the directories with ``memory.current``.

Only a mount of the whole hierarchy is the host's: a mount whose root (mountinfo's 4th
field) is not ``/`` is a bind mount of a sub-cgroup, and one whose top is not the
hierarchy's root cgroup is a cgroup namespace's view (a container's). Either would count
one cgroup's subtree as the host's, so neither is used; the host's hierarchy is then looked
for in PID 1's mount namespace (host PID), else the counts are refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from guardian.hostio.host import Host, read_kernel_file, read_value


@dataclass(frozen=True)
class Layout:
    """Where the memory controller lives on this host."""

    version: int  # 1 or 2
    memory_root: Path  # v1: the memory hierarchy's mount; v2: the cgroup2 mount
    kind: str  # "v1", "v2" or "hybrid"


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup or cgroup2 line of mountinfo."""

    fstype: str  # "cgroup" (v1) or "cgroup2"
    root: str  # the cgroup the mount shows, within the hierarchy (the 4th field)
    path: Path  # where it is mounted, under the host root
    options: frozenset[str]  # super options: a v1 hierarchy's controllers
    hidden: bool = False  # a later mount covers its mount point (podman's tmpfs does)


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...)
    return _ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


def cgroup_mounts(text: str, under: Path) -> list[CgroupMount]:
    """The cgroup mounts in a mountinfo text, their mount points placed under ``under``.

    mountinfo lists a namespace's mounts in the order they were stacked, so a mount whose
    mount point (or a directory above it) is mounted on again later, by a mount that is not
    one of its own parents, is hidden: a privileged container sees the host's cgroup mounts
    listed under the tmpfs its runtime put on ``/sys/fs/cgroup``, and reading that path
    reads the tmpfs."""
    parsed: list[tuple[str, list[str], list[str]]] = []
    parent: dict[str, str] = {}
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5:
            parsed.append((_unescape(fields[4]), fields, rfields))
            parent[fields[0]] = fields[1]

    def ancestors(mount_id: str) -> set[str]:
        seen: set[str] = set()
        while mount_id in parent and mount_id not in seen:
            seen.add(mount_id)
            mount_id = parent[mount_id]
        return seen

    out: list[CgroupMount] = []
    for i, (point, fields, rfields) in enumerate(parsed):
        if len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
            continue
        mine = ancestors(fields[1])
        hidden = any((later == point or point.startswith(later.rstrip("/") + "/"))
                     and lfields[0] not in mine for later, lfields, _ in parsed[i + 1:])
        out.append(CgroupMount(rfields[0], _unescape(fields[3]),
                               under / point.lstrip("/"),
                               frozenset(rfields[2].split(",")), hidden))
    return out


def is_hierarchy_root(mount: CgroupMount) -> bool:
    """Whether the mount shows its whole hierarchy. mountinfo's root is relative to the
    reader's cgroup namespace, so a container's own mount says "/" too; the files only a
    root cgroup lacks or has tell them apart: ``cgroup.events`` exists on non-root cgroups
    only (Documentation/admin-guide/cgroup-v2.rst), v1's ``release_agent`` on the root
    only (CFTYPE_ONLY_ON_ROOT, kernel/cgroup/cgroup-v1.c)."""
    # In a cgroup namespace of its own (a container on a v2 host) the reader sees a mount
    # of the whole hierarchy with a root above its own namespace's: "/../..".
    above_own_namespace = all(part == ".." for part in mount.root.strip("/").split("/"))
    if mount.hidden or not (mount.root == "/" or above_own_namespace):
        return False
    if mount.fstype == "cgroup2":
        return not (mount.path / "cgroup.events").exists()
    return (mount.path / "release_agent").exists()


def _pick(mounts: list[CgroupMount]) -> Layout | None:
    v1_memory = v2 = None
    for m in mounts:
        if not is_hierarchy_root(m):
            continue
        if m.fstype == "cgroup2" and v2 is None:
            v2 = m.path
        elif m.fstype == "cgroup" and "memory" in m.options and v1_memory is None:
            v1_memory = m.path
    if v1_memory is not None:
        return Layout(1, v1_memory, "hybrid" if v2 is not None else "v1")
    if v2 is not None:
        return Layout(2, v2, "v2")
    return None


def locate(root: Path, proc: Path) -> Layout | str:
    """The host's memory cgroup hierarchy, or why it cannot be found."""
    mounts = cgroup_mounts(read_kernel_file(proc / "self" / "mountinfo"), root)
    found = _pick(mounts)
    if found is not None:
        return found
    if not mounts:
        return "no cgroup v1 memory hierarchy and no cgroup2 mount"
    # Only part of a hierarchy is mounted here. With the host's PID namespace, PID 1's
    # mount namespace has the whole one (readable through /proc/1/root when privileged).
    try:
        host_mounts = cgroup_mounts(read_kernel_file(proc / "1" / "mountinfo"),
                                    proc / "1" / "root")
        found = _pick(host_mounts)
    except OSError:
        found = None
    if found is not None:
        return found
    parts = ", ".join(f"{m.path} (hidden by a later mount)" if m.hidden else
                      f"{m.path} (shows {m.root})" if m.root.strip("/.") else
                      f"{m.path} (a cgroup namespace's root)" for m in mounts)
    return (f"only part of the cgroup hierarchy is mounted here: {parts}; its counts would "
            "be one subtree's, not the host's (mount the host's cgroup filesystem, or run "
            "in the host's cgroup namespace)")


def detect_layout(root: Path, proc: Path) -> Layout | None:
    """Where memory cgroups are counted, or None when the host's hierarchy is not here."""
    found = locate(root, proc)
    return found if isinstance(found, Layout) else None


def count_dirs(top: Path, marker: str | None = None) -> int:
    """Directories under ``top``, itself included (each is a live cgroup); with
    ``marker``, only those holding that file (below ``top``: ``top`` always counts).

    Only directories with subdirectories are listed. On cgroupfs a directory's link count
    is its subdirectories plus two (``set_nlink(inode, kn->dir.subdirs + 2)``,
    kernfs_refresh_inode in fs/kernfs/inode.c), so one ``stat`` tells a leaf cgroup, the
    most of a node's, without reading its few dozen file names; a link count other than
    2 (a file system that does not count subdirectories says 1) is listed. With
    ``marker``, a directory without it is not descended into: a cgroup can enable for its
    children only the controllers it has itself (cgroup_subtree_control_write refuses
    one not in ``cgroup_control(cgrp)``, kernel/cgroup/cgroup.c), and a controller's
    interface files show exactly where it is enabled (css_visible), so nothing below a
    cgroup without ``memory.current`` has it."""
    return _walk(top, marker, None)


def count_memcgs(top: Path) -> int:
    """cgroup2 before 6.11: the live memory cgroups under ``top`` (the hierarchy's root),
    itself included: the cgroups showing ``memory.current``, walked as :func:`count_dirs`
    walks them, except that a cgroup whose children are all leaves is not listed when
    three of its files say how many of them have the memory controller
    (:func:`_leaf_memcgs`); on a Kubernetes node, every pod's slice."""
    return _walk(top, "memory.current", _leaf_memcgs)


def _walk(top: Path, marker: str | None,
          leaves: Callable[[Path, int], int | None] | None) -> int:
    """:func:`count_dirs`' walk; ``leaves`` may count a directory's children (all leaves)
    without listing it, or say None to have it listed."""
    n = 1
    stack = [str(top)]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                subdirs = [e.path for e in it if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            continue  # removed while we walked
        for sub in subdirs:
            if marker is not None and not os.path.exists(os.path.join(sub, marker)):
                continue
            try:
                links = os.lstat(sub).st_nlink
            except FileNotFoundError:
                continue  # removed while we walked
            n += 1
            if links == 2:
                continue  # a leaf
            counted = leaves(Path(sub), links - 2) if leaves is not None else None
            if counted is None:
                stack.append(sub)
            else:
                n += counted
    return n


def _leaf_memcgs(cgroup: Path, subdirs: int) -> int | None:
    """How many of ``cgroup``'s ``subdirs`` children are memory cgroups, without listing
    it, when they are all leaves and none is threaded; else None. All are leaves when its
    ``nr_descendants`` (cgroup.stat: its live descendants) is its subdirectory count;
    none is threaded when its ``cgroup.type`` says ``domain`` (cgroup_type_show,
    kernel/cgroup/cgroup.c: a cgroup with threaded children says ``domain threaded``);
    then each child has the memory controller exactly when ``cgroup.subtree_control``
    enables it (cgroup_control: a domain child's controllers are its parent's
    subtree_control)."""
    try:
        if read_kernel_file(cgroup / "cgroup.type").strip() != "domain" \
                or cgroup_stat(cgroup).get("nr_descendants") != subdirs:
            return None
        enabled = read_kernel_file(cgroup / "cgroup.subtree_control").split()
    except (OSError, ValueError):
        return None
    return subdirs if "memory" in enabled else 0


def proc_cgroups_count(proc: Path, controller: str = "memory") -> int:
    for line in read_kernel_file(proc / "cgroups").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == controller:
            return int(parts[2])
    raise LookupError(f"no {controller!r} line in {proc / 'cgroups'}")


def cgroup_stat(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in read_kernel_file(path / "cgroup.stat").splitlines():
        k, _, v = line.partition(" ")
        if k:
            out[k] = int(v)
    return out


def layout_problem(host: Host, layout: Layout | None) -> str | None:
    """Why memcgs cannot be counted with ``layout`` on ``host``, or None."""
    if layout is None:
        return "no cgroup v1 memory hierarchy and no cgroup2 mount of the whole hierarchy"
    if layout.version == 2 and "memory" not in (
            layout.memory_root / "cgroup.controllers").read_text().split():
        return f"memory controller not enabled in {layout.memory_root}"
    return None


def memcg_counts(host: Host, layout: Layout) -> tuple[int, int]:
    """(live, dying) memory cgroups."""
    if layout.version == 1:
        total = proc_cgroups_count(host.proc)
        live = count_dirs(layout.memory_root)
        return live, max(total - live, 0)
    stat = cgroup_stat(layout.memory_root)
    if "nr_subsys_memory" in stat:  # 6.11+: per controller, the root itself included
        return stat["nr_subsys_memory"], stat.get("nr_dying_subsys_memory", 0)
    # Before 6.11: a dying cgroup whose memcg lives on stays dying, so the dying cgroups
    # are the dying memcgs' upper bound; live memcgs are the cgroups with memory.current.
    return count_memcgs(layout.memory_root), stat["nr_dying_descendants"]


def dying_memcgs(host: Host) -> int | None:
    """Dying memory cgroups now, or None when this host's cannot be counted."""
    try:
        layout = detect_layout(host.root, host.proc)
        if layout_problem(host, layout) is not None or layout is None:
            return None
        return memcg_counts(host, layout)[1]
    except (OSError, ValueError, KeyError, LookupError):
        return None


def leaking_cgroup(top: Path) -> Path:
    """The deepest cgroup under ``top`` (a cgroup2 mount) that holds all of its dying
    descendants: where ``memory.reclaim`` reaches them without reclaiming from the rest of
    the machine. ``top`` itself when they are split across its children, or some are its
    own children (a dying cgroup has no directory left to descend into)."""
    here = top
    while True:
        dying = cgroup_stat(here).get("nr_dying_descendants", 0)
        if dying == 0:
            return here
        holder = None
        with os.scandir(here) as it:
            for e in it:
                if not e.is_dir(follow_symlinks=False):
                    continue
                try:
                    below = cgroup_stat(Path(e.path)).get("nr_dying_descendants", 0)
                except FileNotFoundError:
                    continue  # removed meanwhile
                if below == dying:
                    holder = Path(e.path)
                if below:
                    break  # at most one child can hold any of them all
        if holder is None:
            return here
        here = holder


def gives_memory(cgroup: Path) -> bool:
    """Whether a cgroup v2 cgroup enables the memory controller for its children
    (``cgroup.subtree_control``); False when that cannot be read."""
    try:
        return "memory" in read_value(cgroup / "cgroup.subtree_control").split()
    except OSError:
        return False


def memory_current(cgroup: Path) -> int:
    """A cgroup v2 cgroup's ``memory.current``, in bytes (the root has none). Raises
    OSError or ValueError."""
    return int(read_value(cgroup / "memory.current"))


def make_and_remove_child(probe: Path) -> str:
    """Make and remove ``probe``, a child cgroup: its memcg going offline queues the
    kernel's clean-up of offline writeback structures (wb_memcg_offline, then
    cleanup_offline_cgwbs_workfn in mm/backing-dev.c), which the structures of memcgs that
    died dirty were skipped by, and moves their now clean inodes to the parent's. Says
    "triggered", or which step failed and why."""
    try:
        probe.mkdir()
    except OSError as exc:
        return f"not triggered: mkdir {probe}: {exc.strerror}"
    try:
        probe.rmdir()
    except OSError as exc:
        return f"made, not removed: rmdir {probe}: {exc.strerror}"
    return "triggered"
