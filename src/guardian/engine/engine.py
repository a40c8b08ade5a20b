"""The rule engine: pure, with no I/O and no clock of its own.

Each call to :meth:`Engine.evaluate` takes a snapshot (whose ``time`` is the only clock)
and returns :class:`Decision` records; the same series of snapshots always yields the same
decisions. Per rule the state machine is Prometheus' (inactive -> pending -> firing ->
resolved, with ``for`` and ``keep_firing_for``); on top of it sit Monit-style action
bounds: a cooldown between runs, a per-rule limit ("N runs within M"), and a global budget.

What the operators say enters as data, set before a call: :attr:`Engine.holds` (pauses
and silences, each with its expiry) and :attr:`Engine.wall` (the Unix time they and the
maintenance windows are judged at; the snapshot's time when not given), and
:attr:`Engine.window` (the config's default maintenance window).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from guardian.core.durations import format_duration
from guardian.core.snapshot import Family, Snapshot, Value, check_values, format_key
from guardian.engine.history import History
from guardian.model.holds import Hold
from guardian.model.ruleset import BoundAction, CompiledRule, Ruleset
from guardian.model.window import Window

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

# Decisions the engine emits carry this mark; the executor applies no other decision
# (a dry run may still plan one). It guards against mistakes, not against code that sets
# the mark on purpose.
_ENGINE_MARK = object()


@dataclass(frozen=True)
class Budget:
    """The global action budget: at most ``runs`` rule action runs within ``within`` s."""

    runs: int = 20
    within: float = 3600.0


@dataclass
class Decision:
    """A state change of a rule, or an action run it asks for.

    ``kind`` is one of: ``pending``, ``firing``, ``retry`` (actions again while firing,
    after the cooldown), ``suppressed`` (wanted to act but a limit said no), ``held`` (its
    actions wait: while a rule that causes it is pending or firing, while a hold pauses
    it, or outside its maintenance window; the reason says which, and ``would`` lists the
    held actions, planned and audited but not applied), ``escalated`` (its actions ran
    their limit and it still fires: the rule's ``escalate`` actions, once; it needs a
    human), ``resolved``, ``inactive`` (pending ended without firing). ``mode`` is
    ``observe`` for a shadow rule: its actions are planned and audited, never applied.
    """

    time: float
    rule: str
    kind: str
    severity: str
    summary: str
    evidence: dict[str, Value | None] = field(default_factory=dict)
    actions: list[BoundAction] = field(default_factory=list)
    reason: str = ""
    fleet: bool = False  # the rule's disruptive actions need a slot of the fleet budget
    mode: str = "act"  # "observe": shadow mode, planned and audited, never applied
    labels: dict[str, str] = field(default_factory=dict)  # the rule's labels
    would: list[BoundAction] = field(default_factory=list)  # held: planned, not applied
    _mark: object = field(default=None, repr=False, compare=False)

    @property
    def values(self) -> dict[str, Any]:
        """The evidence rendered for people and JSON (labels as text, ``+Inf``)."""
        return render_values(self.evidence)

    @property
    def matched(self) -> Family | None:
        """For a family condition, the members that matched (typed: label tuples)."""
        m = self.evidence.get("matched")
        return m if isinstance(m, dict) else None

    @property
    def from_engine(self) -> bool:
        """True for a decision an :class:`Engine` emitted (the only kind that may act)."""
        return self._mark is _ENGINE_MARK

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time, "rule": self.rule, "kind": self.kind,
            "severity": self.severity, "summary": self.summary, "values": self.values,
            "actions": [{"use": a.use, **a.public_params} for a in self.actions],
            "reason": self.reason,
            **({"mode": self.mode} if self.mode != "act" else {}),
            **({"held_actions": [{"use": a.use, **a.public_params} for a in self.would]}
               if self.would else {}),
        }


@dataclass
class RuleState:
    """What the engine remembers of one rule between ticks (persistable)."""

    phase: str = "inactive"  # inactive | pending | firing
    since: float | None = None  # pending or firing since
    active_at: float | None = None  # the condition holds since (pending's start)
    keep_firing_since: float | None = None  # firing, first false evaluation since it held
    last_run: float | None = None
    runs: list[float] = field(default_factory=list)  # action runs within the limit window
    said_suppressed: bool = False
    held: bool = False  # disruptive actions are owed: they were held while a cause was active
    unknown: bool = False  # condition had no value at the last tick
    changed: bool = False  # reloaded with another condition or timing; not yet evaluated
    escalated: bool = False  # ran its limit without resolving: needs a human
    paused: str = ""  # the hold that pauses it now, described ("" when none)


class Engine:
    """Evaluates a ruleset over snapshots; see the module docstring."""

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
        self.active = [(r, states[r.name], r.condition.fn) for r in _causes_first(sorted(
            (r for r in ruleset.rules if r.spec.enabled),
            key=lambda r: SEVERITY_ORDER[r.spec.severity]))]
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
            holds = bool(result)
            phase = st.phase
            if st.changed:
                st.changed = False
                start = st.active_at if st.active_at is not None else st.since
                if phase == "firing" and holds and start is not None \
                        and round((now - start) * 1000) < rule.for_ms:
                    st.phase, st.since = "pending", start
                    st.keep_firing_since = None
                    out.append(self._decision(rule, "pending", now, values, result,
                                              reason="reload raised `for`; pending since "
                                                     "the condition began to hold"))
                    continue
            if phase == "inactive":
                if holds:
                    st.since = now
                    st.active_at = now
                    if rule.spec.for_ <= 0:
                        self._fire(rule, st, now, values, result, out)
                    else:
                        st.phase = "pending"
                        out.append(self._decision(rule, "pending", now, values, result))
            elif phase == "pending":
                if holds:
                    assert st.since is not None
                    if round((now - st.since) * 1000) >= rule.for_ms:
                        self._fire(rule, st, now, values, result, out)
                else:
                    st.phase = "inactive"
                    st.since = st.active_at = None
                    out.append(self._decision(rule, "inactive", now, values, result))
            elif holds:  # firing, still true
                st.keep_firing_since = None
                self._act(rule, st, now, values, result, out, "retry")
            else:  # firing, no longer true: kept firing for keep_firing_for from here
                if st.keep_firing_since is None:
                    st.keep_firing_since = now
                if round((now - st.keep_firing_since) * 1000) >= rule.keep_firing_ms:
                    st.phase = "inactive"
                    st.since = st.active_at = st.keep_firing_since = None
                    st.said_suppressed = st.held = False
                    # clean-up actions (on = "resolve"/"both") are not held to the limits
                    cleanup = [a for a in rule.actions if a.spec.on != "fire"]
                    if st.escalated:  # a page that fired resolves too
                        cleanup += [a for a in rule.escalate if a.spec.on != "fire"]
                        st.escalated = False
                    out.append(self._decision(rule, "resolved", now, values, result,
                                              actions=cleanup))
        return out

    def _check(self, snapshot: Snapshot) -> None:
        used = {n: v for n, v in snapshot.values.items() if n in self.ruleset.signals}
        good, problems = check_values(used, self.ruleset.signals, undeclared=False)
        for name in problems:
            del snapshot.values[name]
        snapshot.values.update(good)  # canonical label order
        snapshot.errors.update(problems)
        snapshot.checked = True

    def _fire(self, rule: CompiledRule, st: RuleState, now: float, values: Any,
              result: object, out: list[Decision]) -> None:
        st.phase = "firing"
        st.since = now
        if not self._act(rule, st, now, values, result, out, "firing"):
            out.append(self._decision(rule, "firing", now, values, result))

    def _act(self, rule: CompiledRule, st: RuleState, now: float, values: Any,
             result: object, out: list[Decision], kind: str) -> bool:
        """Emit an action run if the bounds allow; True when a decision was emitted."""
        acting = [a for a in rule.actions if a.spec.on != "resolve"]
        if not acting:
            return False
        spec = rule.spec
        held, why_held, planned = self._held(rule, acting)
        owed = st.held and not held  # what was held runs now
        if not owed and st.last_run is not None and now - st.last_run < spec.cooldown:
            return False
        horizon = now - spec.limit.within
        st.runs = [t for t in st.runs if t > horizon]
        while self.global_runs and self.global_runs[0] <= now - self.budget.within:
            self.global_runs.popleft()
        reason = ""
        if len(st.runs) >= spec.limit.runs:
            reason = (f"rule limit reached: {len(st.runs)} action runs within "
                      f"{format_duration(spec.limit.within)}; not acting until one ages out")
            self._escalate(rule, st, now, values, result, out)
        elif not rule.observe and len(self.global_runs) >= self.budget.runs:
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
        if held:
            acting = [a for a in acting if a not in held]
        st.last_run = now  # held or not: the next look is after the cooldown
        st.said_suppressed = False
        if acting:
            st.runs.append(now)
            if not rule.observe:  # a shadow rule's runs are its own, not the node's
                self.global_runs.append(now)
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
        """The actions of ``acting`` that wait now, why, and those of them to plan (a
        pause holds every action; outside its maintenance window a disruptive action
        waits; while a cause is active, its disruptive actions wait)."""
        pause = self.pause(rule)
        if pause is not None:
            return list(acting), pause.describe(), list(acting)
        held: list[BoundAction] = []
        why: list[str] = []
        holders = self.holders(rule)
        if holders:
            held = [a for a in acting if a.held_by_causes]
            if held:
                causes = ", ".join(f"{name} is {phase}" for name, phase in holders)
                why.append(f"{', '.join(a.use for a in held)} held while its cause "
                           f"{causes}: the cause is fixed first")
        window = rule.spec.window or self.window
        planned: list[BoundAction] = []
        if window is not None and not window.is_open(self._now_wall):
            planned = [a for a in acting if a.disruptive and a not in held]
            if planned:
                held += planned
                why.append(f"{', '.join(a.use for a in planned)} held outside the "
                           f"maintenance window ({window.describe()}): runs when it opens")
        return held, "; ".join(why), planned

    def pause(self, rule: CompiledRule) -> Hold | None:
        """The hold in force that pauses ``rule`` now (the one that ends last), if any."""
        found = [h for h in self.holds
                 if h.until > self._now_wall and h.matches(rule.name, rule.spec.labels)]
        return max(found, key=lambda h: h.until) if found else None

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

    def holders(self, rule: CompiledRule) -> list[tuple[str, str]]:
        """The causes of ``rule`` (``caused_by``) that are pending or firing, with their
        phase: while there are any, its disruptive actions are held."""
        out = []
        for cause in rule.spec.caused_by:
            st = self.states.get(cause)
            if st is not None and st.phase in ("pending", "firing"):
                out.append((cause, st.phase))
        return out

    def _decision(self, rule: CompiledRule, kind: str, now: float, values: Any,
                  result: object, actions: list[BoundAction] | None = None,
                  reason: str = "") -> Decision:
        return Decision(now, rule.name, kind, rule.spec.severity, rule.spec.summary,
                        self.decision_values(rule, values, result), actions or [], reason,
                        fleet=bool(rule.spec.fleet), mode=rule.spec.mode,
                        labels=rule.spec.labels, _mark=_ENGINE_MARK)

    @staticmethod
    def decision_values(rule: CompiledRule, values: Any, result: object
                        ) -> dict[str, Value | None]:
        """The signal values behind a decision (and, for family conditions, the members
        that matched, under ``matched``), typed; :func:`render_values` renders them."""
        out: dict[str, Value | None] = {}
        for ref in rule.condition.refs:
            v = ref.value(values)
            if isinstance(result, dict) and isinstance(v, dict):
                v = {k: x for k, x in v.items() if k in result}  # only what matched
            exact = ref.matchers and not any(is_glob for _, _, is_glob in ref.matchers)
            if exact and isinstance(v, dict) and len(v) == 1:
                v = next(iter(v.values()))  # the key already names the one member
            out[ref.key] = v
        if isinstance(result, dict):
            out["matched"] = result
        return out

    # -- persistence ---------------------------------------------------------------------
    def export_state(self, offset: float = 0.0) -> dict[str, Any]:
        """Rule states and action history, times shifted by ``offset`` (e.g. from the
        monotonic clock to wall-clock time, so they survive a reboot)."""
        def t(x: float | None) -> float | None:
            return None if x is None else x + offset
        return {
            "rules": {name: {"phase": st.phase, "since": t(st.since),
                             "active_at": t(st.active_at),
                             "keep_firing_since": t(st.keep_firing_since),
                             "last_run": t(st.last_run),
                             "runs": [x + offset for x in st.runs],
                             "said_suppressed": st.said_suppressed, "held": st.held,
                             "escalated": st.escalated}
                      for name, st in self.states.items()},
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
            phase = saved.get("phase")
            st.phase = phase if phase in ("inactive", "pending", "firing") else "inactive"
            st.since = t(saved.get("since"))
            st.keep_firing_since = t(saved.get("keep_firing_since"))
            st.active_at = t(saved.get("active_at", saved.get("since")))
            st.last_run = t(saved.get("last_run"))
            st.runs = [v for x in saved.get("runs", []) if (v := t(x)) is not None]
            st.said_suppressed = bool(saved.get("said_suppressed"))
            st.held = bool(saved.get("held"))
            st.escalated = bool(saved.get("escalated"))
            restored.append(name)
        self.global_runs = deque(sorted(v for x in data.get("global_runs", [])
                                        if (v := t(x)) is not None))
        return restored

    # -- introspection -------------------------------------------------------------------
    def firing(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "firing"]

    def pending(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "pending"]


def _causes_first(rules: list[CompiledRule]) -> list[CompiledRule]:
    """``rules`` in their order, except that a rule comes after the rules that cause it
    (its `caused_by`), so a symptom sees its causes' phase of the same evaluation."""
    by_name = {r.name: r for r in rules}
    out: list[CompiledRule] = []
    placed: set[str] = set()

    def place(r: CompiledRule, trail: frozenset[str]) -> None:
        if r.name in placed or r.name in trail:  # a cycle (refused at load) stops here
            return
        for cause in r.spec.caused_by:
            if cause in by_name:
                place(by_name[cause], trail | {r.name})
        placed.add(r.name)
        out.append(r)

    for r in rules:
        place(r, frozenset())
    return out


def render_values(evidence: dict[str, Any]) -> dict[str, Any]:
    """Evidence as the audit log, logs and ``--json`` show it: a family's members keyed
    by their labels as text, numbers as int where whole, infinities as text."""
    return {k: _plain(v) for k, v in evidence.items()}


def short(v: Any) -> str:
    """A rendered value in one short line: at most four members of a family."""
    if isinstance(v, dict):
        items = list(v.items())
        body = ", ".join(f"{k}: {x}" for k, x in items[:4])
        return "{" + body + (f", … {len(items) - 4} more" if len(items) > 4 else "") + "}"
    return str(v)


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {(format_key("", k) or "{}") if isinstance(k, tuple) else k: _num(x)
                for k, x in sorted(v.items())}
    return None if v is None else _num(v)


def _num(x: Any) -> Any:
    if not isinstance(x, int | float):
        return x  # rendered already
    x = float(x)
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return int(x) if x.is_integer() and abs(x) < 2**53 else round(x, 6)
