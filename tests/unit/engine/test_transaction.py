"""One tick, one transaction (issue 39): :meth:`Engine.propose` changes nothing of the
engine's decision state; :meth:`Engine.commit` takes the proposal whole; a dropped one
leaves the engine where it was, a reload's raised ``for`` included; a stale one is
refused. Holds, wall time and window are arguments of the evaluation."""

from __future__ import annotations

import pytest

from guardian import Engine, Snapshot, load_text
from guardian.engine.engine import StaleProposal
from guardian.engine.lifecycle import FIELDS
from guardian.model.holds import Hold

RULE = '''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 10"
{timing}cooldown = "0s"
limit = {{ runs = 100, within = "1h" }}
  [[rule.action]]
  use = "log"
'''


def _fields(engine: Engine) -> dict[str, object]:
    return {n: {f: getattr(st, f) for f in FIELDS} for n, st in engine.states.items()}


def _snap(t: float, v: float = 50.0) -> Snapshot:
    return Snapshot(t, {"memcg.dying": v})


def test_a_proposal_changes_nothing_until_committed() -> None:
    engine = Engine(load_text(RULE.format(timing="")))
    before, runs, generation = _fields(engine), list(engine.global_runs), engine.generation
    first = engine.propose(_snap(0.0))
    assert [d.kind for d in first.decisions] == ["firing"]
    assert _fields(engine) == before and list(engine.global_runs) == runs
    assert engine.generation == generation
    again = engine.propose(_snap(1.0))  # the first was dropped: the same decision again
    assert [d.kind for d in again.decisions] == ["firing"]
    engine.commit(again.proposal)
    assert engine.states["r"].phase == "firing" and list(engine.global_runs) == [1.0]
    with pytest.raises(StaleProposal):
        engine.commit(first.proposal)  # made before the commit: never applied over it


def test_a_dropped_tick_keeps_a_reloads_raised_for() -> None:
    """Before: the daemon undid a tick by re-importing the saved state, which had no
    ``changed``; the rule went on firing and acted at the next tick."""
    engine = Engine(load_text(RULE.format(timing="")))
    engine.evaluate(_snap(0.0))
    engine.replace_rules(load_text(RULE.format(timing='for = "1h"\n')))
    dropped = engine.propose(_snap(10.0))
    assert [(d.kind, d.reason) for d in dropped.decisions] == [
        ("pending", "reload raised `for`; pending since the condition began to hold")]
    assert engine.states["r"].changed and engine.states["r"].phase == "firing"
    kept = engine.propose(_snap(20.0))
    assert [d.kind for d in kept.decisions] == ["pending"]
    engine.commit(kept.proposal)
    assert [d.kind for d in engine.evaluate(_snap(30.0))] == []  # waits its hour


def test_a_reload_between_propose_and_commit_makes_the_proposal_stale() -> None:
    rules = load_text(RULE.format(timing=""))
    engine = Engine(rules)
    evaluation = engine.propose(_snap(0.0))
    engine.replace_rules(rules)
    with pytest.raises(StaleProposal):
        engine.commit(evaluation.proposal)


def test_holds_wall_and_window_are_arguments_of_the_evaluation() -> None:
    engine = Engine(load_text(RULE.format(timing="")))
    freeze = [Hold(2000.0, "freeze", "ops")]
    held = engine.evaluate(_snap(0.0), holds=freeze, wall=1000.0)
    assert [d.kind for d in held] == ["firing", "held"]
    assert engine.states["r"].paused.startswith("paused by ops")
    assert engine.operating.wall == 1000.0 and engine.operating.holds == tuple(freeze)
    # the next evaluation without them is not paused: nothing stays set on the engine
    assert [d.kind for d in engine.evaluate(_snap(1.0), wall=1001.0)] == ["retry"]
    assert engine.states["r"].paused == ""
