"""The daemon, whole process, at steady state, against node_exporter in the same run.

1. `guardian run` (shipped rules, dry run, 1 s tick) and Debian's node_exporter (the
   collectors for what guardian's sources read) scraped once a second run side by side
   for GUARDIAN_BENCH_DAEMON_MINUTES (12 unless bench/run says otherwise: past the rules'
   10-minute windows). Each one's CPU (every thread, and children waited for) is read from
   /proc/<pid>/stat at each minute; the figure is the median of the per-minute CPU over the
   last three minutes, and the growth is the last minute against minute 2. RSS at the end.
2. The daemon under a 5,000-line-a-second kernel-log flood against itself idle.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import NODE_EXPORTER_COLLECTORS, REPO, cpu_seconds, figure, node_exporter, rss_mib


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _daemon(tmp: str, interval: str = "1s") -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "PYTHONDONTWRITEBYTECODE")}
    # the flood below is written from user space: let its facility reach the patterns
    Path(tmp, "g.toml").write_text('[sources.kmsg]\nfacilities = ["kern", "user"]\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--dry-run", "--rules", str(REPO / "rules"),
         "--config", f"{tmp}/g.toml",
         "--interval", interval, "--metrics-port", "0", "--state", f"{tmp}/s.json",
         "--audit", f"{tmp}/a.jsonl"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


@contextlib.contextmanager
def _node_exporter(binary: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = _free_port()
    proc = subprocess.Popen(
        [str(binary), f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
         *(f"--collector.{c}" for c in NODE_EXPORTER_COLLECTORS)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc, f"http://127.0.0.1:{port}/metrics"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def _scrape_every_second(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        t0 = time.monotonic()
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=5).read()
        stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))


def side_by_side(minutes: float) -> dict[str, Any]:
    binary = node_exporter()
    with tempfile.TemporaryDirectory() as tmp, _daemon(tmp) as daemon, \
            contextlib.ExitStack() as stack:
        peer = None
        stop = threading.Event()
        if binary is not None:
            peer, url = stack.enter_context(_node_exporter(binary))
            scraper = threading.Thread(target=_scrape_every_second, args=(url, stop),
                                       daemon=True)
            scraper.start()
            stack.callback(stop.set)
        time.sleep(5)  # both started and serving
        ours, theirs = [cpu_seconds(daemon.pid)], [cpu_seconds(peer.pid) if peer else 0.0]
        for _ in range(max(int(minutes), 4)):
            time.sleep(60)
            ours.append(cpu_seconds(daemon.pid))
            theirs.append(cpu_seconds(peer.pid) if peer else 0.0)
        rss = rss_mib(daemon.pid)
        peer_rss = rss_mib(peer.pid) if peer else None
    per_min = [100 * (b - a) / 60 for a, b in itertools.pairwise(ours)]
    peer_min = [100 * (b - a) / 60 for a, b in itertools.pairwise(theirs)]
    # CPU is counted in 10 ms clock ticks: a minute's share moves in steps of 0.017%, so
    # growth compares medians of three minutes (2-4 against the last three)
    return {"ours": statistics.median(per_min[-3:]), "early": statistics.median(per_min[1:4]),
            "peer": statistics.median(peer_min[-3:]) if peer else None,
            "rss": rss, "peer_rss": peer_rss, "minutes": len(per_min),
            "per_minute": [round(m, 3) for m in per_min]}


def under_flood(seconds: float = 10.0, rate: int = 5000) -> tuple[float, float, float]:
    """(idle CPU %, flood CPU %, RSS MiB after) of the daemon at a 1 s tick."""
    knob = Path("/proc/sys/kernel/printk_devkmsg")
    old = knob.read_text().strip()
    with tempfile.TemporaryDirectory() as tmp, _daemon(tmp) as proc:
        time.sleep(5)
        c0 = cpu_seconds(proc.pid)
        time.sleep(seconds)
        c1 = cpu_seconds(proc.pid)
        try:
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
        finally:
            knob.write_text(old + "\n")
        c2 = cpu_seconds(proc.pid)
        rss = rss_mib(proc.pid)
    return 100 * (c1 - c0) / seconds, 100 * (c2 - c1) / seconds, rss


def run() -> Iterator[dict[str, Any]]:
    minutes = float(os.environ.get("GUARDIAN_BENCH_DAEMON_MINUTES", "12"))
    r = side_by_side(minutes)
    how = (f"whole process (threads, children), 1 s tick, shipped rules, dry run; median "
           f"CPU of the last 3 of {r['minutes']} minutes; node_exporter scraped once a "
           "second over the same minutes")
    yield figure("daemon.cpu at steady state", r["ours"], "% of a core", how,
                 "node_exporter, same collectors" if r["peer"] is not None else "",
                 r["peer"], target="≤ 0.5%, ≤ 0.3x node_exporter", digits=2)
    yield figure("daemon.cpu last 3 minutes vs minutes 2-4", r["ours"], "% of a core",
                 "the same run, medians of three minutes: does the tick grow as history "
                 f"fills? (per minute: {r['per_minute']})", "minutes 2-4", r["early"],
                 target="≤ 1.1x", digits=2)
    yield figure("daemon.rss at the end", r["rss"], "MiB", "VmRSS after the run",
                 "node_exporter" if r["peer_rss"] else "", r["peer_rss"],
                 target="≤ 50 MiB", digits=1)
    if os.geteuid() == 0:
        idle, flood, rss = under_flood()
        yield figure("daemon.cpu under a kernel-log flood", flood, "% of a core",
                     "5,000 lines a second for 10 s, 1 s tick", "idle, same daemon", idle,
                     digits=2)
        yield figure("daemon.rss after the flood", rss, "MiB", "VmRSS", digits=1)
