"""A rule's lifecycle, Prometheus' state machine: inactive -> pending (the condition
holds, ``for`` has not passed) -> firing -> resolved (false for ``keep_firing_for``),
then inactive again. Only the phases live here; what a firing rule may do is
:mod:`guardian.engine.bounds`'.

:class:`RuleState` is the one definition of what the engine remembers of a rule, and so
of what a saved state holds: every field is saved and restored (the state file validates
an entry against these same types), so nothing an evaluation reads is lost by a restart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Annotated, Literal

from pydantic import AllowInfNan, NonNegativeFloat, NonNegativeInt, Strict, StrictBool, StrictStr

from guardian.model.kinds import Phase
from guardian.model.ruleset import CompiledRule

# What one evaluation did to a rule's phase: it became pending or fired, it went on
# firing (a ``retry``: actions again, if the bounds allow), or it ended (``inactive``:
# pending without firing; ``resolved``: firing no more).
Step = Literal["pending", "firing", "retry", "resolved", "inactive"]

# A time on the engine's clock (a snapshot's ``time``): a finite number. The metadata
# only matters when a saved state is validated; the engine itself never pays for it.
Time = Annotated[float, AllowInfNan(False), Strict()]
# A count, and a span of time (not a point: never moved from one clock to another).
Count = Annotated[NonNegativeInt, Strict()]
Span = Annotated[NonNegativeFloat, AllowInfNan(False), Strict()]


@dataclass(slots=True)
class RuleState:
    """What the engine remembers of one rule between ticks; all of it is saved."""

    phase: Phase = "inactive"
    since: Time | None = None  # pending or firing since
    active_at: Time | None = None  # the condition holds since (pending's start)
    keep_firing_since: Time | None = None  # firing, first false evaluation since it held
    last_run: Time | None = None
    runs: list[Time] = field(default_factory=list)  # action runs within the limit window
    said_suppressed: StrictBool = False
    held: StrictBool = False  # disruptive actions are owed: held while a cause was active
    unknown: StrictBool = False  # condition had no value at the last tick
    changed: StrictBool = False  # reloaded with another condition or timing; not yet evaluated
    escalated: StrictBool = False  # needs a human (its limit, its top step, its validation)
    paused: StrictStr = ""  # the hold that pauses it now, described ("" when none)
    # a ladder's climb (guardian.engine.ladder): the steps run in it, when the last ran
    step: Count = 0
    step_at: Time | None = None
    fired_at: Time | None = None  # this episode's first fire (it ends when it resolves)
    # stopped firing, its clean-up waits for `validate` (since), which holds since
    validating: Time | None = None
    valid_since: Time | None = None
    validation: StrictStr = ""  # where the validation stands, said
    # its record (guardian.engine.outcomes), kept across restarts and reboots
    fires: Count = 0
    resolutions: Count = 0
    resolve_times: list[Span] = field(default_factory=list)  # the last ones, seconds
    resolved_at: list[Count] = field(default_factory=list)  # per steps run: resolutions
    needs_human: Count = 0  # times it escalated
    # the boots it fired in (their ids, the last few) and when it first fired in each
    boots: list[StrictStr] = field(default_factory=list)
    boot_times: list[Time] = field(default_factory=list)
    # learning (`demote`): the episodes its remedy acted in since the rule last changed
    # (``remedy``: its fingerprint then), those of them it resolved without a human, why
    # it was demoted ("" when it was not) and whether this episode runs in shadow mode
    tried: Count = 0
    worked: Count = 0
    demoted: StrictStr = ""
    shadow: StrictBool = False
    remedy: StrictStr = ""
    # why it needs a human, said ("its 3 steps ran and it still fires"; "" when it does not)
    escalated_why: StrictStr = ""
    # an approval gate (`approve`): its disruptive actions wait for a human's approval
    # since then (the engine's clock: the timeout), and since then on the wall clock (an
    # approval counts only if given at or after it; never shifted to another clock)
    awaiting: Time | None = None
    awaiting_wall: Time | None = None

    def copy(self) -> RuleState:
        """An independent copy (what an evaluation changes, while the engine's stays)."""
        return RuleState(self.phase, self.since, self.active_at, self.keep_firing_since,
                         self.last_run, list(self.runs), self.said_suppressed, self.held,
                         self.unknown, self.changed, self.escalated, self.paused,
                         self.step, self.step_at, self.fired_at, self.validating,
                         self.valid_since, self.validation, self.fires, self.resolutions,
                         list(self.resolve_times), list(self.resolved_at),
                         self.needs_human, list(self.boots), list(self.boot_times),
                         self.tried, self.worked, self.demoted, self.shadow, self.remedy,
                         self.escalated_why, self.awaiting, self.awaiting_wall)

    def shifted(self, t: Callable[[float], float]) -> RuleState:
        """A copy with every time mapped through ``t`` (from one clock to another)."""
        def opt(x: float | None) -> float | None:
            return None if x is None else t(x)
        out = self.copy()
        out.since, out.active_at = opt(self.since), opt(self.active_at)
        out.keep_firing_since, out.last_run = opt(self.keep_firing_since), opt(self.last_run)
        out.runs = [t(x) for x in self.runs]
        out.step_at, out.fired_at = opt(self.step_at), opt(self.fired_at)
        out.validating, out.valid_since = opt(self.validating), opt(self.valid_since)
        out.awaiting = opt(self.awaiting)
        out.boot_times = [t(x) for x in self.boot_times]
        return out

    def problem(self) -> str:
        """Why this state cannot be (a phase past inactive has a start); "" when it can."""
        if self.phase != "inactive" and self.since is None:
            return f"{self.phase} without `since`"
        if self.step and self.step_at is None:
            return f"step {self.step} of a climb without `step_at`"
        if len(self.boots) != len(self.boot_times):
            return "`boots` and `boot_times` of different lengths"
        if (self.awaiting is None) != (self.awaiting_wall is None):
            return "`awaiting` and `awaiting_wall` not both set"
        return ""


FIELDS = tuple(f.name for f in fields(RuleState))


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

