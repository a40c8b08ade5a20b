"""A fix that holds across boots (issue 42): a ladder's step with `recurs` applies only
once the rule fired in that many boots (the engine's boot id; the record in the saved
state survives a reboot): a climb then starts at it; before, it is skipped. Time is the
snapshots' own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian import Engine, Snapshot, load_text
from guardian.core.diagnostics import RuleError
from guardian.model.ruleset import Ruleset
from guardian.runtime import state as state_file

RULES = '''version = 1

[[rule]]
name = "loops"
summary = "a unit loops"
when = "memcg.dying > 10"
cooldown = "0s"
  [[rule.step]]
  verify = "5m"
  [[rule.step.action]]
  use = "log"
  message = "stop"

  [[rule.step]]
  recurs = {{ boots = 2, within = "{within}" }}
  verify = "5m"
  [[rule.step.action]]
  use = "log"
  message = "mask"
'''


def rules(within: str = "1d") -> Ruleset:
    return load_text(RULES.format(within=within))


def run(e: Engine, times: list[int], x: float = 50.0) -> list[tuple[int, str, str, str]]:
    """(time, kind, its actions' messages, reason) of every decision at ``times``."""
    out: list[tuple[int, str, str, str]] = []
    for t in times:
        for d in e.evaluate(Snapshot(float(t), {"memcg.dying": x})):
            out.append((t, d.kind, ",".join(a.params["message"] for a in d.actions),
                        d.reason))
    return out


def reboot(e: Engine, boot: str, *, mono: float, wall: float, saved_wall: float) -> Engine:
    """The state saved by ``e``, loaded by a fresh engine in boot ``boot`` (as the
    service does across a reboot: monotonic times bridged by the wall clock)."""
    raw = json.loads(json.dumps(state_file.encode(e.state(), state_file.Clock(
        monotonic=lambda: 1000.0, wall=lambda: saved_wall, boot=lambda: "boot-a"))))
    again = Engine(e.ruleset, boot=boot)
    again.restore(state_file.decode(raw, Path("state.json"), state_file.Clock(
        monotonic=lambda: mono, wall=lambda: wall, boot=lambda: boot)))
    return again


def test_in_the_first_boot_the_recurring_step_is_skipped() -> None:
    e = Engine(rules(), boot="boot-a")
    got = run(e, [0, 300, 600])
    assert [(t, k, m) for t, k, m, _ in got] == [(0, "firing", "stop")]
    assert e.states["loops"].escalated  # past its top in this boot: a human
    assert e.states["loops"].boots == ["boot-a"]


def test_in_a_second_boot_the_climb_starts_at_the_recurring_step_and_says_why() -> None:
    e = Engine(rules(), boot="boot-a")
    run(e, [0])
    run(e, [60, 120], x=1.0)  # resolved in the first boot
    e = reboot(e, "boot-b", mono=50.0, wall=2e9 + 3600, saved_wall=2e9)
    got = run(e, [100])
    assert [(t, k, m) for t, k, m, _ in got] == [(100, "firing", "mask")]
    assert "it fired in 2 boots within 1d" in got[0][3]
    assert "step 1 skipped" in got[0][3]
    assert e.states["loops"].boots == ["boot-a", "boot-b"]


def test_a_rule_still_firing_across_a_reboot_counts_the_new_boot() -> None:
    e = Engine(rules(), boot="boot-a")
    run(e, [0])
    e = reboot(e, "boot-b", mono=50.0, wall=2e9 + 600, saved_wall=2e9)
    # step 1 ran 10m before the save: its verify passed; in this second boot, step 2
    got = run(e, [100])
    assert [(t, k, m) for t, k, m, _ in got] == [(100, "retry", "mask")]


def test_boots_further_apart_than_within_do_not_count() -> None:
    e = Engine(rules(within="1h"), boot="boot-a")
    run(e, [0])
    run(e, [60], x=1.0)
    e = reboot(e, "boot-b", mono=50.0, wall=2e9 + 7200, saved_wall=2e9)
    got = run(e, [100])
    assert [(t, k, m) for t, k, m, _ in got] == [(100, "firing", "stop")]


def test_an_unknown_boot_counts_none() -> None:
    e = Engine(rules(), boot="")
    run(e, [0])
    run(e, [60], x=1.0)
    e2 = Engine(e.ruleset, boot="")
    e2.restore(e.state())
    got = run(e2, [120])
    assert [(t, k, m) for t, k, m, _ in got] == [(120, "firing", "stop")]
    assert e2.states["loops"].boots == []


def test_recurs_on_the_first_step_is_a_located_error() -> None:
    text = RULES.format(within="1d").replace(
        'verify = "5m"\n  [[rule.step.action]]\n  use = "log"\n  message = "stop"',
        'verify = "5m"\n  recurs = { boots = 2 }\n  [[rule.step.action]]\n  use = "log"\n'
        '  message = "stop"', 1)
    with pytest.raises(RuleError, match="first step runs in the first boot"):
        load_text(text)
