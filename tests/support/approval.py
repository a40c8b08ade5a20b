"""A rule whose disruptive action waits for a human's approval, and its evaluation on a
simulated clock (the snapshot's time, and a wall clock beside it): shared by the tests
of the approval gate (issue 45)."""

from __future__ import annotations

from typing import ClassVar

from guardian import Action, ActionContext, Engine, Outcome, Plan, load_text
from guardian.core.snapshot import Snapshot, Value
from guardian.engine.decision import Decision
from guardian.model.approvals import Approval
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import Registry, default_registry

WALL = 1_800_000_000.0  # the wall clock at the snapshot's time 0: 2027-01-15T08:00:00Z
ILL: dict[str, Value] = {"memcg.dying": 500.0}
WELL: dict[str, Value] = {"memcg.dying": 0.0}


class Disrupts(Action[NoParams]):
    """A disruptive action that touches nothing (a cordon's stand-in)."""

    name: ClassVar[str] = "test.disrupts"
    disruptive: ClassVar[bool] = True

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True)


def registry() -> Registry:
    reg = default_registry().copy()
    reg.add_action(Disrupts)
    return reg


def rules(approve: str = 'approve = { timeout = "2h" }') -> str:
    """nic-stall: a log, then test.disrupts, gated by ``approve``."""
    return f'''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "memcg.dying > 100"
cooldown = "10m"
{approve}
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "test.disrupts"
'''


def engine(text: str | None = None) -> Engine:
    return Engine(load_text(text or rules(), registry=registry()))


def approval(at: float, rule: str = "nic-stall", by: str = "alice",
             why: str = "drained by hand") -> Approval:
    """An approval given ``at`` seconds after the wall clock's start."""
    return Approval(rule, by, why, WALL + at, source="cli")


def tick(e: Engine, t: float, values: dict[str, Value] | None = None,
         approvals: list[Approval] | None = None) -> list[Decision]:
    """One evaluation at ``t`` (wall clock ``WALL + t``)."""
    return e.evaluate(Snapshot(t, dict(ILL if values is None else values)),
                      wall=WALL + t, approvals=approvals or [])
