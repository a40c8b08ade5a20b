"""Kernel log patterns from /dev/kmsg.

The follower starts where the last guardian of this boot stopped reading (the sequence
number and boot id it keeps in the service's state directory, so lines logged while no
guardian ran - a restart, a rolling update - are read back, and none is counted twice);
without such a position, at the end of the ring buffer, or ``lookback`` before it (as
node-problem-detector's kernel monitor does), or at its start with ``replay``. It reads
every new record without blocking and counts matches of named regular expressions. It
reads records as Documentation/ABI/testing/dev-kmsg defines them:

- one read() returns one record, ``<facility*8+level>,<seq>,<usec>,<flag>[,...];<text>``
  then optional `` KEY=value`` dictionary lines; fields after the flag are ignored;
- the text escapes non-printable bytes and ``\\`` as ``\\xNN``; they are decoded (then
  UTF-8) before matching;
- by default only records of the kernel facility match: a write to /dev/kmsg from user
  space can never carry facility 0, so no process can fire a pattern by logging text;
- the flag is ``-``, or marks a fragment of a line. Kernels before 4.9 flag a line's first
  fragment ``c`` and the rest ``+``; since 4.9 a record flagged ``c`` continues the record
  before it and ``+`` never appears. Fragments are matched as they arrive, joined to their
  line, and a pattern counts once per line;
- ``EPIPE`` means records were overwritten before we read them: the next record's sequence
  number says how many (``kmsg.lost``, each counted once);
- ``EINVAL`` means the record does not fit the read buffer: the buffer grows. Older kernels
  keep the record for the next read (it is read then; one that fits no buffer is jumped
  over, so the reader never wedges on it); newer ones have moved past it already (then it
  is counted as skipped, not lost).

A record that cannot be read (no header, an unknown flag, text that is not UTF-8, longer
than the record limit) is counted in ``kmsg.skipped{reason}`` and skipped. With
:meth:`KmsgSource.follow`, a thread waits on the device and wakes the engine as soon as a
pattern matches, instead of at the next tick.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from guardian.core.atomicfile import write_json
from guardian.core.durations import Duration
from guardian.core.regexsafety import named_pattern_problem
from guardian.core.snapshot import Family, SignalSpec, labels_of
from guardian.hostio.host import Host, boot_id
from guardian.hostio.kmsg import RECORD_MAX, BadRecord, KmsgDevice, record_fields
from guardian.hostio.procfs import system_unit_of
from guardian.hostio.records import read_json
from guardian.plugin.contract import SampleError, Source
from guardian.sources.kernel_patterns import (
    DEFAULT_PATTERNS,
    TASK_UNITS,
    XID_ACTION_NAMES,
    xid_of,
)
from guardian.sources.kernel_usertext import mask, named_task, prepare, spoofable

# syslog facility numbers (RFC 5424, <sys/syslog.h>)
FACILITIES: dict[str, int] = {
    "kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6,
    "news": 7, "uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11,
    **{f"local{i}": 16 + i for i in range(8)},
}
SKIP_REASONS = ("header", "flags", "utf8", "too_long")
_READ_SIZE = RECORD_MAX      # the kernel's record limit (CONSOLE_EXT_LOG_MAX)
_READ_SIZE_MAX = 1 << 20     # a record that does not fit this is skipped
_LINE_MAX = 65536            # a line joined from fragments is cut here
_FOLLOW_COALESCE = 0.05      # at most ~20 wake-ups a second, however fast lines arrive
# a numbered back-reference or conditional: wrong once patterns share one expression
_NUMBERED_GROUP_REF = re.compile(r"(?<!\\)(?:\\\\)*(?:\\[1-9]|\(\?\(\d)")


class KmsgConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_patterns: bool = Field(True, description="include the shipped patterns")
    patterns: dict[str, str] = Field(
        default_factory=dict, description="name -> regular expression, added to the defaults")
    facilities: list[str] = Field(
        default_factory=lambda: ["kern"],
        description="facilities whose records may match (user space cannot write 'kern')")
    continuation: Literal["auto", "before-4.9", "4.9+"] = Field(
        "auto", description="what a record's 'c' flag means; auto: by the running kernel")
    replay: bool = Field(False, description="read the ring buffer from its start")
    lookback: Duration = Field(0.0, ge=0, description="with no read position kept for this "
                               "boot (a first start), also read the records of this long "
                               "before the start (node-problem-detector's lookback)")
    max_records_per_drain: int = Field(20_000, gt=0,
                                       description="bounds guardian's CPU under a log flood")

    @field_validator("patterns")
    @classmethod
    def _compile(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for name, rx in v.items():
            if (why := named_pattern_problem(name, rx)) is not None:
                raise ValueError(why)
            if _NUMBERED_GROUP_REF.search(rx):
                raise ValueError(f"pattern {name!r}: numbered group references change "
                                 "meaning when the patterns are combined; name the group: "
                                 "(?P<x>...)(?P=x)")
        # the live matcher screens each line with the patterns in one or two alternations
        try:
            with warnings.catch_warnings():
                # 3.10 only warns of a global flag past the start; 3.11 refuses it
                warnings.simplefilter("error", DeprecationWarning)
                _screens(_with_defaults(info.data.get("default_patterns", True), v))
        except DeprecationWarning:
            raise ValueError("the patterns do not combine into one expression: global "
                             "flags not at the start; use (?i:...) instead of (?i) and "
                             "unique group names") from None
        except (re.error, RecursionError, OverflowError) as exc:
            # a re.error's position would be one in the combined expression: leave it out
            why = exc.msg if isinstance(exc, re.error) else str(exc)
            raise ValueError(f"the patterns do not combine into one expression: {why}; "
                             "use (?i:...) instead of (?i) and unique group names") from None
        return v

    @field_validator("facilities")
    @classmethod
    def _known_facilities(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in FACILITIES]
        if unknown:
            raise ValueError(f"unknown facilit{'y' if len(unknown) == 1 else 'ies'} "
                             f"{', '.join(map(repr, unknown))} (known: "
                             f"{', '.join(FACILITIES)})")
        return v

    def merged(self) -> dict[str, str]:
        return _with_defaults(self.default_patterns, self.patterns)

    def compiled(self) -> dict[str, re.Pattern[str]]:
        return {n: re.compile(p) for n, p in self.merged().items()}


def _with_defaults(default_patterns: bool, patterns: dict[str, str]) -> dict[str, str]:
    """The patterns the source matches: the shipped ones (unless turned off), then the
    configured ones."""
    return {**(DEFAULT_PATTERNS if default_patterns else {}), **patterns}


def _screen(patterns: dict[str, str]) -> re.Pattern[str]:
    """One alternation of every pattern: only lines it hits run the named patterns."""
    return re.compile("|".join(f"(?:{p})" for p in patterns.values()) or r"(?!)")


def _branches(rx: str) -> list[str]:
    """The top-level alternatives of a regular expression (``|`` outside groups and
    character classes)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(rx):
        c = rx[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]" or rx[i - 1] == "["
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(rx[start:i])
            start = i + 1
        i += 1
    return [*out, rx[start:]]


def anchored(rx: str) -> bool:
    """Whether every alternative of ``rx`` starts with ``^`` (it can match only at the
    start of a line, so trying it elsewhere is wasted)."""
    return all(branch.startswith("^") for branch in _branches(rx))


def _screens(patterns: dict[str, str]) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
    """The screen for patterns anchored at the line's start (tried there only, with
    ``match``) and the one for the rest (``search``), if any."""
    at_start = {n: p for n, p in patterns.items() if anchored(p)}
    anywhere = {n: p for n, p in patterns.items() if n not in at_start}
    return _screen(at_start), (_screen(anywhere) if anywhere else None)


def match_line(patterns: dict[str, re.Pattern[str]], line: str) -> list[str]:
    """Names of the patterns that match one log line."""
    return [name for name, rx in patterns.items() if rx.search(line)]


def c_continues_previous(release: str) -> bool:
    """Whether a kernel of this release flags a continuation ``c`` (4.9 and later) rather
    than a line's first fragment (3.5 to 4.8, which flag the rest ``+``)."""
    found = re.match(r"(\d+)\.(\d+)", release)
    return found is None or (int(found[1]), int(found[2])) >= (4, 9)


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
        SignalSpec("kmsg.skipped", "records that could not be read, by reason (header, "
                   "flags, utf8, too_long)", "records", labels=("reason",), counter=True),
        SignalSpec("gpu.xid", "NVIDIA Xid errors since start, by GPU (PCI address), code "
                   "and the action NVIDIA's catalog gives it (restart_app, reset_gpu, "
                   "reboot, nvlink, drain_p2p, ignore, unknown)", "errors",
                   labels=("pci", "code", "action"), counter=True),
        SignalSpec("gpu.xid_by_action", "NVIDIA Xid errors since start, by the action "
                   "NVIDIA's catalog gives them (every action present from the start, so "
                   "the first Xid is an increase)", "errors", labels=("action",),
                   counter=True),
    )

    def __init__(self, host: Host, config: KmsgConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: KmsgConfig = self.config
        self.patterns = self.cfg.compiled()
        self.screen_start, self.screen_anywhere = _screens(self.cfg.merged())
        prepare()
        self.facilities = frozenset(FACILITIES[f] for f in self.cfg.facilities)
        self.c_continues = (c_continues_previous(os.uname().release)
                            if self.cfg.continuation == "auto"
                            else self.cfg.continuation == "4.9+")
        self.read_size = _READ_SIZE
        self.device: KmsgDevice | None = None
        self.is_file = False
        self.skip_long_line = False
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self.patterns, 0)
        self.xids: dict[tuple[str, int, str], int] = {}
        self.last_match: dict[str, float] = {}
        self.records = 0
        self.lost = 0
        self.skipped = dict.fromkeys(SKIP_REASONS, 0)
        self.last_seq: int | None = None
        self.too_big_at: int | None = None  # the buffer size a record did not fit
        self.gap_explained = 0  # records the next sequence gap holds that were counted
        self.line: str | None = None  # the line the last record belongs to
        self.line_matched: set[str] = set()  # patterns counted for that line
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.position: Path | None = None  # where the read position is kept
        self.saved_seq: int | None = None  # the sequence number last written there
        self.skip_through: int | None = None  # records up to it were read by a past run
        self.not_before: int | None = None  # usec since boot: older records are skipped
        # reading back (a kept position, a lookback): the first collection reports the
        # counts before it, so that what is read back is an increase, as live lines are
        self.baseline_pending = False

    def unavailable(self) -> str | None:
        try:
            self._open()
        except OSError as exc:
            return f"cannot open {self.host.kmsg}: {exc.strerror}"
        return None

    def _open(self) -> KmsgDevice:
        if self.device is None:
            device = self.device = KmsgDevice(self.host.kmsg)
            self.is_file = device.is_file
            if self.cfg.replay:
                return device
            if self.cfg.lookback and not self.is_file:
                # from the oldest record, skipping those logged before the window
                uptime = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
                self.not_before = uptime - int(self.cfg.lookback * 1e6)
                self.baseline_pending = True
                return device
            if self.is_file:
                device.to_end()
            elif (last := device.read_to_end()) is not None:
                self.last_seq = last
        return self.device

    def _boot_id(self) -> str:
        return boot_id(self.host.proc / "sys/kernel/random/boot_id")

    def keep_state(self, directory: Path) -> None:
        """Keep the read position in ``directory``; when one was kept for this boot, read
        on from it: what was logged while no guardian ran is read back (records the
        kernel overwrote meanwhile count as ``kmsg.lost``)."""
        with self.lock:
            self.position = directory / "kmsg-position.json"
            if self.device is None or self.is_file or self.cfg.replay or self.records:
                return
            try:
                saved = read_json(self.position)
                seq = int(saved["seq"])
                same_boot = saved["boot_id"] == self._boot_id() != ""
            except (OSError, ValueError, KeyError, TypeError):
                return  # none yet (a first start), or unreadable: start as without
            if not same_boot:
                return  # another boot's sequence numbers: they start over
            self.device.to_start()  # the oldest record the kernel still has
            self.skip_through, self.not_before = seq, None
            self.last_seq = self.saved_seq = seq
            self.baseline_pending = True

    def _save_position(self) -> None:
        """Write the sequence number read up to (under the lock), if it moved."""
        if self.position is None or self.last_seq is None or self.last_seq == self.saved_seq:
            return
        try:
            write_json(self.position, {"boot_id": self._boot_id(), "seq": self.last_seq})
            self.saved_seq = self.last_seq
        except OSError:
            pass  # read on; the next save may succeed (a restart rereads at most that)

    def _read_before(self, raw: bytes) -> bool:
        """Whether a record was read by a past run or is older than the lookback."""
        fields = raw.split(b",", 3)
        with contextlib.suppress(IndexError, ValueError):
            seq = int(fields[1])
            if (self.skip_through is not None and seq <= self.skip_through) or \
                    (self.not_before is not None and int(fields[2]) < self.not_before):
                if self.skip_through is None:
                    self.last_seq = seq  # read, and not to be read again
                return True
        self.skip_through = self.not_before = None  # the rest is newer
        return False

    def drain(self, now: float) -> list[str]:
        """Read what is new (bounded per call); the names of the patterns that matched."""
        with self.lock:
            device = self._open()
            matched: list[str] = []
            for _ in range(self.cfg.max_records_per_drain):
                try:
                    raw = device.read(self.read_size)
                except BlockingIOError:
                    self._after_too_big(None)
                    break
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        if self.last_seq is None:
                            self.lost += 1  # at least one; the next sequence cannot say
                        continue  # the next read resumes at the oldest record left
                    if exc.errno == errno.EINVAL:
                        self._too_big(device)
                        continue
                    raise
                if not raw:
                    break  # a recording at its end
                self._after_too_big(raw)
                if self.is_file:
                    if not self._recorded(device, raw, now, matched):
                        break
                elif (self.skip_through is None and self.not_before is None) \
                        or not self._read_before(raw):
                    self._record(raw, now, matched)
            if matched:  # counted: a restart must not count them again
                self._save_position()
            return matched

    def _too_big(self, device: KmsgDevice) -> None:
        """The record does not fit the buffer: read again with a larger one."""
        self.too_big_at = self.read_size
        if self.read_size < _READ_SIZE_MAX:
            self.read_size = min(self.read_size * 8, _READ_SIZE_MAX)
            return
        # no buffer takes it: jump past it (the sequence gap counts what was jumped over)
        self.too_big_at = None
        self.skipped["too_long"] += 1
        device.to_end()

    def _after_too_big(self, raw: bytes | None) -> None:
        """After an EINVAL: a kernel that kept the record hands it over now (longer than
        the buffer that failed); anything else means the kernel moved past it."""
        if self.too_big_at is None:
            return
        if raw is None or len(raw) <= self.too_big_at:
            self.skipped["too_long"] += 1
            self.gap_explained += 1
        self.too_big_at = None

    def _recorded(self, device: KmsgDevice, chunk: bytes, now: float,
                  matched: list[str]) -> bool:
        """Records of a recorded log, one per line; a partial last line is read again.
        False when the chunk held no whole line (the recording ends mid-line)."""
        start = 0
        if self.skip_long_line:
            start = chunk.find(b"\n") + 1
            if start == 0:
                return True  # still inside the over-long line
            self.skip_long_line = False
        end = chunk.rfind(b"\n")
        if end < start:
            if start == 0 and len(chunk) >= self.read_size:
                self.skipped["too_long"] += 1  # a line longer than any record
                self.skip_long_line = True
                return True
            device.move(start - len(chunk))
            return start > 0
        device.move(end + 1 - len(chunk))
        for line in chunk[start:end].split(b"\n"):
            if line and not line.startswith(b" "):
                self._record(line, now, matched)
        return True

    def _record(self, raw: bytes, now: float, matched: list[str]) -> None:
        self.records += 1
        try:
            prio, seq, flag, text = record_fields(raw)
        except BadRecord as bad:
            self.skipped[bad.reason] += 1
            return
        last = self.last_seq
        if last is not None and seq > last + 1:
            self.lost += max(seq - last - 1 - self.gap_explained, 0)
        self.gap_explained = 0
        self.last_seq = seq
        if prio >> 3 not in self.facilities:
            return
        if flag == b"-":
            line = self.line = text
            if self.line_matched:
                self.line_matched = set()
        else:
            if flag == b"+":
                self.c_continues = False  # only kernels before 4.9 print '+'
            continues = flag == b"+" or self.c_continues
            if continues and self.line is not None and len(self.line) < _LINE_MAX:
                line = self.line = self.line + text
            else:
                line = self.line = text
                if self.line_matched:
                    self.line_matched = set()
        masked = mask(line)
        # the line as printed: xid_of reads the driver's prefix and the end of the line
        # (Xid 154's recovery action, Xid 45's cause), which a process's name (pid=,
        # name=, before the driver's message) cannot reach; masked, a 45's end is gone
        if "gpu.xid" not in self.line_matched and (xid := xid_of(line)) is not None:
            self.line_matched.add("gpu.xid")
            self.xids[xid] = self.xids.get(xid, 0) + 1
        for name in self._matches(line, masked):
            if name not in self.line_matched:  # once per line, however many fragments
                self.line_matched.add(name)
                self.counts[name] += 1
                self.last_match[name] = now
                matched.append(name)

    def matches(self, line: str) -> list[str]:
        """Names of the configured patterns one kernel-log line matches: what the live
        source counts, and what rule tests check. Fields a process chose (its name, its
        file names: see :mod:`.kernel_usertext`) are masked first, so no pattern matches
        inside them."""
        return self._matches(line, mask(line))

    def _matches(self, line: str, masked: str) -> list[str]:
        if not self.screen_start.match(masked) and (
                self.screen_anywhere is None or not self.screen_anywhere.search(masked)):
            return []
        found = match_line(self.patterns, masked)
        if any(name in TASK_UNITS for name in found):
            found = [n for n in found if n not in TASK_UNITS or self._task_in(line, n)]
        return found

    def _task_in(self, line: str, pattern: str) -> bool:
        """Whether the task ``line`` names runs in one of the services ``pattern`` is
        about (a recorded line is never confirmed: its process is not this host's)."""
        pid = named_task(line)
        return pid is not None and self.device is not None and not self.is_file and \
            system_unit_of(self.host.proc, pid) in TASK_UNITS[pattern]

    offers_samples: ClassVar[bool] = True

    @classmethod
    def config_warnings(cls, config: KmsgConfig) -> list[str]:
        """Patterns an unprivileged process could fire through a line the kernel logs for
        it (a segfault, a trap, an audit record)."""
        return [f"pattern {name!r} {why}" for name, rx in config.merged().items()
                if (why := spoofable(rx)) is not None]

    @classmethod
    def sample_schema(cls) -> dict[str, Any]:
        return {"type": "object", "required": ["line", "matches"],
                "additionalProperties": False,
                "properties": {"line": {"type": "string", "description": "a kernel-log line"},
                               "matches": {"type": "array", "items": {"type": "string"},
                                           "description": "the patterns it must match"}}}

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

    def collect(self, now: float) -> dict[str, object]:
        if self.baseline_pending:
            self.baseline_pending = False  # the next drain reads back
        else:
            self.drain(now)
        with self.lock:
            self._save_position()
            matches: Family = {labels_of({"pattern": n}): float(c)
                               for n, c in self.counts.items()}
            ages: Family = {labels_of({"pattern": n}): max(now - t, 0.0)
                            for n, t in self.last_match.items()}
            skipped: Family = {labels_of({"reason": r}): float(c)
                               for r, c in self.skipped.items()}
            xids: Family = {labels_of({"pci": pci, "code": str(code), "action": action}):
                            float(n) for (pci, code, action), n in self.xids.items()}
            by_action = dict.fromkeys(XID_ACTION_NAMES, 0.0)
            for (_, _, action), n in self.xids.items():
                by_action[action] += n
            actions: Family = {labels_of({"action": a}): n for a, n in by_action.items()}
            return {"kmsg.matches": matches, "kmsg.last_match_age_seconds": ages,
                    "kmsg.records": self.records, "kmsg.lost": self.lost,
                    "kmsg.skipped": skipped, "gpu.xid": xids, "gpu.xid_by_action": actions}

    def follow(self, wake: Callable[[str], None]) -> bool:
        if self.thread is not None:
            return True
        device = self._open()

        def loop() -> None:
            poller = select.poll()
            poller.register(device.fileno(), select.POLLIN)
            while not self.stop.is_set():
                if self.baseline_pending:  # nothing is read back before the baseline
                    self.stop.wait(_FOLLOW_COALESCE)
                    continue
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
            self._save_position()
            if self.device is not None:
                self.device.close()
                self.device = None
