"""Processes: zombies in total and per parent, how long they have been seen, kernel
threads kept apart (they are never targets), and who burns kernel time: the top commands
by system CPU, from the same scan of /proc/<pid>/stat (the incident was found by seeing
kubelet spend its time in the kernel)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.snapshot import Family, SignalSpec, labels_of
from guardian.hostio.host import Host, exists
from guardian.hostio.procfs import (
    CLK_TCK,
    ProcessTable,
    ProcStat,
    cgroup_of,
    pids,
    real_uid,
    zombies_by_parent,
)
from guardian.plugin.contract import Source


class ProcessesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    top: int = Field(5, ge=1, le=50, description="commands kept in "
                     "processes.top_system_cpu_pct (bounds its cardinality)")


class ProcessesSource(Source[ProcessesConfig]):
    name: ClassVar[str] = "processes"
    Config = ProcessesConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("processes.total", "processes and kernel threads", "processes"),
        SignalSpec("processes.kernel_threads", "kernel threads (PF_KTHREAD)", "threads"),
        SignalSpec("processes.zombies", "zombie (defunct) processes", "processes"),
        SignalSpec("processes.zombies_by_parent", "zombies per parent process", "processes",
                   labels=("ppid", "comm")),
        SignalSpec("processes.zombie_max_age_seconds",
                   "how long guardian has seen the longest-standing zombie", "seconds"),
        SignalSpec("processes.top_system_cpu_pct", "system (kernel) CPU of the commands "
                   "that used the most since the last collection, in percent of one core, "
                   "by command, real UID and cgroup (a process names itself, so the UID "
                   "and the cgroup, the systemd unit or pod, say whose it is; processes "
                   "alike added up; the top `top`, 5 unless configured; of the kernel "
                   "threads, reclaim's: kswapd and kcompactd, whose time is page reclaim "
                   "and compaction; ksoftirqd: see cpu.ksoftirqd_pct)",
                   "percent", labels=("comm", "uid", "cgroup")),
    )

    def __init__(self, host: Host, config: ProcessesConfig | None = None) -> None:
        super().__init__(host, config)
        # (pid, starttime) of each zombie -> when guardian first saw it; the kernel does
        # not record when a process exited, so age is measured from first sight.
        self.first_seen: dict[tuple[int, int], float] = {}
        # (time, {pid: stat}) of the last collection
        self.prev_stats: tuple[float, dict[int, ProcStat]] | None = None
        self.table = ProcessTable(host.proc)

    def unavailable(self) -> str | None:
        return None if exists(self.host.proc / "self") or pids(self.host.proc) \
            else "no processes in procfs"

    def collect(self, now: float) -> dict[str, object]:
        found, kernel_threads = self.table.scan()
        if not found and not kernel_threads:
            raise RuntimeError(f"no readable processes under {self.host.proc}")
        stats = {st.pid: st for st in found}
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
            "processes.top_system_cpu_pct": self._top_system(
                now, stats | {st.pid: st for st in self.table.reclaim_threads}),
            "processes.total": len(stats) + kernel_threads,
            "processes.kernel_threads": kernel_threads,
            "processes.zombies": len(seen),
            "processes.zombies_by_parent": family,
            "processes.zombie_max_age_seconds": max((now - t for t in seen.values()),
                                                    default=0.0),
        }

    def _top_system(self, now: float, stats: dict[int, ProcStat]) -> Family | None:
        """System CPU per command since the last collection; no value at the first."""
        prev, self.prev_stats = self.prev_stats, (now, stats)
        if prev is None or now <= prev[0]:
            return None
        before = prev[1]
        used: dict[int, int] = {}
        for pid, st in stats.items():
            old = before.get(pid)  # a process new since then has no delta yet
            if old is not None and st.stime > old.stime and st.starttime == old.starttime:
                used[pid] = st.stime - old.stime
        # who they are is read for the biggest users only: two small files a process
        burners = sorted(used, key=lambda pid: -used[pid])[:8 * self.config.top]
        per_owner: dict[tuple[str, str, str], float] = {}
        for pid in burners:
            uid = real_uid(self.host.proc, pid)
            key = (stats[pid].comm, "?" if uid is None else str(uid),
                   cgroup_of(self.host.proc, pid))
            per_owner[key] = per_owner.get(key, 0.0) + used[pid]
        top = sorted(per_owner.items(), key=lambda kv: (-kv[1], kv[0]))[:self.config.top]
        seconds = now - prev[0]
        return {labels_of({"comm": comm, "uid": uid, "cgroup": cgroup}):
                round(100.0 * ticks / CLK_TCK / seconds, 3)
                for (comm, uid, cgroup), ticks in top}
