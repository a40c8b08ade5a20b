"""The engine's state machine and action bounds, driven by explicit time."""

from __future__ import annotations

from guardian import Budget, Engine, Snapshot, load_text
from guardian.core.snapshot import Value

RULES = '''version = 1

[[rule]]
name = "hot"
summary = "x is high"
when = "memcg.dying > 10"
for = "{for_}"
keep_firing_for = "{keep}"
cooldown = "{cooldown}"
limit = {{ runs = {runs}, within = "{within}" }}

  [[rule.action]]
  use = "log"
'''


def engine(for_: str = "0s", keep: str = "0s", cooldown: str = "0s", runs: int = 100,
           within: str = "1h", budget: Budget | None = None, extra: str = "") -> Engine:
    text = RULES.format(for_=for_, keep=keep, cooldown=cooldown, runs=runs, within=within)
    return Engine(load_text(text + extra), budget=budget)


def tick(e: Engine, t: float, x: float | None) -> list[tuple[str, str, int]]:
    values: dict[str, Value] = {} if x is None else {"memcg.dying": x}
    return [(d.rule, d.kind, len(d.actions)) for d in e.evaluate(Snapshot(t, values))]


def test_for_pending_then_firing_then_resolved() -> None:
    e = engine(for_="30s")
    assert tick(e, 0, 50) == [("hot", "pending", 0)]
    assert tick(e, 15, 50) == []
    assert tick(e, 30, 50) == [("hot", "firing", 1)]
    assert e.firing() == ["hot"]
    assert tick(e, 45, 1) == [("hot", "resolved", 0)]
    assert e.firing() == []


def test_pending_that_clears_goes_inactive_without_firing() -> None:
    e = engine(for_="1m")
    tick(e, 0, 50)
    assert tick(e, 30, 1) == [("hot", "inactive", 0)]
    assert tick(e, 60, 50) == [("hot", "pending", 0)]  # the timer starts over


def test_keep_firing_for_bridges_a_flap() -> None:
    e = engine(keep="1m", cooldown="5m")
    assert tick(e, 0, 50) == [("hot", "firing", 1)]
    assert tick(e, 30, 1) == []  # false, but kept firing
    assert tick(e, 45, 50) == []  # true again: no new episode, no second action
    assert tick(e, 60, 1) == []  # false again: keep_firing_for counts from here
    # Prometheus rules/alerting.go Eval: KeepFiringSince is the first false evaluation,
    # and the alert keeps firing while ts - KeepFiringSince < keepFiringFor
    assert tick(e, 105, 1) == []
    assert tick(e, 120, 1) == [("hot", "resolved", 0)]


def test_unknown_neither_fires_nor_clears() -> None:
    e = engine(for_="30s")
    tick(e, 0, 50)
    assert tick(e, 30, None) == []  # would have fired: unknown does not
    assert e.pending() == ["hot"]
    assert tick(e, 40, 50) == [("hot", "firing", 1)]
    assert tick(e, 50, None) == []  # would have resolved: unknown does not
    assert e.firing() == ["hot"]
    assert e.states["hot"].unknown is True


def test_cooldown_spaces_action_runs_while_firing() -> None:
    e = engine(cooldown="5m")
    assert tick(e, 0, 50) == [("hot", "firing", 1)]
    for t in range(15, 300, 15):
        assert tick(e, t, 50) == []
    assert tick(e, 300, 50) == [("hot", "retry", 1)]


def test_cooldown_holds_across_episodes() -> None:
    e = engine(cooldown="5m")
    tick(e, 0, 50)
    tick(e, 10, 1)
    assert tick(e, 20, 50) == [("hot", "firing", 0)]  # fires, but may not act yet
    assert tick(e, 300, 50) == [("hot", "retry", 1)]


def test_rule_limit_stops_acting_and_says_so_once() -> None:
    e = engine(runs=3, within="1h")
    kinds = [tick(e, t, 50) for t in range(0, 600, 60)]
    assert kinds[0] == [("hot", "firing", 1)]
    assert kinds[1] == kinds[2] == [("hot", "retry", 1)]
    assert kinds[3] == [("hot", "suppressed", 0)]
    assert all(k == [] for k in kinds[4:])
    decisions = e.evaluate(Snapshot(3600, {"memcg.dying": 50.0}))  # first run aged out
    assert [(d.kind, len(d.actions)) for d in decisions] == [("retry", 1)]


def test_suppressed_reason_names_the_limit() -> None:
    e = engine(runs=1, within="1h")
    e.evaluate(Snapshot(0, {"memcg.dying": 50.0}))
    [d] = e.evaluate(Snapshot(60, {"memcg.dying": 50.0}))
    assert d.kind == "suppressed" and "rule limit reached: 1 action runs within 1h" in d.reason


def test_global_budget_caps_all_rules() -> None:
    extra = "".join(f'''
[[rule]]
name = "r{i}"
summary = "s"
when = "memcg.dying > 10"
  [[rule.action]]
  use = "log"
''' for i in range(5))
    e = engine(budget=Budget(runs=3, within=3600), extra=extra)
    ds = e.evaluate(Snapshot(0, {"memcg.dying": 50.0}))
    acting = [d for d in ds if d.actions]
    assert len(acting) == 3
    blocked = [d for d in ds if d.kind == "firing" and not d.actions]
    assert len(blocked) == 3 and all("global action budget" in d.reason for d in blocked)


def test_critical_rules_get_the_budget_first() -> None:
    extra = '''
[[rule]]
name = "urgent"
summary = "s"
when = "memcg.dying > 10"
severity = "critical"
  [[rule.action]]
  use = "log"
'''
    e = engine(budget=Budget(runs=1, within=3600), extra=extra)
    ds = e.evaluate(Snapshot(0, {"memcg.dying": 50.0}))
    assert [(d.rule, len(d.actions)) for d in ds] == [("urgent", 1), ("hot", 0)]


def test_decisions_carry_the_values_behind_them() -> None:
    e = engine()
    [d] = e.evaluate(Snapshot(0, {"memcg.dying": 50.0}))
    assert d.values == {"memcg.dying": 50}
    assert d.to_dict()["actions"] == [{"use": "log"}]


def test_same_series_same_decisions() -> None:
    series = [(t, float((t * 7919) % 23)) for t in range(0, 3600, 15)]

    def run() -> list[dict[str, object]]:
        e = engine(for_="30s", keep="45s", cooldown="2m", runs=5, within="20m")
        return [d.to_dict() for t, x in series for d in e.evaluate(Snapshot(t, {
            "memcg.dying": x}))]

    first = run()
    assert first and first == run()


def test_reload_keeps_state_of_unchanged_rules() -> None:
    e = engine(for_="1m", cooldown="10m")
    tick(e, 0, 50)
    e.replace_rules(load_text(RULES.format(for_="1m", keep="0s", cooldown="10m", runs=100,
                                           within="1h")))
    assert e.pending() == ["hot"]  # timer survives
    assert tick(e, 60, 50) == [("hot", "firing", 1)]
    # a changed timing keeps the phase (firing, as its condition still holds) and the
    # cooldown: no second action
    e.replace_rules(load_text(RULES.format(for_="0s", keep="0s", cooldown="10m", runs=100,
                                           within="1h")))
    assert e.firing() == ["hot"]
    assert tick(e, 120, 50) == []


CLEANUP = '''version = 1

[[rule]]
name = "hot"
summary = "x is high"
when = "{when}"
for = "{for_}"
cooldown = "10m"

  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "log"
  on = "resolve"
  message = "clean up"
'''

OTHER = CLEANUP.replace('name = "hot"', 'name = "other"').replace("{when}", "memcg.live > 0")


def _firing(when: str = "memcg.dying > 10", for_: str = "1m") -> Engine:
    e = Engine(load_text(CLEANUP.format(when=when, for_=for_)))
    assert tick(e, 0, 50) == [("hot", "pending", 0)]
    assert tick(e, 60, 50) == [("hot", "firing", 1)]
    assert e.firing() == ["hot"]
    return e


def test_reload_keeps_a_firing_rule_firing_while_its_changed_condition_holds() -> None:
    """Every combination of changed/removed x holds/not for a firing rule with clean-up."""
    # changed condition, still holds: stays firing, no new episode, no clean-up
    e = _firing()
    e.replace_rules(load_text(CLEANUP.format(when="memcg.dying > 20", for_="1m")))
    assert tick(e, 75, 50) == [] and e.firing() == ["hot"]
    # changed condition, no longer holds: resolved, with its clean-up action
    e = _firing()
    e.replace_rules(load_text(CLEANUP.format(when="memcg.dying > 100", for_="1m")))
    assert tick(e, 75, 50) == [("hot", "resolved", 1)] and e.firing() == []
    # removed, condition would still hold: resolved with clean-up at the next evaluation
    e = _firing()
    e.replace_rules(load_text(OTHER.format(for_="0s")))
    out = e.evaluate(Snapshot(75, {"memcg.dying": 50.0, "memcg.live": 0.0}))
    assert [(d.rule, d.kind, [a.params.get("message") for a in d.actions]) for d in out] == [
        ("hot", "resolved", ["clean up"])]
    assert "removed by a reload" in out[0].reason
    # removed, condition no longer holds: the same
    e = _firing()
    e.replace_rules(load_text(OTHER.format(for_="0s")))
    out = e.evaluate(Snapshot(75, {"memcg.dying": 1.0, "memcg.live": 0.0}))
    assert [(d.rule, d.kind, len(d.actions)) for d in out] == [("hot", "resolved", 1)]
    # disabled: resolves like a removed rule
    e = _firing()
    e.replace_rules(load_text(CLEANUP.format(when="memcg.dying > 10", for_="1m")
                              .replace("[[rule]]", "[[rule]]\nenabled = false")))
    assert tick(e, 75, 50) == [("hot", "resolved", 1)]


def test_reload_raising_for_moves_a_firing_rule_back_to_pending_keeping_its_start() -> None:
    """Prometheus keeps an alert's ActiveAt across a reload; a longer `for` that has not
    passed since then makes it pending again (rules/alerting.go, Eval)."""
    e = _firing(for_="1m")  # holding since t=0, firing since t=60
    e.replace_rules(load_text(CLEANUP.format(when="memcg.dying > 10", for_="5m")))
    assert tick(e, 90, 50) == [("hot", "pending", 0)]
    assert e.pending() == ["hot"]
    assert tick(e, 240, 50) == []
    # 5 minutes after t=0, not after t=90; no action: the cooldown of the run at t=60 holds
    assert tick(e, 300, 50) == [("hot", "firing", 0)]
    # a `for` that has already passed keeps it firing
    e = _firing(for_="1m")
    e.replace_rules(load_text(CLEANUP.format(when="memcg.dying > 10", for_="70s")))
    assert tick(e, 90, 50) == [] and e.firing() == ["hot"]


def test_disabled_rules_are_not_evaluated() -> None:
    text = RULES.format(for_="0s", keep="0s", cooldown="0s", runs=1, within="1h")
    e = Engine(load_text(text.replace('use = "log"', 'use = "log"\n[rule.labels]\n')
                         .replace("[[rule]]", "[[rule]]\nenabled = false")))
    assert e.evaluate(Snapshot(0, {"memcg.dying": 50.0})) == []
