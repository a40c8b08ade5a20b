"""A rule's status in words, as ``guardian run --once`` and ``guardian explain`` print it:
where the rule is in its lifecycle and why it does or does not act now.

Every sentence is read from the engine: its state of the rule and the decisions of the
evaluation just made, with the engine's own bounds and waits asked the same questions
the engine asks (on copies: nothing here changes the engine). Durations are for people
(:func:`for_people`: "3m10s"), never raw seconds."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from guardian.core import numbers
from guardian.engine import bounds, causes, gate, outcomes, waits
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine, next_step
from guardian.engine.lifecycle import RuleState
from guardian.model.ruleset import BoundAction, CompiledRule

__all__ = ["Tally", "acted_line", "approval_words", "at", "climb_words", "for_people", "held_by",
           "now_words", "record_line", "state_words", "tally"]

ACTS = ("firing", "retry", "escalated")  # decision kinds that run actions


def for_people(span: float) -> str:
    """A duration as people read it ("3m10s", never "190.022s"; milliseconds below one
    second)."""
    return numbers.seconds(span)


def at(t: float) -> str:
    """A point of a run or recording, from its start: ``+6m15s``."""
    return "+" + for_people(t)


def _acting(rule: CompiledRule) -> list[BoundAction]:
    return [a for s in rule.steps for a in s.actions] or [
        a for a in rule.actions if a.spec.on != "resolve"]


def _uses(actions: Iterable[BoundAction]) -> str:
    return ", ".join(a.use for a in actions)


def held_by(engine: Engine, rule: CompiledRule) -> list[str]:
    """The active causes that hold some of the rule's actions (a ``hold = false`` or
    non-disruptive action is never held by a cause): none when nothing of it waits."""
    if not any(a.held_by_causes for a in _acting(rule)):
        return []
    return [name for name, _ in causes.holders(rule, engine.states)]


def _waiting_now(engine: Engine, rule: CompiledRule, now: float,
                 acting: list[BoundAction] | None = None) -> str:
    """Why some of the rule's actions (or of ``acting``) would wait if it acted now (""
    when none would): the engine's own waits, for a pause, an active cause, a shut
    window."""
    op = engine.operating  # what the last committed evaluation was judged under
    wall = op.wall if op.wall is not None else now
    _, why, _ = waits.waiting(acting or _acting(rule), waits.pause(op.holds, rule, wall),
                              causes.holders(rule, engine.states),
                              rule.spec.window or op.window, wall)
    return why


def _refusal(engine: Engine, rule: CompiledRule, st: RuleState, now: float) -> str:
    """The rule's limit or the global budget, asked as the engine asks (on copies)."""
    reason, _ = bounds.refusal(rule, dataclasses.replace(st), deque(engine.global_runs),
                               engine.budget, now)
    return reason


def now_words(engine: Engine, rule: CompiledRule, decisions: Sequence[Decision],
              now: float, *, dry_run: bool) -> str:
    """What the engine decided for ``rule`` at the evaluation at ``now`` (``decisions``:
    that evaluation's, or any that include it), in one line that starts with the phase:
    ``firing: would act now``, ``firing: in cooldown: acts again in 25m``, ``kept firing
    by keep_firing_for: ...``, ``pending: fires after holding for 5m (4m left)``..."""
    st = engine.states[rule.name]
    spec = rule.spec
    mine = [d for d in decisions if d.rule == rule.name and d.time == now]
    if not spec.enabled:
        return "disabled"
    resolved = next((d for d in mine if d.kind == "resolved"), None)
    if resolved is not None:
        clean = ""
        if resolved.actions:
            clean = (": would run its clean-up" if dry_run else ": running its clean-up")
        return f"resolved now{clean}"
    if st.unknown:
        stays = {"firing": " (still firing)", "pending": " (still pending)"}.get(st.phase, "")
        return f"unknown: the condition has no value; it neither fires nor clears{stays}"
    if st.phase == "pending" and st.since is not None:
        left = spec.for_ - (now - st.since)
        return (f"pending: fires after holding for {for_people(spec.for_)} "
                f"({for_people(left)} left)")
    if any(d.kind == "inactive" for d in mine):
        return "inactive now: it stopped holding before `for` passed, without firing"
    if st.phase == "inactive" and st.validating is not None:
        return st.validation or "validating"
    if st.phase == "inactive":
        return "inactive"
    return "firing: " + _firing_now(engine, rule, st, mine, now, dry_run=dry_run)


def _firing_now(engine: Engine, rule: CompiledRule, st: RuleState,
                mine: list[Decision], now: float, *, dry_run: bool, own: bool = False
                ) -> str:
    spec = rule.spec
    acted = [d for d in mine if d.kind in ACTS and d.actions]
    held = next((d for d in mine if d.kind == "held"), None)
    awaits = next((d for d in mine if d.kind == "awaiting_approval"), None)
    limited = next((d for d in mine if d.kind in ("suppressed", "firing") and d.reason
                    and not d.actions), None)
    parts: list[str] = []
    for d in acted:
        shadow = " (observe only: planned, never applied)" if d.mode == "observe" else ""
        verb = "would act now" if dry_run or d.mode == "observe" else "acting now"
        if d.kind == "escalated":
            run = "would run now" if dry_run or d.mode == "observe" else "run now"
            parts.append(f"{d.reason}; its escalate actions {run}: {_uses(d.actions)}"
                         f"{shadow}")
        else:
            if d.reason:  # what was held runs now, its cooldown or not
                verb += f" ({d.reason})"
            elif d.kind == "retry":
                verb += " again (its cooldown is over)"
            parts.append(f"{verb}: {_uses(d.actions)}{shadow}")
    if awaits is not None:
        parts.append(f"awaiting approval now: {awaits.reason}")
    if held is not None:
        parts.append(f"held now: {held.reason}")
    if limited is not None:
        parts.append(f"not acting: {limited.reason}")
    if parts:
        return "; ".join(parts)
    if st.keep_firing_since is not None:  # the condition no longer holds
        false_for = now - st.keep_firing_since
        left = spec.keep_firing_for - false_for
        since = (f"false for the last {for_people(false_for)}" if round(false_for) >= 1
                 else "false at this evaluation")
        return (f"kept firing by keep_firing_for: resolves in {for_people(left)} unless "
                f"it holds again ({since}; no action meanwhile)")
    if not _acting(rule):
        return "no action: it has none to run while firing"
    paused = f"; {st.paused}" if st.paused else ""
    awaiting = approval_words(rule, st, now)
    if awaiting:
        return awaiting + paused
    if rule.steps:
        return climb_words(engine, rule, engine.previous(rule.name) if own else st, now,
                           mine if own else None) + paused
    if bounds.cooling_down(rule, st, now):
        assert st.last_run is not None
        left = spec.cooldown - (now - st.last_run)
        waiting = ""
        if st.held:
            why = _waiting_now(engine, rule, now)  # a pause is among the waits
            waiting = (f"; waiting: {why}" if why else
                       "; what was held runs at the next evaluation")
            paused = ""
        return (f"in cooldown: actions again in {for_people(left)} (cooldown "
                f"{for_people(spec.cooldown)} from the last run, "
                f"{for_people(now - st.last_run)} ago){waiting}{paused}")
    reason = _refusal(engine, rule, st, now)
    if reason:
        return f"not acting: {reason}{paused}"
    return f"no action at this evaluation{paused}"


def approval_words(rule: CompiledRule, st: RuleState, now: float) -> str:
    """Where the rule's wait for approval stands (since when, when it times out, how to
    approve), or "" when it does not wait (see :func:`guardian.engine.gate.words`)."""
    if st.awaiting is None:
        return ""
    step = None
    if rule.steps:
        step = next_step(rule, st, now)
        if step is None:
            return ""
    return gate.words(rule, st, step, now)


def climb_words(engine: Engine, rule: CompiledRule, st: RuleState, now: float,
                own: Sequence[Decision] | None = None) -> str:
    """Where a ladder's climb is: ``step 2 of 3 (systemd.unit), verifying for 4m more;
    then step 3 (node.reboot)``, what the next step waits for, or that it needs a
    human. ``own``: the evaluation was this command's own, which applies nothing (its
    decisions; ``st`` the state it started from, as saved): it says the step it would
    run now, and never that one is verifying (none ran here)."""
    steps, n = rule.steps, st.step
    if own is not None:
        ran = next((d for d in own if d.rule == rule.name and d.time == now and d.step
                    and d.actions and d.kind in ("firing", "retry")), None)
        if ran is not None:
            return (f"would run step {ran.step} of {len(steps)} "
                    f"({steps[ran.step - 1].uses}) now")
    if st.escalated:
        last = f"; the last step run: {n} of {len(steps)} ({steps[n - 1].uses})" if n else ""
        return f"it needs a human: {st.escalated_why or 'it escalated'}{last}"
    if n:
        assert st.step_at is not None
        ran_step = steps[n - 1]
        left = ran_step.verify - (now - st.step_at)
        nxt = f"step {n + 1} ({steps[n].uses})" if n < len(steps) else "it needs a human"
        if round(left * 1000) > 0:
            if own is not None:
                then = f"step {n + 1} would run" if n < len(steps) else \
                    "it would need a human"
                return (f"step {n} of {len(steps)} ({ran_step.uses}) ran "
                        f"{for_people(now - st.step_at)} ago (the saved state); {then} "
                        f"in {for_people(left)} if it still fires")
            return (f"step {n} of {len(steps)} ({ran_step.uses}), verifying for "
                    f"{for_people(left)} more; then {nxt}")
        if n >= len(steps):
            return (f"step {n} of {len(steps)} ({ran_step.uses}) did not resolve it: it "
                    f"needs a human (its escalation waits)")
        head = f"step {n} of {len(steps)} ({ran_step.uses}) did not resolve it; {nxt}"
    else:
        head = f"step 1 of {len(steps)} ({steps[0].uses})"
        if not st.held and bounds.cooling_down(rule, st, now):
            assert st.last_run is not None
            left = rule.spec.cooldown - (now - st.last_run)
            return f"{head} runs after the cooldown, in {for_people(left)}"
    why = _waiting_now(engine, rule, now, steps[n].actions) if n < len(steps) else ""
    reason = _refusal(engine, rule, st, now)
    if why or reason:
        return f"{head} waits: {why or reason}"
    return f"{head} runs at the next evaluation"


def record_line(rule: CompiledRule, st: RuleState) -> str:
    """The rule's record (``record: fired 11 times, resolved 9 (after step 1: 7, ...),
    median 3m to resolve``); "" before it ever fired."""
    said = outcomes.words(st, ladder=bool(rule.steps))
    return f"record: {said}" if said else ""


def acted_line(rule: CompiledRule, st: RuleState, decisions: Sequence[Decision],
               verb: str = "acted") -> str:
    """The last time this firing episode ran (or, over a recording, would have run)
    actions: ``acted: +6m15s: firing: log, systemd.unit`` ("" when it has not)."""
    start = st.since if st.phase == "firing" else None
    if start is None:
        return ""
    ran = [d for d in decisions if d.rule == rule.name and d.kind in ACTS and d.actions
           and d.time >= start]
    if not ran:
        return ""
    d = ran[-1]
    shadow = " (shadow mode: never applied)" if d.mode == "observe" else ""
    return f"{verb}: {at(d.time)}: {d.kind}: {_uses(d.actions)}{shadow}"


def state_words(engine: Engine, rule: CompiledRule, decisions: Sequence[Decision],
                now: float, missing: Sequence[str], *, dry_run: bool = True,
                own: bool = False) -> str:
    """The rule's state at ``now`` in one line: disabled, unknown (and what is missing),
    pending (and when it fires), firing (for how long, and what the engine does about
    it now: acts, waits out its cooldown, is held, is kept firing by keep_firing_for) or
    inactive. ``own``: the evaluation was this command's own, which applies nothing (a
    climb says what it would run, never that a step verifies: see :func:`climb_words`)."""
    spec = rule.spec
    st = engine.states[rule.name]
    if not spec.enabled:
        return "disabled"
    if st.unknown:
        stays = {"firing": "; it was firing and stays so",
                 "pending": "; it was pending and stays so"}.get(st.phase, "")
        return ("UNKNOWN: the condition has no value (missing: "
                f"{', '.join(missing) or 'a computed value'}); it neither fires nor clears"
                f"{stays}")
    held_for = 0.0 if st.since is None else now - st.since
    if st.phase == "pending":
        return (f"PENDING: holds for {for_people(held_for)}; fires in "
                f"{for_people(spec.for_ - held_for)} (for = {for_people(spec.for_)})")
    if st.phase == "firing":
        words = _firing_now(engine, rule, st,
                            [d for d in decisions if d.rule == rule.name and d.time == now],
                            now, dry_run=dry_run, own=own)
        began = ""
        if st.active_at is not None and st.active_at != st.since:
            began = f" (began {for_people(now - st.active_at)} ago, pending first)"
        return f"FIRING for {for_people(held_for)}{began}; {words}"
    if st.validating is not None:
        return (f"VALIDATING: stopped firing {for_people(now - st.validating)} ago; "
                f"{st.validation}" + ("; it NEEDS A HUMAN" if st.escalated else ""))
    resolved = any(d.rule == rule.name and d.kind == "resolved" and d.time == now
                   for d in decisions)
    if resolved:
        return "INACTIVE: resolved at this evaluation"
    return "INACTIVE: the condition does not hold"


@dataclass
class Tally:
    """A pass over every rule, counted: each rule in one bucket (disabled, unknown,
    firing, pending, holds, ok), and the actions it ran, would run or held."""

    rules: int = 0
    ok: int = 0
    unknown: int = 0
    firing: int = 0
    pending: int = 0
    holds: int = 0  # the condition holds, neither pending nor firing (should not be)
    disabled: int = 0
    acting: int = 0  # actions run (live) or that would run (dry run) now
    held: int = 0  # actions planned while held, never applied
    shadow: int = 0  # a shadow rule's (mode = "observe") actions: planned, never applied
    failed: int = 0  # actions that failed, errored or were refused
    blind: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def line(self, dry_run: bool) -> str:
        """``55 rules: 45 ok, 9 unknown, 1 firing; nothing to do``."""
        counts = [(self.ok, "ok"), (self.firing, "firing"), (self.pending, "pending"),
                  (self.holds, "holding"), (self.unknown, "unknown"),
                  (self.disabled, "disabled")]
        head = f"{self.rules} rule{'s' if self.rules != 1 else ''}: " + \
            (", ".join(f"{n} {word}" for n, word in counts if n) or "none")
        todo: list[str] = []
        if self.acting:
            n = f"{self.acting} action{'s' if self.acting != 1 else ''}"
            todo.append(f"would run {n}" if dry_run else f"ran {n}")
        if self.failed:
            todo.append(f"{self.failed} failed or refused")
        if self.held:
            todo.append(f"{self.held} held")
        if self.shadow:
            todo.append(f"{self.shadow} planned only (observe)")
        return head + "; " + (", ".join(todo) or "nothing to do")

    def to_dict(self) -> dict[str, int]:
        return {"rules": self.rules, "ok": self.ok, "firing": self.firing,
                "pending": self.pending, "holds": self.holds, "unknown": self.unknown,
                "disabled": self.disabled, "actions": self.acting, "held": self.held,
                "observe": self.shadow, "failed": self.failed}


def tally(rules: Iterable[tuple[str, str, str, str, Sequence[str]]]) -> Tally:
    """Count ``(rule, condition, phase, why blind, results of its actions)`` rows, one
    per rule (condition: holds, ok, unknown, disabled; results: :attr:`Executed.result`
    of what it ran or planned at this evaluation)."""
    t = Tally()
    for name, condition, phase, blind, results in rules:
        t.rules += 1
        if condition == "disabled":
            t.disabled += 1
        elif condition == "unknown":
            t.unknown += 1
            t.blind.append((name, blind))
        elif phase == "firing":
            t.firing += 1
        elif phase == "pending":
            t.pending += 1
        elif condition == "holds":
            t.holds += 1
        else:
            t.ok += 1
        for r in results:
            if r in ("ok", "unverified", "planned"):
                t.acting += 1
            elif r == "held":
                t.held += 1
            elif r == "would_act":
                t.shadow += 1
            else:
                t.failed += 1
    return t
