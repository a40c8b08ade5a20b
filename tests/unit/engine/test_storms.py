"""Flapping and storms: a signal that toggles every tick for a simulated hour, and every
rule firing at once. Actions stay within the per-rule limits and the global budget."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from guardian import Budget, Engine, Snapshot, load_text
from guardian.engine.decision import Decision

FLAPPY = '''version = 1
[[rule]]
name = "flappy"
summary = "s"
when = "memcg.dying > 10"
cooldown = "{cooldown}"
limit = {{ runs = 3, within = "1h" }}
  [[rule.action]]
  use = "log"
'''


def runs_of(decisions: Sequence[Decision]) -> list[float]:
    return [d.time for d in decisions if d.actions]


def test_a_signal_toggling_every_tick_for_an_hour_stays_within_the_limit() -> None:
    for cooldown in ("0s", "1m"):
        e = Engine(load_text(FLAPPY.format(cooldown=cooldown)))
        decisions = []
        for tick in range(3600 // 5):  # 5 s ticks, one hour
            decisions += e.evaluate(Snapshot(tick * 5.0, {"memcg.dying": 50.0 if tick % 2
                                                          else 1.0}))
        runs = runs_of(decisions)
        assert len(runs) == 3, (cooldown, runs)
        if cooldown == "1m":
            assert all(b - a >= 60 for a, b in itertools.pairwise(runs))
        # it said it stopped acting, once per firing episode it was blocked in
        assert any(d.reason.startswith("rule limit reached") for d in decisions)


def test_flapping_with_keep_firing_for_does_not_restart_episodes() -> None:
    text = FLAPPY.format(cooldown="10m").replace('cooldown = "10m"',
                                                 'cooldown = "10m"\nkeep_firing_for = "30s"')
    e = Engine(load_text(text))
    kinds = []
    for tick in range(3600 // 5):
        kinds += [d.kind for d in e.evaluate(Snapshot(tick * 5.0, {
            "memcg.dying": 50.0 if tick % 2 else 1.0}))]
    assert kinds.count("firing") == 1 and "resolved" not in kinds


def test_every_rule_firing_at_once_is_capped_by_the_global_budget() -> None:
    text = "version = 1\n" + "".join(f'''
[[rule]]
name = "r{i:03d}"
summary = "s"
when = "memcg.dying > 10"
cooldown = "0s"
severity = "{("critical", "warning", "info")[i % 3]}"
limit = {{ runs = 5, within = "1h" }}
  [[rule.action]]
  use = "log"
''' for i in range(200))
    e = Engine(load_text(text), Budget(runs=20, within=3600))
    decisions = []
    for tick in range(3600 // 15):
        decisions += e.evaluate(Snapshot(tick * 15.0, {"memcg.dying": 50.0}))
    runs = [d for d in decisions if d.actions]
    assert len(runs) == 20
    # critical rules got the budget first
    assert all(int(d.rule[1:]) % 3 == 0 for d in runs)
    blocked = [d for d in decisions if "global action budget" in d.reason]
    # each rule says so once: 180 as they fire, the 20 that acted when they would retry
    assert sorted(d.kind for d in blocked) == ["firing"] * 180 + ["suppressed"] * 20
    # the budget refills as runs age out of its window
    later = e.evaluate(Snapshot(3600.0 + 1, {"memcg.dying": 50.0}))
    assert len([d for d in later if d.actions]) == 20
