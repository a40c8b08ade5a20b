"""Hostile state files (tests/data/hostile/state/) and a wrong wall clock: what cannot be
trusted is dropped, never fatal, and never suppresses actions for good."""

from __future__ import annotations

import time
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


def test_a_wrong_wall_clock_never_suppresses_actions_for_good(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: persisted times were wall-clock; a clock one year behind at start-up put
    every last run a year into the future, and no cooldown ever ended."""
    rules = load_text(RULE.format(name="r"))  # cooldown 1h
    engine = Engine(rules)
    now = time.monotonic()
    engine.states["r"].phase, engine.states["r"].since = "firing", now
    engine.states["r"].last_run = now
    path = tmp_path / "state.json"
    state_file.save(engine, path)
    year = 365 * 86400.0
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - year)  # the clock state reads
    # the same boot: monotonic times are exact, whatever the wall clock says
    same = Engine(rules)
    state_file.load(same, path)
    assert same.states["r"].last_run == now
    # another boot (the wall clock a year behind): nothing lands after now
    monkeypatch.setattr(state_file, "boot_id", lambda path: "another-boot")
    other = Engine(rules)
    state_file.load(other, path)
    last, loaded = other.states["r"].last_run, time.monotonic()  # a time, not a duration
    assert last is not None and last <= loaded
    an_hour_on = snapshot(loaded + 3601, {"processes.total": 5.0})  # the cooldown is over
    assert [d.kind for d in other.evaluate(an_hour_on)] == ["retry"]
