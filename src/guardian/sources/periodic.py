"""Jobs run on their own intervals by a small pool of worker threads, never on the loop's
thread (script checks, health probes). A job still running when it is due again is not
started again; the first run of each is at once (as node-problem-detector runs every
plugin once at start)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


class Periodic:
    """Runs ``job(name)`` for each name every ``intervals[name]`` seconds, at most
    ``concurrency`` at once. ``start`` is idempotent; ``close`` stops scheduling (a
    running job ends within its own timeout)."""

    def __init__(self, intervals: dict[str, float], job: Callable[[str], None],
                 concurrency: int, prefix: str) -> None:
        self.intervals = intervals
        self.job = job
        self.concurrency = concurrency
        self.prefix = prefix
        self.running: set[str] = set()
        self.due = dict.fromkeys(intervals, 0.0)  # monotonic time of each job's next run
        self._lock = threading.Lock()
        self.stop = threading.Event()  # set by close(): a running job should end now
        self._kick = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is not None or not self.intervals or self.stop.is_set():
            return
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.prefix)
        self.thread = threading.Thread(target=self._schedule, daemon=True,
                                       name=f"{self.prefix}-scheduler")
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self._kick.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _schedule(self) -> None:
        """Start each job when it is due and not running; sleep until the next is due."""
        assert self._pool is not None
        while not self.stop.is_set():
            now = time.monotonic()
            with self._lock:
                due = [n for n, t in self.due.items() if t <= now and n not in self.running]
                for name in due:
                    self.running.add(name)
                    self.due[name] = now + self.intervals[name]
                nxt = min(self.due.values())
            for name in due:
                try:
                    self._pool.submit(self._run, name)
                except RuntimeError:  # shut down
                    return
            self._kick.wait(max(0.01, nxt - time.monotonic()))
            self._kick.clear()

    def _run(self, name: str) -> None:
        try:
            self.job(name)
        finally:
            with self._lock:
                self.running.discard(name)
