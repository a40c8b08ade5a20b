"""Memory cgroups on this host: where the controller is mounted (v1, v2 or hybrid, from
mountinfo) and how many memcgs are live and dying, counted in O(live) without reading any
per-memcg stat file (walking those is the kernel cost that starved softirqs in the
incident).

cgroup v1: ``/proc/cgroups`` counts live + dying memcgs; live ones are the directories of
the memory hierarchy. cgroup v2: the root's ``cgroup.stat`` has ``nr_descendants`` and
``nr_dying_descendants``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..host import Host, read_kernel_file


@dataclass(frozen=True)
class Layout:
    """Where the memory controller lives on this host."""

    version: int  # 1 or 2
    memory_root: Path  # v1: the memory hierarchy's mount; v2: the cgroup2 mount
    kind: str  # "v1", "v2" or "hybrid"


def detect_layout(root: Path, proc: Path) -> Layout | None:
    """Read mountinfo and decide where memory cgroups are counted."""
    v1_memory: Path | None = None
    v2: Path | None = None
    with open(proc / "self" / "mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) < 5 or len(rfields) < 3:
                continue
            mount = root / fields[4].lstrip("/").replace("\\040", " ")
            if rfields[0] == "cgroup2":
                v2 = mount
            elif rfields[0] == "cgroup" and "memory" in rfields[2].split(","):
                v1_memory = mount
    if v1_memory is not None:
        return Layout(1, v1_memory, "hybrid" if v2 is not None else "v1")
    if v2 is not None:
        return Layout(2, v2, "v2")
    return None


def count_dirs(top: Path) -> int:
    """Directories under ``top``, itself included (each is a live cgroup)."""
    n = 0
    stack = [str(top)]
    while stack:
        d = stack.pop()
        n += 1
        try:
            with os.scandir(d) as it:
                stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            n -= 1  # removed while we walked
    return n


def proc_cgroups_count(proc: Path, controller: str = "memory") -> int:
    for line in read_kernel_file(proc / "cgroups").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == controller:
            return int(parts[2])
    raise LookupError(f"no {controller!r} line in {proc / 'cgroups'}")


def cgroup_stat(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(path / "cgroup.stat", encoding="utf-8") as f:
        for line in f:
            k, _, v = line.partition(" ")
            out[k] = int(v)
    return out


def layout_problem(host: Host, layout: Layout | None) -> str | None:
    """Why memcgs cannot be counted with ``layout`` on ``host``, or None."""
    if layout is None:
        return "no cgroup v1 memory hierarchy and no cgroup2 mount"
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
    return stat["nr_descendants"] + 1, stat["nr_dying_descendants"]


def dying_memcgs(host: Host) -> int | None:
    """Dying memory cgroups now, or None when this host's cannot be counted."""
    try:
        layout = detect_layout(host.root, host.proc)
        if layout_problem(host, layout) is not None or layout is None:
            return None
        return memcg_counts(host, layout)[1]
    except (OSError, ValueError, KeyError, LookupError):
        return None
