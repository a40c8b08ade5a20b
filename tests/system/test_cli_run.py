"""`guardian run --once --dry-run` on this live host, the executor and the audit log."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from guardian import (
    Action,
    ActionContext,
    Engine,
    Executor,
    Host,
    Outcome,
    Plan,
    Snapshot,
    Step,
    load_text,
)
from guardian.core.audit import AuditLog, TornLine, read_audit
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import Registry, default_registry
from tests.support.checkout import RULES, write


def test_dry_run_of_shipped_rules_on_this_host(tmp_path: Path) -> None:
    """Real host (not a fixture): every shipped rule is evaluated against live sources."""
    audit = tmp_path / "audit.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "guardian", "run", "--once", "--dry-run", "--json",
         "--warmup", "0.2s", "--rules", str(RULES), "--audit", str(audit)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["data"]
    assert out["dry_run"] is True
    assert {"processes", "cgroups", "cpu", "net"} <= set(out["sources"])
    names = {r["rule"] for r in out["rules"]}
    assert {"dying-memcgs", "zombie-pileup", "core-system-saturated", "nic-reset"} <= names
    for r in out["rules"]:
        assert r["condition"] in ("ok", "holds", "unknown")
    memcg = next(r for r in out["rules"] if r["rule"] == "dying-memcgs")
    assert isinstance(memcg["values"]["memcg.live"], int) and memcg["values"]["memcg.live"] >= 1
    assert "sources available" in proc.stderr


def test_dry_run_prints_the_plan_of_a_rule_that_holds(tmp_path: Path) -> None:
    rules = write(tmp_path, "always.toml", '''version = 1
[[rule]]
name = "always"
summary = "a host always has processes"
when = "processes.total > 0"
for = "10m"
  [[rule.action]]
  use = "log"
  message = "would log for $rule"
''')
    proc = subprocess.run(
        [sys.executable, "-m", "guardian", "run", "--once", "--dry-run", "--warmup", "0.1s",
         "--rules", str(rules)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HOLDS    always" in proc.stdout
    assert "pending: fires after holding for 600s (600s left), then:" in proc.stdout
    assert "- guardian log: warning: would log for always" in proc.stdout


class Boom(Action[NoParams]):
    name = "test.boom"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("nothing", "raise")])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        raise OSError("disk on fire")


def _registry() -> Registry:
    reg = default_registry().copy()
    reg.add_action(Boom)
    return reg


RULE = '''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "test.boom"
'''


def test_live_apply_audits_plans_and_outcomes_even_failures(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rs = load_text(RULE, registry=_registry())
    audit = AuditLog(tmp_path / "a.jsonl")
    ex = Executor(Host(), dry_run=False, audit=audit)
    snap = Snapshot(0, {"memcg.dying": 5.0})
    with caplog.at_level(logging.INFO):
        results = ex.run(Engine(rs).evaluate(snap), snap)
    assert [r.use for r in results] == ["log", "test.boom"]
    assert results[0].outcome is not None and results[0].outcome.ok
    assert results[1].outcome is not None and not results[1].outcome.ok
    assert "disk on fire" in results[1].outcome.error
    records = list(read_audit(tmp_path / "a.jsonl"))
    assert [r["type"] for r in records if isinstance(r, dict)] == [
        "decision", "plan", "outcome", "plan", "outcome"]
    assert "rule r fired" in caplog.text


def test_dry_run_never_applies(tmp_path: Path) -> None:
    rs = load_text(RULE, registry=_registry())
    ex = Executor(Host(), dry_run=True, audit=AuditLog(tmp_path / "a.jsonl"))
    snap = Snapshot(0, {"memcg.dying": 5.0})
    results = ex.run(Engine(rs).evaluate(snap), snap)
    assert all(r.plan is not None and r.outcome is None for r in results)
    kinds = [r["type"] for r in read_audit(tmp_path / "a.jsonl") if isinstance(r, dict)]
    assert "outcome" not in kinds and kinds.count("plan") == 2


def test_torn_audit_line_is_reported(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl")
    log.write({"type": "decision", "rule": "x"})
    log.close()
    with open(tmp_path / "a.jsonl", "a") as f:
        f.write('{"type": "outc')
    recs = list(read_audit(tmp_path / "a.jsonl"))
    assert isinstance(recs[0], dict) and isinstance(recs[1], TornLine)
    assert recs[1].line_no == 2


def test_builtins_register_through_entry_points() -> None:
    reg = Registry.from_entry_points()
    assert reg.load_errors == []
    assert "log" in reg.actions
    assert {"processes", "cgroups", "cpu", "net", "pressure", "ethtool", "kmsg"} <= set(
        reg.sources)


def test_embedding_takes_a_few_lines() -> None:
    import guardian
    rules = guardian.load_rules([RULES])
    engine = guardian.Engine(rules)
    decisions = engine.evaluate(guardian.Snapshot(0.0, {"processes.zombies": 9000.0}))
    assert [d.kind for d in decisions] == ["pending"]
    assert decisions[0].rule == "zombie-flood"
