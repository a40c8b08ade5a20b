"""systemd's service units over its private D-Bus socket, kept current from its signals.

``systemctl`` costs a fork and an exec a call, and ``show`` makes systemd serialise every
property of every unit; at a 1 s tick that is about 2% of a core (systemctl and PID 1
together, measured against the nspawn systemd of the tests). Instead guardian holds one
connection to ``/run/systemd/private`` (root only; systemctl uses it too, and it works
while the D-Bus daemon is down), lists the service units once, asks each for
``NRestarts``, and then reads the ``PropertiesChanged``, ``UnitNew`` and ``UnitRemoved``
signals that systemd sends to every private connection (``NRestarts``, ``ActiveState`` and
``SubState`` are all emitted on change: systemd's dbus-unit.c and dbus-service.c). A tick
with nothing changed costs one non-blocking read. Everything is listed again every
``resync`` seconds, and after any fault (systemd re-executing closes the connection).
Messages are built and parsed by jeepney.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from jeepney import DBusAddress, Message, MessageType, Parser, new_method_call
from jeepney.io.blocking import prep_socket
from jeepney.low_level import HeaderFields

PRIVATE_SOCKET = "/run/systemd/private"
SYSTEMD = "org.freedesktop.systemd1"
MANAGER = DBusAddress("/org/freedesktop/systemd1", SYSTEMD, f"{SYSTEMD}.Manager")
PROPERTIES = "org.freedesktop.DBus.Properties"
READS_PER_POLL = 128  # of up to 64 KiB: a bound on one tick's reading; the rest waits
NEW_PER_POLL = 64  # units first seen in signals, asked about per poll; the rest wait
NUDGE = 0.2  # s without an answer before systemd is pinged (see _wait)


@dataclass
class UnitState:
    """What the systemd source reports of one unit."""

    restarts: int | None = None  # NRestarts; None until systemd has said
    active: str = ""
    sub: str = ""


class SystemdBus:
    """The service units matching ``globs``, as systemd last said they are."""

    def __init__(self, globs: Iterable[str], path: str = PRIVATE_SOCKET,
                 timeout: float = 10.0, resync: float = 600.0) -> None:
        self.globs = list(globs)
        self.path = path
        self.timeout = timeout
        self.resync_every = resync
        self.sock: socket.socket | None = None
        self.parser = Parser()
        self.serial = 0
        self.units: dict[str, UnitState] = {}
        self.paths: dict[str, str] = {}  # object path -> unit name
        self.pending: dict[int, tuple[str, str]] = {}  # serial -> (unit, property)
        self.synced_at = 0.0
        # units announced by UnitNew, asked about at the next poll: asking about a unit
        # systemd has no file for loads it again, which it announces again, so asking
        # at once would loop (any user's `systemctl status no-such.service` did, for a
        # minute, without a watchdog ping)
        self.new: dict[str, str] = {}  # unit -> object path
        self.ignored: dict[str, float] = {}  # unit not loaded -> until (monotonic)

    # -- the connection ------------------------------------------------------------------
    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.parser = Parser()
        self.pending.clear()
        self.new.clear()

    def _send(self, msg: Message) -> int:
        assert self.sock is not None
        self.serial += 1
        self.sock.sendall(msg.serialise(serial=self.serial))
        return self.serial

    def _read(self, wait: float) -> bool:
        """Read what has arrived, waiting up to ``wait`` s for something; False if
        nothing came."""
        assert self.sock is not None
        ready, _, _ = select.select([self.sock], [], [], max(wait, 0.0))
        if not ready:
            return False
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("systemd closed the connection")
        self.parser.add_data(data)
        return True

    def _call(self, path: str, interface: str, member: str, signature: str = "",
              body: tuple[Any, ...] = ()) -> int:
        return self._send(new_method_call(DBusAddress(path, SYSTEMD, interface), member,
                                          signature, body))

    # -- keeping the units current -------------------------------------------------------
    def poll(self) -> dict[str, UnitState]:
        """The units now. Raises OSError, ConnectionError or TimeoutError when systemd
        cannot be asked (the caller reports no value; the next poll reconnects)."""
        try:
            if self.sock is None or time.monotonic() - self.synced_at >= self.resync_every:
                self._sync()
            else:
                self._drain()
        except (OSError, ConnectionError, TimeoutError, ValueError):
            self.close()
            raise
        return {name: st for name, st in self.units.items() if st.restarts is not None}

    def _sync(self) -> None:
        self.close()
        self.sock = prep_socket(self.path, timeout=self.timeout)
        self.sock.settimeout(self.timeout)  # a send to a systemd that reads nothing ends
        serial = self._send(new_method_call(MANAGER, "ListUnitsByPatterns", "asas",
                                            ([], self.globs)))
        self.units, self.paths = {}, {}
        reply = self._await(serial)
        for name, _, load, active, sub, _, path, *_ in reply.body[0]:
            if load == "loaded":
                self._add(name, path, active, sub)
        self.synced_at = time.monotonic()
        self._await_pending()

    def _wanted(self, name: str) -> bool:
        return name.endswith(".service") and any(fnmatchcase(name, g) for g in self.globs)

    def _add(self, name: str, path: str, active: str = "", sub: str = "") -> None:
        """Follow a unit: ask its restarts (and, for one only announced, whether it is
        loaded at all, and its state)."""
        if not self._wanted(name):
            return
        self.units[name] = UnitState(None, active, sub)
        self.paths[path] = name
        unit_props = () if active else ("LoadState", "ActiveState", "SubState")
        for iface, prop in ((f"{SYSTEMD}.Service", "NRestarts"),
                            *((f"{SYSTEMD}.Unit", p) for p in unit_props)):
            serial = self._call(path, PROPERTIES, "Get", "ss", (iface, prop))
            self.pending[serial] = (name, prop)

    def _wait(self, deadline: float) -> None:
        """Read until something arrives or ``deadline`` passes (then TimeoutError)."""
        while not self._read(min(NUDGE, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"systemd did not answer within {self.timeout:g}s")
            # a call sent right after authenticating can go unanswered until more comes
            # in (seen with systemd 252 on reconnecting): a ping wakes it; its answer is
            # read and dropped
            self._call("/org/freedesktop/systemd1", "org.freedesktop.DBus.Peer", "Ping")

    def _await(self, serial: int) -> Message:
        deadline = time.monotonic() + self.timeout
        while True:
            for msg in self._messages():
                if msg.header.fields.get(HeaderFields.reply_serial) == serial:
                    if msg.header.message_type == MessageType.error:
                        raise ConnectionError(f"systemd: {msg.body}")
                    return msg
            self._wait(deadline)

    def _await_pending(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            for _ in self._messages():
                pass
            if not self.pending:
                return
            self._wait(deadline)

    def _drain(self) -> None:
        for _ in range(READS_PER_POLL):
            if not self._read(0.0):
                break
        for _ in self._messages():
            pass
        now = time.monotonic()
        self.ignored = {n: until for n, until in self.ignored.items() if until > now}
        for name in list(self.new)[:NEW_PER_POLL]:
            path = self.new.pop(name)
            if name not in self.units and name not in self.ignored:
                self._add(name, path)
        if self.pending:
            self._await_pending()

    def _messages(self) -> Iterable[Message]:
        """Apply every complete message received; yield the ones that are not signals
        or answers this class is waiting for."""
        while (msg := self.parser.get_next_message()) is not None:
            fields = msg.header.fields
            kind = msg.header.message_type
            reply_to = fields.get(HeaderFields.reply_serial)
            if kind in (MessageType.method_return, MessageType.error) \
                    and reply_to in self.pending:
                name, prop = self.pending.pop(reply_to)
                if name not in self.units:
                    continue
                if kind == MessageType.error or (prop == "LoadState"
                                                 and msg.body[0][1] != "loaded"):
                    self._forget(name)  # no such unit (a typo, a unit gone): not again
                    self.ignored[name] = time.monotonic() + self.resync_every
                else:
                    self._set(self.units[name], prop, msg.body[0][1])
                continue
            if kind == MessageType.signal:
                self._signal(fields.get(HeaderFields.path, ""),
                             fields.get(HeaderFields.member, ""), msg.body)
                continue
            yield msg

    def _signal(self, path: str, member: str, body: tuple[Any, ...]) -> None:
        if member == "PropertiesChanged":
            name = self.paths.get(path)
            if name is not None and name in self.units:
                for prop, (_, value) in body[1].items():
                    self._set(self.units[name], prop, value)
        elif member == "UnitNew" and body[0] not in self.units and self._wanted(body[0]):
            self.new[body[0]] = body[1]  # asked about at the next poll, not now
        elif member == "UnitRemoved":
            self._forget(body[0])
            self.new.pop(body[0], None)

    def _forget(self, name: str) -> None:
        self.units.pop(name, None)
        self.paths = {p: n for p, n in self.paths.items() if n != name}

    @staticmethod
    def _set(st: UnitState, prop: str, value: object) -> None:
        if prop == "NRestarts" and isinstance(value, int):
            st.restarts = value
        elif prop == "ActiveState" and isinstance(value, str):
            st.active = value
        elif prop == "SubState" and isinstance(value, str):
            st.sub = value
