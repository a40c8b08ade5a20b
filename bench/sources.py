"""Source cost, measured against Debian's prometheus-node-exporter in the same run.

1. CPU per tick of guardian's full default source set (median) vs CPU per scrape of
   node_exporter with the equivalent collectors (cpu, stat, softnet, netdev, pressure,
   ethtool, processes, cgroups), both on this host; node_exporter's CPU is read from its
   /proc/<pid>/stat over all scrapes (its HTTP and text encoding included, as a scrape is
   how it collects).
2. The same tick with 0 and with 20,000 real dying memcgs (cost must not grow with the
   leak it watches).
3. The process scan with 5,000 extra real processes: cost per process.

node_exporter comes from Debian's package, unpacked (never installed or started as a
service) into a cache directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from guardian.collector import Collector
from guardian.host import Host
from guardian.plugins import default_registry
from guardian.sources.processes import ProcessesSource

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "guardian-bench"
COLLECTORS = ["cpu", "stat", "softnet", "netdev", "pressure", "ethtool", "processes",
              "cgroups"]
TICKS = 200
CLK_TCK = os.sysconf("SC_CLK_TCK")


def node_exporter() -> Path | None:
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


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_exporter_cpu_per_scrape(binary: Path, n: int) -> float:
    port = _free_port()
    args = [str(binary), f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults", *(f"--collector.{c}" for c in COLLECTORS)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.05)
        for _ in range(5):
            urllib.request.urlopen(url, timeout=10).read()
        start = _cpu_seconds(proc.pid)
        for _ in range(n):
            urllib.request.urlopen(url, timeout=10).read()
        return (_cpu_seconds(proc.pid) - start) / n
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def guardian_cpu_per_tick(n: int) -> float:
    """Median CPU seconds of one collection of every default source."""
    coll = Collector.from_registry(Host(), default_registry())
    for i in range(5):
        coll.collect(float(i))
    times = []
    for i in range(n):
        start = time.process_time()
        coll.collect(10.0 + i)
        times.append(time.process_time() - start)
    coll.close()
    return sorted(times)[n // 2]


def process_scan_seconds(n: int) -> float:
    src = ProcessesSource(Host())
    src.collect(0.0)
    start = time.process_time()
    for i in range(n):
        src.collect(float(i))
    return (time.process_time() - start) / n


def _spawn_sleepers(count: int) -> list[int]:
    sleep = shutil.which("sleep") or "/bin/sleep"
    return [os.posix_spawn(sleep, [sleep, "3600"], {}) for _ in range(count)]


def _stop(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)


def run() -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    ours = guardian_cpu_per_tick(TICKS) * 1000
    binary = node_exporter()
    if binary is not None:
        peer = node_exporter_cpu_per_scrape(binary, TICKS) * 1000
        figures.append({"name": "sources.tick_cpu", "value": round(ours, 3), "unit": "ms",
                        "peer": "node_exporter scrape (same collectors)",
                        "peer_value": round(peer, 3), "ratio": round(ours / peer, 2)})
    else:
        figures.append({"name": "sources.tick_cpu", "value": round(ours, 3), "unit": "ms",
                        "peer": "", "peer_value": None, "ratio": None})

    if os.geteuid() == 0 and Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        from guardian.testing import dying_memcgs
        base = guardian_cpu_per_tick(TICKS) * 1000
        t0 = time.monotonic()
        with dying_memcgs(20_000):
            made_s = time.monotonic() - t0
            coll = Collector.from_registry(Host(), default_registry(), only=["cgroups"])
            dying = coll.collect(0.0).values.get("memcg.dying")
            leaked = guardian_cpu_per_tick(TICKS) * 1000
        figures.append({"name": "sources.tick_cpu_with_20000_dying_memcgs",
                        "value": round(leaked, 3), "unit": "ms",
                        "peer": f"same tick, no leak (dying={dying}, made in {made_s:.0f}s)",
                        "peer_value": round(base, 3), "ratio": round(leaked / base, 2)})

    base_scan = process_scan_seconds(50)
    pids = _spawn_sleepers(5000)
    try:
        loaded_scan = process_scan_seconds(20)
    finally:
        _stop(pids)
    per_proc_us = (loaded_scan - base_scan) / 5000 * 1e6
    figures.append({"name": "processes.scan_cost_per_process", "value": round(per_proc_us, 2),
                    "unit": "us", "peer": "scan without the 5,000 extra processes",
                    "peer_value": round(base_scan * 1000, 3), "peer_unit": "ms",
                    "ratio": round(loaded_scan / base_scan, 2)})
    figures.extend(kmsg_figures())
    return figures


def kmsg_flood_cost(lines: int = 20_000) -> tuple[float, float]:
    """µs of guardian CPU per kernel-log line under a flood (patterns matched), and the
    same for a bare read-and-discard loop over the same lines (the floor)."""
    from guardian.sources.kmsg import KmsgSource
    knob = Path("/proc/sys/kernel/printk_devkmsg")
    old = knob.read_text().strip()
    payload = b"<7>guardian-bench: flood line that matches no pattern " + b"x" * 60 + b"\n"
    src = KmsgSource(Host(), KmsgSource.Config(max_records_per_drain=1_000_000))
    floor_fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(floor_fd, 0, os.SEEK_END)
    src.collect(0.0)
    try:
        knob.write_text("on\n")
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        try:
            for _ in range(lines):
                os.write(fd, payload)
        finally:
            os.close(fd)
        t0 = time.process_time()
        src.drain(1.0)
        ours = time.process_time() - t0
        read = src.records
        t0 = time.process_time()
        n = 0
        while True:
            try:
                os.read(floor_fd, 8192)
                n += 1
            except BlockingIOError:
                break
            except OSError:
                continue
        floor = time.process_time() - t0
    finally:
        knob.write_text(old + "\n")
        src.close()
        os.close(floor_fd)
    return ours / max(read, 1) * 1e6, floor / max(n, 1) * 1e6


def kmsg_figures() -> list[dict[str, Any]]:
    if os.geteuid() != 0:
        return []
    ours, floor = kmsg_flood_cost()
    return [{"name": "kmsg.cpu_per_flood_line", "value": round(ours, 2), "unit": "us",
             "peer": "bare read of the same lines", "peer_value": round(floor, 2),
             "ratio": round(ours / floor, 2)}]
