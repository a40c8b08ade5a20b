"""Kernel log patterns from /dev/kmsg.

The follower starts at the end of the kernel's ring buffer (old lines are replayed only
when asked), reads every new record without blocking, and counts matches of named regular
expressions. Each read of /dev/kmsg returns one record ``prio,seq,usec,flags;message``
followed by optional `` KEY=value`` dictionary lines; ``EPIPE`` means records were
overwritten before we read them, which is counted in ``kmsg.lost``.
"""

from __future__ import annotations

import errno
import os
import re
from typing import ClassVar

from ..host import Host
from ..plugins import Source
from ..snapshot import Family, SignalSpec, labels_of

# The ENA reset sequence (see the incident) and the kernel's classic distress lines.
DEFAULT_PATTERNS: dict[str, str] = {
    "ena_tx_paused": r"TX q \d+ is paused for too long",
    "ena_tx_missing_completion": r"Found a Tx that wasn't completed on time",
    "ena_keep_alive_timeout": r"Keep alive watchdog timeout",
    "ena_reset_triggered": r"Trigger reset is on",
    "ena_reset_completed": r"Device reset completed successfully",
    "nic_tx_timeout": r"NETDEV WATCHDOG: .* transmit queue \d+ timed out",
    "oom_kill": r"Out of memory: Killed process|oom-kill:",
    "hung_task": r"blocked for more than \d+ seconds",
    "soft_lockup": r"soft lockup - CPU#\d+ stuck",
    "rcu_stall": r"rcu_(?:sched|preempt) (?:self-)?detected (?:stalls|stall)",
}
MAX_RECORDS_PER_DRAIN = 20_000  # bounds guardian's own CPU under a log flood
_RECORD_MAX = 8192


def parse_record(raw: bytes) -> tuple[int, int, str] | None:
    """(priority, sequence, message) of one /dev/kmsg record, or None if malformed."""
    text = raw.decode("utf-8", errors="replace")
    head, sep, rest = text.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    message = rest.split("\n", 1)[0]  # dictionary lines (" KEY=value") follow
    return int(fields[0]) & 7, int(fields[1]), message


class KmsgSource(Source):
    name: ClassVar[str] = "kmsg"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("kmsg.matches", "kernel log lines that matched a pattern, since start",
                   "lines", labels=("pattern",), counter=True),
        SignalSpec("kmsg.last_match_age_seconds", "time since a pattern last matched "
                   "(only patterns that have matched)", "seconds", labels=("pattern",)),
        SignalSpec("kmsg.records", "kernel log records read since start", "records",
                   counter=True),
        SignalSpec("kmsg.lost", "times records were overwritten before guardian read them",
                   "events", counter=True),
    )

    def __init__(self, host: Host, patterns: dict[str, str] | None = None,
                 replay: bool = False) -> None:
        super().__init__(host)
        self.patterns = {n: re.compile(p) for n, p in (patterns or DEFAULT_PATTERNS).items()}
        self.replay = replay
        self.fd = -1
        self.counts = dict.fromkeys(self.patterns, 0)
        self.last_match: dict[str, float] = {}
        self.records = 0
        self.lost = 0
        self.last_seq: int | None = None

    def unavailable(self) -> str | None:
        try:
            self._open()
        except OSError as exc:
            return f"cannot open {self.host.kmsg}: {exc.strerror}"
        return None

    def _open(self) -> None:
        if self.fd < 0:
            self.fd = os.open(self.host.kmsg, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            if not self.replay:
                os.lseek(self.fd, 0, os.SEEK_END)

    def drain(self, now: float) -> list[str]:
        """Read what is new (at most MAX_RECORDS_PER_DRAIN records); the names of the
        patterns that matched."""
        self._open()
        matched: list[str] = []
        for _ in range(MAX_RECORDS_PER_DRAIN):
            try:
                raw = os.read(self.fd, _RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                raise
            if not raw:
                break  # a regular file (fixture) at its end
            for chunk in raw.split(b"\n") if not self.host.is_live else (raw,):
                self._one(chunk, now, matched)
        return matched

    def _one(self, raw: bytes, now: float, matched: list[str]) -> None:
        rec = parse_record(raw)
        if rec is None:
            return
        _, seq, message = rec
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.lost += 1  # records were skipped (overwritten in the ring)
        self.last_seq = seq
        self.records += 1
        for name, rx in self.patterns.items():
            if rx.search(message):
                self.counts[name] += 1
                self.last_match[name] = now
                matched.append(name)

    def collect(self, now: float) -> dict[str, object]:
        self.drain(now)
        matches: Family = {labels_of({"pattern": n}): float(c) for n, c in self.counts.items()}
        ages: Family = {labels_of({"pattern": n}): now - t for n, t in self.last_match.items()}
        return {"kmsg.matches": matches, "kmsg.last_match_age_seconds": ages,
                "kmsg.records": self.records, "kmsg.lost": self.lost}

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
