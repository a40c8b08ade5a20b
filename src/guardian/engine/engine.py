"""The rule engine: pure, with no I/O and no clock of its own.

Each call to :meth:`Engine.evaluate` takes a snapshot (whose ``time`` is the only clock)
and returns :class:`~guardian.engine.decision.Decision` records; the same series of
snapshots always yields the same decisions. Per rule the state machine is Prometheus'
(:mod:`~guardian.engine.lifecycle`); on top of it sit Monit-style action bounds
(:mod:`~guardian.engine.bounds`), causes that hold their symptoms' disruptive actions
(:mod:`~guardian.engine.causes`) and the pauses and maintenance windows that make
actions wait (:mod:`~guardian.engine.waits`).

What the operators say enters as data, set before a call: :attr:`Engine.holds` (pauses
and silences, each with its expiry) and :attr:`Engine.wall` (the Unix time they and the
maintenance windows are judged at; the snapshot's time when not given), and
:attr:`Engine.window` (the config's default maintenance window).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

from guardian.core.durations import format_duration
from guardian.core.snapshot import Snapshot, check_values
from guardian.engine import bounds, causes, waits
from guardian.engine.bounds import Budget
from guardian.engine.decision import ENGINE_MARK, Decision, decision_values
from guardian.engine.history import History
from guardian.engine.lifecycle import RuleState, advance
from guardian.model.holds import Hold
from guardian.model.kinds import EngineKind
from guardian.model.ruleset import BoundAction, CompiledRule, Ruleset
from guardian.model.window import Window


class Engine:
    """Evaluates a ruleset over snapshots; see the module docstring."""

    decision_values = staticmethod(decision_values)

    def __init__(self, ruleset: Ruleset, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self.global_runs: deque[float] = deque()
        self.states: dict[str, RuleState] = {}
        self.ruleset = Ruleset()
        self.history = History({})
        self.ending: list[tuple[CompiledRule, str]] = []  # firing rules a reload took away
        self.holds: list[Hold] = []  # pauses and silences, set by the caller
        self.wall: float | None = None  # Unix time for holds and windows (None: snapshot's)
        self.window: Window | None = None  # the config's default maintenance window
        self._now_wall = 0.0
        self.replace_rules(ruleset)

    # -- rules -------------------------------------------------------------------------
    def replace_rules(self, ruleset: Ruleset) -> None:
        """Swap in a new ruleset, keeping promises made under the old one.

        Rules that keep their name keep their whole state: a firing rule whose condition
        or timing changed stays firing while its (new) condition holds, and goes back to
        pending, keeping its start, when a raised ``for`` has not yet passed (as
        Prometheus does). A firing rule that is removed or disabled resolves at the next
        evaluation, with its clean-up actions."""
        old = {r.name: r for r in self.ruleset.rules}
        kept = {r.name for r in ruleset.rules if r.spec.enabled}
        for name, gone in old.items():
            st = self.states.get(name)
            if st is not None and st.phase == "firing" and name not in kept:
                how = "removed" if ruleset.by_name(name) is None else "disabled"
                self.ending.append((gone, f"rule {how} by a reload"))
        states: dict[str, RuleState] = {}
        for rule in ruleset.rules:
            st = self.states.get(rule.name)
            prev = old.get(rule.name)
            if st is not None and prev is not None:
                if not rule.spec.enabled:
                    st = RuleState(last_run=st.last_run, runs=st.runs)
                elif prev.spec.mode != rule.spec.mode:
                    st.held = False  # nothing observed is owed to a rule now acting
                else:
                    st.changed = (prev.spec.when, prev.spec.for_,
                                  prev.spec.keep_firing_for) != (
                        rule.spec.when, rule.spec.for_, rule.spec.keep_firing_for)
            states[rule.name] = st or RuleState()
        self.states = states
        self.ruleset = ruleset
        self.active = [(r, states[r.name], r.condition.fn)
                       for r in causes.evaluation_order(ruleset.rules)]
        self.history = History(ruleset.lookbacks, previous=self.history)

    # -- evaluation ----------------------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> None:
        """Add a snapshot to the history without evaluating (a warm-up sample for rates)."""
        self.history.record(snapshot.time, snapshot.values)

    def evaluate(self, snapshot: Snapshot) -> list[Decision]:
        """One tick: evaluate every enabled rule against ``snapshot``. The signals the
        rules use are held to their specs first unless the snapshot was checked already
        (a value that breaks its spec is unknown, and ``snapshot.errors`` says why)."""
        if not snapshot.checked:
            self._check(snapshot)
        now = snapshot.time
        self._now_wall = self.wall if self.wall is not None else now
        values = snapshot.values
        self.history.record(now, values)
        hist = self.history
        out: list[Decision] = []
        for gone, why in self.ending:
            cleanup = [a for a in gone.actions if a.spec.on != "fire"]
            out.append(self._decision(gone, "resolved", now, values, None, cleanup, why))
        self.ending = []
        for rule, st, fn in self.active:
            pause = self.pause(rule)
            st.paused = pause.describe() if pause else ""
            try:
                result = fn(values, hist)
            except Exception:  # a compiled condition should not raise; if it does: unknown
                result = None
            if result is None:
                st.unknown = True
                continue
            st.unknown = False
            step = advance(rule, st, bool(result), now)
            if step is None:
                continue
            kind, reason = step
            if kind == "firing":
                if not self._act(rule, st, now, values, result, out, "firing"):
                    out.append(self._decision(rule, "firing", now, values, result))
            elif kind == "retry":
                self._act(rule, st, now, values, result, out, "retry")
            elif kind == "resolved":
                st.said_suppressed = st.held = False
                # clean-up actions (on = "resolve"/"both") are not held to the limits
                cleanup = [a for a in rule.actions if a.spec.on != "fire"]
                if st.escalated:  # a page that fired resolves too
                    cleanup += [a for a in rule.escalate if a.spec.on != "fire"]
                    st.escalated = False
                out.append(self._decision(rule, "resolved", now, values, result,
                                          actions=cleanup))
            else:
                out.append(self._decision(rule, kind, now, values, result, reason=reason))
        return out

    def _check(self, snapshot: Snapshot) -> None:
        used = {n: v for n, v in snapshot.values.items() if n in self.ruleset.signals}
        good, problems = check_values(used, self.ruleset.signals, undeclared=False)
        for name in problems:
            del snapshot.values[name]
        snapshot.values.update(good)  # canonical label order
        snapshot.errors.update(problems)
        snapshot.checked = True

    def _act(self, rule: CompiledRule, st: RuleState, now: float, values: Any,
             result: object, out: list[Decision], kind: Literal["firing", "retry"]) -> bool:
        """Emit an action run if the bounds allow; True when a decision was emitted."""
        acting = [a for a in rule.actions if a.spec.on != "resolve"]
        if not acting:
            return False
        held, why_held, planned = self._held(rule, acting)
        owed = st.held and not held  # what was held runs now
        if not owed and bounds.cooling_down(rule, st, now):
            return False
        reason, limited = bounds.refusal(rule, st, self.global_runs, self.budget, now)
        if limited:
            self._escalate(rule, st, now, values, result, out)
        if reason:
            if kind == "firing":
                out.append(self._decision(rule, "firing", now, values, result, reason=reason))
                st.said_suppressed = True
                return True
            if not st.said_suppressed:
                st.said_suppressed = True
                out.append(self._decision(rule, "suppressed", now, values, result,
                                          reason=reason))
            return False
        if held:
            acting = [a for a in acting if a not in held]
        st.last_run = now  # held or not: the next look is after the cooldown
        st.said_suppressed = False
        if acting:
            bounds.record_run(rule, st, self.global_runs, now)
            out.append(self._decision(rule, kind, now, values, result, actions=acting,
                                      reason="what was held runs now" if owed else ""))
        elif kind == "firing":
            out.append(self._decision(rule, kind, now, values, result))
        st.held = bool(held)
        if held:
            d = self._decision(rule, "held", now, values, result, reason=why_held)
            d.would = planned
            out.append(d)
        return True

    def _held(self, rule: CompiledRule, acting: list[BoundAction]
              ) -> tuple[list[BoundAction], str, list[BoundAction]]:
        """The actions of ``acting`` that wait now, why, and those of them to plan."""
        return waits.waiting(acting, self.pause(rule), causes.holders(rule, self.states),
                             rule.spec.window or self.window, self._now_wall)

    def pause(self, rule: CompiledRule) -> Hold | None:
        """The hold in force that pauses ``rule`` now (the one that ends last), if any."""
        return waits.pause(self.holds, rule, self._now_wall)

    def holders(self, rule: CompiledRule) -> list[tuple[str, str]]:
        """The causes of ``rule`` (``caused_by``) that are pending or firing, with their
        phase: while there are any, its disruptive actions are held."""
        return [*causes.holders(rule, self.states)]

    def _escalate(self, rule: CompiledRule, st: RuleState, now: float, values: Any,
                  result: object, out: list[Decision]) -> None:
        """The remedy ran its limit and the rule still fires: it needs a human, and its
        ``escalate`` actions run once (not while a hold pauses it; a disruptive one waits
        for the maintenance window)."""
        if st.escalated:
            return
        steps = [a for a in rule.escalate if a.spec.on != "resolve"]
        _, _, waiting = self._held(rule, steps) if steps else ([], "", [])
        if self.pause(rule) is not None or waiting:
            return
        st.escalated = True
        if steps:
            out.append(self._decision(
                rule, "escalated", now, values, result, actions=steps,
                reason=f"needs a human: {len(st.runs)} action runs within "
                       f"{format_duration(rule.spec.limit.within)} did not resolve it"))

    def _decision(self, rule: CompiledRule, kind: EngineKind, now: float, values: Any,
                  result: object, actions: list[BoundAction] | None = None,
                  reason: str = "") -> Decision:
        return Decision(now, rule.name, kind, rule.spec.severity, rule.spec.summary,
                        decision_values(rule, values, result), actions or [], reason,
                        fleet=bool(rule.spec.fleet), mode=rule.spec.mode,
                        labels=rule.spec.labels, _mark=ENGINE_MARK)

    # -- persistence ---------------------------------------------------------------------
    def export_state(self, offset: float = 0.0) -> dict[str, Any]:
        """Rule states and action history, times shifted by ``offset`` (e.g. from the
        monotonic clock to wall-clock time, so they survive a reboot)."""
        def t(x: float | None) -> float | None:
            return None if x is None else x + offset
        return {
            "rules": {name: st.export(t) for name, st in self.states.items()},
            "global_runs": [x + offset for x in self.global_runs],
        }

    def import_state(self, data: dict[str, Any], offset: float = 0.0,
                     now: float | None = None) -> list[str]:
        """Restore what :meth:`export_state` wrote (times shifted back by ``offset``) for
        rules that still exist; their names. With ``now``, no restored time lies after
        it (a clock that jumped must not leave a cooldown that never ends)."""
        def t(x: Any) -> float | None:
            if x is None:
                return None
            v = float(x) - offset
            return v if now is None else min(v, now)
        restored = []
        for name, saved in (data.get("rules") or {}).items():
            st = self.states.get(name)
            if st is None or not isinstance(saved, dict):
                continue
            st.restore(saved, t)
            restored.append(name)
        self.global_runs = deque(sorted(v for x in data.get("global_runs", [])
                                        if (v := t(x)) is not None))
        return restored

    # -- introspection -------------------------------------------------------------------
    def firing(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "firing"]

    def pending(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "pending"]
