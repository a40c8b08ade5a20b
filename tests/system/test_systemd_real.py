"""The systemd source against a real systemd (252, booted in systemd-nspawn; this VM has
no systemd as PID 1), over both transports: its private D-Bus socket (in the container's
PID namespace, as guardian is in the host's on a node: systemd refuses a peer whose PID it
cannot see), and the configurable systemctl argv prefix, as a DaemonSet without
/run/systemd mounted reaches the host's."""

from __future__ import annotations

import json
import time

import pytest

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.sources.systemd import SystemdSource
from guardian.testing.nspawn import booted
from tests.support.wait import ends, wait_until

# Boots a container or builds packages: run on the default interpreter only (.ci/run).
pytestmark = pytest.mark.os_integration


def test_a_crash_looping_unit_is_visible() -> None:
    with booted() as c:
        c.run("systemd-run", "--unit=crashy", "-p", "Restart=always", "-p",
              "RestartSec=100ms", "-p", "StartLimitIntervalSec=0", "/bin/false")
        c.run("systemd-run", "--unit=steady", "/bin/sleep", "600")
        src = SystemdSource(Host(), SystemdSource.Config(
            systemctl=[*c.enter, "systemctl"], transport="systemctl", restart_window="1m",
            crashloop_restarts=5))
        assert src.unavailable() is None
        first = src.collect(0.0)
        time.sleep(2.0)
        out = src.collect(2.0)
        crashy, steady = labels_of({"unit": "crashy.service"}), labels_of({"unit":
                                                                           "steady.service"})
        restarts = out["systemd.unit_restarts"]
        recent = out["systemd.unit_restarts_recent"]
        assert isinstance(restarts, dict) and isinstance(recent, dict)
        assert restarts[crashy] > first["systemd.unit_restarts"][crashy]  # type: ignore[index]
        assert recent[crashy] >= 5, (first, out)
        assert restarts[steady] == 0 and recent[steady] == 0
        assert out["systemd.unit_active"][steady] == 1.0  # type: ignore[index]
        assert out["systemd.crashlooping_units"] == 1
        states = out["systemd.unit_state"]
        assert isinstance(states, dict)
        assert labels_of({"unit": "steady.service", "active": "active", "sub": "running"}) \
            in states


PROBE = r"""
import json, sys, time
from guardian.hostio.host import Host
from guardian.sources.systemd import SystemdSource


src = SystemdSource(Host(), SystemdSource.Config(transport="dbus", bus_socket=sys.argv[1],
                                                 restart_window="1m", crashloop_restarts=5))
assert src.unavailable() is None
for line in sys.stdin:
    try:
        out = src.collect(float(line))
        bus = src.bus
        print(json.dumps({"restarts": {dict(k)["unit"]: v for k, v in
                                       out["systemd.unit_restarts"].items()},
                          "recent": {dict(k)["unit"]: v for k, v in
                                     out["systemd.unit_restarts_recent"].items()},
                          "crashlooping": out["systemd.crashlooping_units"],
                          "pending": len(bus.pending)}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


def test_over_the_private_bus_units_are_kept_current_from_signals() -> None:
    """Issue 20: no fork a tick. The source lists the units once, then follows systemd's
    PropertiesChanged signals; it sees a crash loop as systemctl does, a unit created
    after it started, and recovers when systemd re-executes (which closes the socket)."""
    with booted() as c:
        c.run("systemd-run", "--unit=steady", "/bin/sleep", "600")
        probe = c.python_in_pid_namespace(PROBE, c.private_socket)
        assert probe.stdin is not None and probe.stdout is not None

        def collect(t: float) -> dict[str, object]:
            assert probe.stdin is not None and probe.stdout is not None
            probe.stdin.write(f"{t}\n")
            probe.stdin.flush()
            out: dict[str, object] = json.loads(probe.stdout.readline())
            return out

        try:
            first = collect(0.0)
            assert first["restarts"]["steady.service"] == 0  # type: ignore[index]
            # created after the source listed the units: seen through UnitNew
            c.run("systemd-run", "--unit=crashy", "-p", "Restart=always", "-p",
                  "RestartSec=100ms", "-p", "StartLimitIntervalSec=0", "/bin/false")
            collect(1.0)  # first sight of crashy: its restarts so far are the baseline
            time.sleep(2.0)
            out = collect(3.0)
            shown = c.run("systemctl", "show", "--property=NRestarts", "--value",
                          "crashy.service").stdout.strip()
            restarts, recent = out["restarts"], out["recent"]
            assert isinstance(restarts, dict) and isinstance(recent, dict)
            assert recent["crashy.service"] >= 5, out
            # systemctl, asked just after, has seen at least as many (it keeps looping)
            assert int(shown) >= restarts["crashy.service"]
            assert out["crashlooping"] == 1 and restarts["steady.service"] == 0
            c.run("systemctl", "daemon-reexec")
            time.sleep(1.0)
            after = [collect(4.0 + i) for i in range(3)]
            assert "error" in after[0], after  # the re-exec closed the socket: no value
            assert "restarts" in after[-1], after  # reconnected and listed again
            assert after[-1]["restarts"]["crashy.service"] >= restarts["crashy.service"]  # type: ignore[index]
        finally:
            probe.kill()
            probe.wait(timeout=10)


TIMED = r"""
import json, sys, time
from guardian.hostio.systemdbus import SystemdBus

bus = SystemdBus(["*"], path=sys.argv[1], timeout=10.0)
for line in sys.stdin:
    t0 = time.monotonic()
    try:
        units = bus.poll()
        print(json.dumps({"seconds": time.monotonic() - t0, "units": len(units),
                          "new": len(bus.new), "ignored": sorted(bus.ignored)}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                          "seconds": time.monotonic() - t0}), flush=True)
"""


def test_a_status_of_a_unit_that_does_not_exist_does_not_stall_the_poll() -> None:
    """Before: `systemctl status no-such.service`, which any user may run, stalled the
    loop for about a minute (no watchdog ping for 71 s against WatchdogSec=30s, 200,000
    D-Bus messages): each property read of the garbage-collected unit made systemd load
    it again and announce it again. Now a unit first seen in a signal is asked about at
    the next poll, and one that is not loaded is not asked about again."""
    with booted() as c:
        probe = c.python_in_pid_namespace(TIMED, c.private_socket)
        assert probe.stdin is not None and probe.stdout is not None

        def poll() -> dict[str, object]:
            assert probe.stdin is not None and probe.stdout is not None
            probe.stdin.write("\n")
            probe.stdin.flush()
            out: dict[str, object] = json.loads(probe.stdout.readline())
            return out

        try:
            first = poll()
            assert "units" in first, first
            for _ in range(3):  # a typo, as any user may make it
                c.run("systemctl", "status", "no-such.service", check=False)
            # each poll ends within the bound (before: about a minute), with no error
            polls = [ends(poll, "a poll after the typos") for _ in range(6)]
            assert all("error" not in p for p in polls), polls
            c.run("systemd-run", "--unit=later", "/bin/sleep", "600")  # a real one still is
            wait_until(lambda: int(poll()["units"]) > int(first["units"]),  # type: ignore[call-overload]
                       "the real unit listed", every=0.3)
        finally:
            probe.kill()
            probe.wait(timeout=10)
