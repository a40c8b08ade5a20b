"""The approval gate (``approve = { timeout, then }`` on a rule or a ladder step): its
disruptive actions wait for a human's approval; its other actions run when the wait
begins, so a human learns of it. The wait is durable (the rule's state keeps when it
began, on the engine's clock for the timeout and on the wall clock for the approvals), so
a restart keeps waiting. An approval counts only if given at or after the wait began
(:mod:`guardian.model.approvals`): the actions it lets run end the wait, and the next wait
(a retry, the next step, the next episode) needs a new one; one given after the timeout
passed comes too late. Past ``timeout`` without one
the rule needs a human (``then = "needs_human"``, the default: the gated actions never
run in that episode) or runs without one (``then = "proceed"``, said in its decision)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from guardian.core.durations import format_duration
from guardian.engine.lifecycle import RuleState
from guardian.model.approvals import Approval, found
from guardian.model.ruleset import BoundAction, CompiledRule
from guardian.model.schema import Approve

Said = Literal["begins", "waits", "approved", "timed_out", "proceeds"]


@dataclass(frozen=True)
class Verdict:
    """Where a gate stands at one evaluation: the wait ``begins`` now, still ``waits``,
    was ``approved`` (by ``approval``), ``timed_out`` (it needs a human) or ``proceeds``
    without an approval past its timeout; ``why`` says it for people."""

    said: Said
    why: str = ""
    approval: Approval | None = None


def gate_of(rule: CompiledRule, step: int | None = None) -> Approve | None:
    """The gate on ``rule``'s actions, or on its ladder step ``step`` (an index: the
    step's own, else the rule's)."""
    if step is None or step >= len(rule.spec.step):
        return rule.spec.approve
    return rule.spec.step[step].approve or rule.spec.approve


def gated(gate: Approve | None, actions: list[BoundAction]) -> list[BoundAction]:
    """The actions of ``actions`` that wait for an approval (the disruptive ones)."""
    return [a for a in actions if a.disruptive] if gate is not None else []


def ever_waits(rule: CompiledRule) -> bool:
    """Whether any of ``rule``'s actions can ever wait for an approval: a gate (its own,
    or a ladder step's) over at least one disruptive action it runs."""
    if rule.steps:
        return any(gated(gate_of(rule, i), step.actions)
                   for i, step in enumerate(rule.steps))
    return bool(gated(gate_of(rule), rule.actions))


def how_to(rule: str) -> str:
    """How a human approves ``rule``."""
    return (f"approve with `guardian approve {rule} --why TEXT` or the node annotation "
            f"guardian.io/approve")


def judge(gate: Approve, rule: CompiledRule, st: RuleState, actions: list[BoundAction],
          approvals: Iterable[Approval], now: float, wall: float) -> Verdict:
    """The gate's verdict at ``now`` (the engine's clock; ``wall`` for the approvals)
    on the gated ``actions``; a wait that begins is recorded in ``st``."""
    uses = ", ".join(a.use for a in actions)
    one = len(actions) == 1
    if st.awaiting is None or st.awaiting_wall is None:
        st.awaiting, st.awaiting_wall = now, wall
        then = ("then it needs a human" if gate.then == "needs_human"
                else "then they run without one")
        return Verdict("begins", f"{uses} wait{'s' if one else ''} for approval (times out in "
                                 f"{format_duration(gate.timeout)}, {then}): "
                                 f"{how_to(rule.name)}")
    # an approval given after the timeout passed comes too late: the episode needs a
    # human (who acts by hand), or its actions ran without one
    ends = st.awaiting_wall + gate.timeout
    approval = found((a for a in approvals if a.at < ends), rule.name, st.awaiting_wall,
                     wall)
    if approval is not None:
        return Verdict("approved", approval.describe(), approval)
    if round((now - st.awaiting) * 1000) < round(gate.timeout * 1000):
        return Verdict("waits")
    within = f"not approved within {format_duration(gate.timeout)}"
    if gate.then == "proceed":
        return Verdict("proceeds", f"{within}: {uses} run{'s' if one else ''} without an approval "
                                   f"(approve.then = \"proceed\")")
    return Verdict("timed_out", f"{within}: {uses} never run{'s' if one else ''} in this "
                                   f"episode")


def awaits(st: RuleState) -> bool:
    """Whether the rule waits for an approval now (a wait past its timeout needs a human
    instead: it escalated)."""
    return st.awaiting is not None and not st.escalated


def ended(st: RuleState) -> None:
    """The wait is over (its actions ran, or the episode ended)."""
    st.awaiting = st.awaiting_wall = None


def words(rule: CompiledRule, st: RuleState, step: int | None, now: float) -> str:
    """Where ``rule``'s wait stands, for `why`: ``waits for approval since 10:02:00Z
    (times out 12:02:00Z): approve with ...``; "" when it does not wait."""
    gate = gate_of(rule, step)
    if st.awaiting is None or st.awaiting_wall is None or gate is None:
        return ""
    ends = st.awaiting_wall + gate.timeout
    left = gate.timeout - (now - st.awaiting)
    if left <= 0:
        then = "it needs a human" if gate.then == "needs_human" else "it runs without one"
        return (f"waited for approval since {_clock(st.awaiting_wall)}: not approved "
                f"within {format_duration(gate.timeout)}, {then}")
    return (f"waits for approval since {_clock(st.awaiting_wall)} (times out "
            f"{_clock(ends)}): {how_to(rule.name)}")


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
