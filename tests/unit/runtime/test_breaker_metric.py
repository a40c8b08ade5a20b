"""guardian_breaker_tripped: 1 for each rule whose breaker latched a group this node is
in (issue 45); the latch also shows as a hold that never expires (+Inf)."""

from __future__ import annotations

import math

from prometheus_client import generate_latest

from guardian.model.holds import Hold
from guardian.runtime.metrics import Metrics


def test_a_latched_hold_is_the_breaker_metric() -> None:
    m = Metrics()
    m.operations.holds = [
        Hold(math.inf, "breaker tripped ...", "guardian breaker", "memcg-leak", (),
             "breaker topology.kubernetes.io/zone=a", latched=True),
        Hold(2e9, "freeze", "ops")]
    text = generate_latest(m.registry).decode()
    assert 'guardian_breaker_tripped{group="topology.kubernetes.io/zone=a",' \
        'rule="memcg-leak"} 1.0' in text
    assert text.count("guardian_breaker_tripped{") == 1
    assert 'guardian_hold_expiry_timestamp_seconds{author="guardian breaker"' in text
    assert "+Inf" in text


class Told:
    """A reader of holds that is told what holds on this node (as KubeBreaker is)."""

    def __init__(self) -> None:
        self.told: list[list[str]] = []

    def read(self) -> list[Hold]:
        return []

    def firing(self, rules: list[str]) -> None:
        self.told.append(list(rules))


def test_the_loop_tells_the_breaker_which_fleet_rules_hold() -> None:
    """Pending or firing `fleet = true` rules only; told after each commit."""
    from guardian import Engine, Snapshot, load_text
    from guardian.runtime.config import Config
    from guardian.runtime.operate import Operations

    rules = load_text('version = 1\n' + ''.join(
        f'[[rule]]\nname = "{n}"\nsummary = "s"\nwhen = "memcg.dying > 10"\n{extra}'
        f'fleet = {fleet}\n  [[rule.action]]\n  use = "log"\n'
        for n, extra, fleet in (("slow", 'for = "5m"\n', "true"), ("now", "", "true"),
                                ("local", "", "false"))))
    engine, told = Engine(rules), Told()
    ops = Operations(Config(), None, sources=[told])
    engine.evaluate(Snapshot(0.0, {"memcg.dying": 0.0}))
    ops.tell(engine)
    engine.evaluate(Snapshot(15.0, {"memcg.dying": 50.0}))
    ops.tell(engine)
    assert told.told == [[], ["now", "slow"]]
