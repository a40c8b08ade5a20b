"""The systemd notification protocol (sd_notify), through the sdnotify package.

Without ``NOTIFY_SOCKET`` (not under systemd, or not Type=notify) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
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
            saved = os.environ.get("NOTIFY_SOCKET")
            os.environ["NOTIFY_SOCKET"] = self.address  # sdnotify reads it from os.environ
            try:
                self._notifier = sdnotify.SystemdNotifier(debug=True)
            except OSError as exc:
                log.warning("cannot reach NOTIFY_SOCKET %s: %s", self.address, exc)
            finally:
                if saved is None:
                    os.environ.pop("NOTIFY_SOCKET", None)
                else:
                    os.environ["NOTIFY_SOCKET"] = saved

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
