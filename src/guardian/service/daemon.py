"""The daemon behind `guardian run`: a tick loop woken early by event sources, speaking
the systemd notify protocol (READY, STATUS, WATCHDOG from the loop itself, RELOADING,
STOPPING), reloading rules on change or SIGHUP, persisting state and serving metrics."""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from guardian.core.audit import ActCrashRecord, SourceErrorRecord, SourceRecoveredRecord
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine, Proposal
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import Registry, default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import seen as seen_file
from guardian.runtime import state as state_file
from guardian.runtime import why as why_chain
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.coverage import Blind, Sight, blind_rules, summary
from guardian.runtime.deadline import DeadlineRunner
from guardian.runtime.executor import Executed, Executor
from guardian.runtime.metrics import STATES, Metrics
from guardian.runtime.operate import Operations
from guardian.service.components import NotBuilt, build_components, build_engine
from guardian.service.instancelock import InstanceLock, InstanceLocked, LockUnavailable
from guardian.service.notify import Notifier
from guardian.service.rulewatch import RuleWatcher, unsafe_rule_paths
from guardian.service.wakeup import Wakeup

log = logging.getLogger("guardian.service")

RELOAD_SETTLE = 0.3  # an editor writes in bursts: reload once they are done


@dataclass
class ServiceOptions:
    rules: list[str]
    dry_run: bool = False
    interval: float = 15.0
    state_path: Path | None = None
    audit_path: Path | None = None
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = 9847
    textfile: str | None = None
    apply_timeout: float = 300.0
    act_deadline: float = 360.0  # the longest the loop waits for one tick's actions
    require_root_owned_rules: bool = True
    root: Path = field(default_factory=lambda: Path("/"))


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
        self.status_extra = ""
        self.last_action = "none"
        self.started = time.monotonic()
        self.last_tick_done: float | None = None
        self.ruleset: Ruleset | None = None
        self.engine: Engine | None = None
        self.collector: Collector | None = None
        self.executor: Executor | None = None
        self.rule_watch = RuleWatcher(opts.rules, self.request_reload)
        self.ready = False
        self.next_ping = 0.0
        self.failing: dict[str, str] = {}  # sources failing at the last tick
        self.state_fault = ""  # why the state cannot be saved now
        self.lock_fault = ""  # why the state directory's lock is not held (disk faults)
        self.proposed: Proposal | None = None  # the tick's durable proposal, while acting
        # the worker carrying out decisions
        self.acting: DeadlineRunner[list[Executed]] = DeadlineRunner("guardian-act")
        self.act_fault = ""  # why no worker could be started to act
        self.operations = Operations(config, opts.state_path)  # holds, windows (issue 31)
        self.sight = Sight()  # which source gives which signal, and why some give none
        self.blind: list[Blind] = []  # rules with no value at the last tick
        self.recent = seen_file.Recent()  # the last actions, for `guardian why`
        self.seen = seen_file.Keeper(opts.state_path.parent / seen_file.SEEN_NAME) \
            if opts.state_path else None
        self.seen_fault = ""  # why what the service saw cannot be written now

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
            config = [self.config.path] if self.config.path else []
            problems = unsafe_rule_paths([*self.opts.rules, *config])
            if problems:
                raise PermissionError(
                    "refusing rule or config files others can change: " + "; ".join(problems))
        return load_rules(self.opts.rules, self.registry)

    def _abandon(self) -> None:
        """Release what a start took (also what one that failed part-way took)."""
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
        if self.lock is not None:
            try:
                self.lock.acquire()
            except LockUnavailable as exc:  # the disk, not the setup: run, acting on nothing
                log.error("%s; running, and acting on nothing until the lock is taken", exc)
                self.lock_fault = str(exc)
            except InstanceLocked as exc:
                self._not_started(str(exc))
                return ExitCode.CONFIG
        try:
            self.ruleset = self.load()
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
        self.engine = build_engine(self.ruleset, self.config)
        if self.opts.state_path is not None:
            restored = state_file.load(self.engine, self.opts.state_path)
            if restored:
                log.info("restored state of %d rule(s) from %s", len(restored),
                         self.opts.state_path)
        try:
            parts = build_components(self.opts, self.config, self.registry, self.ruleset,
                                     self.metrics, self.health)
        except NotBuilt as exc:
            self._not_started(str(exc))
            return exc.code
        self.collector, self.sight, self.executor = parts.collector, parts.sight, \
            parts.executor
        self.executor.on_result.append(self._count)
        followers = self.collector.follow(lambda reason: self.wake.set())
        self.rule_watch.start()
        log.info("guardian %s: %d rule(s) from %s, every %gs; sources: %s; events: %s",
                 "dry run" if self.opts.dry_run else "live", len(self.ruleset.rules),
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
        assert self.engine and self.collector and self.executor and self.ruleset
        started = time.monotonic()
        snap = self.collector.collect(started)
        self._source_health(snap.errors)
        op = self.operations.before()
        # One tick, one transaction: the evaluation proposes, and the engine takes the
        # proposal only once the state file and the audit log hold it; otherwise it is
        # dropped whole and the engine decides (and acts) again at a later tick.
        evaluation = self.engine.propose(snap, holds=op.holds, wall=op.wall,
                                         window=op.window)
        decisions = evaluation.decisions
        proposal: Proposal | None = evaluation.proposal
        # what this evaluation could not see, whatever becomes of its proposal (READY's
        # status says it too)
        self.blind = blind_rules(self.ruleset, {**self.engine.states,
                                                **evaluation.proposal.states},
                                 snap, self.sight)
        if decisions and self.acting.is_alive():
            # the previous tick's actions are still waiting on the outside world: none
            # start beside them, and nothing is decided until they are done
            proposal, decisions = None, []
        elif decisions and not self._persist(evaluation.proposal):
            # Fail closed: what cannot be made durable did not happen
            proposal, decisions = None, []
        elif not decisions:
            self.engine.commit(evaluation.proposal)  # nothing decided: nothing to keep
            proposal = None
        self.proposed = proposal  # what the status says until it is committed
        if not self.ready:  # ready once it evaluates: acting may wait on the outside world
            self.ready = True
            self.notifier.ready(self.status())
        for d in decisions:
            self.metrics.decisions.labels(d.rule, d.kind).inc()
            log.log(logging.WARNING if d.kind in ("firing", "suppressed") else logging.INFO,
                    "rule %s: %s%s", d.rule, d.kind, f" ({d.reason})" if d.reason else "")
        results = self._act(decisions, snap) if decisions else self.executor.run([], snap)
        self.proposed = None
        if proposal is not None:
            self._settle(proposal, results)
        results = results or []
        self._update_metrics(snap)
        self._write_seen(snap, decisions)
        self.operations.after(self.engine, self.metrics)
        self.metrics.tick.observe(time.monotonic() - started)
        self.metrics.last_tick.set(time.time())
        self.last_tick_done = time.monotonic()
        if self.opts.textfile:
            self.metrics.write_textfile(self.opts.textfile)
        self.notifier.status(self.status())
        return results

    def _settle(self, proposal: Proposal, results: list[Executed] | None) -> None:
        """Commit a durable tick's proposal once its decisions were carried out, or drop
        it when they never reached the audit log and nothing was applied (no worker could
        be started, or the audit log could not be written): not decided, so decided again
        later, and the state file is put back to the engine's."""
        assert self.engine and self.executor
        unapplied = results is None or (
            bool(self.executor.audit_fault) and not self.acting.is_alive()
            and not any(ex.outcome is not None for ex in results))
        if unapplied:
            self._persist()
            return
        self.engine.commit(proposal)

    def _act(self, decisions: list[Decision], snap: Snapshot) -> list[Executed] | None:
        """Carry out decisions off the loop: planning and the fleet budget talk to an API
        server, which may never answer. The loop waits at most ``act_deadline``, a
        bounded join at a time, pinging the watchdog and honouring SIGTERM between joins;
        the worker is then left to end, and no other starts beside it."""
        assert self.executor
        executor = self.executor
        ran = self.acting.run(lambda: executor.run(decisions, snap), self.opts.act_deadline,
                              tick=self.ping_if_due, stop=lambda: self.stop_requested)
        if ran.status == "unstarted":  # no thread to be had (TasksMax): decide again later
            if not self.act_fault:
                log.error("cannot start a thread to act (a task limit?): %s; nothing is "
                          "acted on until one can be", ran.error)
            self.act_fault = f"cannot start a thread: {ran.error}"
            return None
        self.act_fault = ""
        if ran.status == "done":
            return ran.value
        if ran.status == "crashed" and ran.error is not None:
            error = ran.error
            rules = sorted({d.rule for d in decisions})
            log.error("acting on %s crashed: %r", ", ".join(rules), error,
                      exc_info=(type(error), error, error.__traceback__))
            executor.audit_entry(ActCrashRecord(rules=rules, error=repr(error)))
        elif ran.status == "overran":
            log.error("actions did not finish within %gs (an API that does not answer?); "
                      "the loop goes on, and nothing else acts until they end",
                      self.opts.act_deadline)
        return []

    def _persist(self, proposal: Proposal | None = None) -> bool:
        """Save the engine's state (as ``proposal`` leaves it, when given) before anything
        is acted on; False (the fault logged once and shown in the status and metrics)
        when it cannot be saved, or when the state directory's lock is not held."""
        if self.opts.state_path is None:
            return True
        if not self._locked():
            return False
        try:
            assert self.engine is not None
            state_file.save(self.engine, self.opts.state_path, proposal=proposal)
        except OSError as exc:
            if not self.state_fault:
                log.error("cannot save state to %s: %s; nothing is acted on until it can",
                          self.opts.state_path, exc)
            self.state_fault = f"state: {exc.strerror or exc}"
            return False
        if self.state_fault:
            log.info("state is saved again; acting resumes")
        self.state_fault = ""
        return True

    def _locked(self) -> bool:
        """Whether this process holds its state directory's lock, taken now if a start
        could not (a read-only or full disk then); the fault is logged once."""
        if self.lock is None or self.lock.held:
            return True
        try:
            self.lock.acquire()
        except InstanceLocked as exc:
            if str(exc) != self.lock_fault:
                log.error("%s; nothing is acted on until the lock is taken", exc)
            self.lock_fault = str(exc)
            return False
        log.info("took the lock on %s", self.lock.path.parent)
        self.lock_fault = ""
        return True

    def persistence_fault(self) -> str:
        """Why decisions cannot be made durable now ("" when they can)."""
        assert self.executor
        lock = f"instance lock: {self.lock_fault}" if self.lock_fault else ""
        return "; ".join(f for f in (lock, self.state_fault, self.executor.audit_fault) if f)

    def _source_health(self, errors: dict[str, str]) -> None:
        """Log and audit a source that starts failing (its signals have no value until it
        recovers) and one that recovers; not every failing tick."""
        assert self.executor
        for name in sorted(set(errors) - set(self.failing)):
            log.error("source %s failed: %s; its signals have no value", name, errors[name])
            self.executor.audit_entry(SourceErrorRecord(source=name, error=errors[name]))
        for name in sorted(set(self.failing) - set(errors)):
            log.info("source %s recovered", name)
            self.executor.audit_entry(SourceRecoveredRecord(source=name))
        self.failing = dict(errors)

    def _count(self, ex: Executed) -> None:
        outcome = ex.result
        self.metrics.actions.labels(ex.decision.rule, ex.use, outcome).inc()
        self.last_action = f"{ex.use} for {ex.decision.rule}: {outcome}"
        self.recent.add(ex, time.time())

    def _write_seen(self, snap: Snapshot, decisions: list[Decision]) -> None:
        """Keep what this tick saw where `guardian why` reads it; a failure is logged
        once (it changes nothing the service decides)."""
        if self.seen is None:
            return
        assert self.engine and self.ruleset
        chain = why_chain.links(self.engine, snap, decisions)
        for link in chain:
            link.did = self.recent.of(link.rule)
        seen = seen_file.Seen(os.getpid(), time.time(), snap.time, len(self.ruleset.rules),
                              chain, self.blind, list(self.recent.entries))
        try:
            self.seen.keep(seen, time.monotonic())
        except OSError as exc:
            if not self.seen_fault:
                log.error("cannot write %s: %s; `guardian why` cannot show what the "
                          "service sees until it can", self.seen.path, exc.strerror or exc)
            self.seen_fault = str(exc.strerror or exc)
            return
        self.seen_fault = ""

    def _update_metrics(self, snap: Snapshot) -> None:
        assert self.engine and self.collector
        self.metrics.signals.snapshot = snap
        for name, st in self.engine.states.items():
            current = "unknown" if st.unknown else st.phase
            for s in STATES:
                self.metrics.rule_state.labels(name, s).set(1.0 if s == current else 0.0)
        self.metrics.source_errors.counts = dict(self.collector.error_counts)
        self.metrics.source_up.up = {
            **{n: n not in self.failing for n in self.collector.error_counts},
            **dict.fromkeys(self.collector.unavailable, False)}
        self.metrics.persistence_ok.set(0 if self.persistence_fault() else 1)
        self.metrics.rules_blind.set(len(self.blind))

    def health(self) -> tuple[bool, str]:
        """Whether the loop is alive: a tick completed within three intervals (at least
        30 s), as the systemd watchdog would judge it; with the age of the last one.
        Alive with sources that cannot be read (their rules stay unknown) is "degraded",
        naming them: still alive, since restarting would not bring a device back."""
        limit = max(3 * self.opts.interval, 30.0)
        last = self.last_tick_done
        if last is None:
            age = time.monotonic() - self.started
            return age < limit + self.opts.interval, f"starting ({age:.0f}s)"
        age = time.monotonic() - last
        if age > limit:
            return False, f"stuck: the last tick completed {age:.0f}s ago (limit {limit:.0f}s)"
        text = f"the last tick completed {age:.1f}s ago"
        degraded = self.degraded()
        if degraded or self.blind:
            return True, "; ".join([f"degraded: {text}",
                                    *([summary(self.blind, limit=10)] if self.blind else []),
                                    *(f"source {name} {reason}"
                                      for name, reason in sorted(degraded.items()))])
        return True, f"ok: {text}"

    def degraded(self) -> dict[str, str]:
        """Sources some rule reads whose signals have no value now: unavailable since
        start (a host without systemd, /dev/kmsg not readable) or failing at the last
        tick; with why. The rules over them stay unknown."""
        used = self._used_sources()
        out = {n: f"unavailable: {why}" for n, why in
               (self.collector.unavailable.items() if self.collector else ()) if n in used}
        out.update({n: f"failing: {why}" for n, why in self.failing.items() if n in used})
        return out

    def _used_sources(self) -> set[str]:
        if self.ruleset is None:
            return set()
        read = {ref.name for rule in self.ruleset.rules for ref in rule.condition.refs}
        return {name for name, src in self.registry.sources.items()
                if any(spec.name in read for spec in src.specs)}

    def status(self) -> str:
        assert self.engine and self.ruleset
        firing = self.engine.firing(self.proposed)
        parts = [f"{len(self.ruleset.rules)} rules",
                 f"{len(firing)} firing" + (f" ({', '.join(firing[:3])})" if firing else ""),
                 *([summary(self.blind)] if self.blind else []),
                 f"last action: {self.last_action}"]
        if self.opts.dry_run:
            parts.insert(0, "dry run: observing only, acting is off")
        if self.status_extra:
            parts.append(self.status_extra)
        if fault := self.persistence_fault():
            parts.append(f"NOT ACTING, persistence failing ({fault})")
        if self.acting.is_alive():
            parts.append("acting (waiting on the outside world)")
        if self.act_fault:
            parts.append(f"NOT ACTING ({self.act_fault})")
        return "; ".join(parts)

    def reload(self) -> bool:
        """Load the rules again; keep the running ones if the new set does not check."""
        assert self.engine
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
            self.metrics.reloads.labels("failed").inc()
            self.metrics.last_reload_ok.set(0)
            self.status_extra = f"reload rejected, {len(errors)} error(s), " \
                                f"running the last good rules; first: {errors[0]}"
            self.notifier.send("READY=1", f"STATUS={self.status()}")
            return False
        self.engine.replace_rules(ruleset)
        self.ruleset = ruleset
        self.metrics.use_rules(ruleset, self.registry.catalogue())
        self.metrics.reloads.labels("ok").inc()
        self.metrics.last_reload_ok.set(1)
        self.status_extra = ""
        log.info("reloaded (%s): %d rule(s)", reason, len(ruleset.rules))
        self.notifier.send("READY=1", f"STATUS={self.status()}")
        return True

    def shutdown(self) -> None:
        self.notifier.stopping()
        self.rule_watch.stop()
        if self.engine is not None and self.opts.state_path is not None \
                and (self.lock is None or self.lock.held):  # another may hold the lock
            try:
                state_file.save(self.engine, self.opts.state_path)
            except OSError as exc:
                log.error("cannot save state: %s", exc)
        self._abandon()
        log.info("stopped")
