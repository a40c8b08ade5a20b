"""`guardian act reap.zombies` is no harsher than the shipped rule unless asked: the
action's default ladder is SIGCHLD alone, as zombie-pileup sends; `escalate = true` adds
SIGTERM and SIGKILL. Before: the default ladder was SIGCHLD → SIGTERM → SIGKILL, so a
manual `act` with no parameters killed the parent the shipped rule only nudges."""

from __future__ import annotations

from pathlib import Path

from guardian.actions.reap import ReapParams, ReapZombies
from guardian.cli.act import _parse_set
from guardian.core.snapshot import Snapshot
from guardian.plugin.contract import ActionContext
from guardian.policy.loader import load_rules
from guardian.testing import FakeHost
from tests.support.checkout import REPO


def _signals(p: ReapParams) -> list[str]:
    return [s.signal for s in p.ladder]


def test_the_default_ladder_is_sigchld_only() -> None:
    # what `guardian act reap.zombies` validates when no --set is given
    assert _signals(ReapParams.model_validate(_parse_set([]))) == ["SIGCHLD"]


def test_escalation_is_asked_for() -> None:
    asked = ReapParams.model_validate(_parse_set(["escalate=true"]))
    assert [(s.signal, s.wait) for s in asked.ladder] == [
        ("SIGCHLD", 5.0), ("SIGTERM", 5.0), ("SIGKILL", 5.0)]
    # a ladder of one's own keeps its steps; escalate adds only what it does not send
    own = ReapParams.model_validate({"ladder": [{"signal": "SIGHUP", "wait": "1s"},
                                                {"signal": "SIGKILL", "wait": "1s"}],
                                     "escalate": True})
    assert _signals(own) == ["SIGHUP", "SIGKILL", "SIGTERM"]
    # the parameters as audited validate to the same ladder again
    assert ReapParams.model_validate(asked.model_dump()).ladder == asked.ladder


def test_the_shipped_rule_and_a_plain_act_send_the_same() -> None:
    rules = load_rules([REPO / "rules"])
    [rule] = [r for r in rules.rules if r.name == "zombie-pileup"]
    [reap] = [a.action for a in rule.actions if a.use == "reap.zombies"]
    assert isinstance(reap, ReapZombies)
    assert reap.params.ladder == ReapParams().ladder


def test_the_plan_of_a_plain_act_names_sigchld_only(tmp_path: Path) -> None:
    fake = FakeHost(tmp_path)
    fake.write("proc/uptime", "1000.00 900.00\n")
    fake.process(500, "worker", starttime=100)
    for pid in (501, 502, 503):
        fake.process(pid, "child", state="Z", ppid=500, starttime=200)
    ctx = ActionContext("manual", Snapshot(0.0), fake.host, dry_run=True)
    plan = ReapZombies(ReapParams()).plan(ctx)
    [step] = plan.steps
    assert step.target == "pid 500 (worker)"
    assert "SIGCHLD, wait 5s" in step.change and "SIGTERM" not in step.change, step.change
    escalated = ReapZombies(ReapParams(escalate=True)).plan(ctx)
    assert "SIGCHLD, wait 5s → SIGTERM, wait 5s → SIGKILL, wait 5s" in escalated.steps[0].change
