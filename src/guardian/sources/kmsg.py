"""Kernel log patterns from /dev/kmsg.

The follower starts at the end of the kernel's ring buffer (old lines are replayed only
when asked), reads every new record without blocking, and counts matches of named regular
expressions. Each read of /dev/kmsg returns one record ``prio,seq,usec,flags;message``
followed by optional `` KEY=value`` dictionary lines. ``EPIPE`` means records were
overwritten before we read them; it and gaps in the sequence numbers count in ``kmsg.lost``.
With :meth:`KmsgSource.follow`, a thread waits on the device and wakes the engine as soon
as a pattern matches, instead of at the next tick.
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..host import Host
from ..plugins import SampleError, Source
from ..regexsafety import backtracking_risk, spoof_risk
from ..snapshot import Family, SignalSpec, labels_of

# The ENA reset sequence (see the incident) and the kernel's classic distress lines, each
# anchored at the start of the message the kernel or driver writes, so a process cannot
# fire one through its own name (see guardian.regexsafety). ENA lines come through
# netdev_err()/dev_err(): "ena <pci address>[ <netdev>]: <message>".
_ENA = r"^ena [0-9a-f:.]+(?: \S+)?: "
DEFAULT_PATTERNS: dict[str, str] = {
    "ena_tx_paused": _ENA + r"TX q \d+ is paused for too long",
    "ena_tx_missing_completion": _ENA + r"Found a Tx that wasn't completed on time",
    "ena_keep_alive_timeout": _ENA + r"Keep alive watchdog timeout",
    "ena_reset_triggered": _ENA + r"Trigger reset is on",
    "ena_reset_completed": _ENA + r"Device reset completed successfully",
    "nic_tx_timeout": r"^NETDEV WATCHDOG: .* transmit queue \d+ timed out",
    "oom_kill": r"^(?:Out of memory|Memory cgroup out of memory): Killed process \d+"
                r"|^oom-kill:constraint=",
    "hung_task": r"^INFO: task .+:\d+ blocked for more than \d+ seconds",
    "soft_lockup": r"^(?:watchdog: )?BUG: soft lockup - CPU#\d+ stuck",
    "rcu_stall": r"^(?:rcu: )?INFO: rcu_(?:sched|preempt|bh) (?:self-)?detected stalls?",
}
_RECORD_MAX = 8192
_FOLLOW_COALESCE = 0.05  # at most ~20 wake-ups a second, however fast lines arrive


class KmsgConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patterns: dict[str, str] = Field(
        default_factory=dict, description="name -> regular expression, added to the defaults")
    default_patterns: bool = Field(True, description="include the shipped patterns")
    replay: bool = Field(False, description="read the ring buffer from its start")
    max_records_per_drain: int = Field(20_000, gt=0,
                                       description="bounds guardian's CPU under a log flood")

    @field_validator("patterns")
    @classmethod
    def _compile(cls, v: dict[str, str]) -> dict[str, str]:
        for name, rx in v.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ValueError(f"pattern name {name!r} must be lower_snake_case")
            try:
                re.compile(rx)
            except (re.error, RecursionError, OverflowError) as exc:
                raise ValueError(f"pattern {name!r}: bad regular expression: {exc}") from None
            if (why := backtracking_risk(rx)) is not None:
                raise ValueError(f"pattern {name!r}: {why}; rewrite it without (e.g. "
                                 "`a+` for `(a+)+`)")
        return v

    @model_validator(mode="after")
    def _combined(self) -> KmsgConfig:
        """The live matcher screens each line with all patterns in one alternation:
        that form must compile too (no inline flags past the start, no group name used
        twice)."""
        try:
            _screen(self.merged())
        except re.error as exc:
            raise ValueError(f"the patterns do not combine into one expression: {exc}; "
                             "use (?i:...) instead of (?i) and unique group names") from None
        return self

    def merged(self) -> dict[str, str]:
        return {**(DEFAULT_PATTERNS if self.default_patterns else {}), **self.patterns}

    def compiled(self) -> dict[str, re.Pattern[str]]:
        return {n: re.compile(p) for n, p in self.merged().items()}


def _screen(patterns: dict[str, str]) -> re.Pattern[str]:
    """One alternation of every pattern: only lines it hits run the named patterns."""
    return re.compile("|".join(f"(?:{p})" for p in patterns.values()) or r"(?!)")


def parse_record(raw: bytes) -> tuple[int, int, str, str] | None:
    """(priority, sequence, flags, message) of one /dev/kmsg record, or None."""
    text = raw.decode("utf-8", errors="replace")
    head, sep, rest = text.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    message = rest.split("\n", 1)[0]  # dictionary lines (" KEY=value") follow
    return int(fields[0]) & 7, int(fields[1]), fields[3], message


def match_line(patterns: dict[str, re.Pattern[str]], line: str) -> list[str]:
    """Names of the patterns that match one log line (what `guardian test` checks)."""
    return [name for name, rx in patterns.items() if rx.search(line)]


class KmsgSource(Source[KmsgConfig]):
    name: ClassVar[str] = "kmsg"
    Config = KmsgConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("kmsg.matches", "kernel log lines that matched a pattern, since start",
                   "lines", labels=("pattern",), counter=True),
        SignalSpec("kmsg.last_match_age_seconds", "time since a pattern last matched "
                   "(only patterns that have matched)", "seconds", labels=("pattern",)),
        SignalSpec("kmsg.records", "kernel log records read since start", "records",
                   counter=True),
        SignalSpec("kmsg.lost", "records overwritten before guardian read them", "records",
                   counter=True),
    )

    def __init__(self, host: Host, config: KmsgConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: KmsgConfig = self.config
        self.patterns = self.cfg.compiled()
        self.screen = _screen(self.cfg.merged())
        self.fd = -1
        self.is_file = False
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self.patterns, 0)
        self.last_match: dict[str, float] = {}
        self.records = 0
        self.lost = 0
        self.last_seq: int | None = None
        self.fragment = ""
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def unavailable(self) -> str | None:
        try:
            self._open()
        except OSError as exc:
            return f"cannot open {self.host.kmsg}: {exc.strerror}"
        return None

    def _open(self) -> None:
        if self.fd < 0:
            self.fd = os.open(self.host.kmsg, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            # a recorded log (a regular file, one record per line) instead of the device
            self.is_file = stat.S_ISREG(os.fstat(self.fd).st_mode)
            if not self.cfg.replay:
                os.lseek(self.fd, 0, os.SEEK_END)

    def drain(self, now: float) -> list[str]:
        """Read what is new (bounded per call); the names of the patterns that matched."""
        with self.lock:
            self._open()
            matched: list[str] = []
            for _ in range(self.cfg.max_records_per_drain):
                try:
                    raw = os.read(self.fd, _RECORD_MAX)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        self.lost += 1  # the next read resumes at the oldest record left
                        continue
                    raise
                if not raw:
                    break  # a recording at its end
                if self.is_file:
                    self._recorded(raw, now, matched)
                else:
                    self._record(raw, now, matched)
            return matched

    def _recorded(self, chunk: bytes, now: float, matched: list[str]) -> None:
        """Records of a recorded log: whole lines; a partial last line is read again."""
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        os.lseek(self.fd, end + 1 - len(chunk), os.SEEK_CUR)
        for line in chunk[:end].split(b"\n"):
            if line and not line.startswith(b" "):
                self._record(line, now, matched)

    def _record(self, raw: bytes, now: float, matched: list[str]) -> None:
        rec = parse_record(raw)
        if rec is None:
            return
        _, seq, flags, message = rec
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.lost += seq - self.last_seq - 1
        self.last_seq = seq
        self.records += 1
        # 'c' starts a line printed in fragments and '+' continues it: match the whole line
        if flags == "+" and self.fragment:
            self.fragment += message
            return
        if self.fragment:
            self._match(self.fragment, now, matched)
            self.fragment = ""
        if flags == "c":
            self.fragment = message
            return
        self._match(message, now, matched)

    def matches(self, line: str) -> list[str]:
        """Names of the configured patterns one kernel-log line matches: what the live
        source counts, and what rule tests check."""
        if not self.screen.search(line):
            return []
        return match_line(self.patterns, line)

    offers_samples: ClassVar[bool] = True

    @classmethod
    def config_warnings(cls, config: KmsgConfig) -> list[str]:
        """Patterns a process could fire through its own name."""
        return [f"pattern {name!r} {why}" for name, rx in config.merged().items()
                if (why := spoof_risk(rx)) is not None]

    def check_sample(self, sample: dict[str, Any]) -> str | None:
        """A ``[[kmsg]]`` sample: a kernel-log ``line`` and the patterns it ``matches``."""
        line, want = sample.get("line"), sample.get("matches")
        if not isinstance(line, str) or not isinstance(want, list):
            raise SampleError((), "a [[kmsg]] sample needs `line` (text) and `matches` (list)")
        unknown = [str(w) for w in want if w not in self.patterns]
        if unknown:
            raise SampleError(("matches",), f"unknown pattern(s) {', '.join(unknown)} "
                                            f"(known: {', '.join(sorted(self.patterns))})")
        got = sorted(self.matches(line))
        if got == sorted(want):
            return None
        return f"    matches:\n      want: {sorted(want)}\n      got:  {got}\n    line: {line}"

    def _match(self, line: str, now: float, matched: list[str]) -> None:
        for name in self.matches(line):
            self.counts[name] += 1
            self.last_match[name] = now
            matched.append(name)

    def collect(self, now: float) -> dict[str, object]:
        self.drain(now)
        with self.lock:
            if self.fragment:  # a fragment no one continued by now is a whole line
                self._match(self.fragment, now, [])
                self.fragment = ""
            matches: Family = {labels_of({"pattern": n}): float(c)
                               for n, c in self.counts.items()}
            ages: Family = {labels_of({"pattern": n}): max(now - t, 0.0)
                            for n, t in self.last_match.items()}
            return {"kmsg.matches": matches, "kmsg.last_match_age_seconds": ages,
                    "kmsg.records": self.records, "kmsg.lost": self.lost}

    def follow(self, wake: Callable[[str], None]) -> bool:
        if self.thread is not None:
            return True
        self._open()

        def loop() -> None:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            while not self.stop.is_set():
                if not poller.poll(500):
                    continue
                matched = self.drain(time.monotonic())
                if matched:
                    wake("kmsg: " + ", ".join(sorted(set(matched))))
                self.stop.wait(_FOLLOW_COALESCE)

        self.thread = threading.Thread(target=loop, name="guardian-kmsg", daemon=True)
        self.thread.start()
        return True

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
            self.thread = None
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
