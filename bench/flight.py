"""The flight recorder's steady cost: the daemon with [evidence.flight] enabled against the
same daemon without it, side by side in the same minutes.

1. Two `guardian run` (shipped rules, dry run, 1 s tick), one with the flight recorder
   (perf record --overwrite of every CPU, 19 Hz, an 8 MiB ring) and one without, run side
   by side for a minute, then GUARDIAN_BENCH_FLIGHT_MINUTES more (3 unless told); each
   one's whole-process CPU (every thread, children waited for) and, for the first, its
   perf child's, are read from /proc/<pid>/stat at each of those minutes; the figure is
   the median of the per-minute CPU. The kernel's own work of taking a sample (an
   interrupt per CPU 19 times a second) falls on whatever task it interrupts and is not
   in either process's figure: the samples a second are said beside it.
2. One dump of a ring that ran 60 s: its wall time, the CPU of perf's part of it
   (perf script), the samples and distinct stacks written.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import REPO, cpu_seconds, figure, rss_mib

from guardian.hostio.flight import FlightRecorder

FREQUENCY = 19
RING_MB = 8


@contextlib.contextmanager
def _daemon(tmp: Path, flight: bool) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "PYTHONDONTWRITEBYTECODE")}
    tmp.mkdir()
    (tmp / "g.toml").write_text(
        f"[evidence.flight]\nenabled = {'true' if flight else 'false'}\n"
        f"frequency = {FREQUENCY}\nring_mb = {RING_MB}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--dry-run", "--rules", str(REPO / "rules"),
         "--config", str(tmp / "g.toml"), "--interval", "1s", "--metrics-port", "0",
         "--state", str(tmp / "s.json"), "--audit", str(tmp / "a.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _perf_child(pid: int) -> int | None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                if Path(f"/proc/{child}/comm").read_text().strip() == "perf":
                    return int(child)
    return None


def side_by_side(minutes: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, \
            _daemon(Path(tmp, "without"), False) as plain, \
            _daemon(Path(tmp, "with"), True) as flown:
        deadline = time.monotonic() + 60
        while (perf := _perf_child(flown.pid)) is None:
            if time.monotonic() > deadline or flown.poll() is not None:
                raise RuntimeError("the daemon with [evidence.flight] started no perf")
            time.sleep(0.5)
        time.sleep(60)  # both past their start
        ours, theirs, perfs = [], [], []
        for _ in range(max(int(minutes), 3) + 1):
            if _:
                time.sleep(60)
            theirs.append(cpu_seconds(plain.pid))
            ours.append(cpu_seconds(flown.pid))
            perfs.append(cpu_seconds(perf))
        rss, perf_rss = rss_mib(flown.pid), rss_mib(perf)
        plain_rss = rss_mib(plain.pid)

    def per_min(xs: list[float]) -> list[float]:
        return [100 * (b - a) / 60 for a, b in itertools.pairwise(xs)]

    with_, without, perf_min = per_min(ours), per_min(theirs), per_min(perfs)
    total = [a + b for a, b in zip(with_, perf_min, strict=True)]
    return {"with": statistics.median(total), "without": statistics.median(without),
            "perf": statistics.median(perf_min), "daemon_with": statistics.median(with_),
            "minutes": len(total), "per_minute": [round(t, 3) for t in total],
            "per_minute_without": [round(t, 3) for t in without],
            "rss": rss, "perf_rss": perf_rss, "plain_rss": plain_rss}


def one_dump(seconds: float = 60.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        rec = FlightRecorder(frequency=FREQUENCY, ring_mb=RING_MB, workdir=Path(tmp, "w"))
        rec.start()
        if not rec.running:
            raise RuntimeError("perf could not start")
        try:
            time.sleep(seconds)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            own = time.process_time()
            t0 = time.monotonic()
            got = rec.dump(Path(tmp, "bundle"))
            wall = time.monotonic() - t0
            own = time.process_time() - own
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if got is None or rec.last is None:
                raise RuntimeError("the dump failed")
            return {"wall": wall, "script_cpu": (after.ru_utime + after.ru_stime) -
                    (before.ru_utime + before.ru_stime), "fold_cpu": own,
                    "samples": rec.last.samples, "stacks": rec.last.stacks,
                    "span": rec.last.seconds, "bytes": got.stat().st_size}
        finally:
            rec.stop()


def run() -> Iterator[dict[str, Any]]:
    minutes = float(os.environ.get("GUARDIAN_BENCH_FLIGHT_MINUTES", "3"))
    r = side_by_side(minutes)
    cpus = os.cpu_count() or 1
    how = (f"two `guardian run` side by side (shipped rules, dry run, 1 s tick), one with "
           f"[evidence.flight] (perf record -a -g --overwrite, {FREQUENCY} Hz, {RING_MB} MiB "
           f"ring: {FREQUENCY * cpus} samples a second here, whose taking in the kernel "
           "falls on the tasks interrupted); whole process (threads, children) plus its "
           f"perf; median of {r['minutes']} minutes after the first (with: "
           f"{r['per_minute']}; without: {r['per_minute_without']}); perf alone "
           f"{r['perf']:.3f} %")
    yield figure("flight.cpu: the daemon with its flight recorder", r["with"], "% of a core",
                 how, "the daemon without it, same minutes", r["without"], digits=3)
    yield figure("flight.rss of perf", r["perf_rss"], "MiB",
                 f"VmRSS of perf record at the end (the daemon's: {r['rss']:.1f} MiB with, "
                 f"{r['plain_rss']:.1f} MiB without)", digits=1)
    d = one_dump()
    yield figure("flight.dump of a 60 s ring", d["wall"], "s",
                 f"SIGUSR2, perf's file, perf script ({d['script_cpu']:.2f} s CPU) and "
                 f"folding ({d['fold_cpu']:.2f} s CPU): {d['samples']} samples over "
                 f"{d['span']:.0f} s, {d['stacks']} stacks, {d['bytes']} bytes folded",
                 digits=2)
