"""`guardian run --once --dry-run` on this live host, the executor and the audit log."""

from __future__ import annotations

import json
import logging
import re
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
    # a source with nothing to read (no probes here) is the operator's choice, said as
    # `run --once` says it of its rules, not as a fault (before: "source probe unavailable")
    assert "guardian: source probe not configured: no probes in [sources.probe]" \
        in proc.stderr.splitlines()


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
    assert "PENDING  always  processes.total: " in proc.stdout  # its status, not HOLDS
    assert "pending: fires after holding for 10m (10m left), then it would run:" in \
        proc.stdout
    assert "- guardian log: warning: would log for always" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "1 rule: 1 pending; nothing to do"


FIRES = '''version = 1
[[rule]]
name = "always"
summary = "a host always has processes"
when = "processes.total > 0"
cooldown = "30m"
  [[rule.action]]
  use = "log"
  message = "would log for $rule"
'''


def _run_once(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardian", "run", "--once", "--warmup",
                           "0.1s", *args], capture_output=True, text=True, timeout=120)


def test_a_dry_run_never_says_no_action_above_the_plan_it_would_run(
        tmp_path: Path) -> None:
    """Before: `firing: no action now (cooldown, limit or budget; ...)` directly above
    the plan of the action the dry run was about to run."""
    rules = write(tmp_path, "fires.toml", FIRES)
    proc = _run_once("--dry-run", "--rules", str(rules))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "no action" not in proc.stdout
    at = lines.index("         firing: would act now: log")
    assert lines[at + 1:at + 3] == ["         log:",
                                    "           - guardian log: warning: would log for always"]
    assert lines[-1] == "1 rule: 1 firing; would run 1 action"


def test_live_runs_carried_in_the_state_say_the_cooldown_left(tmp_path: Path) -> None:
    """Before: the second run said `firing: no action now (cooldown, limit or budget;
    see guardian explain)`, guessing; now the engine's reason, with the time left."""
    rules = write(tmp_path, "fires.toml", FIRES)
    state = tmp_path / "state.json"
    first = _run_once("--rules", str(rules), "--state", str(state))
    assert first.returncode == 0, first.stderr
    assert "         firing: acting now: log" in first.stdout.splitlines()
    assert first.stdout.splitlines()[-1] == "1 rule: 1 firing; ran 1 action"
    second = _run_once("--rules", str(rules), "--state", str(state))
    assert second.returncode == 0, second.stderr
    # whole seconds: 29m59.6s left reads "30m" on a quick second run
    assert re.search(r"^         firing: in cooldown: actions again in (29m\d+s|30m) \(cooldown "
                     r"30m from the last run, \d+(ms|s) ago\)$", second.stdout, re.M), \
        second.stdout
    assert second.stdout.splitlines()[-1] == "1 rule: 1 firing; nothing to do"
    doc = json.loads(_run_once("--rules", str(rules), "--state", str(state),
                               "--json").stdout)["data"]
    assert doc["summary"] == "1 rule: 1 firing; nothing to do"
    assert (doc["counts"]["rules"], doc["counts"]["firing"], doc["counts"]["actions"]) == \
        (1, 1, 0)


def test_the_summary_counts_the_rules_and_names_the_blind(tmp_path: Path) -> None:
    """Before: no summary; an UNKNOWN rule was one line among fifty-five."""
    rules = write(tmp_path, "rules.toml", '''version = 1
[[rule]]
name = "gpu"
summary = "a DCGM sample, with no endpoint configured"
when = 'prom.sample{metric="DCGM_FI_DEV_XID_ERRORS"} == 79'

[[rule]]
name = "calm"
summary = "never"
when = "processes.total < 0"
''')
    config = write(tmp_path, "guardian.toml", "")
    proc = _run_once("--dry-run", "--config", str(config), "--rules", str(rules))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == [
        "blind (no value): gpu (source exposition not configured: no endpoints or "
        "textfile directories in [sources.exposition])",
        "2 rules: 1 ok, 1 unknown; nothing to do"]
    doc = json.loads(_run_once("--dry-run", "--json", "--config", str(config), "--rules",
                               str(rules)).stdout)["data"]
    assert doc["summary"] == "2 rules: 1 ok, 1 unknown; nothing to do"
    assert (doc["counts"]["ok"], doc["counts"]["unknown"]) == (1, 1)
    assert [b["rule"] for b in doc["blind"]] == ["gpu"]


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
