"""Run a callable in a worker thread and wait for it up to a deadline: what the daemon's
tick does with its actions and the executor with each ``apply()``.

A Python thread cannot be killed, so one that overruns is left to end: its result goes to
``late`` when it arrives, and no second call starts beside it (``busy``). Whoever waits may
do something between bounded waits (``tick``: the loop's watchdog ping); the worker itself
never does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

#: ``done`` (a value), ``crashed`` (it raised), ``overran`` (still running at the
#: deadline), ``stopped`` (the waiter was asked to stop first), ``busy`` (the previous
#: call still runs: nothing started), ``unstarted`` (no thread to be had: TasksMax)
Status = Literal["done", "crashed", "overran", "stopped", "busy", "unstarted"]


@dataclass
class Ran(Generic[T]):
    """How a call went; ``value`` only when done, ``error`` when it crashed or could not
    start."""

    status: Status
    value: T | None = None
    error: BaseException | None = None


class DeadlineRunner(Generic[T]):
    """One call at a time, in a worker thread named ``name``."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self._guard = threading.Lock()
        self._busy = False  # a call runs
        self._thread: threading.Thread | None = None

    def is_alive(self) -> bool:
        """Whether the last call is still running (overrun, or being waited on). False as
        soon as its result is handed over: never the worker thread's own last moments,
        which would refuse the next call for a race."""
        with self._guard:
            return self._busy

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the last call's worker to end, its late result
        handed over included; whether it ended (for shutdown, and tests)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def _finish(self) -> None:
        with self._guard:
            self._busy = False

    def run(self, fn: Callable[[], T], timeout: float, *,
            tick: Callable[[], None] | None = None, step: float = 0.25,
            stop: Callable[[], bool] = lambda: False,
            late: Callable[[Ran[T]], None] | None = None) -> Ran[T]:
        """Call ``fn`` in the worker and wait up to ``timeout`` seconds. With ``tick``, wait
        at most ``step`` at a time and call it between waits, on the waiting thread;
        ``stop`` ends the wait early. A call that ends after the wait gave up is handed to
        ``late``, on the worker's thread."""
        with self._guard:
            if self._busy:
                return Ran("busy")
            self._busy = True
        done = threading.Event()
        lock = threading.Lock()
        box: list[Ran[T]] = []
        gave_up = False

        def work() -> None:
            try:
                ran: Ran[T] = Ran("done", fn())
            except Exception as exc:  # reported as what it is, not as an overrun
                ran = Ran("crashed", error=exc)
            with lock:
                box.append(ran)
                was_late = gave_up
            self._finish()  # before anyone hears of it: the next call may start then
            done.set()
            if was_late and late is not None:
                late(ran)

        thread = threading.Thread(target=work, name=self.name, daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had (TasksMax): fail, do not die
            self._finish()
            return Ran("unstarted", error=exc)
        self._thread = thread
        deadline = self.clock() + timeout
        while not stop():
            left = deadline - self.clock()
            if left <= 0 or done.wait(left if tick is None else min(step, left)):
                break
            if tick is not None:
                tick()
        with lock:
            if box:
                return box[0]
            gave_up = True
        return Ran("stopped" if stop() else "overran")
