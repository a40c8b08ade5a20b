"""The rails around apply(): only engine decisions act, a refusing plan is never applied,
plugins cannot replace one another, and a source's malformed output is unknown (never a
known empty family). Through the command line: tests/system/test_rails_cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from guardian import (
    Action,
    ActionContext,
    Collector,
    Decision,
    Engine,
    Executor,
    Host,
    Outcome,
    Plan,
    SignalSpec,
    Snapshot,
    Source,
    Step,
    load_text,
)
from guardian.core.audit import AuditLog, read_audit
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import Registry, RegistryError, default_registry
from guardian.testing import family, snapshot
from tests.support.plugins import registry_with
from tests.support.rule_texts import ACTION_RULE


class RefusingAction(Action[NoParams]):
    """Its plan refuses; its apply would leave a marker."""

    name: ClassVar[str] = "test.refusing"
    marker: ClassVar[Path]

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("x", "y")], refused=["not today"])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        self.marker.write_text("applied")
        return Outcome(ok=True)


class MarkerAction(Action[NoParams]):
    """Applies by leaving a marker."""

    name: ClassVar[str] = "test.marker"
    marker: ClassVar[Path]

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("marker", "write")])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        self.marker.write_text("applied")
        return Outcome(ok=True)


def test_a_plan_that_refuses_is_never_applied_and_said_once(tmp_path: Path) -> None:
    RefusingAction.marker = tmp_path / "marker"
    rules = load_text(ACTION_RULE.format(use="test.refusing"),
                      registry=registry_with(RefusingAction))
    audit = tmp_path / "a.jsonl"
    snap = Snapshot(0.0, {"memcg.dying": 5.0})
    [done] = Executor(Host(), dry_run=False, audit=AuditLog(audit)).run(
        Engine(rules).evaluate(snap), snap)
    assert done.refused and done.outcome is None and "not today" in done.error
    assert not RefusingAction.marker.exists()
    types = [r["type"] for r in read_audit(audit) if isinstance(r, dict)]
    assert types == ["decision", "plan", "refused"]


def test_only_engine_decisions_are_applied(tmp_path: Path) -> None:
    """A decision built by hand (as `run --once`, `explain` or `replay` build them to
    show a plan) is planned in a dry run and refused live."""
    MarkerAction.marker = tmp_path / "marker"
    rules = load_text(ACTION_RULE.format(use="test.marker"), registry=registry_with(MarkerAction))
    rule = rules.rules[0]
    snap = Snapshot(0.0, {"memcg.dying": 5.0})
    forged = Decision(0.0, "r", "firing", "warning", "s", {}, list(rule.actions))
    assert not forged.from_engine
    [planned] = Executor(Host(), dry_run=True).run([forged], snap)
    assert planned.plan is not None and planned.outcome is None and not planned.refused
    [live] = Executor(Host(), dry_run=False).run([forged], snap)
    assert live.refused and "not a decision of the engine" in live.error
    assert not MarkerAction.marker.exists()
    [real] = Executor(Host(), dry_run=False).run(Engine(rules).evaluate(snap), snap)
    assert real.outcome is not None and real.outcome.ok
    assert MarkerAction.marker.read_text() == "applied"


def test_in_process_registration_cannot_replace_a_name() -> None:
    class Other(Action[NoParams]):
        name: ClassVar[str] = "log"

        def plan(self, ctx: ActionContext) -> Plan:
            return Plan(self.name, ctx.rule)

        def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
            return Outcome(ok=True)

    reg = default_registry().copy()
    with pytest.raises(RegistryError, match="action 'log' is provided twice"):
        reg.add_action(Other)
    reg.add_action(reg.actions["log"])  # the same class again is no collision


class Malformed(Source[NoParams]):
    """Returns one malformed shape per signal, chosen by ``shape``."""

    name: ClassVar[str] = "test.malformed"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("test.load", "a family", labels=("cpu",)),
        SignalSpec("test.level", "a scalar"),
    )
    shape: ClassVar[str] = ""

    def collect(self, now: float) -> dict[str, object]:
        shapes: dict[str, dict[str, object]] = {
            "string keys": {"test.load": {"0": 95.0}},
            "wrong labels": {"test.load": {(("core", "0"),): 95.0}},
            "nan member": {"test.load": {(("cpu", "0"),): float("nan")}},
            "scalar for a family": {"test.load": 95.0},
            "nan scalar": {"test.level": float("nan")},
            "string scalar": {"test.level": "95"},
            "undeclared name": {"test.loda": {(("cpu", "0"),): 95.0}},
        }
        return shapes[self.shape]


@pytest.mark.parametrize("shape", ["string keys", "wrong labels", "nan member",
                                   "scalar for a family", "nan scalar", "string scalar",
                                   "undeclared name"])
def test_a_malformed_source_value_is_unknown_and_counted(
        shape: str, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a family with string keys became a known, empty family, so `max(x) > 90`
    was false instead of unknown, and no error was counted."""
    Malformed.shape = shape
    reg = Registry()
    reg.add_source(Malformed)
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "s"
when = "max(test.load) > 90 or test.level > 90"
''', registry=reg)
    coll = Collector(Host(), [Malformed(Host())])
    engine = Engine(rules)
    for t in (0.0, 1.0):
        snap = coll.collect(t)
        assert engine.evaluate(snap) == []
    assert engine.states["hot"].unknown  # not false: unknown
    assert "test.load" not in snap.values and "test.level" not in snap.values
    assert coll.error_counts["test.malformed"] == 2
    errors = snap.values["guardian.source_errors"]
    assert isinstance(errors, dict) and errors[(("source", "test.malformed"),)] == 2.0
    assert "test.malformed" in snap.errors
    told = [r for r in caplog.records if "has no value" in r.getMessage()]
    assert len(told) == 1  # logged once, not every tick


def test_hand_built_snapshots_are_checked_the_same_way() -> None:
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "s"
when = "max(cpu.core.sys_pct) > 90"
''')
    engine = Engine(rules)
    snap = Snapshot(0.0, {"cpu.core.sys_pct": {"3": 95.0}})  # type: ignore[dict-item]
    assert engine.evaluate(snap) == [] and engine.states["hot"].unknown
    assert "cpu.core.sys_pct" in snap.errors
    good = snapshot(0.0, {"cpu.core.sys_pct": family("cpu", {"3": 95.0})})
    assert [d.kind for d in engine.evaluate(good)] == ["firing"]
