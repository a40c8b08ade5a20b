"""What the service tells of itself (issue 39): the STATUS= line, /healthz, the metrics of
each tick, a source that starts failing or recovers (in the journal and the audit log),
the actions carried out (counted, the last one, the recent ones) and what it saw, kept in
``seen.json`` for `guardian why`. The daemon tells it what each tick did."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from guardian.core.audit import SourceErrorRecord, SourceRecoveredRecord
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision
from guardian.engine.lifecycle import RuleState
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import Registry
from guardian.runtime import seen as seen_file
from guardian.runtime import why as why_chain
from guardian.runtime.collector import Collector
from guardian.runtime.coverage import CHOSEN, Blind, Sight, blind_rules, summary
from guardian.runtime.evidencebundle import RecentSignals
from guardian.runtime.executor import Executed
from guardian.runtime.metrics import STATES, Metrics
from guardian.runtime.tick import TickResult, TickTransaction
from guardian.service.components import ServiceOptions

log = logging.getLogger("guardian.service")


class Witness:
    """What one service process tells; :meth:`attach` gives it what a start built."""

    def __init__(self, opts: ServiceOptions, registry: Registry, metrics: Metrics) -> None:
        self.opts = opts
        self.registry = registry
        self.metrics = metrics
        self.started = time.monotonic()
        self.last_tick_done: float | None = None
        self.ruleset: Ruleset | None = None
        self.collector: Collector | None = None
        self.transaction: TickTransaction | None = None
        self.status_extra = ""  # a rejected reload, until one loads
        self.last_action = "none"
        self.failing: dict[str, str] = {}  # sources failing at the last tick
        self.sight = Sight()  # which source gives which signal, and why some give none
        self.blind: list[Blind] = []  # rules with no value at the last tick
        self.recent = seen_file.Recent()  # the last actions, for `guardian why`
        self.seen = seen_file.Keeper(opts.state_path.parent / seen_file.SEEN_NAME) \
            if opts.state_path else None
        self.seen_fault = ""  # why what the service saw cannot be written now
        self.signals: RecentSignals | None = None  # recent snapshots, for evidence bundles

    def attach(self, ruleset: Ruleset, collector: Collector, sight: Sight,
               transaction: TickTransaction) -> None:
        self.ruleset, self.collector, self.sight = ruleset, collector, sight
        self.transaction = transaction
        transaction.executor.on_result.append(self._count)
        self.signals = RecentSignals(collector, self.opts.interval)
        self.signals.follow(ruleset)
        transaction.executor.on_result.append(self.signals.on_result)

    def reloaded(self, ruleset: Ruleset) -> None:
        self.ruleset = ruleset
        if self.signals is not None:
            self.signals.follow(ruleset)
        self.metrics.use_rules(ruleset, self.registry.catalogue())
        self.metrics.reloads.labels("ok").inc()
        self.metrics.last_reload_ok.set(1)
        self.status_extra = ""

    def rejected(self, errors: list[str]) -> None:
        """A reload that did not load: the status says so until one does."""
        self.metrics.reloads.labels("failed").inc()
        self.metrics.last_reload_ok.set(0)
        self.status_extra = f"reload rejected, {len(errors)} error(s), " \
                            f"running the last good rules; first: {errors[0]}"

    # -- told by the daemon, in the order of a tick ----------------------------------------
    def sources(self, errors: dict[str, str]) -> None:
        """Log and audit a source that starts failing (its signals have no value until it
        recovers) and one that recovers; not every failing tick."""
        assert self.transaction
        executor = self.transaction.executor
        for name in sorted(set(errors) - set(self.failing)):
            log.error("source %s failed: %s; its signals have no value", name, errors[name])
            executor.audit_entry(SourceErrorRecord(source=name, error=errors[name]))
        for name in sorted(set(self.failing) - set(errors)):
            log.info("source %s recovered", name)
            executor.audit_entry(SourceRecoveredRecord(source=name))
        self.failing = dict(errors)

    def evaluated(self, snap: Snapshot, states: Mapping[str, RuleState]) -> None:
        """What an evaluation could not see, whatever becomes of its proposal (READY's
        status says it too)."""
        assert self.ruleset
        self.blind = blind_rules(self.ruleset, states, snap, self.sight)
        if self.signals is not None:
            self.signals.add(snap)

    def decided(self, decisions: list[Decision]) -> None:
        for d in decisions:
            self.metrics.decisions.labels(d.rule, d.kind).inc()
            self.metrics.outcome(d)
            log.log(logging.WARNING if d.kind in ("firing", "suppressed") else logging.INFO,
                    "rule %s: %s%s", d.rule, d.kind, f" ({d.reason})" if d.reason else "")

    def ticked(self, snap: Snapshot, done: TickResult, started: float) -> None:
        """A tick that began at ``started`` (monotonic) is done."""
        self._update_metrics(snap)
        self._write_seen(snap, done.decisions)
        self.metrics.tick.observe(time.monotonic() - started)
        self.metrics.last_tick.set(time.time())
        self.last_tick_done = time.monotonic()
        if self.opts.textfile:
            self.metrics.write_textfile(self.opts.textfile)

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
        assert self.transaction and self.ruleset
        chain = why_chain.links(self.transaction.engine, snap, decisions)
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
        assert self.transaction and self.collector
        self.metrics.signals.snapshot = snap
        for name, st in self.transaction.engine.states.items():
            current = "unknown" if st.unknown else st.phase
            for s in STATES:
                self.metrics.rule_state.labels(name, s).set(1.0 if s == current else 0.0)
        self.metrics.source_errors.counts = dict(self.collector.error_counts)
        self.metrics.source_up.up = {
            **{n: n not in self.failing for n in self.collector.error_counts},
            **dict.fromkeys(self.collector.unavailable, False)}
        self.metrics.persistence_ok.set(0 if self.transaction.persistence_fault() else 1)
        self.metrics.rules_blind.set(len(self.blind))
        self.metrics.rule_blind.causes = {b.rule: b.cause for b in self.blind}

    # -- asked ---------------------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        """Whether the loop is alive: a tick completed within three intervals (at least
        30 s), as the systemd watchdog would judge it; with the age of the last one.
        Alive with sources that cannot be read (their rules stay unknown) is "degraded",
        naming them: still alive, since restarting would not bring a device back. Rules
        blind only by the operator's choice (their sources have nothing configured, or
        are disabled: node-problem-detector runs no monitor it was not given) leave it
        "ok", and are named with that cause: blind, never counted healthy."""
        limit = max(3 * self.opts.interval, 30.0)
        last = self.last_tick_done
        if last is None:
            age = time.monotonic() - self.started
            alive, text = age < limit + self.opts.interval, f"starting ({age:.0f}s)"
            if not alive or not self.blind:  # blind is known once the first evaluation is
                return alive, text
            text = f"the first tick is under way ({age:.0f}s)"
        else:
            age = time.monotonic() - last
            if age > limit:
                return False, (f"stuck: the last tick completed {age:.0f}s ago "
                               f"(limit {limit:.0f}s)")
            text = f"the last tick completed {age:.1f}s ago"
        degraded = self.degraded()
        word = "degraded" if degraded or any(not b.chosen for b in self.blind) else "ok"
        return True, "; ".join([f"{word}: {text}",
                                *([summary(self.blind, limit=10)] if self.blind else []),
                                *(f"source {name} {reason}"
                                  for name, reason in sorted(degraded.items())),
                                *(f"source {name} {reason}"
                                  for name, reason in sorted(self.chosen().items()))])

    def ready(self, evaluated: bool) -> tuple[bool, str]:
        """Whether the service is ready (a readiness probe's question, a rolling update's
        wait): its rules loaded and ``evaluated`` once (the daemon's READY=1). Not whether
        it is alive: that is :meth:`health`'s."""
        if self.ruleset is None or not evaluated:
            age = time.monotonic() - self.started
            what = "the first evaluation is under way" if self.ruleset is not None \
                else "loading the rules"
            return False, f"not ready: {what} ({age:.0f}s)"
        return True, f"ready: {len(self.ruleset.rules)} rule(s) loaded and evaluated"

    def degraded(self) -> dict[str, str]:
        """Sources some rule reads whose signals have no value now: unavailable since
        start (a host without systemd, /dev/kmsg not readable) or failing at the last
        tick; with why (not one with nothing configured: :meth:`chosen`). The rules over
        them stay unknown."""
        used = self._used_sources()
        lacks = self.collector.unconfigured if self.collector else {}
        out = {n: f"unavailable: {why}" for n, why in
               (self.collector.unavailable.items() if self.collector else ())
               if n in used and n not in lacks}
        out.update({n: f"failing: {why}" for n, why in self.failing.items() if n in used})
        return out

    def chosen(self) -> dict[str, str]:
        """Sources some blind rule lacks that the operator chose to leave out: nothing
        configured for them, or disabled; with why (``not configured: no probes in
        [sources.probe]``)."""
        lacking = {s for b in self.blind for s, c in zip(b.sources, b.causes, strict=False)
                   if c in CHOSEN}
        return {n: self.sight.off[n] for n in lacking if n in self.sight.off}

    def _used_sources(self) -> set[str]:
        if self.ruleset is None:
            return set()
        read = {ref.name for rule in self.ruleset.rules for ref in rule.condition.refs}
        return {name for name, src in self.registry.sources.items()
                if any(spec.name in read for spec in src.specs)}

    def status(self) -> str:
        """The STATUS= line."""
        assert self.transaction and self.ruleset
        ticks = self.transaction
        firing = ticks.firing()
        parts = [f"{len(self.ruleset.rules)} rules",
                 f"{len(firing)} firing" + (f" ({', '.join(firing[:3])})" if firing else ""),
                 *([summary(self.blind)] if self.blind else []),
                 f"last action: {self.last_action}"]
        if self.opts.dry_run:
            parts.insert(0, "dry run: observing only, acting is off")
        if self.status_extra:
            parts.append(self.status_extra)
        if fault := ticks.persistence_fault():
            parts.append(f"NOT ACTING, persistence failing ({fault})")
        if ticks.acting.is_alive():
            parts.append("acting (waiting on the outside world)")
        if ticks.act_fault:
            parts.append(f"NOT ACTING ({ticks.act_fault})")
        return "; ".join(parts)
