"""The systemd notification protocol (sd_notify), through the sdnotify package.

Without ``NOTIFY_SOCKET`` (not under systemd, or not Type=notify) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

import sdnotify

log = logging.getLogger("guardian.notify")


class Notifier:
    """Sends READY/STATUS/WATCHDOG/RELOADING/STOPPING to systemd."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.address = env.get("NOTIFY_SOCKET", "")
        self.watchdog_usec = _watchdog_usec(env)
        self._notifier: sdnotify.SystemdNotifier | None = None
        if self.address:
            try:
                self._notifier = _connect(self.address)
            except OSError as exc:
                log.warning("cannot reach NOTIFY_SOCKET %s: %s", self.address, exc)

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec else None

    def send(self, *fields: str) -> None:
        if self._notifier is None:
            return
        try:
            self._notifier.notify("\n".join(fields))
        except BlockingIOError:
            log.debug("sd_notify: the notify socket's queue is full; dropped %s", fields[0])
        except OSError as exc:
            log.warning("sd_notify failed: %s", exc)

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def reloading(self, monotonic_usec: int) -> None:
        self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec}")

    def stopping(self) -> None:
        self.send("STOPPING=1")


def _connect(address: str) -> sdnotify.SystemdNotifier:
    """An sdnotify notifier connected to ``address``. sdnotify itself connects to the
    process environment's NOTIFY_SOCKET; the address is given here instead, so nothing
    edits os.environ (an embedding agent's environment is its own)."""
    # non-blocking: a notify socket whose queue is full (nobody reading) costs a message,
    # never the loop
    sock = socket.socket(socket.AF_UNIX,
                         socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
    try:
        sock.connect("\0" + address[1:] if address.startswith("@") else address)
    except OSError:
        sock.close()
        raise
    notifier = sdnotify.SystemdNotifier.__new__(sdnotify.SystemdNotifier)
    notifier.debug, notifier.socket = True, sock
    return notifier


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    """WATCHDOG_USEC, if it is meant for this process (WATCHDOG_PID unset or ours)."""
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec if usec > 0 else None
