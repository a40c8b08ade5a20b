"""guardian's own footprint: the daemon's CPU and memory under a kernel-log flood, and the
engine's memory with 100,000 signals, over many ticks (bounded means: no growth)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from guardian import Engine, Snapshot
from guardian.plugins import Registry, default_registry
from guardian.policy.loader import load_text
from guardian.snapshot import SignalSpec, labels_of

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_rss(pid: int) -> tuple[float, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    rss_kib = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text()
                       .splitlines() if line.startswith("VmRSS:")))
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, rss_kib


def daemon_under_flood(seconds: float = 10.0, rate: int = 5000) -> dict[str, float]:
    """Daemon CPU share and RSS while idle and while /dev/kmsg takes ``rate`` lines/s."""
    knob = Path("/proc/sys/kernel/printk_devkmsg")
    old = knob.read_text().strip()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "guardian", "run", "--dry-run", "--rules",
             str(REPO / "rules"), "--interval", "15s", "--metrics-port", "0",
             "--state", f"{tmp}/s.json", "--audit", f"{tmp}/a.jsonl"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"})
        try:
            time.sleep(3)
            c0, rss0 = _cpu_rss(proc.pid)
            time.sleep(seconds)
            c1, rss1 = _cpu_rss(proc.pid)
            knob.write_text("on\n")
            fd = os.open("/dev/kmsg", os.O_WRONLY)
            line = b"<7>guardian-bench: flood line matching no pattern " + b"x" * 40 + b"\n"
            start = time.monotonic()
            sent = 0
            while (elapsed := time.monotonic() - start) < seconds:
                while sent < rate * elapsed:
                    os.write(fd, line)
                    sent += 1
                time.sleep(0.005)
            os.close(fd)
            c2, rss2 = _cpu_rss(proc.pid)
        finally:
            knob.write_text(old + "\n")
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
    return {"idle_cpu_pct": 100 * (c1 - c0) / seconds, "flood_cpu_pct": 100 * (c2 - c1) /
            seconds, "idle_rss_kib": rss1, "flood_rss_kib": rss2, "start_rss_kib": rss0,
            "lines_per_s": sent / seconds}


def engine_with_100k_signals(ticks: int = 40) -> dict[str, float]:
    """Python heap of an engine over a 100,000-member family, after 10 and after
    ``ticks`` ticks (history is bounded, so the second should not exceed the first by
    much), and the time of one tick."""
    reg = Registry()
    reg.actions = dict(default_registry().actions)
    cat = {"big.family": SignalSpec("big.family", "", labels=("id",))}
    rules = load_text('version = 1\n[[rule]]\nname = "big"\nsummary = "s"\n'
                      'when = \'max(big.family) > 1e9 or max(rate(big.family, "1m")) > 1e9\'\n',
                      registry=reg, catalogue=cat)
    keys = [labels_of({"id": str(i)}) for i in range(100_000)]
    untraced = Engine(rules)
    t_tick = 0.0
    for t in range(6):  # the tick's time, without tracemalloc's overhead
        fam = {k: float(t + i % 7) for i, k in enumerate(keys)}
        s0 = time.perf_counter()
        untraced.evaluate(Snapshot(t * 15.0, {"big.family": fam}, checked=True))
        t_tick = time.perf_counter() - s0
    engine = Engine(rules)
    tracemalloc.start()
    after10 = 0
    for t in range(ticks):
        fam = {k: float(t + i % 7) for i, k in enumerate(keys)}
        engine.evaluate(Snapshot(t * 15.0, {"big.family": fam}, checked=True))
        if t == 9:
            after10 = tracemalloc.get_traced_memory()[0]
    final = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"heap_after_10_mib": after10 / 2**20, "heap_after_n_mib": final / 2**20,
            "tick_ms": t_tick * 1000}


def run() -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    big = engine_with_100k_signals()
    figures.append({"name": "engine.heap_100k_signals_after_40_ticks",
                    "value": round(big["heap_after_n_mib"], 1), "unit": "MiB",
                    "peer": "after 10 ticks", "peer_value": round(big["heap_after_10_mib"], 1),
                    "ratio": round(big["heap_after_n_mib"] / big["heap_after_10_mib"], 2)})
    figures.append({"name": "engine.tick_100k_signals_with_1m_rate", "value":
                    round(big["tick_ms"], 1), "unit": "ms", "peer": "", "peer_value": None,
                    "ratio": None})
    if os.geteuid() == 0:
        f = daemon_under_flood()
        figures.append({"name": "daemon.cpu_under_kmsg_flood", "value":
                        round(f["flood_cpu_pct"], 2), "unit": "%",
                        "peer": f"idle ({f['lines_per_s']:.0f} lines/s in the flood)",
                        "peer_value": round(f["idle_cpu_pct"], 2), "peer_unit": "%",
                        "ratio": round(f["flood_cpu_pct"] / max(f["idle_cpu_pct"], 0.01), 1)})
        figures.append({"name": "daemon.rss_after_kmsg_flood", "value": f["flood_rss_kib"],
                        "unit": "KiB", "peer": "idle", "peer_value": f["idle_rss_kib"],
                        "ratio": round(f["flood_rss_kib"] / f["idle_rss_kib"], 2)})
    return figures
