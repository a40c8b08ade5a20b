"""A rule's record, kept in its state (so across restarts and reboots): how often it
fired, how often it resolved and after which step of its remedy, how long that took (the
last :data:`KEPT` times, for a median) and how often it needed a human. Bounded: a few
counts and at most :data:`KEPT` times per rule."""

from __future__ import annotations

import statistics

from guardian.core import numbers
from guardian.engine.lifecycle import RuleState

KEPT = 20  # resolve times kept per rule
MOST_STEPS = 16  # resolutions counted per steps run, up to this many


def fired(st: RuleState, now: float) -> None:
    """The rule fired: a new episode begins unless one is still open (it fired again while
    its clean-up waited for validation)."""
    if st.fired_at is None:
        st.fired_at = now
        st.fires += 1


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
    """A fresh state that keeps ``st``'s record and its action bounds (a rule disabled
    by a reload)."""
    return RuleState(last_run=st.last_run, runs=list(st.runs), fires=st.fires,
                     resolutions=st.resolutions, resolve_times=list(st.resolve_times),
                     resolved_at=list(st.resolved_at), needs_human=st.needs_human)


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
    return out


def _times(n: int) -> str:
    return f"{n} time{'s' if n != 1 else ''}"
