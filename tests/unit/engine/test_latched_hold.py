"""A latched hold (a tripped correlated-failure breaker): the rule's disruptive actions
wait, planned and audited, until a human releases it; its other actions still run, it
never expires, and it is no pause (issue 45)."""

from __future__ import annotations

import math

from guardian import Engine, Snapshot, load_text
from guardian.core.snapshot import Value
from guardian.model.holds import Hold

RULES = '''version = 1
[[rule]]
name = "memcg-leak"
summary = "s"
when = "memcg.dying > 100"
cooldown = "1m"
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]
'''
WHY = ("breaker tripped: memcg-leak's condition began to hold (pending or firing) on 7 of "
       "12 nodes in topology.kubernetes.io/zone=a within 10m (58%, above the bound of 30%)")


def latch(rule: str = "memcg-leak") -> Hold:
    return Hold(math.inf, WHY, "guardian breaker", rule, (), "breaker", latched=True)


def test_a_latched_hold_holds_only_disruptive_actions_until_released() -> None:
    engine = Engine(load_text(RULES))
    ill: dict[str, Value] = {"memcg.dying": 500.0}
    first = engine.evaluate(Snapshot(0, ill), holds=[latch()], wall=1e12)
    assert [(d.kind, [a.use for a in d.actions], [a.use for a in d.would])
            for d in first] == [("firing", ["log"], []), ("held", [], ["command"])]
    assert first[1].reason == f"command held: {WHY}"
    [rule] = engine.ruleset.rules
    assert engine.pause(rule) is None  # not a pause: the rule is not "paused"
    # it never expires: a year later it still holds (nothing runs; the log cooled down)
    later = engine.evaluate(Snapshot(60, ill), holds=[latch()], wall=1e12 + 3.2e7)
    assert [a.use for d in later for a in d.actions] == ["log"]
    assert all(d.kind != "retry" or "command" not in [a.use for a in d.actions]
               for d in later)
    # released by a human: what was held runs at once
    free = engine.evaluate(Snapshot(120, ill), holds=[], wall=1e12 + 3.2e7)
    assert [(d.kind, [a.use for a in d.actions], d.reason) for d in free] == [
        ("retry", ["log", "command"], "what was held runs now")]


def test_a_latch_on_another_rule_holds_nothing_and_reads_as_itself() -> None:
    engine = Engine(load_text(RULES))
    out = engine.evaluate(Snapshot(0, {"memcg.dying": 500.0}), holds=[latch("other")])
    assert [(d.kind, [a.use for a in d.actions]) for d in out] == [
        ("firing", ["log", "command"])]
    h = latch()
    assert not h.broken and h.until_text == "released" and h.describe() == WHY
    assert h.to_dict()["latched"] is True
