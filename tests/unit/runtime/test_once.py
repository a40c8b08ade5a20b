"""guardian.runtime.once: one pass of the service's loop (``guardian run --once``),
called as a library: the engine's state carried between passes in the state file, the
holds in force honoured, a dry run's preview of rules that would fire."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

import pytest

from guardian import (
    Action,
    ActionContext,
    Collector,
    Executor,
    Host,
    Outcome,
    Plan,
    SignalSpec,
    Source,
    Step,
    default_registry,
    load_text,
)
from guardian.model.holds import Hold
from guardian.model.nodegroups import NodeConfig, NodeGroup
from guardian.model.ruleset import Ruleset
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import Registry
from guardian.runtime import once
from guardian.runtime.config import Config, HoldsConfig
from guardian.runtime.holds import HoldFile
from guardian.sources.exposition import ExpositionSource


class Level(Source[NoParams]):
    """One scalar signal whose value the test sets (None: no value)."""

    name: ClassVar[str] = "test.once"
    specs: ClassVar[tuple[SignalSpec, ...]] = (SignalSpec("test.once.level", "a level"),)
    value: ClassVar[float | None] = 5.0

    def collect(self, now: float) -> dict[str, object]:
        return {} if self.value is None else {"test.once.level": self.value}


class Count(Action[NoParams]):
    """Counts its applies."""

    name: ClassVar[str] = "test.once.count"
    applied: ClassVar[int] = 0

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("counter", "add one")])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Count.applied += 1
        return Outcome(ok=True, detail="counted")


def _registry() -> Registry:
    reg = default_registry().copy()
    reg.add_source(Level)
    reg.add_action(Count)
    return reg


def _rules(for_: str = "0s", enabled: bool = True) -> Ruleset:
    return load_text(f'''version = 1
[[rule]]
name = "high"
summary = "the level is high"
when = "test.once.level > 1"
for = "{for_}"
cooldown = "1h"
enabled = {str(enabled).lower()}
  [[rule.action]]
  use = "test.once.count"
''', registry=_registry())


def _config(tmp_path: Path, **more: object) -> Config:
    return Config(holds=HoldsConfig(dropin=str(tmp_path / "holds.d")), **more)


def _pass(tmp_path: Path, rules: Ruleset, *, dry_run: bool = False,
          config: Config | None = None) -> once.Pass:
    state = tmp_path / "state.json"
    state_path = None if dry_run else state
    config = config or _config(tmp_path)
    coll = Collector(Host(), [Level(Host())])
    engine = once.engine_for(rules, config, state_path, state)
    executor = Executor(coll.host, dry_run=dry_run)
    try:
        return once.run_once(rules, coll, engine, executor, warmup=0.0,
                             state_path=state_path,
                             operating=once.operating(config, state, executor))
    finally:
        coll.close()


def test_passes_carry_the_state_so_a_rule_acts_once_within_its_cooldown(
        tmp_path: Path) -> None:
    Level.value, Count.applied = 5.0, 0
    rules = _rules()
    first = _pass(tmp_path, rules)
    [report] = first.rules
    assert (report.rule, report.condition, report.phase) == ("high", "holds", "firing")
    assert report.decisions == ["firing"] and report.acted
    assert report.values == {"test.once.level": 5.0}
    assert [ex.result for ex in first.executed] == ["ok"]
    assert (tmp_path / "state.json").exists()
    second = _pass(tmp_path, rules)  # a new engine, from the state file
    assert second.rules[0].phase == "firing" and not second.rules[0].acted
    assert second.decisions == [] and Count.applied == 1


def test_a_pending_rule_waits_across_passes(tmp_path: Path) -> None:
    Level.value, Count.applied = 5.0, 0
    rules = _rules(for_="1h")
    for _ in range(2):
        done = _pass(tmp_path, rules)
        assert done.rules[0].phase == "pending" and done.rules[0].plans == []
    assert Count.applied == 0


def test_a_dry_run_previews_the_plan_of_a_rule_that_would_fire_and_keeps_no_state(
        tmp_path: Path) -> None:
    Level.value, Count.applied = 5.0, 0
    done = _pass(tmp_path, _rules(for_="1h"), dry_run=True)
    [report] = done.rules
    assert report.phase == "pending" and not report.acted
    assert [p["use"] for p in report.plans] == ["test.once.count"]
    assert report.plans[0]["plan"]["steps"] == [{"target": "counter", "change": "add one"}]
    assert Count.applied == 0 and not (tmp_path / "state.json").exists()


def test_unknown_and_disabled_rules_are_said_so(tmp_path: Path) -> None:
    Level.value = None
    [unknown] = _pass(tmp_path, _rules(), dry_run=True).rules
    assert unknown.condition == "unknown" and unknown.missing == ["test.once.level"]
    Level.value = 5.0
    [disabled] = _pass(tmp_path, _rules(enabled=False), dry_run=True).rules
    assert disabled.condition == "disabled" and disabled.plans == []
    assert disabled.to_dict()["condition"] == "disabled"
    assert list(disabled.to_dict()) == ["rule", "severity", "condition", "phase", "values",
                                        "missing", "decisions", "actions", "plans", "blind"]


def test_an_unknown_rule_says_why_it_is_blind(tmp_path: Path) -> None:
    """The summary of `run --once` names each blind rule with the reason: the source of
    its missing signal unavailable (with the source's own words), or running without a
    value for it."""
    Level.value = None
    [running] = _pass(tmp_path, _rules(), dry_run=True).rules
    assert running.blind == "no value for test.once.level"
    rules = load_text('''version = 1
[[rule]]
name = "gpu"
summary = "a sample"
when = 'prom.sample{metric="x"} > 0'
''')
    coll = Collector(Host(), [ExpositionSource(Host())])
    engine = once.engine_for(rules, _config(tmp_path), None, tmp_path / "state.json")
    try:
        done = once.run_once(rules, coll, engine, Executor(coll.host), warmup=0.0,
                             state_path=None)
    finally:
        coll.close()
    [gpu] = done.rules
    assert gpu.condition == "unknown"
    assert gpu.blind.startswith("source exposition not configured: no endpoints or "
                                "textfile directories in [sources.exposition]")


def test_plans_say_their_result_and_previews_are_not_counted_as_acting(
        tmp_path: Path) -> None:
    Level.value, Count.applied = 5.0, 0
    [fires] = _pass(tmp_path, _rules(), dry_run=True).rules
    assert [p["result"] for p in fires.plans] == ["planned"] and fires.results == ["planned"]
    [waits] = _pass(tmp_path, _rules(for_="1h"), dry_run=True).rules
    assert [p["result"] for p in waits.plans] == ["preview"] and waits.results == []


def test_a_pause_on_every_rule_holds_the_action(tmp_path: Path) -> None:
    Level.value, Count.applied = 5.0, 0
    until = time.time() + 3600
    HoldFile(tmp_path / "holds.json").write([Hold(until, "freeze", "ops")])
    done = _pass(tmp_path, _rules())
    [report] = done.rules
    assert report.decisions == ["firing", "held"] and not report.acted
    assert [ex.result for ex in done.executed] == ["held"] and Count.applied == 0


CANARY = NodeGroup(name="canary", labels={"guardian.io/canary": "true"}, mode="shadow")


@pytest.mark.parametrize(("labels", "applied", "reason"), [
    ({"guardian.io/canary": "true"}, 0, "node group canary is in shadow mode"),
    ({"guardian.io/canary": "false"}, 1, ""),  # in no group: it acts
])
def test_a_node_of_a_shadow_group_plans_and_never_applies(
        tmp_path: Path, labels: dict[str, str], applied: int, reason: str) -> None:
    """As the service's executor (Operations.govern). Before: run --once applied it on
    the canary node (the group was read by the service only)."""
    Level.value, Count.applied = 5.0, 0
    config = _config(tmp_path, node=NodeConfig(labels=labels), groups=[CANARY])
    done = _pass(tmp_path, _rules(), config=config)
    assert Count.applied == applied
    assert [ex.result for ex in done.executed] == ["would_act" if reason else "ok"]
    assert done.decisions[0].reason.endswith(reason)


def test_warm_snapshot_feeds_the_first_sample_to_the_history_only(tmp_path: Path) -> None:
    Level.value = 5.0
    rules = _rules()
    engine = once.engine_for(rules, _config(tmp_path), None, tmp_path / "state.json")
    coll = Collector(Host(), [Level(Host())])
    snap = once.warm_snapshot(coll, 0.0, engine)
    coll.close()
    assert snap.values["test.once.level"] == 5.0
    assert engine.states["high"].phase == "inactive"  # observed, not evaluated
