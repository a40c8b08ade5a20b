"""The rule engine: pure, with no I/O and no clock of its own.

Each call to :meth:`Engine.evaluate` takes a snapshot (whose ``time`` is the only clock)
and returns :class:`Decision` records; the same series of snapshots always yields the same
decisions. Per rule the state machine is Prometheus' (inactive -> pending -> firing ->
resolved, with ``for`` and ``keep_firing_for``); on top of it sit Monit-style action
bounds: a cooldown between runs, a per-rule limit ("N runs within M"), and a global budget.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .durations import format_duration
from .history import History
from .policy.loader import CompiledRule, Ruleset
from .policy.schema import ActionSpec
from .snapshot import Family, Snapshot, format_key

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Budget:
    """The global action budget: at most ``runs`` rule action runs within ``within`` s."""

    runs: int = 20
    within: float = 3600.0


@dataclass
class Decision:
    """A state change of a rule, or an action run it asks for.

    ``kind`` is one of: ``pending``, ``firing``, ``retry`` (actions again while firing,
    after the cooldown), ``suppressed`` (wanted to act but a limit said no), ``resolved``,
    ``inactive`` (pending ended without firing).
    """

    time: float
    rule: str
    kind: str
    severity: str
    summary: str
    values: dict[str, Any] = field(default_factory=dict)
    actions: list[ActionSpec] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time, "rule": self.rule, "kind": self.kind,
            "severity": self.severity, "summary": self.summary, "values": self.values,
            "actions": [{"use": a.use, **a.public_params} for a in self.actions],
            "reason": self.reason,
        }


@dataclass
class RuleState:
    """What the engine remembers of one rule between ticks (persistable)."""

    phase: str = "inactive"  # inactive | pending | firing
    since: float | None = None  # pending or firing since
    last_true: float | None = None
    last_run: float | None = None
    runs: list[float] = field(default_factory=list)  # action runs within the limit window
    said_suppressed: bool = False
    unknown: bool = False  # condition had no value at the last tick


class Engine:
    """Evaluates a ruleset over snapshots; see the module docstring."""

    def __init__(self, ruleset: Ruleset, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self.global_runs: deque[float] = deque()
        self.states: dict[str, RuleState] = {}
        self.ruleset = Ruleset()
        self.history = History({})
        self.replace_rules(ruleset)

    # -- rules -------------------------------------------------------------------------
    def replace_rules(self, ruleset: Ruleset) -> None:
        """Swap in a new ruleset. Rules that keep their name keep their action history
        (cooldowns, limits); those whose condition and timing are unchanged also keep
        their phase, so a reload neither restarts a ``for`` timer nor re-fires."""
        old = {r.name: r for r in self.ruleset.rules}
        states: dict[str, RuleState] = {}
        for rule in ruleset.rules:
            st = self.states.get(rule.name)
            prev = old.get(rule.name)
            if st is not None and prev is not None:
                same = (prev.spec.when, prev.spec.for_, prev.spec.keep_firing_for) == (
                    rule.spec.when, rule.spec.for_, rule.spec.keep_firing_for)
                if not same:
                    st = RuleState(last_run=st.last_run, runs=st.runs)
            states[rule.name] = st or RuleState()
        self.states = states
        self.ruleset = ruleset
        self.active = [(r, states[r.name], r.condition.fn) for r in sorted(
            (r for r in ruleset.rules if r.spec.enabled),
            key=lambda r: SEVERITY_ORDER[r.spec.severity])]
        old_samples = self.history.samples
        self.history = History(ruleset.windows)
        for name, dq in self.history.samples.items():
            dq.extend(old_samples.get(name, ()))

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self, snapshot: Snapshot) -> list[Decision]:
        """One tick: evaluate every enabled rule against ``snapshot``."""
        now = snapshot.time
        values = snapshot.values
        self.history.record(now, values)
        hist = self.history
        out: list[Decision] = []
        for rule, st, fn in self.active:
            try:
                result = fn(values, hist)
            except Exception:  # a compiled condition should not raise; if it does: unknown
                result = None
            if result is None:
                st.unknown = True
                continue
            st.unknown = False
            holds = bool(result)
            phase = st.phase
            if phase == "inactive":
                if holds:
                    st.since = now
                    st.last_true = now
                    if rule.spec.for_ <= 0:
                        self._fire(rule, st, now, values, result, out)
                    else:
                        st.phase = "pending"
                        out.append(self._decision(rule, "pending", now, values, result))
            elif phase == "pending":
                if holds:
                    st.last_true = now
                    assert st.since is not None
                    if now - st.since >= rule.spec.for_:
                        self._fire(rule, st, now, values, result, out)
                else:
                    st.phase = "inactive"
                    st.since = None
                    out.append(self._decision(rule, "inactive", now, values, result))
            elif holds:  # firing, still true
                st.last_true = now
                self._act(rule, st, now, values, result, out, "retry")
            else:  # firing, no longer true
                assert st.last_true is not None
                if now - st.last_true >= rule.spec.keep_firing_for:
                    st.phase = "inactive"
                    st.since = None
                    st.said_suppressed = False
                    # clean-up actions (on = "resolve"/"both") are not held to the limits
                    cleanup = [a.spec for a in rule.actions if a.spec.on != "fire"]
                    out.append(self._decision(rule, "resolved", now, values, result,
                                              actions=cleanup))
        return out

    def _fire(self, rule: CompiledRule, st: RuleState, now: float, values: Any,
              result: object, out: list[Decision]) -> None:
        st.phase = "firing"
        st.since = now
        if not self._act(rule, st, now, values, result, out, "firing"):
            out.append(self._decision(rule, "firing", now, values, result))

    def _act(self, rule: CompiledRule, st: RuleState, now: float, values: Any,
             result: object, out: list[Decision], kind: str) -> bool:
        """Emit an action run if the bounds allow; True when a decision was emitted."""
        acting = [a.spec for a in rule.actions if a.spec.on != "resolve"]
        if not acting:
            return False
        spec = rule.spec
        if st.last_run is not None and now - st.last_run < spec.cooldown:
            return False
        horizon = now - spec.limit.within
        st.runs = [t for t in st.runs if t > horizon]
        while self.global_runs and self.global_runs[0] <= now - self.budget.within:
            self.global_runs.popleft()
        reason = ""
        if len(st.runs) >= spec.limit.runs:
            reason = (f"rule limit reached: {len(st.runs)} action runs within "
                      f"{format_duration(spec.limit.within)}; not acting until one ages out")
        elif len(self.global_runs) >= self.budget.runs:
            reason = (f"global action budget reached: {len(self.global_runs)} runs within "
                      f"{format_duration(self.budget.within)}")
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
        st.runs.append(now)
        st.last_run = now
        st.said_suppressed = False
        self.global_runs.append(now)
        out.append(self._decision(rule, kind, now, values, result, actions=acting))
        return True

    def _decision(self, rule: CompiledRule, kind: str, now: float, values: Any,
                  result: object, actions: list[ActionSpec] | None = None,
                  reason: str = "") -> Decision:
        return Decision(now, rule.name, kind, rule.spec.severity, rule.spec.summary,
                        self.decision_values(rule, values, result), actions or [], reason)

    @staticmethod
    def decision_values(rule: CompiledRule, values: Any, result: object) -> dict[str, Any]:
        """The signal values behind a decision (and, for family conditions, the members
        that matched), for the audit log and the operator."""
        out: dict[str, Any] = {}
        for ref in rule.condition.refs:
            v = ref.value(values)
            if isinstance(result, dict) and isinstance(v, dict):
                v = {k: x for k, x in v.items() if k in result}  # only what matched
            exact = ref.matchers and not any(is_glob for _, _, is_glob in ref.matchers)
            if exact and isinstance(v, dict) and len(v) == 1:
                v = next(iter(v.values()))  # the key already names the one member
            out[ref.key] = _plain(v)
        if isinstance(result, dict):
            out["matched"] = _plain(result)
        return out

    # -- persistence ---------------------------------------------------------------------
    def export_state(self, offset: float = 0.0) -> dict[str, Any]:
        """Rule states and action history, times shifted by ``offset`` (e.g. from the
        monotonic clock to wall-clock time, so they survive a reboot)."""
        def t(x: float | None) -> float | None:
            return None if x is None else x + offset
        return {
            "rules": {name: {"phase": st.phase, "since": t(st.since),
                             "last_true": t(st.last_true), "last_run": t(st.last_run),
                             "runs": [x + offset for x in st.runs],
                             "said_suppressed": st.said_suppressed}
                      for name, st in self.states.items()},
            "global_runs": [x + offset for x in self.global_runs],
        }

    def import_state(self, data: dict[str, Any], offset: float = 0.0) -> list[str]:
        """Restore what :meth:`export_state` wrote (times shifted back by ``offset``) for
        rules that still exist; their names."""
        def t(x: Any) -> float | None:
            return None if x is None else float(x) - offset
        restored = []
        for name, saved in (data.get("rules") or {}).items():
            st = self.states.get(name)
            if st is None or not isinstance(saved, dict):
                continue
            phase = saved.get("phase")
            st.phase = phase if phase in ("inactive", "pending", "firing") else "inactive"
            st.since, st.last_true = t(saved.get("since")), t(saved.get("last_true"))
            st.last_run = t(saved.get("last_run"))
            st.runs = [float(x) - offset for x in saved.get("runs", [])]
            st.said_suppressed = bool(saved.get("said_suppressed"))
            restored.append(name)
        self.global_runs = deque(sorted(float(x) - offset
                                        for x in data.get("global_runs", [])))
        return restored

    # -- introspection -------------------------------------------------------------------
    def firing(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "firing"]

    def pending(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "pending"]


def _plain(v: float | Family | None) -> Any:
    if isinstance(v, dict):
        return {format_key("", k) or "{}": _num(x) for k, x in sorted(v.items())}
    return None if v is None else _num(v)


def _num(x: float) -> float | int | str:
    x = float(x)
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return int(x) if x.is_integer() and abs(x) < 2**53 else round(x, 6)
