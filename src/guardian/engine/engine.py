"""The rule engine: pure, with no I/O and no clock of its own.

One tick is a transaction. :meth:`Engine.propose` takes a snapshot (whose ``time`` is the
only clock) and what operators say (the holds in force, the wall time they and the
maintenance windows are judged at, the default window) and returns an
:class:`Evaluation`: the :class:`~guardian.engine.decision.Decision` records and the
:class:`Proposal`, the rules' next state. The engine's rule states, action budget and a
reload's owed resolutions do not change until :meth:`Engine.commit` takes the proposal;
one that is dropped leaves no trace, so the same decisions are proposed again (the service
commits only what it made durable). :meth:`Engine.evaluate` proposes and commits at once.
The snapshot joins the history when it is proposed over: what was observed stays observed,
only decisions wait for a commit. The same series of snapshots always yields the same
decisions.

Per rule the state machine is Prometheus' (:mod:`~guardian.engine.lifecycle`); on top of
it sit Monit-style action bounds (:mod:`~guardian.engine.bounds`), causes that hold their
symptoms' disruptive actions (:mod:`~guardian.engine.causes`) and the pauses and
maintenance windows that make actions wait (:mod:`~guardian.engine.waits`).

A rule with steps climbs them (:meth:`Engine._climb`): the first when it fires, each next
one once the previous one's ``verify`` passed with the rule still firing, never two at
once; a step runs whole or waits whole (a hold, a cause, a shut window), counts against
the limit and the budget, and the cooldown only spaces climbs. Past the top it needs a
human. A step with ``recurs`` applies only once the rule fired in that many boots (the
engine's ``boot`` is the boot id its caller read; "" counts none): a climb then starts at
it, skipping the steps before, and before then it is skipped. A rule with ``validate``
keeps its clean-up (and the episode) open once it stops firing until the validation holds
(:meth:`Engine._validate`). Each episode's outcome goes into the rule's record
(:mod:`~guardian.engine.outcomes`); a rule with ``demote`` whose remedy does not work (too
few of its attempts resolved without a human) is demoted to shadow mode from its next
episode, until the rule changes (its fingerprint; a reload or a restart).
"""

from __future__ import annotations

from collections import ChainMap, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from guardian.core.durations import format_duration
from guardian.core.errors import GuardianError
from guardian.core.evidence import values_text
from guardian.core.snapshot import Snapshot, check_values
from guardian.engine import bounds, causes, gate, outcomes, waits
from guardian.engine.bounds import Budget
from guardian.engine.decision import (
    ENGINE_MARK,
    Decision,
    condition_values,
    decision_values,
    render_values,
    signal_units,
)
from guardian.engine.history import History
from guardian.engine.lifecycle import RuleState, advance
from guardian.model.approvals import Approval
from guardian.model.holds import Hold
from guardian.model.kinds import EngineKind
from guardian.model.ruleset import BoundAction, CompiledRule, Ruleset
from guardian.model.window import Window


class StaleProposal(GuardianError):
    """A proposal made before the engine last changed (a commit, a reload, a restore)."""


@dataclass(frozen=True)
class Operating:
    """What operators say, for one evaluation: the holds in force (pauses and silences,
    each with its expiry), the Unix time they and the maintenance windows are judged at
    (None: the snapshot's time), the config's default maintenance window and the
    approvals given (:mod:`guardian.engine.gate`)."""

    holds: tuple[Hold, ...] = ()
    wall: float | None = None  # once committed: the time they were judged at
    window: Window | None = None
    approvals: tuple[Approval, ...] = ()


@dataclass(frozen=True)
class Proposal:
    """The engine's next state after one evaluation, for :meth:`Engine.commit`: the
    states of the rules it changed, the global budget's runs (None: unchanged), whether
    it decided the resolutions a reload owed, and what it was judged under."""

    base: int  # the engine's generation it was proposed against
    states: dict[str, RuleState]
    global_runs: deque[float] | None
    ended: bool
    operating: Operating


@dataclass
class Evaluation:
    """One evaluation's decisions and the proposal that makes them the engine's."""

    decisions: list[Decision]
    proposal: Proposal


@dataclass
class EngineState:
    """All the engine keeps between ticks that a restart must not lose: every rule's
    state and the global budget's runs."""

    rules: dict[str, RuleState] = field(default_factory=dict)
    global_runs: list[float] = field(default_factory=list)


class _Tick:
    """One evaluation in progress: copies of what it changes, never the engine's."""

    __slots__ = ("base", "global_runs", "now", "operating", "out", "states", "values",
                 "wall")

    def __init__(self, base: deque[float], now: float, values: Any,
                 operating: Operating) -> None:
        self.base = base
        self.now = now
        self.values = values
        self.operating = operating
        self.wall = operating.wall if operating.wall is not None else now
        self.states: dict[str, RuleState] = {}
        self.global_runs: deque[float] | None = None
        self.out: list[Decision] = []

    def runs(self) -> deque[float]:
        """The global budget's runs, copied when first needed."""
        if self.global_runs is None:
            self.global_runs = deque(self.base)
        return self.global_runs


class Engine:
    """Evaluates a ruleset over snapshots; see the module docstring."""

    decision_values = staticmethod(decision_values)

    def __init__(self, ruleset: Ruleset, budget: Budget | None = None, *,
                 boot: str = "") -> None:
        self.budget = budget or Budget()
        self.boot = boot  # the kernel's boot id ("": unknown; no boot is counted)
        self.global_runs: deque[float] = deque()
        self.states: dict[str, RuleState] = {}
        # the states the last commit replaced (each rule's before that evaluation, where
        # it changed): what a command that evaluates once on its own had saved
        self.before: dict[str, RuleState] = {}
        self.ruleset = Ruleset()
        self.history = History({})
        self.ending: list[tuple[CompiledRule, str]] = []  # firing rules a reload took away
        self.operating = Operating()  # what the last committed evaluation was judged under
        self.generation = 0  # moves on at each commit, reload and restore
        # per enabled rule, in evaluation order: its name, state, condition and the
        # actions it runs when it fires (all but the clean-up ones)
        self.active: list[tuple[CompiledRule, str, RuleState, Any, list[BoundAction]]] = []
        self._slot: dict[str, int] = {}  # rule name -> its place in self.active
        self.replace_rules(ruleset)

    # -- rules -------------------------------------------------------------------------
    def replace_rules(self, ruleset: Ruleset) -> None:
        """Swap in a new ruleset, keeping promises made under the old one.

        Rules that keep their name keep their whole state: a firing rule whose condition
        or timing changed stays firing while its (new) condition holds, and goes back to
        pending, keeping its start, when a raised ``for`` has not yet passed (as
        Prometheus does). A firing rule that is removed or disabled resolves at the next
        evaluation, with its clean-up actions. A proposal made before is stale."""
        old = {r.name: r for r in self.ruleset.rules}
        kept = {r.name for r in ruleset.rules if r.spec.enabled}
        for name, gone in old.items():
            st = self.states.get(name)
            if st is not None and (st.phase == "firing" or st.validating is not None) \
                    and name not in kept:
                how = "removed" if ruleset.by_name(name) is None else "disabled"
                self.ending.append((gone, f"rule {how} by a reload"))
        states: dict[str, RuleState] = {}
        for rule in ruleset.rules:
            st = self.states.get(rule.name)
            prev = old.get(rule.name)
            if st is not None and prev is not None:
                if not rule.spec.enabled:
                    st = outcomes.keep(st)
                elif prev.spec.mode != rule.spec.mode:
                    st.held = False  # nothing observed is owed to a rule now acting
                else:
                    st.changed = st.changed or (
                        prev.spec.when, prev.spec.for_, prev.spec.keep_firing_for) != (
                        rule.spec.when, rule.spec.for_, rule.spec.keep_firing_for)
            states[rule.name] = st = st or RuleState()
            outcomes.rejudged(st, rule.fingerprint)
        self.states, self.before = states, {}
        self.ruleset = ruleset
        self._activate()
        self.history = History(ruleset.lookbacks, previous=self.history)

    def _activate(self) -> None:
        """The enabled rules in evaluation order, each with its state and condition."""
        self.active = [(r, r.name, self.states[r.name], r.condition.fn,
                        [a for s in r.steps for a in s.actions]
                        or [a for a in r.actions if a.spec.on != "resolve"])
                       for r in causes.evaluation_order(self.ruleset.rules)]
        self._slot = {a[1]: i for i, a in enumerate(self.active)}
        self.generation += 1

    # -- evaluation ----------------------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> None:
        """Add a snapshot to the history without evaluating (a warm-up sample for rates)."""
        self.history.record(snapshot.time, snapshot.values)

    def evaluate(self, snapshot: Snapshot, *, holds: Iterable[Hold] = (),
                 wall: float | None = None, window: Window | None = None,
                 approvals: Iterable[Approval] = ()) -> list[Decision]:
        """One tick proposed and committed at once (:meth:`propose`, :meth:`commit`): for
        callers that have nothing to make durable first."""
        evaluation = self.propose(snapshot, holds=holds, wall=wall, window=window,
                                  approvals=approvals)
        self.commit(evaluation.proposal)
        return evaluation.decisions

    def propose(self, snapshot: Snapshot, *, holds: Iterable[Hold] = (),
                wall: float | None = None, window: Window | None = None,
                approvals: Iterable[Approval] = ()) -> Evaluation:
        """One tick: evaluate every enabled rule against ``snapshot``, under the
        ``holds`` in force at Unix time ``wall`` (None: the snapshot's time), the
        default maintenance ``window`` and the ``approvals`` given. Returns the
        decisions and the proposed next state; the engine's state is unchanged until
        :meth:`commit`. The signals the rules use are held to their specs first unless
        the snapshot was checked already (a value that breaks its spec is unknown, and
        ``snapshot.errors`` says why)."""
        if not snapshot.checked:
            self._check(snapshot)
        now = snapshot.time
        values = snapshot.values
        self.history.record(now, values)
        hist = self.history
        operating = Operating(tuple(holds), wall, window, tuple(approvals))
        tick = _Tick(self.global_runs, now, values, operating)
        out = tick.out
        new = tick.states
        for gone, why in self.ending:
            cleanup = [a for a in gone.actions if a.spec.on != "fire"]
            out.append(self._decision(gone, "resolved", now, values, None, cleanup, why))
            out[-1].step = 0
        any_holds = bool(operating.holds)
        for rule, name, st, fn, acting in self.active:
            pause = waits.pause(operating.holds, rule, tick.wall) if any_holds else None
            paused = pause.describe() if pause else ""
            try:
                result = fn(values, hist)
            except Exception:  # a compiled condition should not raise; if it does: unknown
                result = None
            if result is None:
                if not st.unknown or st.paused != paused:
                    new[name] = nst = st.copy()
                    nst.unknown, nst.paused = True, paused
                continue
            if st.paused == paused and not st.changed and not st.unknown:
                # what changes nothing is not copied (most rules, most ticks)
                if not result:
                    if st.phase == "inactive" and st.validating is None:
                        continue  # false, and was
                elif st.phase == "firing" and st.keep_firing_since is None and (
                        not acting or (not rule.steps and not st.held
                        and st.awaiting is None and st.last_run is not None
                        and now - st.last_run < rule.spec.cooldown)) and (
                        not self.boot or (st.boots and st.boots[-1] == self.boot)):
                    continue  # a retry that would not act (none to run, or cooling down)
            new[name] = st = st.copy()
            st.unknown, st.paused = False, paused
            step = advance(rule, st, bool(result), now)
            if st.phase == "firing":
                outcomes.in_boot(st, self.boot, now)
            if step is None:
                if st.validating is not None and st.phase == "inactive":
                    self._validate(tick, rule, st, result)
                continue
            kind, reason = step
            act = self._climb if rule.steps else self._act
            if kind == "firing":
                outcomes.fired(st, now)
                st.validating = st.valid_since = None  # the problem is back: no clean-up
                st.validation = ""
                gate.ended(st)  # a new episode: a wait of the last one is over
                if not act(tick, rule, st, result, "firing", acting):
                    out.append(self._decision(rule, "firing", now, values, result))
            elif kind == "retry":
                act(tick, rule, st, result, "retry", acting)
            elif kind == "resolved":
                st.said_suppressed = st.held = False
                if rule.validation is not None:
                    st.validating = now
                    self._validate(tick, rule, st, result)
                else:
                    self._resolve(tick, rule, st, result, "")
            else:
                out.append(self._decision(rule, kind, now, values, result, reason=reason))
        for d in out:  # a demoted rule's episode runs in shadow mode
            ds = new.get(d.rule) or self.states.get(d.rule)
            if ds is not None and ds.shadow:
                d.mode = "observe"
        proposal = Proposal(self.generation, new, tick.global_runs, bool(self.ending),
                            Operating(operating.holds, tick.wall, window,
                                      operating.approvals))
        return Evaluation(out, proposal)

    def commit(self, proposal: Proposal) -> None:
        """Make ``proposal`` the engine's state. Raises :class:`StaleProposal` when the
        engine changed since it was proposed (a commit, a reload, a restore)."""
        if proposal.base != self.generation:
            raise StaleProposal(f"proposal of generation {proposal.base}, the engine is "
                                f"at {self.generation}")
        self.before = {n: self.states[n] for n in proposal.states if n in self.states}
        for name, st in proposal.states.items():
            self.states[name] = st
            i = self._slot.get(name)
            if i is not None:
                rule, _, _, fn, acting = self.active[i]
                self.active[i] = (rule, name, st, fn, acting)
        if proposal.global_runs is not None:
            self.global_runs = proposal.global_runs
        if proposal.ended:
            self.ending = []
        self.operating = proposal.operating
        self.generation += 1

    def _check(self, snapshot: Snapshot) -> None:
        used = {n: v for n, v in snapshot.values.items() if n in self.ruleset.signals}
        good, problems = check_values(used, self.ruleset.signals, undeclared=False)
        for name in problems:
            del snapshot.values[name]
        snapshot.values.update(good)  # canonical label order
        snapshot.errors.update(problems)
        snapshot.checked = True

    def _act(self, tick: _Tick, rule: CompiledRule, st: RuleState, result: object,
             kind: Literal["firing", "retry"], acting: list[BoundAction]) -> bool:
        """Emit an action run if the bounds allow; True when a decision was emitted."""
        if not acting:
            return False
        now, values, out = tick.now, tick.values, tick.out
        held, why_held, planned = self._held(tick, rule, acting)
        owed = st.held and not held  # what was held runs now
        approve = gate.gate_of(rule)
        waiting = gate.gated(approve, [a for a in acting if a not in held])
        if not gate.gated(approve, acting):
            gate.ended(st)  # nothing of it waits for approval (a reload took the gate)
        elif waiting and st.awaiting is not None:
            owed = True  # an approval (or the timeout) is looked for at every tick
        if not owed and bounds.cooling_down(rule, st, now):
            return False
        global_runs = tick.runs()
        reason, limited = bounds.refusal(rule, st, global_runs, self.budget, now)
        if limited:
            self._escalate(tick, rule, st, result, _ran_limit(rule, st))
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
        approval: Approval | None = None
        said = "what was held runs now" if st.held and not held else ""
        if approve is not None and waiting:
            verdict = gate.judge(approve, rule, st, waiting, tick.operating.approvals, now,
                                 tick.wall)
            if verdict.said == "begins":
                return self._awaits(tick, rule, st, result, kind,
                                    [a for a in acting if a not in waiting], waiting,
                                    verdict.why, 1, held, why_held, planned)
            if verdict.said == "waits":
                return False
            if verdict.said == "timed_out":
                self._not_approved(tick, rule, st, result, verdict.why)
                return False
            approval = verdict.approval
            said = "; ".join(w for w in (said, verdict.why) if w)
            gate.ended(st)
        st.last_run = now  # held or not: the next look is after the cooldown
        st.said_suppressed = False
        if acting:
            bounds.record_run(rule, st, global_runs, now)
            st.step, st.step_at = 1, now  # for its record: its actions are one step
            out.append(self._decision(rule, kind, now, values, result, actions=acting,
                                      reason=said))
            out[-1].step = 1
            out[-1].approval = approval
        elif kind == "firing":
            out.append(self._decision(rule, kind, now, values, result))
        st.held = bool(held)
        if held:
            d = self._decision(rule, "held", now, values, result, reason=why_held)
            d.would = planned
            out.append(d)
        return True

    def _climb(self, tick: _Tick, rule: CompiledRule, st: RuleState, result: object,
               kind: Literal["firing", "retry"], acting: list[BoundAction]) -> bool:
        """The next step of a ladder if it is due and nothing makes it wait; True when a
        decision was emitted. A step is due when the rule fires (a new climb waits out
        the cooldown since the last step ran) and once the step before's ``verify``
        passed; past the top the rule needs a human. A step runs whole or waits whole."""
        now, values, out, steps = tick.now, tick.values, tick.out, rule.steps
        if st.escalated:
            return False  # it needs a human: the climb stops until the episode ends
        n = st.step
        if n:
            assert st.step_at is not None
            if round((now - st.step_at) * 1000) < round(steps[n - 1].verify * 1000):
                return False  # verifying
        elif not st.held and bounds.cooling_down(rule, st, now):
            return False
        i = next_step(rule, st, now)
        if i is None:
            ran = f"its {n} steps ran" if n == len(steps) else \
                f"step {n} of {len(steps)} ran (the rest wait for it to recur in more boots)"
            self._escalate(tick, rule, st, result, f"{ran} and it still fires",
                           f"needs a human: {ran} and it still fires "
                           f"{format_duration(steps[n - 1].verify)} after the last")
            return False
        step = steps[i]
        of = f"step {i + 1} of {len(steps)}"
        held, why_held, planned = self._held(tick, rule, step.actions)
        if held:
            if not st.held:  # said once, until it runs
                st.held = True
                d = self._decision(rule, "held", now, values, result,
                                   reason=f"{of} ({step.uses}) waits: {why_held}")
                d.would, d.step = planned, i + 1
                out.append(d)
            return False
        global_runs = tick.runs()
        reason, limited = bounds.refusal(rule, st, global_runs, self.budget, now)
        if limited:
            # a climb that reaches its limit needs a human: it escalates once, and climbs
            # no further until the episode ends (it does not wait for runs to age out)
            why = f"{_ran_limit(rule, st)} before {of} ({step.uses})"
            said = self._escalate(tick, rule, st, result, why,
                                  f"needs a human: {why} without resolving it; the climb "
                                  f"stops here")
            if st.escalated:
                reason = f"{reason.split(';')[0]}: it needs a human; the climb stops here"
                st.said_suppressed = st.said_suppressed or said
        if reason:
            if kind == "firing" or not st.said_suppressed:
                out.append(self._decision(rule, "firing" if kind == "firing" else
                                          "suppressed", now, values, result,
                                          reason=f"{of} waits: {reason}"
                                          if not st.escalated else f"{of}: {reason}"))
                st.said_suppressed = True
                return True
            return False
        approve = gate.gate_of(rule, i)
        waiting = gate.gated(approve, step.actions)
        approval: Approval | None = None
        if not waiting:
            gate.ended(st)
        elif approve is not None:
            verdict = gate.judge(approve, rule, st, waiting, tick.operating.approvals, now,
                                 tick.wall)
            if verdict.said == "begins":
                return self._awaits(tick, rule, st, result, kind,
                                    [a for a in step.actions if a not in waiting], waiting,
                                    f"{of} ({step.uses}): {verdict.why}", i + 1)
            if verdict.said == "waits":
                return False
            if verdict.said == "timed_out":
                self._not_approved(tick, rule, st, result, f"{of}: {verdict.why}")
                return False
            approval = verdict.approval
            gate.ended(st)
        bounds.record_run(rule, st, global_runs, now)
        words = [f"{of}: {step.uses}, verify {format_duration(step.verify)}"]
        if waiting and approve is not None:
            words.append(approval.describe() if approval is not None else
                         f"not approved within {format_duration(approve.timeout)}: runs "
                         f"without an approval (approve.then = \"proceed\")")
        if step.recurs is not None:
            boots = outcomes.boots_within(st, step.recurs.within, now)
            words.append(f"it fired in {boots} boots within "
                         f"{format_duration(step.recurs.within)}: the fix that holds across "
                         f"boots" + (f" (steps {n + 1}-{i} skipped)" if i - n > 1 else
                                     f" (step {n + 1} skipped)" if i > n else ""))
        if n:
            words.append(f"step {n} did not resolve it within "
                         f"{format_duration(steps[n - 1].verify)}")
        if st.held:
            words.append("what was held runs now")
        st.held = st.said_suppressed = False
        st.last_run = st.step_at = now
        st.step = i + 1
        d = self._decision(rule, kind, now, values, result, actions=step.actions,
                           reason="; ".join(words))
        d.step, d.approval = i + 1, approval
        out.append(d)
        return True

    def _awaits(self, tick: _Tick, rule: CompiledRule, st: RuleState, result: object,
                kind: Literal["firing", "retry"], told: list[BoundAction],
                waiting: list[BoundAction], why: str, step: int,
                held: list[BoundAction] | None = None, why_held: str = "",
                planned: list[BoundAction] | None = None) -> bool:
        """A wait for approval begins: the actions it does not gate (``told``) run now,
        so a human learns of it (no run of its remedy: not counted against its limit),
        and an ``awaiting_approval`` decision plans the ``waiting`` ones; what other
        waits hold (``held``) is said as ever."""
        now, values, out = tick.now, tick.values, tick.out
        st.said_suppressed = False
        if not rule.steps:
            st.last_run = now
        if told or kind == "firing":
            out.append(self._decision(rule, kind, now, values, result, actions=told))
            out[-1].step = step if told else 0
        d = self._decision(rule, "awaiting_approval", now, values, result, reason=why)
        d.would, d.step = list(waiting), step
        out.append(d)
        if held:
            st.held = True
            h = self._decision(rule, "held", now, values, result, reason=why_held)
            h.would = list(planned or [])
            out.append(h)
        return True

    def _not_approved(self, tick: _Tick, rule: CompiledRule, st: RuleState,
                      result: object, why: str) -> None:
        """Past its gate's timeout without an approval: it needs a human, once (its
        escalate actions run, or an ``escalated`` decision says so on its own)."""
        if st.escalated:
            return
        said = self._escalate(tick, rule, st, result, why, f"needs a human: {why}")
        if st.escalated and not said:
            d = self._decision(rule, "escalated", tick.now, tick.values, result,
                               reason=f"needs a human: {why}")
            d.step = st.step
            tick.out.append(d)

    def _validate(self, tick: _Tick, rule: CompiledRule, st: RuleState,
                  result: object) -> None:
        """A rule that stopped firing keeps its clean-up until ``validate`` has held for
        ``validate_for``; then it resolves. Meanwhile a ``validating`` decision says each
        change of where the validation stands (holds, failing, no value), and past
        ``validate_within`` it needs a human (the clean-up still waits for it)."""
        cond, spec, now = rule.validation, rule.spec, tick.now
        assert cond is not None and st.validating is not None
        try:
            ok = cond.fn(tick.values, self.history)
        except Exception:  # a compiled condition should not raise; if it does: no value
            ok = None
        if ok:
            if st.valid_since is None:
                st.valid_since = now
            left = spec.validate_for - (now - st.valid_since)
            if round(left * 1000) <= 0:
                held = f" for {format_duration(spec.validate_for)}" if spec.validate_for \
                    else ""
                self._resolve(tick, rule, st, result, f"validated: `{spec.validate_}` "
                              f"held{held}")
                return
            said = (f"validating: `{spec.validate_}` holds; the clean-up runs once it held "
                    f"for {format_duration(spec.validate_for)}")
        else:
            st.valid_since = None
            # every member of its operands: failing, none matched (an empty family), and
            # the values that made it fail are the why (a family's, filtered to what
            # matched, said only "no member")
            evidence = values_text(render_values(condition_values(cond, tick.values, None)),
                                   signal_units(rule, self.ruleset.signals, cond))
            said = (f"validation {'has no value' if ok is None else 'failing'}: "
                    f"`{spec.validate_}` ({evidence}); the clean-up waits")
        if st.validation.partition(":")[0] != said.partition(":")[0]:
            out = self._decision(rule, "validating", now, tick.values, result, reason=said)
            out.step = st.step
            tick.out.append(out)
        st.validation = said
        if now - st.validating >= spec.validate_within:
            within = (f"not validated within {format_duration(spec.validate_within)} "
                      f"after it stopped firing")
            self._escalate(tick, rule, st, result, within,
                           f"needs a human: {within}; {said}")

    def _resolve(self, tick: _Tick, rule: CompiledRule, st: RuleState, result: object,
                 reason: str) -> None:
        """The episode ends: the clean-up actions (on = "resolve"/"both", not held to the
        limits; the escalate ones too when it escalated) run, and its outcome is
        recorded."""
        cleanup = [a for a in rule.actions if a.spec.on != "fire"]
        if st.step and not st.escalated and not rule.observe:
            outcomes.ended(st, worked=True)  # (one that escalated ended as it did)
        if st.escalated:  # a page that fired resolves too
            cleanup += [a for a in rule.escalate if a.spec.on != "fire"]
            st.escalated, st.escalated_why = False, ""
        gate.ended(st)
        step, lasted = outcomes.resolved(st, tick.now)
        d = self._decision(rule, "resolved", tick.now, tick.values, result, actions=cleanup,
                           reason=reason)
        d.step, d.lasted = step, lasted
        tick.out.append(d)
        self._judge(tick, rule, st, result)

    def _judge(self, tick: _Tick, rule: CompiledRule, st: RuleState,
               result: object) -> None:
        """Learning (``demote``): an attempt of its remedy ended; one that does not work
        here is demoted to shadow mode from the rule's next episode, said once."""
        why = outcomes.judge(st, rule.spec.demote)
        if why:
            st.demoted = why
            d = self._decision(rule, "demoted", tick.now, tick.values, result, reason=why)
            d.step = st.step
            tick.out.append(d)

    def _held(self, tick: _Tick, rule: CompiledRule, acting: list[BoundAction]
              ) -> tuple[list[BoundAction], str, list[BoundAction]]:
        """The actions of ``acting`` that wait now, why, and those of them to plan (the
        causes' phases as this evaluation left them)."""
        op = tick.operating
        states = ChainMap(tick.states, self.states)
        return waits.waiting(acting, waits.pause(op.holds, rule, tick.wall),
                             causes.holders(rule, states), rule.spec.window or op.window,
                             tick.wall, waits.latch(op.holds, rule))

    def pause(self, rule: CompiledRule) -> Hold | None:
        """The hold that paused ``rule`` at the last committed evaluation (the one that
        ends last), if any."""
        op = self.operating
        return waits.pause(op.holds, rule, op.wall if op.wall is not None else 0.0)

    def holders(self, rule: CompiledRule) -> list[tuple[str, str]]:
        """The causes of ``rule`` (``caused_by``) that are pending or firing, with their
        phase: while there are any, its disruptive actions are held."""
        return [*causes.holders(rule, self.states)]

    def _escalate(self, tick: _Tick, rule: CompiledRule, st: RuleState,
                  result: object, why: str, reason: str = "") -> bool:
        """The remedy ran its limit (or a ladder its last step, or a validation its
        time) and the rule still fires: it needs a human (``why``, kept in its state),
        and its ``escalate`` actions run once (not while a hold pauses it; a disruptive
        one waits for the maintenance window). True when an ``escalated`` decision was
        emitted."""
        if st.escalated:
            return False
        steps = [a for a in rule.escalate if a.spec.on != "resolve"]
        _, _, waiting = self._held(tick, rule, steps) if steps else ([], "", [])
        if waits.pause(tick.operating.holds, rule, tick.wall) is not None or waiting:
            return False
        st.escalated, st.escalated_why = True, why
        st.needs_human += 1
        if not rule.observe:
            outcomes.ended(st, worked=False)
            self._judge(tick, rule, st, result)
        if steps:
            d = self._decision(
                rule, "escalated", tick.now, tick.values, result, actions=steps,
                reason=reason or f"needs a human: {len(st.runs)} action runs within "
                                 f"{format_duration(rule.spec.limit.within)} did not "
                                 f"resolve it")
            d.step = st.step
            tick.out.append(d)
            return True
        return False

    def _decision(self, rule: CompiledRule, kind: EngineKind, now: float, values: Any,
                  result: object, actions: list[BoundAction] | None = None,
                  reason: str = "") -> Decision:
        return Decision(now, rule.name, kind, rule.spec.severity, rule.spec.summary,
                        decision_values(rule, values, result), actions or [], reason,
                        fleet=bool(rule.spec.fleet), mode=rule.spec.mode,
                        labels=rule.spec.labels, _mark=ENGINE_MARK,
                        units=signal_units(rule, self.ruleset.signals))

    # -- persistence ---------------------------------------------------------------------
    def state(self, proposal: Proposal | None = None) -> EngineState:
        """What a restart must not lose: now, or as it will be once ``proposal`` is
        committed (to make that durable first). The rule states are the engine's own:
        read them, never change them."""
        rules = self.states
        runs = self.global_runs
        if proposal is not None:
            rules = {**rules, **{n: st for n, st in proposal.states.items() if n in rules}}
            if proposal.global_runs is not None:
                runs = proposal.global_runs
        return EngineState(dict(rules), list(runs))

    def restore(self, state: EngineState) -> list[str]:
        """Take back a saved :class:`EngineState` for the rules that still exist; their
        names. Whatever was proposed before is stale."""
        restored = []
        for name, saved in state.rules.items():
            rule = self.ruleset.by_name(name)
            if name in self.states and rule is not None:
                self.states[name] = st = saved.copy()
                outcomes.rejudged(st, rule.fingerprint)
                restored.append(name)
        self.global_runs = deque(sorted(state.global_runs))
        self.before = {}
        self._activate()
        return restored

    # -- introspection -------------------------------------------------------------------
    def firing(self, proposal: Proposal | None = None) -> list[str]:
        """The rules firing now, or as ``proposal`` leaves them once committed."""
        states = self.state(proposal).rules if proposal is not None else self.states
        return [n for n, s in states.items() if s.phase == "firing"]

    def previous(self, name: str) -> RuleState:
        """Rule ``name``'s state before the last committed evaluation (a restored one's,
        for a command that evaluates once on its own)."""
        return self.before.get(name) or self.states[name]

    def pending(self) -> list[str]:
        return [n for n, s in self.states.items() if s.phase == "pending"]


def _ran_limit(rule: CompiledRule, st: RuleState) -> str:
    """``ran its limit (5 runs in 1h)``."""
    limit = rule.spec.limit
    return f"ran its limit ({limit.runs} runs in {format_duration(limit.within)})"


def next_step(rule: CompiledRule, st: RuleState, now: float) -> int | None:
    """The index of the step a ladder climbs to next (None: past its top). A climb starts
    at the highest step whose ``recurs`` the rule's boots meet, else at the first; each
    next step is the first after the last one run whose ``recurs`` (if any) is met."""
    steps = rule.steps
    if not st.step:
        met = [i for i, s in enumerate(steps)
               if s.recurs is not None and outcomes.recurred(st, s.recurs, now)]
        if met:
            return met[-1]
    for i in range(st.step, len(steps)):
        recurs = steps[i].recurs
        if recurs is None or outcomes.recurred(st, recurs, now):
            return i
    return None
