"""A rule's record, kept in its state (so across restarts and reboots): how often it
fired, how often it resolved and after which step of its remedy, how long that took (the
last :data:`KEPT` times, for a median), how often it needed a human, and the boots it
fired in (the last :data:`KEPT_BOOTS`: what a step's ``recurs`` counts). For learning
(``demote``), the episodes its remedy acted in since the rule last changed and how many
of them it resolved without a human. Bounded: a few counts, at most :data:`KEPT` times
and :data:`KEPT_BOOTS` boots per rule."""

from __future__ import annotations

import statistics

from guardian.core import numbers
from guardian.core.durations import format_duration
from guardian.engine.lifecycle import RuleState
from guardian.model.schema import Demote, Recurs

KEPT = 20  # resolve times kept per rule
KEPT_BOOTS = 8  # boots kept per rule (a step's `recurs` counts at most this many)
MOST_STEPS = 16  # resolutions counted per steps run, up to this many


def in_boot(st: RuleState, boot: str, now: float) -> None:
    """The rule fires in ``boot`` (its id; "" when unknown: not counted) at ``now``: the
    boot joins its record the first time."""
    if boot and (not st.boots or st.boots[-1] != boot):
        st.boots = [*st.boots, boot][-KEPT_BOOTS:]
        st.boot_times = [*st.boot_times, now][-KEPT_BOOTS:]


def boots_within(st: RuleState, within: float, now: float) -> int:
    """The boots it fired in (first) within ``within`` before ``now``, this one included."""
    return sum(1 for t in st.boot_times if round((now - t) * 1000) <= round(within * 1000))


def recurred(st: RuleState, recurs: Recurs, now: float) -> bool:
    """Whether it fired in ``recurs.boots`` boots within ``recurs.within``."""
    return boots_within(st, recurs.within, now) >= recurs.boots


def ended(st: RuleState, worked: bool) -> None:
    """An episode its remedy acted in ended: resolved without a human (``worked``), or
    it needed one. A shadow episode (demoted) is no attempt of the remedy."""
    if not st.shadow:
        st.tried += 1
        st.worked += worked


def judge(st: RuleState, demote: Demote | None) -> str:
    """Why the rule is to be demoted to shadow mode now ("" when it is not, or is
    already): its remedy acted ``demote.after`` times or more and resolved it less than
    ``demote.below`` of them."""
    if demote is None or st.demoted or st.tried < demote.after \
            or st.worked >= demote.fraction * st.tried:
        return ""
    return (f"demoted to observe: its remedy resolved it {st.worked} of {st.tried} times "
            f"it acted (below {demote.below}); a reload or restart with the rule changed "
            f"puts it back to act")


def rejudged(st: RuleState, fingerprint: str) -> None:
    """The rule as it is now (its ``fingerprint``): one that changed starts its learning
    afresh, and a demotion is lifted (the episode under way stays as it began)."""
    if st.remedy != fingerprint:
        st.remedy = fingerprint
        st.tried = st.worked = 0
        st.demoted = ""


def fired(st: RuleState, now: float) -> None:
    """The rule fired: a new episode begins unless one is still open (it fired again while
    its clean-up waited for validation)."""
    if st.fired_at is None:
        st.fired_at = now
        st.fires += 1
        st.shadow = bool(st.demoted)


def resolved(st: RuleState, now: float) -> tuple[int, float | None]:
    """The episode ended at ``now``: counted, its time kept, its climb reset. Returns the
    steps run in it (which one resolved it) and how long it took since it fired."""
    lasted = None if st.fired_at is None else max(now - st.fired_at, 0.0)
    step = min(st.step, MOST_STEPS)
    st.resolutions += 1
    if lasted is not None:
        st.resolve_times = [*st.resolve_times, lasted][-KEPT:]
    counts = list(st.resolved_at) + [0] * max(step + 1 - len(st.resolved_at), 0)
    counts[step] += 1
    st.resolved_at = counts
    st.fired_at = st.step_at = st.validating = st.valid_since = None
    st.step, st.validation = 0, ""
    return step, lasted


def keep(st: RuleState) -> RuleState:
    """A fresh state that keeps ``st``'s record, its learning and its action bounds (a
    rule disabled by a reload)."""
    return RuleState(last_run=st.last_run, runs=list(st.runs), fires=st.fires,
                     resolutions=st.resolutions, resolve_times=list(st.resolve_times),
                     resolved_at=list(st.resolved_at), needs_human=st.needs_human,
                     boots=list(st.boots), boot_times=list(st.boot_times),
                     tried=st.tried, worked=st.worked, demoted=st.demoted,
                     remedy=st.remedy)


def words(st: RuleState, ladder: bool) -> str:
    """The record for people: ``fired 11 times, resolved 9 (after step 1: 7, after step
    2: 2), median 3m to resolve (of the last 9); needed a human 1 time`` ("" before it
    ever fired)."""
    if not st.fires:
        return ""
    out = f"fired {_times(st.fires)}, resolved {st.resolutions}"
    if ladder:
        after = [f"after step {i}: {n}" if i else f"before any step: {n}"
                 for i, n in enumerate(st.resolved_at) if n]
        if after:
            out += f" ({', '.join(after)})"
    elif len(st.resolved_at) > 1 and st.resolved_at[1]:
        out += f" ({st.resolved_at[1]} after its actions ran)"
    if st.resolve_times:
        median = numbers.seconds(round(statistics.median(st.resolve_times)))
        out += f", median {median} to resolve (of the last {len(st.resolve_times)})"
    if st.needs_human:
        out += f"; needed a human {_times(st.needs_human)}"
    if len(st.boots) > 1:
        out += f"; fired in {len(st.boots)} boots" + (
            f" (the last {KEPT_BOOTS} kept)" if len(st.boots) >= KEPT_BOOTS else "")
    if st.demoted:
        out += f"; {st.demoted}"
    return out


def recurs_words(recurs: Recurs) -> str:
    """``once it fired in 2 boots within 7d``."""
    return f"once it fired in {recurs.boots} boots within {format_duration(recurs.within)}"


def _times(n: int) -> str:
    return f"{n} time{'s' if n != 1 else ''}"
