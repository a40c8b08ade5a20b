"""What every benchmark shares: a figure's shape, interleaved medians, a process's CPU
and memory from /proc, and node_exporter from Debian's package (unpacked into a cache,
never installed or started as a service)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "guardian-bench"


def figure(name: str, value: float, unit: str, how: str, peer: str = "",
           peer_value: float | None = None, peer_unit: str | None = None,
           target: str = "", digits: int = 3) -> dict[str, Any]:
    """One measured figure; ``ratio`` is value / peer_value when there is a peer."""
    ratio = (round(value / peer_value, 2) if peer_value else None)
    return {"name": name, "value": round(value, digits), "unit": unit, "peer": peer,
            "peer_value": None if peer_value is None else round(peer_value, digits),
            "peer_unit": peer_unit or unit, "ratio": ratio, "how": how, "target": target}


def interleaved(fns: Sequence[Callable[[], object]], rounds: int,
                clock: Callable[[], float] = time.process_time) -> list[float]:
    """Median cost of each function, run in turn ``rounds`` times (so machine noise
    falls on all of them alike)."""
    costs: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = clock()
            fn()
            costs[i].append(clock() - start)
    return [statistics.median(c) for c in costs]


def cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU of a whole process: every thread, and (``children``) the
    children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def node_exporter() -> Path | None:
    """Debian's prometheus-node-exporter binary, or None (the caller goes on without)."""
    binary = CACHE / "usr" / "bin" / "prometheus-node-exporter"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["apt-get", "download", "prometheus-node-exporter"], cwd=CACHE,
                       check=True, capture_output=True, timeout=300)
        deb = next(CACHE.glob("prometheus-node-exporter_*.deb"))
        subprocess.run(["dpkg", "-x", str(deb), str(CACHE)], check=True, timeout=120)
    except (OSError, subprocess.SubprocessError, StopIteration) as exc:
        print(f"bench: node_exporter unavailable: {exc}", file=sys.stderr)
        return None
    return binary if binary.exists() else None


# node_exporter's collectors for what guardian's default sources read
NODE_EXPORTER_COLLECTORS = ["cpu", "stat", "softnet", "netdev", "pressure", "ethtool",
                            "processes", "cgroups", "systemd"]
