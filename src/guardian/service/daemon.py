"""The daemon behind `guardian run`: a tick loop woken early by event sources, speaking
the systemd notify protocol (READY, STATUS, WATCHDOG from the loop itself, RELOADING,
STOPPING) and reloading rules on change or SIGHUP. Each tick is a transaction
(`runtime/tick.py`); what the service tells of it, the witness says (`witness.py`)."""

from __future__ import annotations

import logging
import signal
import time
from types import FrameType

from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.hostio.flight import FlightRecorder
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import Registry, default_registry
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.executor import Executed
from guardian.runtime.metrics import Metrics
from guardian.runtime.operate import Operations
from guardian.runtime.tick import Decided, TickTransaction, restore
from guardian.service.components import NotBuilt, ServiceOptions, build_components, build_engine
from guardian.service.instancelock import InstanceLock, InstanceLocked, LockUnavailable
from guardian.service.notify import Notifier
from guardian.service.rulewatch import RuleWatcher, refuse_unsafe
from guardian.service.wakeup import Wakeup
from guardian.service.witness import Witness

__all__ = ["Daemon", "ServiceOptions"]  # the options are components', named here too

log = logging.getLogger("guardian.service")

RELOAD_SETTLE = 0.3  # an editor writes in bursts: reload once they are done


class Daemon:
    """One guardian service process."""

    def __init__(self, opts: ServiceOptions, config: Config,
                 registry: Registry | None = None, notifier: Notifier | None = None) -> None:
        self.opts = opts
        self.config = config
        self.registry = registry or default_registry()
        self.notifier = notifier or Notifier()
        self.metrics = Metrics()
        self.wake = Wakeup()  # set by threads, and by signals whichever thread takes them
        self.lock = InstanceLock(opts.state_path.parent) if opts.state_path else None
        self.stop_requested = False
        self.reload_reason = ""
        self.reload_at = 0.0
        self.collector: Collector | None = None
        self.flight: FlightRecorder | None = None  # [evidence.flight], started when ready
        self.transaction: TickTransaction | None = None  # engine, executor, state file
        self.rule_watch = RuleWatcher(opts.rules, self.request_reload)
        self.ready = False
        self.next_ping = 0.0
        self.operations = Operations(config, opts.state_path)  # holds, windows (issue 31)
        self.witness = Witness(opts, self.registry, self.metrics)  # what the service tells

    # -- control from signal handlers and watchers --------------------------------------
    def request_stop(self, *_: object) -> None:
        self.stop_requested = True
        self.wake.set()

    def request_reload(self, reason: str) -> None:
        if not self.reload_reason:
            self.reload_at = time.monotonic() + RELOAD_SETTLE
        self.reload_reason = self.reload_reason or reason
        self.wake.set()

    def _on_sighup(self, signum: int, frame: FrameType | None) -> None:
        self.request_reload("SIGHUP")

    # -- life cycle ------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop, SIGHUP reloads. The process's own entry point calls
        this (the CLI does); an agent that embeds the daemon keeps its own handlers."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self._on_sighup)
        self.wake.wake_on_signals()

    def run(self) -> ExitCode:
        """Start, loop until stopped (:meth:`request_stop`), stop. The exit code."""
        code = self.start()
        if code:
            self._abandon()
            return code
        try:
            self.loop()
        finally:
            self.shutdown()
        return ExitCode.OK

    def load(self) -> Ruleset:
        if self.opts.require_root_owned_rules:
            # the config can name programs to run (e.g. the systemctl argv): same rule
            refuse_unsafe([*self.opts.rules, *([self.config.path] if self.config.path else []),
                           *self.config.dropins])
        return load_rules(self.opts.rules, self.registry)

    def _abandon(self) -> None:
        """Release what a start took (also what one that failed part-way took)."""
        if self.flight is not None:
            self.flight.stop()
        if self.collector is not None:
            self.collector.close()
        self.metrics.close()
        if self.lock is not None:
            self.lock.release()
        self.wake.close()

    def _not_started(self, why: str) -> None:
        log.error("not started: %s", why)
        self.notifier.status(f"not started: {why}")

    def start(self) -> ExitCode:
        lock_fault = ""  # why the state directory's lock is not held (disk faults)
        if self.lock is not None:
            try:
                self.lock.acquire()
            except LockUnavailable as exc:  # the disk, not the setup: run, acting on nothing
                log.error("%s; running, and acting on nothing until the lock is taken", exc)
                lock_fault = str(exc)
            except InstanceLocked as exc:
                self._not_started(str(exc))
                return ExitCode.CONFIG
        try:
            ruleset = self.load()
        except RuleError as exc:
            for d in exc.diagnostics:
                log.error("%s", d)
            self.notifier.status(f"not started: {len(exc.diagnostics)} rule error(s); "
                                 f"first: {exc.diagnostics[0] if exc.diagnostics else '?'}")
            return ExitCode.CONFIG
        except PermissionError as exc:
            log.error("%s", exc)
            self.notifier.status(f"not started: {exc}")
            return ExitCode.CONFIG
        except Exception as exc:  # a loader bug must not become a restart loop
            log.exception("rules could not be loaded")
            self.notifier.status(f"not started: rules could not be loaded: {exc}")
            return ExitCode.CONFIG
        engine = build_engine(ruleset, self.config)
        restore(engine, self.opts.state_path)
        try:
            parts = build_components(self.opts, self.config, self.registry, ruleset,
                                     self.metrics, self.health, self.readiness)
        except NotBuilt as exc:
            self._not_started(str(exc))
            return exc.code
        self.collector, self.flight = parts.collector, parts.flight
        self.operations.govern(parts.executor)  # node groups, as run --once's
        self.transaction = TickTransaction(
            engine, parts.executor, self.opts.state_path, act_deadline=self.opts.act_deadline,
            lock=self.lock.take if self.lock else None, lock_fault=lock_fault,
            ping=self.ping_if_due, stopping=lambda: self.stop_requested)
        self.witness.attach(ruleset, parts.collector, parts.sight, self.transaction)
        followers = self.collector.follow(lambda reason: self.wake.set())
        self.rule_watch.start()
        log.info("guardian %s: %d rule(s) from %s, every %gs; sources: %s; events: %s",
                 "dry run" if self.opts.dry_run else "live", len(ruleset.rules),
                 ", ".join(self.opts.rules), self.opts.interval,
                 ", ".join(s.name for s in self.collector.sources) or "none",
                 ", ".join(followers) or "none")
        return ExitCode.OK

    def loop(self) -> None:
        next_tick = time.monotonic()
        while not self.stop_requested:
            now = time.monotonic()
            if self.reload_reason and now >= self.reload_at:
                self.reload()
            if now >= next_tick or self.wake.is_set():
                self.wake.clear()
                self.rule_watch.rewatch_if_moved()
                self.tick()
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.opts.interval
            self.ping_if_due()
            deadline = next_tick
            if self.notifier.watchdog_interval:
                deadline = min(deadline, self.next_ping)
            if self.reload_reason:
                deadline = min(deadline, self.reload_at)
            if self.stop_requested:  # asked during the tick: its wake-up was cleared
                break
            self.wake.wait(max(0.0, deadline - time.monotonic()))

    def ping_if_due(self) -> None:
        interval = self.notifier.watchdog_interval
        if interval and time.monotonic() >= self.next_ping:
            self.notifier.watchdog()
            self.next_ping = time.monotonic() + interval

    def tick(self) -> list[Executed]:
        assert self.collector and self.transaction
        started = time.monotonic()
        snap = self.collector.collect(started)
        self.witness.sources(snap.errors)
        done = self.transaction.tick(snap, self.operations.before(), self._decided)
        self.operations.after(self.transaction.engine, self.metrics)
        self.operations.tell(self.transaction.engine)  # the breaker's reader, if any
        self.witness.ticked(snap, done, started)
        self.notifier.status(self.status())
        return done.results

    def _decided(self, what: Decided) -> None:
        self.witness.evaluated(what.snapshot, what.states)
        if not self.ready:  # ready once it evaluates: acting may wait on the outside world
            self.ready = True
            self.notifier.ready(self.status())
            if self.flight is not None:  # perf's start is not the service's
                self.flight.start()
        self.witness.decided(what.decisions)

    def health(self) -> tuple[bool, str]:
        return self.witness.health()

    def readiness(self) -> tuple[bool, str]:
        return self.witness.ready(self.ready)

    def status(self) -> str:
        return self.witness.status()

    def reload(self) -> bool:
        """Load the rules again; keep the running ones if the new set does not check."""
        assert self.transaction
        reason, self.reload_reason = self.reload_reason, ""
        self.notifier.reloading(time.monotonic_ns() // 1000)
        try:
            ruleset = self.load()
        except Exception as exc:  # whatever the files hold, the running rules stay
            errors = [str(d) for d in exc.diagnostics] if isinstance(exc, RuleError) \
                else [str(exc) if isinstance(exc, PermissionError)
                      else f"rules could not be loaded: {type(exc).__name__}: {exc}"]
            for e in errors:
                log.error("reload (%s) rejected: %s", reason, e)
            self.witness.rejected(errors)
            self.notifier.send("READY=1", f"STATUS={self.status()}")
            return False
        self.transaction.engine.replace_rules(ruleset)
        self.witness.reloaded(ruleset)
        log.info("reloaded (%s): %d rule(s)", reason, len(ruleset.rules))
        self.notifier.send("READY=1", f"STATUS={self.status()}")
        return True

    def shutdown(self) -> None:
        self.notifier.stopping()
        self.rule_watch.stop()
        if self.transaction is not None:
            self.transaction.save()
        self._abandon()
        log.info("stopped")
