"""Per-core CPU time from /proc/stat deltas, and ksoftirqd/N CPU per core.

Aggregate CPU hides the incident's signature (one core pinned at 100% system time while
its NAPI poll starves), so everything here is per core. The first collection has no
previous sample and so yields no percentages: no value, never zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.snapshot import Family, SignalSpec, label
from guardian.hostio.host import Host, exists, read_kernel_file
from guardian.hostio.kernelstats import COLUMNS, parse_proc_stat_cpus
from guardian.hostio.procfs import CLK_TCK, all_stats, read_proc_stat
from guardian.plugin.contract import Source

# /proc/stat cpuN columns, in order; guest time is already counted in user.
PCT_SIGNALS = {"user": "user_pct", "system": "sys_pct", "irq": "irq_pct",
               "softirq": "softirq_pct", "iowait": "iowait_pct", "steal": "steal_pct",
               "idle": "idle_pct", "nice": "nice_pct"}


class CpuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hot_pct: float = Field(90.0, gt=0, le=100, description="a core is hot when its system "
                           "+ irq + softirq share reaches this")


class CpuSource(Source[CpuConfig]):
    name: ClassVar[str] = "cpu"
    Config = CpuConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        *(SignalSpec(f"cpu.core.{sig}", f"share of the core's time in {col}", "percent",
                     labels=("cpu",)) for col, sig in PCT_SIGNALS.items()),
        SignalSpec("cpu.core.kernel_pct", "share of the core's time in the kernel: system + "
                   "irq + softirq", "percent", labels=("cpu",)),
        SignalSpec("cpu.core.hot", "1 when the core's kernel share reaches hot_pct (90% "
                   "unless configured), else 0", labels=("cpu",)),
        SignalSpec("cpu.hottest_core_pct", "system + irq + softirq share of the hottest "
                   "core", "percent"),
        SignalSpec("cpu.hot_cores", "cores whose system + irq + softirq share is at least "
                   "hot_pct (90% unless configured)", "cores"),
        SignalSpec("cpu.cores", "online cores", "cores"),
        SignalSpec("cpu.ksoftirqd_pct", "CPU used by the ksoftirqd thread of each core "
                   "(its softirq backlog)", "percent", labels=("cpu",)),
    )

    def __init__(self, host: Host, config: CpuConfig | None = None) -> None:
        super().__init__(host, config)
        self.hot_pct = self.config.hot_pct
        self.prev: dict[str, tuple[int, ...]] | None = None
        self.ksoftirqd: dict[int, str] = {}  # pid -> cpu
        self.prev_ksoftirqd: tuple[float, dict[int, int]] | None = None
        self.stat_path = str(host.proc / "stat")

    def unavailable(self) -> str | None:
        return None if exists(self.host.proc / "stat") else "no /proc/stat"

    def collect(self, now: float) -> dict[str, object]:
        cur = parse_proc_stat_cpus(read_kernel_file(self.stat_path))
        prev, self.prev = self.prev, cur
        out: dict[str, object] = {"cpu.cores": len(cur)}
        out.update(self._ksoftirqd(now))
        if prev is None:
            return out
        fams: dict[str, Family] = {sig: {} for sig in (*PCT_SIGNALS.values(), "kernel_pct",
                                                       "hot")}
        hot: list[float] = []
        for cpu, vals in cur.items():
            old = prev.get(cpu)
            if old is None:
                continue
            deltas = [max(a - b, 0) for a, b in zip(vals, old, strict=True)]
            span = sum(deltas)
            if span <= 0:
                continue
            key = label("cpu", cpu)
            for col, d in zip(COLUMNS, deltas, strict=True):
                fams[PCT_SIGNALS[col]][key] = 100.0 * d / span
            kernel = 100.0 * (deltas[2] + deltas[5] + deltas[6]) / span
            fams["kernel_pct"][key] = kernel
            fams["hot"][key] = 1.0 if kernel >= self.hot_pct else 0.0
            hot.append(kernel)
        for sig, fam in fams.items():
            out[f"cpu.core.{sig}"] = fam
        if hot:
            out["cpu.hottest_core_pct"] = max(hot)
            out["cpu.hot_cores"] = sum(1 for h in hot if h >= self.hot_pct)
        return out

    def _ksoftirqd(self, now: float) -> dict[str, object]:
        proc = self.host.proc
        ticks: dict[int, int] = {}
        for pid in list(self.ksoftirqd):
            st = read_proc_stat(proc, pid)
            if st is None or not st.comm.startswith("ksoftirqd/"):
                self.ksoftirqd.clear()  # a core went offline or pids moved: rescan
                break
            ticks[pid] = st.utime + st.stime
        if not self.ksoftirqd:
            ticks = self._find_ksoftirqd(proc)
        prev, self.prev_ksoftirqd = self.prev_ksoftirqd, (now, ticks)
        if prev is None or now <= prev[0]:
            return {}
        span = now - prev[0]
        fam: Family = {}
        for pid, t in ticks.items():
            if pid in prev[1]:
                used = (t - prev[1][pid]) / CLK_TCK
                fam[label("cpu", self.ksoftirqd[pid])] = min(100.0 * used / span, 100.0)
        return {"cpu.ksoftirqd_pct": fam}

    def _find_ksoftirqd(self, proc: Path) -> dict[int, int]:
        ticks: dict[int, int] = {}
        for st in all_stats(proc):
            if st.is_kernel_thread and st.comm.startswith("ksoftirqd/"):
                self.ksoftirqd[st.pid] = st.comm.partition("/")[2]
                ticks[st.pid] = st.utime + st.stime
        return ticks
