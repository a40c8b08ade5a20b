"""The systemd source against a real systemd (252, booted in systemd-nspawn; this VM has
no systemd as PID 1). guardian runs on the host and reaches the container's systemd
through the configurable systemctl argv prefix, as a DaemonSet reaches the host's."""

from __future__ import annotations

import time

from guardian.host import Host
from guardian.snapshot import labels_of
from guardian.sources.systemd import SystemdSource

from .nspawn import booted


def test_a_crash_looping_unit_is_visible() -> None:
    with booted() as c:
        c.run("systemd-run", "--unit=crashy", "-p", "Restart=always", "-p",
              "RestartSec=100ms", "-p", "StartLimitIntervalSec=0", "/bin/false")
        c.run("systemd-run", "--unit=steady", "/bin/sleep", "600")
        src = SystemdSource(Host(), SystemdSource.Config(
            systemctl=[*c.enter, "systemctl"], restart_window="1m", crashloop_restarts=5))
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
