"""Why a firing rule's actions wait rather than run: a hold pauses the rule, a cause of
it is active, or its maintenance window is shut."""

from __future__ import annotations

from collections.abc import Iterable

from guardian.model.holds import Hold
from guardian.model.kinds import Phase
from guardian.model.ruleset import BoundAction, CompiledRule
from guardian.model.window import Window


def pause(holds: Iterable[Hold], rule: CompiledRule, wall: float) -> Hold | None:
    """The hold in force at ``wall`` that pauses ``rule`` (the one that ends last)."""
    found = [h for h in holds if h.until > wall and h.matches(rule.name, rule.spec.labels)]
    return max(found, key=lambda h: h.until) if found else None


def waiting(acting: list[BoundAction], paused: Hold | None,
            holders: list[tuple[str, Phase]], window: Window | None, wall: float
            ) -> tuple[list[BoundAction], str, list[BoundAction]]:
    """The actions of ``acting`` that wait now, why, and those of them to plan: a pause
    holds every action; while a cause (of ``holders``) is active, its disruptive actions
    wait; outside the maintenance ``window`` a disruptive action waits."""
    if paused is not None:
        return list(acting), paused.describe(), list(acting)
    held: list[BoundAction] = []
    why: list[str] = []
    if holders:
        held = [a for a in acting if a.held_by_causes]
        if held:
            causes = ", ".join(f"{name} is {phase}" for name, phase in holders)
            why.append(f"{', '.join(a.use for a in held)} held while its cause "
                       f"{causes}: the cause is fixed first")
    planned: list[BoundAction] = []
    if window is not None and not window.is_open(wall):
        planned = [a for a in acting if a.disruptive and a not in held]
        if planned:
            held += planned
            why.append(f"{', '.join(a.use for a in planned)} held outside the "
                       f"maintenance window ({window.describe()}): runs when it opens")
    return held, "; ".join(why), planned
