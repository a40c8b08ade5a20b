"""The flight recorder's steady cost, measured where it falls: the whole system.

Taking a sample is the kernel's work: on each CPU, FREQUENCY times a second, an interrupt
(perf's cpu-clock timer here, where the VM has no PMU; an NMI on hardware with one) walks
the kernel and user stacks into the ring, and that time is charged to whatever task it
interrupted. perf itself reads nothing until a dump (``--overwrite``). So the CPU of two
daemons, one with the recorder and one without, is the same by design (this bench said
1.00 when it compared them); what can show the cost is all the CPUs' busy time.

1. One `guardian run` (shipped rules, dry run, 1 s tick) runs throughout. The recorder
   (:class:`FlightRecorder`, the ``perf record`` the service runs for [evidence.flight]:
   FREQUENCY Hz on every CPU, a RING_MB MiB ring) is started and stopped in turn:
   GUARDIAN_BENCH_FLIGHT_ROUNDS rounds (7 unless told) of one window with it and one
   without, WINDOW seconds each, measured from SETTLE seconds after the switch (perf's
   start and stop left out), the order alternating (on-off, off-on) so that a drift in
   the machine's other load falls on both sides alike. Over each window: the whole
   system's non-idle CPU from /proc/stat's ``cpu`` line (every CPU; the total less idle
   and iowait; guest time is already in user), in % of one core. The figures: the median
   of the windows with against the median of those without (the ratio), and the median
   of the rounds' differences (with minus without) with their range (the absolute cost).
   Resolution: /proc/stat counts USER_HZ ticks (100 a second), so one tick in a window is
   100 / (WINDOW * USER_HZ) % of a core; the machine's other load moves a window by far
   more (the range says by how much).
2. What one sample costs, scaled up until it can be seen: a fixed CPU-bound chunk of work
   (a Python loop, a few ms) timed by its thread's own CPU clock, with the recorder at
   HIGH Hz and without it, interleaved (6 rounds of 3 s each; the median chunk of each).
   A sample's interrupt is charged to the task it interrupts (this kernel has no
   CONFIG_IRQ_TIME_ACCOUNTING), so the chunk's slowdown is the share of a busy CPU that
   sampling takes at HIGH Hz, and the other tasks' load does not enter it (a thread's
   CPU clock runs only while it runs). Divided by HIGH: one sample's cost; times
   FREQUENCY and the CPUs: the recorder's cost with every CPU busy (an idle CPU's sample
   is a shorter stack), assuming a sample costs the same at both rates.
3. One dump of a ring that ran 60 s: its wall time, the CPU of perf's part of it
   (perf script), the samples and distinct stacks written.
"""

from __future__ import annotations

import contextlib
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

from common import CLK_TCK, REPO, figure, rss_mib

from guardian.hostio.flight import FlightRecorder

FREQUENCY = 19
RING_MB = 8
HIGH = 20000  # Hz: the scaled measurement of one sample's cost (the kernel allows 100000)
WINDOW = 10.0  # seconds measured in each window
SETTLE = 3.0  # seconds after a switch before a window starts


@contextlib.contextmanager
def _daemon(tmp: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "PYTHONDONTWRITEBYTECODE")}
    (tmp / "g.toml").write_text("[evidence.flight]\nenabled = false\n")
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


def busy_ticks() -> tuple[int, int]:
    """(non-idle, all) USER_HZ ticks of every CPU so far, from /proc/stat's ``cpu`` line:
    user nice system idle iowait irq softirq steal (guest and guest_nice are already in
    user and nice)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    total = sum(fields)
    return total - fields[3] - fields[4], total


def _window() -> float:
    """The whole system's non-idle CPU over WINDOW seconds, in % of one core."""
    busy0, _ = busy_ticks()
    t0 = time.monotonic()
    time.sleep(WINDOW)
    busy1, _ = busy_ticks()
    return 100 * (busy1 - busy0) / CLK_TCK / (time.monotonic() - t0)


def _perf_child() -> int | None:
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                if Path(f"/proc/{child}/comm").read_text().strip() == "perf":
                    return int(child)
    return None


def interleaved(rounds: int) -> dict[str, Any]:
    with_: list[float] = []
    without: list[float] = []
    perf_rss = 0.0
    with tempfile.TemporaryDirectory() as tmp, _daemon(Path(tmp)) as daemon:
        time.sleep(10)  # past its start
        if daemon.poll() is not None:
            raise RuntimeError("guardian run ended")
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                if not on:
                    time.sleep(SETTLE)
                    without.append(_window())
                    continue
                rec = FlightRecorder(frequency=FREQUENCY, ring_mb=RING_MB,
                                     workdir=Path(tmp, f"w{r}"))
                rec.start()
                try:
                    if not rec.running:
                        raise RuntimeError("perf could not start")
                    time.sleep(SETTLE)
                    with_.append(_window())
                    if (pid := _perf_child()) is not None:
                        perf_rss = max(perf_rss, rss_mib(pid))
                finally:
                    rec.stop()
        daemon_rss = rss_mib(daemon.pid)
    diffs = [a - b for a, b in zip(with_, without, strict=True)]
    return {"with": statistics.median(with_), "without": statistics.median(without),
            "diff": statistics.median(diffs), "diffs": diffs, "with_all": with_,
            "without_all": without, "perf_rss": perf_rss, "daemon_rss": daemon_rss}


def _chunk() -> float:
    """A fixed chunk of CPU-bound work's thread CPU time (seconds)."""
    t0 = time.thread_time()
    x = 0
    for i in range(200_000):
        x += i
    return time.thread_time() - t0


def per_sample(rounds: int = 6, seconds: float = 3.0) -> dict[str, Any]:
    ratios: list[float] = []
    chunks: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            got: dict[bool, float] = {}
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                rec = FlightRecorder(frequency=HIGH, ring_mb=RING_MB, workdir=Path(tmp, "w"))
                if on:
                    rec.start()
                try:
                    if on and not rec.running:
                        raise RuntimeError("perf could not start")
                    time.sleep(1.0)
                    times = []
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        times.append(_chunk())
                    got[on] = statistics.median(times)
                    chunks[on].append(got[on])
                finally:
                    rec.stop()
            ratios.append(got[True] / got[False])
    slow = statistics.median(ratios) - 1  # the share of a busy CPU sampling takes at HIGH
    return {"slow": slow, "ratios": ratios, "sample_us": slow / HIGH * 1e6,
            "chunk_ms": 1000 * statistics.median(chunks[False])}


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
    rounds = int(os.environ.get("GUARDIAN_BENCH_FLIGHT_ROUNDS", "6"))
    r = interleaved(rounds)
    cpus = os.cpu_count() or 1
    tick = 100 / (WINDOW * CLK_TCK)

    def said(xs: list[float]) -> str:
        return ", ".join(f"{x:.1f}" for x in xs)

    how = (f"the whole system's non-idle CPU (/proc/stat, all {cpus} CPUs, in % of one "
           f"core) over {rounds} rounds of a {WINDOW:g} s window with the recorder (perf "
           f"record -a -g --overwrite, {FREQUENCY} Hz, {RING_MB} MiB ring: "
           f"{FREQUENCY * cpus} samples a second here) and one without, interleaved "
           f"(on-off, off-on), one `guardian run` (shipped rules, dry run, 1 s tick) running "
           f"throughout; medians (with: {said(r['with_all'])}; without: "
           f"{said(r['without_all'])}); median difference {r['diff']:+.2f} % of a core "
           f"(rounds from {min(r['diffs']):+.1f} to {max(r['diffs']):+.1f}); one USER_HZ "
           f"tick in a window is {tick:.3f} % of a core")
    yield figure("flight.system: all CPUs' busy time with the recorder", r["with"],
                 "% of a core", how, "the same windows without it, interleaved",
                 r["without"], digits=2)
    yield figure("flight.cost: with minus without, median of the rounds", r["diff"],
                 "% of a core", f"rounds: {said(r['diffs'])}; resolution {tick:.3f} % of a "
                 "core a window", digits=2)
    s = per_sample()
    at = s["slow"] * FREQUENCY / HIGH * cpus * 100
    yield figure(f"flight.sample: a busy CPU's share taken by sampling at {HIGH} Hz",
                 100 * s["slow"], "%",
                 f"a {s['chunk_ms']:.1f} ms CPU-bound chunk timed by its thread's CPU clock, "
                 f"recorder at {HIGH} Hz against none, 6 rounds interleaved, median ratio "
                 f"(rounds: {', '.join(f'{x:.4f}' for x in s['ratios'])}): one sample "
                 f"{s['sample_us']:.1f} us; at {FREQUENCY} Hz on all {cpus} CPUs busy: "
                 f"{at:.4f} % of a core", digits=2)
    yield figure(f"flight.cost at {FREQUENCY} Hz, scaled from it", at, "% of a core",
                 f"{s['sample_us']:.1f} us a sample x {FREQUENCY} Hz x {cpus} CPUs (every "
                 "CPU busy; an idle CPU's sample walks a shorter stack)", digits=4)
    yield figure("flight.rss of perf", r["perf_rss"], "MiB",
                 f"VmRSS of perf record (the daemon's: {r['daemon_rss']:.1f} MiB); the "
                 f"{RING_MB} MiB ring is kernel memory besides", digits=1)
    d = one_dump()
    yield figure("flight.dump of a 60 s ring", d["wall"], "s",
                 f"SIGUSR2, perf's file, perf script ({d['script_cpu']:.2f} s CPU) and "
                 f"folding ({d['fold_cpu']:.2f} s CPU): {d['samples']} samples over "
                 f"{d['span']:.0f} s, {d['stacks']} stacks, {d['bytes']} bytes folded",
                 digits=2)
