"""systemd units: restarts, active and sub state, so a crash-looping unit is visible.

Read with ``systemctl show`` (see :mod:`guardian.hostio.systemctl` for why not D-Bus).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import deque
from fnmatch import fnmatchcase
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..durations import Duration
from ..host import Host
from ..hostio import systemctl
from ..hostio.systemctl import parse_show
from ..plugins import Source
from ..snapshot import Family, SignalSpec, labels_of

PROPERTIES = ("Id", "NRestarts", "ActiveState", "SubState")


class SystemdConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    units: list[str] = Field(["*.service"], description="globs of units to watch")
    restart_window: Duration = Field(600.0, description="window of unit_restarts_recent")
    crashloop_restarts: int = Field(5, gt=0, description="restarts within the window that "
                                    "make a unit count as crash-looping")
    systemctl: list[str] = Field(["systemctl"], min_length=1,
                                 description="argv that runs systemctl")
    timeout: Duration = Field(10.0, description="longest a systemctl call may take")


class SystemdSource(Source[SystemdConfig]):
    name: ClassVar[str] = "systemd"
    Config = SystemdConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("systemd.unit_restarts", "automatic restarts of a unit (NRestarts)",
                   "restarts", labels=("unit",), counter=True),
        SignalSpec("systemd.unit_restarts_recent", "automatic restarts within the source's "
                   "restart_window (10m unless configured)", "restarts", labels=("unit",)),
        SignalSpec("systemd.unit_active", "1 if the unit is active, else 0", "",
                   labels=("unit",)),
        SignalSpec("systemd.unit_failed", "1 if the unit is in the failed state, else 0", "",
                   labels=("unit",)),
        SignalSpec("systemd.unit_state", "1 for the unit's current active and sub state",
                   "", labels=("unit", "active", "sub")),
        SignalSpec("systemd.crashlooping_units", "units with at least crashloop_restarts "
                   "restarts within the window", "units"),
    )

    def __init__(self, host: Host, config: SystemdConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: SystemdConfig = self.config
        self.history: dict[str, deque[tuple[float, int]]] = {}

    def _run(self, *args: str) -> str:
        return systemctl.output(self.cfg.systemctl, *args, timeout=self.cfg.timeout)

    def unavailable(self) -> str | None:
        if shutil.which(self.cfg.systemctl[0]) is None:
            return f"{self.cfg.systemctl[0]} not found"
        try:
            self._run("show", "--property=Version")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            return f"no systemd to talk to: {exc}"
        return None

    def collect(self, now: float) -> dict[str, object]:
        # One call a tick: `show` expands the globs itself, to the units systemd holds in
        # memory that are not inactive (a crash-looping unit is activating or failed). The
        # list-units-then-show pair it replaces cost 3.5x the CPU (systemctl and PID 1
        # together, measured in the nspawn systemd of tests/nspawn.py).
        units = [u for u in parse_show(self._run(
            "show", "--no-pager", "--property=" + ",".join(PROPERTIES), "--",
            *self.cfg.units)) if any(fnmatchcase(u.get("Id", ""), g) for g in self.cfg.units)]
        restarts: Family = {}
        recent: Family = {}
        active: Family = {}
        failed: Family = {}
        state: Family = {}
        seen = set()
        for u in units:
            unit = u.get("Id", "")
            if not unit or not u.get("NRestarts", "").isdigit():
                continue
            seen.add(unit)
            key = labels_of({"unit": unit})
            n = int(u["NRestarts"])
            restarts[key] = float(n)
            recent[key] = float(self._recent(unit, now, n))
            active[key] = float(u.get("ActiveState") == "active")
            failed[key] = float(u.get("ActiveState") == "failed")
            state[labels_of({"unit": unit, "active": u.get("ActiveState", ""),
                             "sub": u.get("SubState", "")})] = 1.0
        for gone in set(self.history) - seen:
            del self.history[gone]
        return {
            "systemd.unit_restarts": restarts, "systemd.unit_restarts_recent": recent,
            "systemd.unit_active": active, "systemd.unit_failed": failed,
            "systemd.unit_state": state,
            "systemd.crashlooping_units": sum(
                1 for v in recent.values() if v >= self.cfg.crashloop_restarts),
        }

    def _recent(self, unit: str, now: float, n: int) -> int:
        """Restarts guardian saw within the window. The baseline is the newest sample at
        or before the window's start; a drop in NRestarts (a manual restart resets it)
        starts over."""
        dq = self.history.setdefault(unit, deque())
        if dq and n < dq[-1][1]:
            dq.clear()
        dq.append((now, n))
        while len(dq) > 1 and dq[1][0] <= now - self.cfg.restart_window:
            dq.popleft()
        return n - dq[0][1]
