"""Waiting for something to happen, without claiming how soon it happens.

A test waits for an event or a condition, with a generous bound that only fails a test
whose awaited thing never happens; it never asserts that something was fast (a loaded CI
machine makes any such claim flaky, and a fast machine makes it vacuous). What a test
means by "does not block" is said by its consequence: the call returned at all while what
it must not wait on was still pending, ticks went on being counted, the process ended."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

BOUND = 30.0  # seconds: a failure bound for a broken test, never a claim about speed


def wait_until(predicate: Callable[[], T | None], what: str, timeout: float = BOUND,
               every: float = 0.02) -> T:
    """Call ``predicate`` until it returns something truthy, and return that. Fails,
    naming ``what`` was awaited, only when it never does within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"never happened (waited {timeout:g} s): {what}")
        time.sleep(every)


def ends(fn: Callable[[], T], what: str, timeout: float = BOUND) -> T:
    """``fn()``, called on a thread of its own, and its result: fails, naming ``what``,
    when it has not returned within ``timeout`` (what blocks forever fails the test
    rather than hanging the run). An exception of ``fn`` is raised here."""
    box: list[T] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=call, name=f"test-ends: {what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise AssertionError(f"never returned (waited {timeout:g} s): {what}")
    if errors:
        raise errors[0]
    return box[0]
