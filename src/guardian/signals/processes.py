"""Processes: zombies in total and per parent, how long they have been seen, and
kernel threads kept apart (they are never targets)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from ..host import Host
from ..plugins import Source
from ..snapshot import Family, SignalSpec, labels_of
from .procfs import all_stats


class ProcessesSource(Source):
    name: ClassVar[str] = "processes"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("processes.total", "processes and kernel threads", "processes"),
        SignalSpec("processes.kernel_threads", "kernel threads (PF_KTHREAD)", "threads"),
        SignalSpec("processes.zombies", "zombie (defunct) processes", "processes"),
        SignalSpec("processes.zombies_by_parent", "zombies per parent process", "processes",
                   labels=("ppid", "comm")),
        SignalSpec("processes.zombie_max_age_seconds",
                   "how long guardian has seen the longest-standing zombie", "seconds"),
    )

    def __init__(self, host: Host, config: BaseModel | None = None) -> None:
        super().__init__(host, config)
        # (pid, starttime) of each zombie -> when guardian first saw it; the kernel does
        # not record when a process exited, so age is measured from first sight.
        self.first_seen: dict[tuple[int, int], float] = {}

    def unavailable(self) -> str | None:
        return None if (self.host.proc / "self").exists() or any(
            p.name.isdigit() for p in self.host.proc.iterdir()) else "no processes in procfs"

    def collect(self, now: float) -> dict[str, object]:
        proc = self.host.proc
        total = kthreads = 0
        comms: dict[int, str] = {}
        zombies: list[tuple[int, int, int]] = []  # pid, ppid, starttime
        for st in all_stats(proc):
            pid = st.pid
            total += 1
            comms[pid] = st.comm
            if st.is_kernel_thread:
                kthreads += 1
            elif st.state == "Z":
                zombies.append((pid, st.ppid, st.starttime))
        if total == 0:
            raise RuntimeError(f"no readable processes under {proc}")
        by_parent: dict[int, int] = {}
        seen: dict[tuple[int, int], float] = {}
        for pid, ppid, start in zombies:
            by_parent[ppid] = by_parent.get(ppid, 0) + 1
            seen[(pid, start)] = self.first_seen.get((pid, start), now)
        self.first_seen = seen
        family: Family = {
            labels_of({"ppid": str(ppid), "comm": comms.get(ppid, "?")}): float(n)
            for ppid, n in by_parent.items()
        }
        return {
            "processes.total": total,
            "processes.kernel_threads": kthreads,
            "processes.zombies": len(zombies),
            "processes.zombies_by_parent": family,
            "processes.zombie_max_age_seconds": max((now - t for t in seen.values()),
                                                    default=0.0),
        }
