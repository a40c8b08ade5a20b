"""The saved state is the engine's state, whole (issue 39): a save and a load give back
every field of every rule's state (before, ``changed``, ``unknown`` and ``paused`` were
left out, so a tick undone through a save forgot a reload's raised ``for`` and acted
again); a file written in format 2 before these fields existed still loads."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from guardian import Engine, Snapshot, load_text
from guardian.engine.engine import EngineState
from guardian.engine.lifecycle import FIELDS, RuleState
from guardian.model.kinds import PHASES
from guardian.runtime import state as state_file
from guardian.testing import snapshot
from tests.support.daemon import RULE

DATA = Path(__file__).resolve().parents[2] / "data" / "state"
NOW = 10_000.0
times = st.floats(min_value=0.0, max_value=NOW, allow_nan=False, allow_infinity=False)


def clock(boot: str = "boot-a", mono: float = NOW, wall: float = 1.7e9) -> state_file.Clock:
    return state_file.Clock(monotonic=lambda: mono, wall=lambda: wall, boot=lambda: boot)


@st.composite
def rule_states(draw: st.DrawFn) -> RuleState:
    phase = draw(st.sampled_from(PHASES))
    since = draw(times) if phase != "inactive" else draw(st.none() | times)
    step = draw(st.integers(0, 4))
    counts = st.integers(0, 10**6)
    boots = draw(st.integers(0, 8))
    # issue 42: a ladder's climb, a validation's gate and the rule's record
    return RuleState(phase, since, draw(st.none() | times), draw(st.none() | times),
                     draw(st.none() | times), draw(st.lists(times, max_size=5)),
                     draw(st.booleans()), draw(st.booleans()), draw(st.booleans()),
                     draw(st.booleans()), draw(st.booleans()), draw(st.text(max_size=20)),
                     step, draw(times) if step else draw(st.none() | times),
                     draw(st.none() | times), draw(st.none() | times),
                     draw(st.none() | times), draw(st.text(max_size=20)), draw(counts),
                     draw(counts), draw(st.lists(times, max_size=20)),
                     draw(st.lists(counts, max_size=5)), draw(counts),
                     # boots it fired in, and learning (its remedy: the rules' fingerprint,
                     # which a restore keeps)
                     [f"boot-{i}" for i in range(boots)],
                     draw(st.lists(times, min_size=boots, max_size=boots)),
                     draw(counts), draw(counts), draw(st.text(max_size=20)),
                     draw(st.booleans()), TWO.rules[0].fingerprint)


TWO = load_text(RULE.format(name="a") + RULE.format(name="b").replace("version = 1\n", ""))


def _engine() -> Engine:
    return Engine(TWO)


@settings(max_examples=150, deadline=None)
@given(a=rule_states(), b=rule_states(), runs=st.lists(times, max_size=5))
def test_a_save_and_a_load_give_back_every_field(a: RuleState, b: RuleState,
                                                 runs: list[float]) -> None:
    engine = _engine()
    engine.restore(EngineState({"a": a, "b": b}, runs))
    raw = json.loads(json.dumps(state_file.encode(engine.state(), clock())))
    again = _engine()
    again.restore(state_file.decode(raw, Path("state.json"), clock(mono=NOW + 5)))
    for name, want in (("a", a), ("b", b)):
        got = again.states[name]
        assert {f: getattr(got, f) for f in FIELDS} == {f: getattr(want, f) for f in FIELDS}
    assert list(again.global_runs) == sorted(runs)


def test_a_format_2_file_from_before_loads_with_defaults_for_what_it_lacks() -> None:
    engine = Engine(load_text(RULE.format(name="acts") + RULE.format(name="old").replace(
        "version = 1\n", "")))
    # the same boot, 50 s on: the times are exact
    restored = state_file.load(engine, DATA / "format2-before-issue39.json",
                               clock=clock(boot="0c1d2e3f-boot", mono=1050.0))
    assert restored == ["acts", "old"]
    acts = engine.states["acts"]
    assert (acts.phase, acts.since, acts.active_at, acts.last_run, acts.runs, acts.held) == \
        ("firing", 900.0, 880.0, 990.0, [900.0, 990.0], True)
    assert (acts.changed, acts.unknown, acts.paused) == (False, False, "")
    old = engine.states["old"]
    assert (old.phase, old.since, old.active_at) == ("pending", 950.0, 950.0)
    assert list(engine.global_runs) == [900.0, 990.0]


def test_a_saved_reload_still_raises_for_after_a_restart(tmp_path: Path) -> None:
    """The reload's promise (``changed``) is saved: a restart before the next evaluation
    does not turn a raised ``for`` back into a retry."""
    text = RULE.format(name="r").replace('cooldown = "1h"', 'cooldown = "0s"')
    engine = Engine(load_text(text))
    engine.evaluate(_snap(0.0))
    assert engine.states["r"].phase == "firing"
    engine.replace_rules(load_text(text.replace('summary = "s"',
                                                'summary = "s"\nfor = "1h"')))
    path = tmp_path / "state.json"
    state_file.save(engine, path, clock=clock(mono=10.0))
    again = Engine(load_text(text.replace('summary = "s"', 'summary = "s"\nfor = "1h"')))
    state_file.load(again, path, clock=clock(mono=10.0))
    assert [d.kind for d in again.evaluate(_snap(10.0))] == ["pending"]


def _snap(t: float) -> Snapshot:
    return snapshot(t, {"processes.total": 5.0})
