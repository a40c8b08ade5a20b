"""systemd units: restarts, active and sub state, so a crash-looping unit is visible.

Read over systemd's private D-Bus socket, kept current from its signals (see
:mod:`guardian.hostio.systemdbus`), or with ``systemctl show`` where that socket cannot be
reached (not root, or a container that does not mount /run/systemd: then ``systemctl`` is
the configurable argv, e.g. through nsenter; see :mod:`guardian.hostio.systemctl`).
"""

from __future__ import annotations

import subprocess
from collections import deque
from fnmatch import fnmatchcase
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.durations import Duration
from guardian.core.errors import in_words
from guardian.core.snapshot import Family, SignalSpec, labels_of
from guardian.hostio import systemctl
from guardian.hostio.host import Host
from guardian.hostio.programs import find_program
from guardian.hostio.systemctl import parse_show
from guardian.hostio.systemdbus import PRIVATE_SOCKET, SystemdBus
from guardian.hostio.systemdclient import SystemdSettings, configure
from guardian.plugin.contract import Source

PROPERTIES = ("Id", "NRestarts", "ActiveState", "SubState")


class SystemdConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    units: list[str] = Field(["*.service"], description="globs of units to watch")
    restart_window: Duration = Field(600.0, description="window of unit_restarts_recent")
    crashloop_restarts: int = Field(5, gt=0, description="restarts within the window that "
                                    "make a unit count as crash-looping")
    systemctl: list[str] = Field(["systemctl"], min_length=1,
                                 description="argv that runs systemctl")
    timeout: Duration = Field(10.0, description="longest a systemctl call, or an answer "
                              "on the bus, may take")
    transport: Literal["auto", "dbus", "systemctl"] = Field(
        "auto", description="dbus: systemd's private socket, kept current from its signals; "
        "systemctl: one `systemctl show` a tick; auto: dbus when the socket is there")
    bus_socket: str = Field(PRIVATE_SOCKET, description="systemd's private socket, under "
                            "the host root")


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
        self.bus: SystemdBus | None = None
        self._share(self.cfg.transport)

    def _share(self, transport: Literal["auto", "dbus", "systemctl"]) -> None:
        """Tell the systemd.unit action how this source reaches systemd (one client)."""
        configure(self.host.root, SystemdSettings(
            transport, tuple(self.cfg.systemctl),
            str(self.host.root / self.cfg.bus_socket.lstrip("/")), self.cfg.timeout))

    def _run(self, *args: str) -> str:
        return systemctl.output(self.cfg.systemctl, *args, timeout=self.cfg.timeout)

    def _new_bus(self) -> SystemdBus:
        socket = str(self.host.root / self.cfg.bus_socket.lstrip("/"))
        return SystemdBus(self.cfg.units, socket, self.cfg.timeout)

    def unavailable(self) -> str | None:
        bus_said = ""
        if self.cfg.transport != "systemctl":
            bus = self._new_bus()
            try:
                bus.poll()
                self.bus = bus
                self._share("dbus")
                return None
            except (OSError, ConnectionError, TimeoutError, ValueError) as exc:
                bus.close()
                bus_said = f"cannot talk to systemd on {bus.path}: {_said(exc)}"
                if self.cfg.transport == "dbus":
                    return bus_said
                bus_said += "; "
        if self.cfg.transport == "auto":
            self._share("systemctl")  # the bus did not answer: the action uses what this does
        if find_program(self.cfg.systemctl[0]) is None:
            return f"{bus_said}{self.cfg.systemctl[0]} not found"
        try:
            self._run("show", "--property=Version")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            return f"{bus_said}no systemd to talk to: {_said(exc)}"
        return None

    def close(self) -> None:
        if self.bus is not None:
            self.bus.close()

    def _units(self) -> list[tuple[str, int, str, str]]:
        """(unit, NRestarts, ActiveState, SubState) of each watched unit."""
        if self.bus is not None or self.cfg.transport == "dbus":
            if self.bus is None:
                self.bus = self._new_bus()
            return [(name, st.restarts, st.active, st.sub)
                    for name, st in self.bus.poll().items() if st.restarts is not None]
        # One call a tick: `show` expands the globs itself, to the units systemd holds in
        # memory that are not inactive (a crash-looping unit is activating or failed).
        out = []
        for u in parse_show(self._run("show", "--no-pager", "--property=" + ",".join(
                PROPERTIES), "--", *self.cfg.units)):
            unit = u.get("Id", "")
            if unit and u.get("NRestarts", "").isdigit() \
                    and any(fnmatchcase(unit, g) for g in self.cfg.units):
                out.append((unit, int(u["NRestarts"]), u.get("ActiveState", ""),
                            u.get("SubState", "")))
        return out

    def collect(self, now: float) -> dict[str, object]:
        restarts: Family = {}
        recent: Family = {}
        active: Family = {}
        failed: Family = {}
        state: Family = {}
        seen = set()
        for unit, n, active_state, sub_state in self._units():
            seen.add(unit)
            key = labels_of({"unit": unit})
            restarts[key] = float(n)
            recent[key] = float(self._recent(unit, now, n))
            active[key] = float(active_state == "active")
            failed[key] = float(active_state == "failed")
            state[labels_of({"unit": unit, "active": active_state, "sub": sub_state})] = 1.0
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


def _said(exc: BaseException) -> str:
    """What went wrong, in words: an OSError's reason and path (``No such file or
    directory``, never ``[Errno 2] ...``), else the exception's own message."""
    return in_words(exc) if isinstance(exc, OSError) and exc.strerror else (
        str(exc) or type(exc).__name__)
