"""Patterns over the systemd journal, read through systemd's own reader.

A child ``journalctl --follow --output=json`` (an argv list, never a shell; scoped with
``-u UNIT`` per configured unit, or ``-D DIR`` for another journal directory) is read
without blocking by a thread that matches each entry's ``MESSAGE`` against named regular
expressions and wakes the loop when one matches. The journal's cursor of the last entry
read is kept in the service's state directory, and a restart reads on after it
(``--after-cursor``): entries logged while no guardian ran are read once. Without a kept
cursor it starts at the journal's end.

Bounds: at most ``max_entries_per_tick`` entries are matched between two collections; the
rest of a flood is read (so journalctl never blocks and the cursor moves on) but only
counted, in ``journal.skipped{reason="flood"}``. A line longer than ``max_line_bytes`` is
skipped (``reason="too_long"``), one that is not a JSON object ``reason="json"``.

Trust: an entry is matched only when journald's ``_UID`` (set from the sender's
credentials, never from what it sends) is one of ``uids`` (default root only): any user can
``logger 'PLEG is not healthy'``; the rest are counted as ``reason="uid"``. Root is not
enough: a root daemon logs what others chose (``ssh -l 'PLEG is not healthy' host`` makes
sshd, uid 0, log that user name), so each pattern matches only entries of the units it is
meant for, its own ``units`` or the source's (``kubelet.service`` and
``containerd.service`` unless set), by journald's ``_SYSTEMD_UNIT`` (the sender's cgroup,
which no unprivileged process can leave for a system unit's) or, in PID 1's own messages
about a unit, ``UNIT``; never by ``_COMM`` (a setuid program run through a link named
``kubelet`` is called kubelet) nor ``SYSLOG_IDENTIFIER`` (the sender's own). Other
units' entries are ``reason="unit"``. An entry that carries ``CONTAINER_ID``,
``CONTAINER_ID_FULL`` or ``CONTAINER_NAME`` is a container's own output relayed by its
runtime (docker's and podman's journald log driver, uid 0, in the runtime's unit) and
never matches (``reason="container"``). These checks read the raw line before it is parsed
and before the per-tick budget: other senders' lines never spend it. Without journald (no
socket and no journal directory under the host root) the source says so instead of
reading healthy zeros.

A journalctl that exits (or cannot start) is started again after a backoff (1 s doubling
to a minute); until it runs the source gives no value, which the collector counts in
``guardian.source_errors{source="journal"}``: a missing reader never reads as a quiet log.
A journalctl that fails before any line is tried without ``--output-fields`` (before
systemd 236), then from the journal's end (a kept cursor it cannot seek to).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from guardian.core.atomicfile import write_json
from guardian.core.regexsafety import named_pattern_problem
from guardian.core.snapshot import Family, SignalSpec, labels_of
from guardian.hostio.host import Host, exists, is_dir
from guardian.hostio.programs import read_pipe
from guardian.hostio.records import read_json
from guardian.plugin.contract import SampleError, Source
from guardian.sources.journal_patterns import PATTERN_SETS

SKIP_REASONS = ("flood", "too_long", "json", "uid", "unit", "container")
_COALESCE = 0.05           # at most ~20 wake-ups a second
_BACKOFF_FIRST, _BACKOFF_MAX = 1.0, 60.0
_STABLE = 30.0             # a child that ran this long resets the backoff
_RELAYED = ("CONTAINER_ID", "CONTAINER_ID_FULL", "CONTAINER_NAME")
_FIELDS = "MESSAGE,_SYSTEMD_UNIT,UNIT,_SYSTEMD_USER_UNIT,_PID,_UID," + ",".join(_RELAYED)
DEFAULT_UNITS = ("kubelet.service", "containerd.service")
_JOURNALD = ("run/systemd/journal/socket", "run/log/journal", "var/log/journal")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@*?\[\]-]+$")


def _check_units(v: list[str]) -> list[str]:
    for unit in v:
        if not _UNIT_NAME.match(unit) or unit.startswith("-"):
            raise ValueError(f"{unit!r} is not a unit name")
    return v


class JournalPattern(BaseModel):
    """A pattern with the units whose entries it is meant for."""

    model_config = ConfigDict(extra="forbid")

    regex: str = Field(description="regular expression over an entry's MESSAGE")
    units: list[str] = Field(
        default_factory=list, description="match only entries of these units (journald's "
        "_SYSTEMD_UNIT, or UNIT in PID 1's own messages); empty: the source's `units`")

    _units = field_validator("units")(_check_units)


class JournalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patterns: dict[str, str | JournalPattern] = Field(
        default_factory=dict, description="name -> regular expression over an entry's "
        "MESSAGE, or a table {regex, units}; with none (and nothing included) the source "
        "does not run")
    include: list[str] = Field(
        default_factory=list, description="pattern sets guardian ships, by name, each "
        "pattern scoped to its own units (" + ", ".join(
            f"{n}: {', '.join(sorted(s))}" for n, s in PATTERN_SETS.items()) +
        "); a pattern of `patterns` with the same name replaces the shipped one")
    units: list[str] = Field(
        default_factory=lambda: list(DEFAULT_UNITS), description="the units a pattern "
        "without its own `units` matches entries of (journald's _SYSTEMD_UNIT; systemd's "
        "own messages about a unit count as the unit's); journalctl reads only the units "
        "of the patterns (-u). Empty: every pattern names its own")
    journalctl: list[str] = Field(
        default_factory=lambda: ["journalctl"], min_length=1,
        description="argv prefix of systemd's reader (e.g. with nsenter for the host's)")
    directory: str | None = Field(None, description="read this journal directory "
                                  "(journalctl -D) instead of the system journal")
    max_entries_per_tick: int = Field(5_000, gt=0, description="entries matched between "
                                      "two collections; the rest of a flood is counted")
    max_line_bytes: int = Field(65_536, gt=0, description="a longer entry is skipped")
    uids: list[int] = Field(
        default_factory=lambda: [0], description="match only entries whose sender's uid "
        "(journald's _UID) is one of these; others are counted as skipped (reason uid); "
        "empty: every sender")

    @field_validator("patterns")
    @classmethod
    def _compile(cls, v: dict[str, str | JournalPattern]
                 ) -> dict[str, str | JournalPattern]:
        for name, rx in v.items():
            text = rx if isinstance(rx, str) else rx.regex
            if (why := named_pattern_problem(name, text)) is not None:
                raise ValueError(why)
        return v

    _units = field_validator("units")(_check_units)

    @field_validator("include")
    @classmethod
    def _known_sets(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in PATTERN_SETS:
                raise ValueError(f"no shipped pattern set {name!r} (there are: "
                                 f"{', '.join(sorted(PATTERN_SETS))})")
        return v

    @model_validator(mode="after")
    def _scoped(self) -> JournalConfig:
        for name, rx in self.patterns.items():
            if not self.units and (isinstance(rx, str) or not rx.units):
                raise ValueError(
                    f"pattern {name!r} names no units and `units` is empty: it would match "
                    f"any root process's entry, and root daemons log what others chose "
                    f"(sshd logs the user name a stranger tried); give it "
                    f"{{ regex = ..., units = [...] }} or set `units`")
        return self

    def scoped(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Each pattern's regex and the units whose entries it may match: the included
        sets' patterns, then ``patterns`` (which replace a shipped one of their name)."""
        shipped = {name: (p.regex, p.units) for s in self.include
                   for name, p in PATTERN_SETS[s].items()}
        return shipped | {name: (rx, tuple(self.units)) if isinstance(rx, str)
                          else (rx.regex, tuple(rx.units or self.units))
                          for name, rx in self.patterns.items()}

    def all_units(self) -> list[str]:
        """The units journalctl reads: every pattern's, in order, once."""
        return list(dict.fromkeys(u for _, units in self.scoped().values() for u in units))


def entry_unit(entry: dict[str, Any]) -> str:
    """The unit an entry is about: the unit that logged it (journald's ``_SYSTEMD_UNIT``,
    or ``_SYSTEMD_USER_UNIT``), or for systemd's own messages about a unit (``_PID`` 1)
    the unit named in ``UNIT``, a field any other sender can set too."""
    about = entry.get("UNIT")
    if entry.get("_PID") == "1" and isinstance(about, str) and about:
        return about
    for key in ("_SYSTEMD_UNIT", "_SYSTEMD_USER_UNIT"):
        own = entry.get(key)
        if isinstance(own, str) and own:
            return own
    return ""


def sender_unit(entry: dict[str, Any]) -> str:
    """The system unit whose entry this is, as far as the sender could not choose it:
    journald's ``_SYSTEMD_UNIT`` (from the sender's cgroup), or for PID 1's own messages
    the unit named in ``UNIT``; "" if neither."""
    about = entry.get("UNIT")
    if entry.get("_PID") == "1" and isinstance(about, str) and about:
        return about
    own = entry.get("_SYSTEMD_UNIT")
    return own if isinstance(own, str) else ""


def _raw_field(raw: bytes, key: bytes) -> str | None:
    """A top-level string field of journalctl's JSON line, read without parsing it: a key
    is a quote after ``{`` or ``,`` (and blanks), which inside a JSON string is always
    escaped; a value with escapes, an array (a field with several values) or none: None."""
    m = _raw_key(key, rb'\s*"([^"\\]*)"').search(raw)
    return m.group(1).decode("ascii", "replace") if m else None


def _raw_has(raw: bytes, key: bytes) -> bool:
    return _raw_key(key, b"").search(raw) is not None


@functools.lru_cache(maxsize=32)
def _raw_key(key: bytes, value: bytes) -> re.Pattern[bytes]:
    return re.compile(rb'[{,]\s*"' + re.escape(key) + rb'"\s*:' + value)


def entry_uid(entry: dict[str, Any]) -> int | None:
    """The sender's uid as journald recorded it, or None (a kernel message has none)."""
    uid = entry.get("_UID")
    if isinstance(uid, str) and uid.isdigit():
        return int(uid)
    return None


def entry_message(entry: dict[str, Any]) -> str:
    """An entry's MESSAGE as text: journalctl's JSON gives a string, or an array of byte
    values for one that is not valid UTF-8, or null for one too large to show."""
    msg = entry.get("MESSAGE")
    if isinstance(msg, str):
        return msg
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        return bytes(msg).decode("utf-8", "replace")
    return ""


class JournalSource(Source[JournalConfig]):
    name: ClassVar[str] = "journal"
    Config = JournalConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("journal.matches", "journal entries whose MESSAGE matched a pattern, "
                   "since start, by pattern and unit (each configured unit from zero)",
                   "entries", labels=("pattern", "unit"), counter=True),
        SignalSpec("journal.lines", "journal entries read since start", "entries",
                   counter=True),
        SignalSpec("journal.skipped", "entries read but not matched, by reason (flood, "
                   "too_long, json, uid, unit: another unit's, container: a container's "
                   "output its runtime relayed)", "entries", labels=("reason",),
                   counter=True),
        SignalSpec("journal.restarts", "times journalctl was started again after it "
                   "exited", "restarts", counter=True),
    )

    def __init__(self, host: Host, config: JournalConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: JournalConfig = self.config
        scoped = self.cfg.scoped()
        self.patterns = {n: re.compile(rx) for n, (rx, _) in scoped.items()}
        self.units = {n: units for n, (_, units) in scoped.items()}
        self.all_units = self.cfg.all_units()
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {
            (p, u): 0 for p, units in self.units.items() for u in units}
        self.lines = 0
        self.skipped = dict.fromkeys(SKIP_REASONS, 0)
        self.restarts = 0
        self.tick_entries = 0
        self.cursor: str | None = None
        self.last_skipped: bytes | None = None  # the newest entry only counted
        self.saved_cursor: str | None = None
        self.position: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.failure: str | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.wake: Callable[[str], None] | None = None
        self.pending: set[str] = set()
        self.output_fields = True  # journalctl before systemd 236 has no --output-fields
        self.empty_failures = 0  # runs in a row that failed before any line

    def unconfigured(self) -> str | None:
        return None if self.patterns else "no patterns or include in [sources.journal]"

    def unavailable(self) -> str | None:
        if (lacks := self.unconfigured()) is not None:
            return lacks  # a caller that asks only this learns it too
        root = self.host.root
        if self.cfg.directory:
            if not is_dir(root / self.cfg.directory.lstrip("/")):
                return f"journal directory {self.cfg.directory} does not exist"
        elif not any(exists(root / p) for p in _JOURNALD):
            return ("no journald on this host (none of /" + ", /".join(_JOURNALD) +
                    " exists)")
        return None

    def keep_state(self, directory: Path) -> None:
        """Keep the journal cursor in ``directory``; a kept one is read on from."""
        with self.lock:
            self.position = directory / "journal-cursor.json"
            if self.thread is not None or self.cursor is not None:
                return
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                saved = read_json(self.position)
                if saved.get("argv") == self._scope() and isinstance(saved["cursor"], str):
                    self.cursor = self.saved_cursor = saved["cursor"]

    def _scope(self) -> list[str]:
        """What the kept cursor is a cursor of: another directory's is not this one's."""
        return [self.cfg.directory or ""]

    def argv(self) -> list[str]:
        """The journalctl command line: from after the kept cursor, or the end."""
        argv = [*self.cfg.journalctl, "--follow", "--output=json", "--no-pager"]
        if self.output_fields:
            argv.append(f"--output-fields={_FIELDS}")
        if self.cfg.directory:
            argv.append(f"--directory={self.cfg.directory}")
        argv += [f"--unit={u}" for u in self.all_units]
        argv.append(f"--after-cursor={self.cursor}" if self.cursor else "--lines=0")
        return argv

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        try:
            proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            self.failure = f"cannot run {self.cfg.journalctl[0]}: {exc.strerror or exc}"
            return None
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        self.failure = None
        return proc

    def _start(self) -> None:
        if self.thread is not None:
            return
        with self.lock:
            self._cursor_of_skipped()
            self.proc = self._spawn()
        self.thread = threading.Thread(target=self._run, name="guardian-journal",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        backoff = _BACKOFF_FIRST
        while not self.stop.is_set():
            proc = self.proc
            if proc is not None:
                started, lines = time.monotonic(), self.lines
                self._pump(proc)
                rc = _end(proc)
                with self.lock:
                    self.proc = None
                    if not self.stop.is_set():
                        self.failure = f"journalctl exited with status {rc}"
                        self._after_failure(rc, self.lines > lines)
                if time.monotonic() - started > _STABLE:
                    backoff = _BACKOFF_FIRST
            if self.stop.wait(backoff):
                break
            backoff = min(backoff * 2, _BACKOFF_MAX)
            with self.lock:
                self._cursor_of_skipped()
                self.proc = self._spawn()
                if self.proc is not None:
                    self.restarts += 1

    def _after_failure(self, rc: int, read: bool) -> None:
        """A run that failed before any line may have been refused its arguments: try
        without ``--output-fields`` (older journalctl), then from the journal's end (a
        kept cursor journalctl cannot seek to), then both again (under the lock)."""
        if read or not rc:
            self.empty_failures = 0
            return
        self.empty_failures += 1
        self.output_fields = self.empty_failures % 2 == 0
        if self.empty_failures == 2 and self.cursor is not None:
            self.cursor = self.last_skipped = None

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        """Read the child's lines until it exits or the source stops."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        buf = b""
        too_long = False
        while not self.stop.is_set():
            if not poller.poll(500):
                continue
            try:
                chunk = read_pipe(fd)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not chunk:
                return
            lines = (buf + chunk).split(b"\n")
            buf = lines.pop()
            if len(buf) > self.cfg.max_line_bytes:
                buf, too_long = b"", True
            with self.lock:
                for raw in lines:
                    if too_long:  # the end of a line that was cut: skip it whole
                        too_long = False
                        self.lines += 1
                        self.skipped["too_long"] += 1
                        continue
                    if raw:
                        self._entry(raw)
            self._maybe_wake()

    def _unit_wanted(self, unit: str, name: str | None = None) -> bool:
        """Whether any pattern (or pattern ``name``) matches entries of ``unit``."""
        units = self.all_units if name is None else self.units[name]
        return bool(unit) and any(fnmatch.fnmatchcase(unit, u) for u in units)

    def _screen(self, raw: bytes) -> str | None:
        """Why an entry can match no pattern, read off the raw line (no parse, no budget
        spent), or None. Fails closed: a field it cannot read is no match."""
        if self.cfg.uids:
            uid = _raw_field(raw, b"_UID")
            if uid is None or not uid.isdigit() or int(uid) not in self.cfg.uids:
                return "uid"
        if any(_raw_has(raw, k.encode()) for k in _RELAYED):
            return "container"
        about = _raw_field(raw, b"UNIT") if _raw_field(raw, b"_PID") == "1" else None
        if not self._unit_wanted(about or _raw_field(raw, b"_SYSTEMD_UNIT") or ""):
            return "unit"
        return None

    def _entry(self, raw: bytes) -> None:
        """One JSON line (under the lock)."""
        self.lines += 1
        if len(raw) > self.cfg.max_line_bytes:
            self.skipped["too_long"] += 1
            return
        if (why := self._screen(raw)) is not None:
            self.skipped[why] += 1
            self.last_skipped = raw  # its cursor is read only when it is needed
            return
        if self.tick_entries >= self.cfg.max_entries_per_tick:
            self.skipped["flood"] += 1
            self.last_skipped = raw  # its cursor is read only when it is needed
            return
        self.tick_entries += 1
        try:
            entry = json.loads(raw)
        except ValueError:
            self.skipped["json"] += 1
            return
        if not isinstance(entry, dict):
            self.skipped["json"] += 1
            return
        cursor = entry.get("__CURSOR")
        if isinstance(cursor, str):
            self.cursor, self.last_skipped = cursor, None
        if self.cfg.uids and entry_uid(entry) not in self.cfg.uids:
            self.skipped["uid"] += 1
            return
        if any(k in entry for k in _RELAYED):
            self.skipped["container"] += 1
            return
        sender = sender_unit(entry)
        if not self._unit_wanted(sender):
            self.skipped["unit"] += 1
            return
        message = entry_message(entry)
        unit = entry_unit(entry)
        for name, rx in self.patterns.items():
            if self._unit_wanted(sender, name) and rx.search(message):
                self.counts[(name, unit)] = self.counts.get((name, unit), 0) + 1
                self.pending.add(name)

    def _cursor_of_skipped(self) -> None:
        """Move the cursor past the entries only counted (under the lock)."""
        if self.last_skipped is None:
            return
        with contextlib.suppress(ValueError, AttributeError):
            cursor = json.loads(self.last_skipped).get("__CURSOR")
            if isinstance(cursor, str):
                self.cursor = cursor
        self.last_skipped = None

    def _maybe_wake(self) -> None:
        with self.lock:
            names, self.pending = self.pending, set()
        if names and self.wake is not None:
            self.wake("journal: " + ", ".join(sorted(names)))
            self.stop.wait(_COALESCE)

    def _save(self) -> None:
        """Write the cursor read up to (under the lock), if it moved."""
        self._cursor_of_skipped()
        if self.position is None or self.cursor is None or self.cursor == self.saved_cursor:
            return
        try:
            write_json(self.position, {"argv": self._scope(), "cursor": self.cursor})
            self.saved_cursor = self.cursor
        except OSError:
            pass  # read on; a restart rereads at most what was read since the last save

    def follow(self, wake: Callable[[str], None]) -> bool:
        self.wake = wake
        self._start()
        return True

    def collect(self, now: float) -> dict[str, object]:
        self._start()
        with self.lock:
            self.tick_entries = 0
            self._save()
            if self.proc is None:
                raise OSError(self.failure or "journalctl is not running")
            matches: Family = {labels_of({"pattern": p, "unit": u}): float(n)
                               for (p, u), n in self.counts.items()}
            skipped: Family = {labels_of({"reason": r}): float(n)
                               for r, n in self.skipped.items()}
            return {"journal.matches": matches, "journal.lines": self.lines,
                    "journal.skipped": skipped, "journal.restarts": self.restarts}

    offers_samples: ClassVar[bool] = True

    @classmethod
    def sample_schema(cls) -> dict[str, Any]:
        return {"type": "object", "required": ["message", "matches"],
                "additionalProperties": False,
                "properties": {"message": {"type": "string",
                                           "description": "a journal entry's MESSAGE"},
                               "unit": {"type": "string", "description": "the unit that "
                                        "logged it (_SYSTEMD_UNIT): a pattern matches only "
                                        "entries of its units; unset, any unit"},
                               "matches": {"type": "array", "items": {"type": "string"},
                                           "description": "the patterns it must match"}}}

    def check_sample(self, sample: dict[str, Any]) -> str | None:
        """A ``[[journal]]`` sample: a ``message``, optionally the ``unit`` that logged
        it, and the patterns it ``matches``: the configured ones, and every shipped set's
        (:mod:`.journal_patterns`) whether or not it is included."""
        msg, want, unit = sample.get("message"), sample.get("matches"), sample.get("unit")
        if not isinstance(msg, str) or not isinstance(want, list) or not isinstance(
                unit, str | None):
            raise SampleError((), "a [[journal]] sample needs `message` (text) and "
                                  "`matches` (list), and `unit` is text")
        every = JournalConfig(include=list(PATTERN_SETS)).scoped() | self.cfg.scoped()
        unknown = [str(w) for w in want if w not in every]
        if unknown:
            raise SampleError(("matches",), f"unknown pattern(s) {', '.join(unknown)}")
        got = sorted(n for n, (rx, units) in every.items()
                     if (unit is None or any(fnmatch.fnmatchcase(unit, u) for u in units))
                     and _compiled(rx).search(msg))
        if got == sorted(want):
            return None
        return f"    matches:\n      want: {sorted(want)}\n      got:  {got}\n    message: {msg}"

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            proc = self.proc
        if proc is not None:
            _end(proc)
        if self.thread is not None:
            self.thread.join(timeout=2)
            self.thread = None
        with self.lock:
            self._save()


@functools.lru_cache(maxsize=256)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _end(proc: subprocess.Popen[bytes]) -> int:
    """Stop a child (its whole session: a wrapper's children too) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode
