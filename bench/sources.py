"""What collecting costs, against floors measured in the same run, interleaved.

1. One `collect()` of every default source against its floor: a bare `os.read` loop over
   exactly the files that collect opened and the directories it listed (recorded with an
   audit hook), in the same run;
   the ethtool ioctls are not in the floor.
2. The same with 20,000 real dying memcgs (root, cgroup v1): the ratio must not grow with
   the leak it watches.
3. The process scan per process (2,000 extra real processes) against the bare read of
   every /proc/<pid>/stat, and against psutil reading the same fields.
4. The kernel log under a flood: CPU per line against a bare read of the same lines.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from common import figure, interleaved

from guardian.hostio.host import Host
from guardian.plugin.registry import default_registry
from guardian.runtime.collector import Collector
from guardian.sources.processes import ProcessesSource

ROUNDS = 40


def _files_opened(fn: Callable[[], object]) -> list[str]:
    """The files ``fn`` opened and the directories it listed (a trailing "/")."""
    opened: list[str] = []
    recording = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not recording[0] or not args or not isinstance(args[0], str | bytes):
            return
        if event == "open":
            opened.append(os.fsdecode(args[0]))
        elif event in ("os.listdir", "os.scandir"):
            opened.append(os.fsdecode(args[0]).rstrip("/") + "/")

    sys.addaudithook(hook)  # audit hooks cannot be removed: this one stops recording
    try:
        fn()
    finally:
        recording[0] = False
    return [p for p in opened if p.startswith(("/proc", "/sys", "/dev"))]


def _bare_read(paths: list[str]) -> Callable[[], None]:
    flags = os.O_RDONLY | os.O_CLOEXEC

    def read_all() -> None:
        for path in paths:
            if path.endswith("/"):
                with contextlib.suppress(OSError), os.scandir(path) as it:
                    for entry in it:
                        entry.is_dir(follow_symlinks=False)
                continue
            try:
                fd = os.open(path, flags | (os.O_NONBLOCK if path.startswith("/dev") else 0))
            except OSError:
                continue
            try:
                while os.read(fd, 65536):
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)

    return read_all


def collect_vs_floor() -> tuple[float, float, int]:
    """(collect ms, floor ms, files read): medians, interleaved."""
    coll = Collector.from_registry(Host(), default_registry())
    tick = iter(range(10**9))
    for _ in range(3):
        coll.collect(float(next(tick)))
    paths = _files_opened(lambda: coll.collect(float(next(tick))))
    ours, floor = interleaved([lambda: coll.collect(float(next(tick))), _bare_read(paths)],
                              ROUNDS)
    coll.close()
    return ours * 1000, floor * 1000, len(paths)


def _sleepers(count: int) -> list[int]:
    sleep = shutil.which("sleep") or "/bin/sleep"
    return [os.posix_spawn(sleep, [sleep, "3600"], {}) for _ in range(count)]


def _stop(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)


def process_scan(extra: int = 2000) -> tuple[float, float, float, int]:
    """µs per process: (guardian's scan, bare read of every stat, psutil), process count."""
    pids = _sleepers(extra)
    try:
        src = ProcessesSource(Host())
        src.collect(0.0)
        tick = iter(range(1, 10**9))
        stat_files = [f"/proc/{n}/stat" for n in os.listdir("/proc") if n.isdigit()]
        n = len(stat_files)

        def bare() -> None:
            _bare_read([f"/proc/{p}/stat" for p in os.listdir("/proc") if p.isdigit()])()

        def with_psutil() -> None:
            for p in psutil.process_iter(["ppid", "status", "cpu_times", "name",
                                          "num_threads"]):
                p.info  # noqa: B018 - what the scan needs, read by psutil

        ours, floor, peer = interleaved(
            [lambda: src.collect(float(next(tick))), bare, with_psutil], 15)
    finally:
        _stop(pids)
    return ours / n * 1e6, floor / n * 1e6, peer / n * 1e6, n


def kmsg_flood_cost(lines: int = 20_000) -> tuple[float, float]:
    """µs of CPU per kernel-log line under a flood (every pattern tried), and the same
    for a bare read-and-discard of the same lines."""
    from guardian.sources.kmsg import KmsgSource
    knob = Path("/proc/sys/kernel/printk_devkmsg")
    old = knob.read_text().strip()
    payload = b"<7>guardian-bench: flood line that matches no pattern " + b"x" * 60 + b"\n"
    # the flood is written from user space (user facility): let it reach the patterns
    src = KmsgSource(Host(), KmsgSource.Config(max_records_per_drain=1_000_000,
                                               facilities=["kern", "user"]))
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


def run() -> Iterator[dict[str, Any]]:
    ours, floor, files = collect_vs_floor()
    how = (f"one collect() of every default source (output checked against the specs), "
           f"median of {ROUNDS}, interleaved with a bare os.read of the {files} files it "
           "opened and the directories it listed (ethtool's ioctls not in the floor)")
    yield figure("sources.collect", ours, "ms", how, "bare read of the same files", floor,
                 target="≤ 1.5x the floor")
    if os.geteuid() == 0 and Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        from guardian.testing import dying_memcgs
        with dying_memcgs(20_000):
            leaked, leaked_floor, _ = collect_vs_floor()
        yield figure("sources.collect with 20,000 dying memcgs", leaked, "ms",
                     "as above, with 20,000 real dying memory cgroups on the host",
                     "bare read of the same files", leaked_floor)
    per, bare, peer, n = process_scan()
    how = (f"processes source per process ({n} processes: 2,000 sleepers added), median "
           "of 15, interleaved")
    yield figure("processes.scan per process", per, "µs", how,
                 "bare read of every /proc/<pid>/stat", bare, target="≤ 1.3x the floor")
    yield figure("processes.scan per process vs psutil", per, "µs", how,
                 "psutil.process_iter, same fields", peer)
    if os.geteuid() == 0:
        line, line_floor = kmsg_flood_cost()
        yield figure("kmsg.cpu per flood line", line, "µs",
                     "20,000 lines injected, drained at once, every shipped pattern tried",
                     "bare read of the same lines", line_floor, digits=2)
