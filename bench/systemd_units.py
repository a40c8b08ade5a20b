"""The systemd source against the nspawn systemd the tests boot (this VM has no systemd as
PID 1; needs root, systemd-nspawn and debootstrap, and the tests' helper, so it runs from a
checkout): CPU per collect over the private D-Bus socket against one `systemctl show` a
tick, each with what it costs systemd itself (PID 1's CPU), interleaved, on an idle node
and while one unit crash-loops."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from common import REPO, cpu_seconds, figure

ROUNDS = 200

PROBE = r"""
import sys, time
from guardian.hostio.host import Host
from guardian.sources.systemd import SystemdSource
src = SystemdSource(Host(), SystemdSource.Config(transport="dbus", bus_socket=sys.argv[1]))
assert src.unavailable() is None
for line in sys.stdin:
    t0 = time.process_time()
    src.collect(float(line))
    print(time.process_time() - t0, flush=True)
"""

SHOW = "systemctl show --no-pager --property=Id,NRestarts,ActiveState,SubState -- '*.service'"


def _measure(c: Any, probe: subprocess.Popen[str]) -> tuple[float, float, float, float]:
    """(dbus ms, PID 1 ms per dbus collect, systemctl ms, PID 1 ms per systemctl call)."""
    assert probe.stdin is not None and probe.stdout is not None
    ours = theirs = pid1_ours = pid1_theirs = 0.0
    for i in range(ROUNDS):
        p0 = cpu_seconds(c.leader, children=False)
        probe.stdin.write(f"{i}\n")
        probe.stdin.flush()
        ours += float(probe.stdout.readline())
        p1 = cpu_seconds(c.leader, children=False)
        r = c.run("bash", "-c", f"{SHOW} >/dev/null; times")
        p2 = cpu_seconds(c.leader, children=False)
        user, system = r.stdout.strip().splitlines()[-1].split()
        theirs += _seconds(user) + _seconds(system)
        pid1_ours += p1 - p0
        pid1_theirs += p2 - p1
    n = ROUNDS / 1000
    return ours / n, pid1_ours / n, theirs / n, pid1_theirs / n


def _seconds(text: str) -> float:
    minutes, _, rest = text.partition("m")
    return int(minutes) * 60 + float(rest.rstrip("s"))


def run() -> Iterator[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    try:
        from guardian.testing.nspawn import booted, nspawn_unavailable
    except ImportError as exc:
        print(f"bench: systemd_units skipped: {exc}", file=sys.stderr)
        return
    if (why := nspawn_unavailable()) is not None:
        print(f"bench: systemd_units skipped: {why}", file=sys.stderr)
        return
    with booted(name="guardian-bench") as c:
        probe = c.python_in_pid_namespace(PROBE, c.private_socket)
        try:
            for label in ("idle", "one unit crash-looping"):
                if label != "idle":
                    c.run("systemd-run", "--unit=crashy", "-p", "Restart=always", "-p",
                          "RestartSec=1s", "-p", "StartLimitIntervalSec=0", "/bin/false")
                    time.sleep(2)
                ours, pid1_ours, theirs, pid1_theirs = _measure(c, probe)
                how = (f"{ROUNDS} collects interleaved with {ROUNDS} `systemctl show` "
                       f"calls (its children's CPU via `times`), nspawn systemd 252, "
                       f"{label}; systemd's own CPU (PID 1) besides")
                yield figure(f"systemd.collect over D-Bus, {label}", ours + pid1_ours, "ms",
                             how + f" (D-Bus {ours:.3f} + PID 1 {pid1_ours:.3f})",
                             "systemctl show + PID 1", theirs + pid1_theirs)
        finally:
            probe.kill()
            probe.wait(timeout=10)
