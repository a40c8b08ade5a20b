"""Monit-style bounds on a firing rule's action runs: a cooldown between runs, the
rule's own limit ("N runs within M"), and a global budget shared by all rules."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from guardian.core.durations import format_duration
from guardian.engine.lifecycle import RuleState
from guardian.model.ruleset import CompiledRule


@dataclass(frozen=True)
class Budget:
    """The global action budget: at most ``runs`` rule action runs within ``within`` s."""

    runs: int = 20
    within: float = 3600.0


def cooling_down(rule: CompiledRule, st: RuleState, now: float) -> bool:
    """The rule ran its actions less than its cooldown ago."""
    return st.last_run is not None and now - st.last_run < rule.spec.cooldown


def refusal(rule: CompiledRule, st: RuleState, global_runs: deque[float], budget: Budget,
            now: float) -> tuple[str, bool]:
    """Why an action run may not happen now ("" when it may), and whether it is the
    rule's own limit that says no. Runs that aged out of their windows are forgotten."""
    limit = rule.spec.limit
    horizon = now - limit.within
    st.runs = [t for t in st.runs if t > horizon]
    while global_runs and global_runs[0] <= now - budget.within:
        global_runs.popleft()
    if len(st.runs) >= limit.runs:
        return (f"rule limit reached: {len(st.runs)} action runs within "
                f"{format_duration(limit.within)}; not acting until one ages out"), True
    if not rule.observe and len(global_runs) >= budget.runs:
        return (f"global action budget reached: {len(global_runs)} runs within "
                f"{format_duration(budget.within)}"), False
    return "", False


def record_run(rule: CompiledRule, st: RuleState, global_runs: deque[float],
               now: float) -> None:
    """Count an action run against the rule's limit and (unless a shadow rule's, which
    are its own, not the node's) the global budget."""
    st.runs.append(now)
    if not rule.observe:
        global_runs.append(now)
