"""Script checks: programs run on their own interval, their exit status and output as
signals, in node-problem-detector's custom-plugin protocol.

The protocol (node-problem-detector's ``pkg/custompluginmonitor/plugin/plugin.go`` and
``types/types.go``): exit 0 is OK, 1 is NonOK (a problem), any other exit is Unknown; the
message is the program's stdout with surrounding white space trimmed, cut at
``max_output_length`` bytes (80 by default); at most 4 KiB of each stream is read.

Checks run on pools of worker threads, each pool scheduled by a thread of its own, never
on the loop's thread: ``collect`` only reads the latest results. A check names its pool
(``default`` unless set); each pool runs at most its ``concurrency`` checks at once, so
checks hanging to their timeout in one pool never delay those of another (as
node-problem-detector gives each monitor its own). A check still running
when it is due again is not started again. Each run is an argv list (no shell) in its own
session; at its timeout, and when it ends, its whole process group is killed.

A program another user could replace (owned by neither root nor guardian's user, writable
by group or others, or in a directory that is, up to ``/``) is never run, as rule files
that others could change are refused: it would run as root, in a dry run too. Such a
check is a start error, with why, and ``guardian check`` warns of it.

A check that did not answer has no value, never a problem and never OK: its program could
not start (missing, not executable; node-problem-detector's ``plugin.go``: "Error in
starting plugin", Unknown), its run timed out (Unknown there too), or it has not finished a
first run yet. Then ``script.status``, ``script.problem`` and ``script.result`` have no
value at all, for every check: a snapshot holds a family whole or not at all, and an empty
or partial family would read "no problem" for the check that did not answer. The failed
run is counted in ``script.errors`` and is a fault of the source naming the check and why
(``guardian.source_errors``, /healthz, ``run --once``); ``script.duration_seconds`` and
``script.age_seconds`` still say when each check last ran. A check that answered Unknown
itself (an exit other than 0 and 1) did answer: ``script.status`` 2, no ``script.problem``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from guardian.core.durations import PositiveDuration
from guardian.core.errors import in_words
from guardian.core.snapshot import Family, SignalSpec, label, labels_of
from guardian.hostio.host import Host
from guardian.hostio.programs import MINIMAL_ENV, Ran, cannot_run, find_program, run_bounded
from guardian.hostio.safefile import replaceable_by_others
from guardian.plugin.contract import Source
from guardian.sources.periodic import Periodic

log = logging.getLogger("guardian.sources.script")

OK, PROBLEM, UNKNOWN = 0, 1, 2  # node-problem-detector's OK, NonOK, Unknown
KEEP = 4096  # bytes of stdout and stderr read (node-problem-detector's maxCustomPluginBufferBytes)
CHECK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class Check(BaseModel):
    """One program to run."""

    model_config = ConfigDict(extra="forbid")
    argv: list[str] = Field(min_length=1, description="program and arguments; no shell. "
                            "The program is an absolute path or a name looked up in PATH")
    interval: PositiveDuration | None = Field(None, description="time between runs "
                                              "(default: the source's interval)")
    timeout: PositiveDuration | None = Field(None, description="killed, with its process "
                                             "group, after this (default: the source's)")
    env: dict[str, str] = Field(default_factory=dict, description="added to a minimal "
                                "environment (PATH, LANG)")
    cwd: str = Field("/", description="working directory")
    max_output_length: int | None = Field(None, ge=1, le=4096, description="bytes of "
                                          "trimmed stdout kept as the message (default: "
                                          "the source's)")
    pool: str = Field("default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$",
                      description="the pool of workers it runs on: checks hanging in one "
                      "pool never delay those of another")

    @field_validator("argv")
    @classmethod
    def _program(cls, argv: list[str]) -> list[str]:
        prog = argv[0]
        if not prog or ("/" in prog and not prog.startswith("/")):
            raise ValueError(f"the program {prog!r} must be an absolute path or a bare "
                             "name (a relative path would depend on guardian's directory)")
        return argv


class Pool(BaseModel):
    """A pool of workers running checks."""

    model_config = ConfigDict(extra="forbid")
    concurrency: int | None = Field(None, ge=1, le=32, description="checks of this pool "
                                    "run at once (default: the source's concurrency)")


class ScriptConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checks: dict[str, Check] = Field(default_factory=dict, description="checks by name "
                                     "(the `check` label)")
    interval: PositiveDuration = Field(30.0, description="default time between runs "
                                       "(node-problem-detector's invoke_interval)")
    timeout: PositiveDuration = Field(5.0, description="default timeout of a run")
    max_output_length: int = Field(80, ge=1, le=KEEP, description="bytes of trimmed "
                                   "stdout kept as the message (node-problem-detector's)")
    concurrency: int = Field(3, ge=1, le=32, description="checks of one pool run at "
                             "once (each pool has its own workers)")
    pools: dict[str, Pool] = Field(default_factory=dict, description="pools by name, "
                                   "each with its own concurrency (a pool a check names "
                                   "and not listed here has the source's)")

    @field_validator("checks")
    @classmethod
    def _names(cls, checks: dict[str, Check]) -> dict[str, Check]:
        for name in checks:
            if not CHECK_NAME.match(name):
                raise ValueError(f"check name {name!r}: letters, digits and _.:- only")
        return checks


@dataclass
class Result:
    """A check's last completed run."""

    at: float                 # monotonic time it ended
    status: int | None        # OK, PROBLEM, UNKNOWN; None: timed out or did not start
    message: str
    seconds: float
    error: str = ""


def replaceable(prog: str) -> str | None:
    """Why a check's program is refused (another user could replace it, or a directory on
    its way: it would run as root, dry run or not), or None. As rule files are refused."""
    found = prog if prog.startswith("/") else find_program(prog, MINIMAL_ENV["PATH"])
    if found is None or cannot_run(found) is not None:
        return None  # not there or not executable: a start error of its own
    why = replaceable_by_others(found)
    return None if why is None else f"another user could replace it: {why}"


def npd_status(exit_status: int) -> int:
    """node-problem-detector's status of an exit status: 0 OK, 1 NonOK, else Unknown."""
    return exit_status if exit_status in (OK, PROBLEM) else UNKNOWN


def npd_message(stdout: bytes, limit: int) -> str:
    """stdout trimmed of white space and cut at ``limit`` bytes, as node-problem-detector
    makes a condition's message (a character cut in two is dropped)."""
    return stdout.strip()[:limit].decode("utf-8", "ignore")


class ScriptSource(Source[ScriptConfig]):
    name: ClassVar[str] = "script"
    Config = ScriptConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("script.status", "the check's last result: 0 OK, 1 problem, 2 unknown "
                   "(exit 0, 1, other; node-problem-detector's protocol); no value (as "
                   "script.problem and script.result) while any check has timed out, "
                   "could not start or has not run yet", labels=("check",)),
        SignalSpec("script.problem", "1 when the check's last run found a problem (exit 1), "
                   "0 when OK; no value when unknown. Labelled with its message (trimmed "
                   "stdout cut at max_output_length): one member per check",
                   labels=("check", "message")),
        SignalSpec("script.result", "the check's status (as script.status) labelled with "
                   "its message: one member per check", labels=("check", "message")),
        SignalSpec("script.duration_seconds", "how long the check's last run took",
                   "seconds", labels=("check",)),
        SignalSpec("script.age_seconds", "time since the check's last run ended", "seconds",
                   labels=("check",)),
        SignalSpec("script.errors", "runs that timed out or could not start", "runs",
                   labels=("check", "reason"), counter=True),
    )

    @classmethod
    def config_warnings(cls, config: Any) -> list[str]:
        """A check whose program is not there or not executable (node-problem-detector
        refuses to start over a missing plugin; guardian starts, and the check is unknown)."""
        out = []
        for name, check in getattr(config, "checks", {}).items():
            prog = check.argv[0]
            if (why := cannot_run(prog)) is not None:
                out.append(f"check {name}: {prog} {why}")
            elif (why := replaceable(prog)) is not None:
                out.append(f"check {name}: not run: {why}")
        return out

    def __init__(self, host: Host, config: ScriptConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: ScriptConfig = self.config
        self.results: dict[str, Result] = {}
        self.errors: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        by_pool: dict[str, dict[str, float]] = {}
        for n, c in self.cfg.checks.items():
            by_pool.setdefault(c.pool, {})[n] = c.interval or self.cfg.interval
        self.pools = {
            pool: Periodic(intervals, self._run, (p.concurrency if (p := self.cfg.pools.get(
                pool)) and p.concurrency else self.cfg.concurrency),
                f"guardian-script-{pool}"[:40])
            for pool, intervals in sorted(by_pool.items())}
        self._wake: Callable[[str], None] | None = None
        self._faults: list[str] = []

    def unconfigured(self) -> str | None:
        # no checks: a rule over script.* watches nothing, and says so (blind, by the
        # operator's choice), never `ok`
        return None if self.cfg.checks else "no checks in [sources.script]"

    def unavailable(self) -> str | None:
        return self.unconfigured()  # a caller that asks only this learns it too

    def follow(self, wake: Callable[[str], None]) -> bool:
        """Start the checks now, and wake the loop when one's status changes."""
        self._wake = wake
        for periodic in self.pools.values():
            periodic.start()
        return bool(self.cfg.checks)

    def collect(self, now: float) -> dict[str, object]:
        for periodic in self.pools.values():
            periodic.start()
        status: Family = {}
        problem: Family = {}
        result: Family = {}
        seconds: Family = {}
        age: Family = {}
        mono = time.monotonic()
        with self._lock:
            results = dict(self.results)
            errors = dict(self.errors)
        self._faults = []
        # a configured check that has no answer: not run yet, or its last run timed out
        # or could not start
        blind = any(name not in results for name in self.cfg.checks)
        for name, r in sorted(results.items()):
            key = label("check", name)
            seconds[key] = r.seconds
            age[key] = max(0.0, mono - r.at)
            if r.status is None:
                self._faults.append(f"check {name}: {r.error}")
                blind = True
                continue
            status[key] = float(r.status)
            said = labels_of({"check": name, "message": r.message})
            result[said] = float(r.status)
            if r.status != UNKNOWN:
                problem[said] = float(r.status == PROBLEM)
        return {"script.status": None if blind else status,
                "script.problem": None if blind else problem,
                "script.result": None if blind else result,
                "script.duration_seconds": seconds, "script.age_seconds": age,
                "script.errors": {labels_of({"check": c, "reason": why}): float(n)
                                  for (c, why), n in errors.items()}}

    def faults(self) -> list[str]:
        return list(self._faults)

    def close(self) -> None:
        """Stop scheduling and kill the checks still running (their process groups)."""
        for periodic in self.pools.values():
            periodic.close()

    def _run(self, name: str) -> None:
        check = self.cfg.checks[name]
        timeout = check.timeout or self.cfg.timeout
        try:
            if (why := replaceable(check.argv[0])) is not None:
                ran = Ran(None, b"", b"", 0.0, error=f"not run: {why}")
            else:
                ran = run_bounded(check.argv, timeout, KEEP, {**MINIMAL_ENV, **check.env},
                                  check.cwd, stop=self.pools[check.pool].stop)
        except Exception as exc:  # a worker must never die with the check marked running
            ran = Ran(None, b"", b"", 0.0, error=in_words(exc))
        self.record(name, ran)

    def record(self, name: str, ran: Ran) -> None:
        """Keep how a run of check ``name`` ended as its latest result (what a worker does
        after each run; a test feeds runs here without starting programs)."""
        check = self.cfg.checks[name]
        result = self._result(ran, check.max_output_length or self.cfg.max_output_length)
        with self._lock:
            before = self.results.get(name)
            self.results[name] = result
            if result.status is None:
                why = "timeout" if ran.timed_out else "start"
                self.errors[(name, why)] = self.errors.get((name, why), 0) + 1
        if result.status is None or result.status != OK:
            log.debug("check %s: %s %s", name, result.status, result.error or result.message)
        changed = before is None or before.status != result.status
        if changed and self._wake is not None:
            self._wake(f"check {name}")
        if ran.stderr and changed:
            log.info("check %s said on stderr: %s", name,
                     ran.stderr.decode("utf-8", "replace").strip()[:500])

    def _result(self, ran: Ran, limit: int) -> Result:
        now = time.monotonic()
        if ran.status is None:
            return Result(now, None, "", ran.seconds, ran.error)
        return Result(now, npd_status(ran.status), npd_message(ran.stdout, limit),
                      ran.seconds)
