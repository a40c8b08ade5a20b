"""Node groups in the executor (issue 45): where this node's labels are not known, only
a decision's disruptive actions run in shadow (its group cannot be told); its log,
condition, event and notify actions still run, as they do without a fleet slot, so a
human learns of the problem. A shadow group, or a rule its group does not list, still
runs the whole decision in shadow."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.core.audit import AuditLog, read_audit
from guardian.engine.decision import Decision
from guardian.model.nodegroups import NodeGroup, shadow_why
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import default_registry
from guardian.testing import snapshot

RULE = '''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "processes.total > 0"
fleet = true
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "test.disrupt"
'''
CANARY = NodeGroup(name="canary", labels={"canary": "true"}, mode="shadow")


class Disrupt(Action[NoParams]):
    """A disruptive action that counts its applies."""

    name: ClassVar[str] = "test.disrupt"
    disruptive: ClassVar[bool] = True
    applied: ClassVar[int] = 0

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Disrupt.applied += 1
        return Outcome(ok=True)


class Gate:
    """A fleet budget that records who asked for a slot."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def hold(self, rule: str) -> tuple[str | None, str]:
        self.asked.append(rule)
        return "slot-0", ""

    def done(self, rule: str) -> None:
        pass

    def renew(self) -> None:
        pass


def _run(tmp_path: Path, labels: dict[str, str] | None
         ) -> tuple[list[tuple[str, str]], Gate, list[dict[str, Any]]]:
    """One firing of RULE on a node with ``labels`` (None: unknown) beside group CANARY:
    each action's result, the fleet budget asked, the audit records."""
    reg = default_registry().copy()
    reg.add_action(Disrupt)
    engine = Engine(load_text(RULE, registry=reg))
    gate = Gate()
    path = tmp_path / f"audit-{len(list(tmp_path.iterdir()))}.jsonl"
    audit = AuditLog(path)

    def shadow(d: Decision) -> str:
        return shadow_why(d.rule, any(a.disruptive for a in d.actions), labels, [CANARY])

    ex = Executor(Host(), dry_run=False, audit=audit, fleet=gate, shadow=shadow)
    snap = snapshot(0.0, {"processes.total": 10.0})
    Disrupt.applied = 0
    done = ex.run(engine.evaluate(snap), snap)
    audit.close()
    records = [r for r in read_audit(path) if isinstance(r, dict)]
    return [(r.use, r.result) for r in done], gate, records


def test_unknown_labels_run_the_log_and_plan_only_the_disruptive_action(
        tmp_path: Path) -> None:
    """Before: the whole decision ran in shadow, its log only planned."""
    ran, gate, records = _run(tmp_path, None)
    assert ran == [("log", "ok"), ("test.disrupt", "would_act")]
    assert Disrupt.applied == 0 and gate.asked == []  # no slot taken for a plan
    [decision] = [r for r in records if r.get("type") == "decision"]
    assert "mode" not in decision and decision["reason"].startswith(  # mode: act
        "this node's labels are not known")
    assert [r.get("would_act", False) for r in records if r.get("type") == "plan"] == [
        False, True]


def test_a_shadow_group_still_plans_the_whole_decision(tmp_path: Path) -> None:
    ran, gate, _ = _run(tmp_path, {"canary": "true"})
    assert ran == [("log", "would_act"), ("test.disrupt", "would_act")]
    assert Disrupt.applied == 0 and gate.asked == []
    ran, gate, _ = _run(tmp_path, {"canary": "false"})  # in no group: it acts
    assert ran == [("log", "ok"), ("test.disrupt", "ok")]
    assert Disrupt.applied == 1 and gate.asked == ["nic-stall"]
