"""What the service loop waits on: an event that threads set and that a signal sets too,
whichever thread the kernel delivers the signal to.

A process-directed signal (``kill``, ``podman stop``) goes to any thread that does not
block it. Python runs its handler in the main thread, but only once that thread runs
bytecode again: one blocked in ``threading.Event.wait`` is woken only when the signal
interrupts *its* system call, so a signal taken by a worker thread waited for the end of
the timeout, a whole tick interval. Here the main thread waits in ``select`` on a pipe
that :func:`signal.set_wakeup_fd` writes to from whichever thread takes the signal."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading


class Wakeup:
    """``set``/``is_set``/``clear``/``wait`` as :class:`threading.Event`, waking on signals."""

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._r, self._w = os.pipe()
        self._signals = False
        for fd in (self._r, self._w):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)

    def set(self) -> None:
        self._flag.set()
        with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
            os.write(self._w, b"\0")

    def is_set(self) -> bool:
        return self._flag.is_set()

    def clear(self) -> None:
        self._flag.clear()
        self._drain()

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 512):
                pass

    def wait(self, timeout: float) -> bool:
        """Wait until set, a signal comes, or ``timeout`` s pass; whether it is set. Once
        ``select`` returns, the signal's handler runs before the caller's next check."""
        if not self._flag.is_set():
            ready, _, _ = select.select([self._r], [], [], max(timeout, 0.0))
            if ready and not self._flag.is_set():
                self._drain()  # a signal's byte: its handler decides what happens
        return self._flag.is_set()

    def wake_on_signals(self) -> None:
        """Make a signal with a Python handler wake :meth:`wait` (main thread only)."""
        signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._signals = True

    def close(self) -> None:
        if self._signals:
            with contextlib.suppress(ValueError):  # not the main thread: leave it
                signal.set_wakeup_fd(-1)
            self._signals = False
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
