"""A rule's status in words, as ``guardian run --once`` and ``guardian explain`` print it:
where the rule is in its lifecycle and why it does or does not act now."""

from __future__ import annotations

from collections.abc import Sequence

from guardian.engine.lifecycle import RuleState
from guardian.model.ruleset import CompiledRule

__all__ = ["not_acting", "state_words"]


def not_acting(rule: CompiledRule, st: RuleState, now: float) -> str:
    """Why a rule whose condition holds does not act at this evaluation."""
    if st.phase == "pending" and st.since is not None:
        left = max(rule.spec.for_ - (now - st.since), 0.0)
        return f"pending: fires after holding for {rule.spec.for_:g}s ({left:g}s left), then:"
    if st.phase == "firing":
        return "firing: no action now (cooldown, limit or budget; see `guardian explain`)"
    return "would fire, then:"


def state_words(rule: CompiledRule, st: RuleState, now: float, missing: Sequence[str],
                holders: Sequence[tuple[str, str]]) -> str:
    """The rule's state at ``now`` in one line: disabled, unknown (and what is missing),
    pending (and when it fires), firing (and its cooldown, and the causes that hold its
    disruptive actions) or inactive."""
    spec = rule.spec
    if not spec.enabled:
        return "disabled"
    if st.unknown:
        return ("UNKNOWN: the condition has no value (missing: "
                f"{', '.join(missing) or 'a computed value'}); it neither fires nor clears")
    held_for = now - (now if st.since is None else st.since)
    if st.phase == "pending":
        left = spec.for_ - held_for
        return (f"PENDING: holds since {held_for:g}s; fires in {max(left, 0):g}s "
                f"(for = {spec.for_:g}s)")
    if st.phase == "firing":
        cool = ""
        if st.last_run is not None and now - st.last_run < spec.cooldown:
            cool = f"; actions again in {spec.cooldown - (now - st.last_run):g}s (cooldown)"
        held = ""
        if holders:
            held = ("; its disruptive actions are held while its cause " +
                    ", ".join(f"{name} is {phase}" for name, phase in holders))
        return f"FIRING since {held_for:g}s{cool}{held}"
    return "INACTIVE: the condition does not hold"
