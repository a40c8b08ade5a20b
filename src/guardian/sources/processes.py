"""Processes: zombies in total and per parent, how long they have been seen, and
kernel threads kept apart (they are never targets)."""

from __future__ import annotations

from typing import ClassVar

from ..host import Host
from ..hostio.procfs import all_stats, zombies_by_parent
from ..plugins import NoParams, Source
from ..snapshot import Family, SignalSpec, labels_of


class ProcessesSource(Source[NoParams]):
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

    def __init__(self, host: Host, config: NoParams | None = None) -> None:
        super().__init__(host, config)
        # (pid, starttime) of each zombie -> when guardian first saw it; the kernel does
        # not record when a process exited, so age is measured from first sight.
        self.first_seen: dict[tuple[int, int], float] = {}

    def unavailable(self) -> str | None:
        return None if (self.host.proc / "self").exists() or any(
            p.name.isdigit() for p in self.host.proc.iterdir()) else "no processes in procfs"

    def collect(self, now: float) -> dict[str, object]:
        proc = self.host.proc
        stats = {st.pid: st for st in all_stats(proc)}
        if not stats:
            raise RuntimeError(f"no readable processes under {proc}")
        by_parent = zombies_by_parent(stats.values())
        seen: dict[tuple[int, int], float] = {}
        for zombies in by_parent.values():
            for z in zombies:
                seen[(z.pid, z.starttime)] = self.first_seen.get((z.pid, z.starttime), now)
        self.first_seen = seen
        family: Family = {
            labels_of({"ppid": str(ppid), "comm": stats[ppid].comm if ppid in stats else "?"}):
            float(len(zs)) for ppid, zs in by_parent.items()
        }
        return {
            "processes.total": len(stats),
            "processes.kernel_threads": sum(1 for st in stats.values() if st.is_kernel_thread),
            "processes.zombies": len(seen),
            "processes.zombies_by_parent": family,
            "processes.zombie_max_age_seconds": max((now - t for t in seen.values()),
                                                    default=0.0),
        }
