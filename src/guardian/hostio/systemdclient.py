"""One way to the host's systemd for the systemd source and the ``systemd.unit`` action:
its private D-Bus socket (method calls built by jeepney, no program needed: the image has
no ``systemctl``), or the configured ``systemctl`` argv (e.g. through ``nsenter`` into PID
1). The action talks to systemd the way the source does: the source registers its
settings for its host root (:func:`configure`), the action asks for them
(:func:`settings_for`) unless its rule names an argv of its own.

Over the bus, the verbs are systemd's own methods (org.freedesktop.systemd1(5)):
``StopUnit`` (then the unit's ``ActiveState`` is awaited, as ``systemctl stop`` waits for
its job), ``ResetFailedUnit``, ``DisableUnitFiles`` and ``MaskUnitFiles`` followed by
``Reload`` (``systemctl disable`` and ``mask`` reload too).
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jeepney import DBusAddress, Message, MessageType, Parser, new_method_call
from jeepney.io.blocking import prep_socket
from jeepney.low_level import HeaderFields

from guardian.core.errors import GuardianError
from guardian.hostio import systemctl as systemctl_cli
from guardian.hostio.systemdbus import NUDGE, PRIVATE_SOCKET, SYSTEMD

Transport = Literal["auto", "dbus", "systemctl"]
MANAGER = DBusAddress("/org/freedesktop/systemd1", SYSTEMD, f"{SYSTEMD}.Manager")
UNIT = f"{SYSTEMD}.Unit"
SHOWN = ("LoadState", "ActiveState", "SubState", "UnitFileState",
         # when the unit last left "inactive" (a start or restart), on CLOCK_MONOTONIC
         "InactiveExitTimestampMonotonic")
# verbs that start a unit's job and return (the action waits for the unit to be active)
JOBS = {"restart": "RestartUnit", "try-restart": "TryRestartUnit", "reload": "ReloadUnit"}
STOPPED = ("inactive", "failed")


@dataclass(frozen=True)
class SystemdSettings:
    """How to reach systemd: the systemd source's ``transport``, ``systemctl`` argv, bus
    socket (a path on this machine, under the host root) and timeout."""

    transport: Transport = "auto"
    systemctl: tuple[str, ...] = ("systemctl",)
    bus_socket: str = PRIVATE_SOCKET
    timeout: float = 10.0


_CONFIGURED: dict[Path, SystemdSettings] = {}


def configure(root: Path, settings: SystemdSettings) -> None:
    """The systemd source's settings for the host at ``root``."""
    _CONFIGURED[root] = settings


def settings_for(root: Path) -> SystemdSettings:
    """What the systemd source of the host at ``root`` uses (defaults without one)."""
    return _CONFIGURED.get(root) or SystemdSettings(
        bus_socket=str(root / PRIVATE_SOCKET.lstrip("/")))


def client_for(root: Path, systemctl: list[str] | None, timeout: float) -> SystemdClient:
    """An action's client: its own ``systemctl`` argv when it names one, else the systemd
    source's transport for the host at ``root``, with the action's timeout."""
    if systemctl:
        return SystemdClient(SystemdSettings("systemctl", tuple(systemctl), timeout=timeout))
    s = settings_for(root)
    return SystemdClient(SystemdSettings(s.transport, s.systemctl, s.bus_socket, timeout))


class SystemdError(GuardianError, RuntimeError):
    """systemd could not be asked, or refused; the message says which and why."""


class SystemdClient:
    """Unit state and unit verbs over the bus or through systemctl (per ``settings``)."""

    def __init__(self, settings: SystemdSettings) -> None:
        self.settings = settings
        self._sock: socket.socket | None = None
        self._parser = Parser()
        self._serial = 0
        self.transport = self._choose()

    def _choose(self) -> Literal["dbus", "systemctl"]:
        s = self.settings
        if s.transport == "systemctl":
            return "systemctl"
        if s.transport == "dbus" or Path(s.bus_socket).exists():
            return "dbus"
        return "systemctl"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._parser = Parser()

    def describe(self) -> str:
        """How systemd is reached, for plans and errors."""
        if self.transport == "dbus":
            return f"systemd's bus at {self.settings.bus_socket}"
        return " ".join(self.settings.systemctl)

    # -- the two operations --------------------------------------------------------------
    def show(self, unit: str) -> dict[str, str]:
        """LoadState, ActiveState, SubState and UnitFileState of ``unit`` ({} when it
        cannot be asked)."""
        if self.transport == "systemctl":
            try:
                    proc = self._systemctl("show", "--property=" + ",".join(SHOWN), "--", unit)
            except SystemdError:
                return {}
            units = systemctl_cli.parse_show(proc.stdout) if proc.returncode == 0 else []
            return units[0] if units else {}
        try:
            path = self._unit_path(unit)
            reply = self._call(DBusAddress(path, SYSTEMD, "org.freedesktop.DBus.Properties"),
                               "GetAll", "s", (UNIT,))
        except SystemdError:
            return {}
        props: dict[str, tuple[str, Any]] = reply[0]
        return {k: str(props[k][1]) for k in SHOWN if k in props}

    def verb(self, verb: str, unit: str) -> str | None:
        """Carry out ``verb`` (stop, disable, mask, reset-failed; restart, try-restart,
        reload: queued, not awaited over the bus) on ``unit``: None, or what went
        wrong."""
        if self.transport == "systemctl":
            try:
                proc = self._systemctl(verb, "--", unit)
            except SystemdError as exc:
                return f"{verb} {unit}: {exc}"
            if proc.returncode != 0:
                return f"{' '.join(self.settings.systemctl)} {verb} {unit}: " \
                       f"{proc.stderr.strip()[:300] or f'exit {proc.returncode}'}"
            return None
        try:
            if verb == "stop":
                self._call(MANAGER, "StopUnit", "ss", (unit, "replace"))
                return self._await_stopped(unit)
            if verb in JOBS:
                self._call(MANAGER, JOBS[verb], "ss", (unit, "replace"))
            elif verb == "reset-failed":
                self._call(MANAGER, "ResetFailedUnit", "s", (unit,))
            elif verb == "disable":
                self._call(MANAGER, "DisableUnitFiles", "asb", ([unit], False))
                self._call(MANAGER, "Reload")
            elif verb == "mask":
                # runtime=false, force=false, as `systemctl mask` without --force: a unit
                # file in /etc/systemd/system is refused, never replaced by the symlink
                self._call(MANAGER, "MaskUnitFiles", "asbb", ([unit], False, False))
                self._call(MANAGER, "Reload")
            else:
                return f"unknown verb {verb!r}"
        except SystemdError as exc:
            return f"{verb} {unit} over {self.describe()}: {exc}"
        return None

    def start(self, unit: str, mode: str = "replace") -> str | None:
        """Queue a start job for ``unit`` (StartUnit; ``systemctl start --job-mode``), not
        awaited: None, or what went wrong. ``reboot.target`` with mode
        ``replace-irreversibly`` is what ``systemctl reboot`` asks of systemd."""
        if self.transport == "systemctl":
            try:
                proc = self._systemctl("start", f"--job-mode={mode}", "--no-block", "--",
                                       unit)
            except SystemdError as exc:
                return f"start {unit}: {exc}"
            if proc.returncode != 0:
                return f"{' '.join(self.settings.systemctl)} start {unit}: " \
                       f"{proc.stderr.strip()[:300] or f'exit {proc.returncode}'}"
            return None
        try:
            self._call(MANAGER, "StartUnit", "ss", (unit, mode))
        except SystemdError as exc:
            return f"start {unit} over {self.describe()}: {exc}"
        return None

    # -- systemctl ---------------------------------------------------------------------------
    def _systemctl(self, *args: str) -> Any:
        try:
            return systemctl_cli.run(self.settings.systemctl, *args,
                                     timeout=self.settings.timeout)
        except OSError as exc:
            raise SystemdError(systemctl_cli.cannot_run(self.settings.systemctl, exc)) \
                from None

    # -- the bus -------------------------------------------------------------------------
    def _call(self, address: DBusAddress, member: str, signature: str = "",
              body: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        """One method call and its reply (signals systemd sends meanwhile are dropped:
        a peer on the private socket gets them unasked). No bus daemon is there to say
        Hello to, so this is a plain socket, as :mod:`.systemdbus` uses."""
        try:
            if self._sock is None:
                self._sock = prep_socket(self.settings.bus_socket,
                                         timeout=self.settings.timeout)
                self._sock.settimeout(self.settings.timeout)
            self._serial += 1
            serial = self._serial
            self._sock.sendall(new_method_call(address, member, signature, body)
                               .serialise(serial=serial))
            reply = self._reply(serial)
        except (OSError, TimeoutError, ConnectionError, ValueError) as exc:
            self.close()
            raise SystemdError(f"no answer from systemd on {self.settings.bus_socket}: "
                               f"{exc}") from None
        if reply.header.message_type == MessageType.error:
            name = reply.header.fields.get(HeaderFields.error_name, "error")
            raise SystemdError(f"{name}: {' '.join(map(str, reply.body))}")
        return tuple(reply.body)

    def _reply(self, serial: int) -> Message:
        assert self._sock is not None
        deadline = time.monotonic() + self.settings.timeout
        while True:
            for msg in iter(self._parser.get_next_message, None):
                if msg.header.fields.get(HeaderFields.reply_serial) == serial:
                    return msg
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no reply within {self.settings.timeout:g}s")
            ready, _, _ = select.select([self._sock], [], [],
                                        max(min(NUDGE, deadline - time.monotonic()), 0.0))
            if not ready:
                # a call sent right after authenticating can go unanswered until more
                # comes in (systemd 252; see .systemdbus): a ping wakes it
                self._serial += 1
                self._sock.sendall(new_method_call(
                    DBusAddress("/org/freedesktop/systemd1", SYSTEMD,
                                "org.freedesktop.DBus.Peer"), "Ping")
                    .serialise(serial=self._serial))
                continue
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("systemd closed the connection")
            self._parser.add_data(data)

    def _unit_path(self, unit: str) -> str:
        # LoadUnit, unlike GetUnit, answers for a unit systemd does not hold in memory
        # (its LoadState says whether it exists)
        path: str = self._call(MANAGER, "LoadUnit", "s", (unit,))[0]
        return path

    def _await_stopped(self, unit: str) -> str | None:
        deadline = time.monotonic() + self.settings.timeout
        while True:
            state = self.show(unit).get("ActiveState", "")
            if state in STOPPED:
                return None
            if time.monotonic() >= deadline:
                return f"stop {unit}: still {state or 'unknown'} after " \
                       f"{self.settings.timeout:g}s"
            time.sleep(0.1)

