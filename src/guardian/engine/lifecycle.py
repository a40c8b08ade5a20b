"""A rule's lifecycle, Prometheus' state machine: inactive -> pending (the condition
holds, ``for`` has not passed) -> firing -> resolved (false for ``keep_firing_for``),
then inactive again. Only the phases live here; what a firing rule may do is
:mod:`guardian.engine.bounds`'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from guardian.model.kinds import PHASES, Phase
from guardian.model.ruleset import CompiledRule

# What one evaluation did to a rule's phase: it became pending or fired, it went on
# firing (a ``retry``: actions again, if the bounds allow), or it ended (``inactive``:
# pending without firing; ``resolved``: firing no more).
Step = Literal["pending", "firing", "retry", "resolved", "inactive"]


@dataclass
class RuleState:
    """What the engine remembers of one rule between ticks (persistable)."""

    phase: Phase = "inactive"
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

    def export(self, t: Callable[[float | None], float | None]) -> dict[str, Any]:
        """What survives a restart, each time mapped through ``t``."""
        return {"phase": self.phase, "since": t(self.since), "active_at": t(self.active_at),
                "keep_firing_since": t(self.keep_firing_since),
                "last_run": t(self.last_run),
                "runs": [v for x in self.runs if (v := t(x)) is not None],
                "said_suppressed": self.said_suppressed, "held": self.held,
                "escalated": self.escalated}

    def restore(self, saved: dict[str, Any], t: Callable[[Any], float | None]) -> None:
        """Take back what :meth:`export` wrote, each time mapped through ``t``."""
        phase = saved.get("phase")
        self.phase = phase if phase in PHASES else "inactive"
        self.since = t(saved.get("since"))
        self.keep_firing_since = t(saved.get("keep_firing_since"))
        self.active_at = t(saved.get("active_at", saved.get("since")))
        self.last_run = t(saved.get("last_run"))
        self.runs = [v for x in saved.get("runs", []) if (v := t(x)) is not None]
        self.said_suppressed = bool(saved.get("said_suppressed"))
        self.held = bool(saved.get("held"))
        self.escalated = bool(saved.get("escalated"))


def advance(rule: CompiledRule, st: RuleState, holds: bool, now: float
            ) -> tuple[Step, str] | None:
    """Move ``st`` on by one evaluation whose condition ``holds`` (or not) at ``now``:
    what happened and why when it is not the plain transition, or None when its phase
    stays as it was (still pending, or still kept firing). Timings are compared in whole
    milliseconds."""
    if st.changed:
        st.changed = False
        start = st.active_at if st.active_at is not None else st.since
        if st.phase == "firing" and holds and start is not None \
                and round((now - start) * 1000) < rule.for_ms:
            # a reload raised `for`: back to pending, from when the condition began
            st.phase, st.since = "pending", start
            st.keep_firing_since = None
            return "pending", "reload raised `for`; pending since the condition began to hold"
    if st.phase == "inactive":
        if not holds:
            return None
        st.since = st.active_at = now
        if rule.spec.for_ <= 0:
            return _fire(st, now)
        st.phase = "pending"
        return "pending", ""
    if st.phase == "pending":
        if not holds:
            st.phase = "inactive"
            st.since = st.active_at = None
            return "inactive", ""
        assert st.since is not None
        return _fire(st, now) if round((now - st.since) * 1000) >= rule.for_ms else None
    if holds:  # firing, still true
        st.keep_firing_since = None
        return "retry", ""
    # firing, no longer true: kept firing for keep_firing_for from here
    if st.keep_firing_since is None:
        st.keep_firing_since = now
    if round((now - st.keep_firing_since) * 1000) < rule.keep_firing_ms:
        return None
    st.phase = "inactive"
    st.since = st.active_at = st.keep_firing_since = None
    return "resolved", ""


def _fire(st: RuleState, now: float) -> tuple[Step, str]:
    st.phase = "firing"
    st.since = now
    return "firing", ""

