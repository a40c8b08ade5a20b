"""Why a firing rule's actions wait rather than run: a hold pauses the rule, a tripped
breaker (a latched hold) holds its disruptive actions, a cause of it is active, or its
maintenance window is shut."""

from __future__ import annotations

from collections.abc import Iterable

from guardian.model.holds import Hold
from guardian.model.kinds import Phase
from guardian.model.ruleset import BoundAction, CompiledRule
from guardian.model.window import Window


def pause(holds: Iterable[Hold], rule: CompiledRule, wall: float) -> Hold | None:
    """The hold in force at ``wall`` that pauses ``rule`` (the one that ends last); a
    latched hold pauses nothing (see :func:`latch`)."""
    found = [h for h in holds if h.until > wall and not h.latched
             and h.matches(rule.name, rule.spec.labels)]
    return max(found, key=lambda h: h.until) if found else None


def latch(holds: Iterable[Hold], rule: CompiledRule) -> Hold | None:
    """The latched hold (a tripped breaker) on ``rule``'s disruptive actions, if any (the
    first by its reason, so the same holds always name the same one)."""
    found = [h for h in holds if h.latched and h.matches(rule.name, rule.spec.labels)]
    return min(found, key=lambda h: h.reason) if found else None


def waiting(acting: list[BoundAction], paused: Hold | None,
            holders: list[tuple[str, Phase]], window: Window | None, wall: float,
            latched: Hold | None = None
            ) -> tuple[list[BoundAction], str, list[BoundAction]]:
    """The actions of ``acting`` that wait now, why, and those of them to plan: a pause
    holds every action; a ``latched`` hold (a tripped breaker) holds the disruptive ones
    until a human releases it; while a cause (of ``holders``) is active, its disruptive
    actions wait; outside the maintenance ``window`` a disruptive action waits."""
    if paused is not None:
        return list(acting), paused.describe(), list(acting)
    held: list[BoundAction] = []
    why: list[str] = []
    planned: list[BoundAction] = []
    if latched is not None:
        planned = [a for a in acting if a.disruptive]
        if planned:
            held += planned
            why.append(f"{', '.join(a.use for a in planned)} held: {latched.describe()}")
    if holders:
        by_causes = [a for a in acting if a.held_by_causes and a not in held]
        if by_causes:
            held += by_causes
            causes = ", ".join(f"{name} is {phase}" for name, phase in holders)
            why.append(f"{', '.join(a.use for a in by_causes)} held while its cause "
                       f"{causes}: the cause is fixed first")
    if window is not None and not window.is_open(wall):
        shut = [a for a in acting if a.disruptive and a not in held]
        if shut:
            held += shut
            planned += shut
            why.append(f"{', '.join(a.use for a in shut)} held outside the "
                       f"maintenance window ({window.describe()}): runs when it opens")
    return held, "; ".join(why), planned
