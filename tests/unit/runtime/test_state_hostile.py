"""Hostile state files (tests/data/hostile/state/) and a wrong wall clock: what cannot be
trusted is dropped, never fatal, and never suppresses actions for good."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian import Engine, load_text
from guardian.runtime import state as state_file
from guardian.testing import snapshot
from tests.support.daemon import RULE
from tests.support.hostile import Case, cases

RULES = ("good", "bad", "nan", "str", "null", "nosince")


@pytest.mark.parametrize("case", cases("state", "json"))
def test_invalid_state_entries_are_dropped_not_fatal(case: Case) -> None:
    """Before: valid JSON of the wrong shape crashed start-up into a restart loop, and a
    NaN last_run bypassed cooldown and limit."""
    text = RULE.format(name=RULES[0]) + "".join(
        RULE.format(name=n).replace("version = 1\n", "") for n in RULES[1:])
    engine = Engine(load_text(text))
    kept = dict(line.split() for line in case.expected)
    assert state_file.load(engine, case.path) == list(kept)
    for rule, phase in kept.items():
        assert engine.states[rule].phase == phase


def test_a_wrong_wall_clock_never_suppresses_actions_for_good(tmp_path: Path) -> None:
    """Before: persisted times were wall-clock; a clock one year behind at start-up put
    every last run a year into the future, and no cooldown ever ended. The clocks are
    the state module's parameter (no patched ``time``)."""
    rules = load_text(RULE.format(name="r"))  # cooldown 1h
    engine = Engine(rules)
    now, wall, year = 5000.0, 1.7e9, 365 * 86400.0
    engine.states["r"].phase, engine.states["r"].since = "firing", now
    engine.states["r"].last_run = now
    path = tmp_path / "state.json"
    state_file.save(engine, path, clock=_clock("boot-a", now, wall))
    # the same boot: monotonic times are exact, whatever the wall clock says
    same = Engine(rules)
    state_file.load(same, path, clock=_clock("boot-a", now + 10, wall - year))
    assert same.states["r"].last_run == now
    # another boot (the wall clock a year behind): nothing lands after now
    other = Engine(rules)
    loaded = 20.0  # this boot's monotonic clock at the load
    state_file.load(other, path, clock=_clock("boot-b", loaded, wall - year))
    last = other.states["r"].last_run
    assert last is not None and last <= loaded
    an_hour_on = snapshot(loaded + 3601, {"processes.total": 5.0})  # the cooldown is over
    assert [d.kind for d in other.evaluate(an_hour_on)] == ["retry"]


def _clock(boot: str, mono: float, wall: float) -> state_file.Clock:
    return state_file.Clock(monotonic=lambda: mono, wall=lambda: wall, boot=lambda: boot)
