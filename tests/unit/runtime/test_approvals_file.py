"""Approvals on a node (issue 45): `guardian approve RULE --why TEXT` keeps one in
approvals.json beside guardian pause's holds, the service's operations read it at each
tick into what the engine evaluates under, and a gated action waiting there runs with the
approver in its decision. A file someone else could have written (writable by group or
others), or one that cannot be parsed, approves nothing.

Before: there was no `guardian approve`, and nothing read approvals."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from guardian import Snapshot
from guardian.cli import main
from guardian.runtime import state as state_file
from guardian.runtime.approvals import ApprovalFile
from guardian.runtime.config import Config
from guardian.runtime.metrics import Metrics
from guardian.runtime.operate import Operations, approvals_path
from tests.support.approval import ILL, engine


def test_guardian_approve_reaches_the_engine_through_the_state_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.json"
    config = tmp_path / "guardian.toml"
    config.write_text("")
    e = engine()
    ops = Operations(Config(), state)
    wall = time.time() - 60  # the wait began a minute ago
    e.evaluate(Snapshot(0, dict(ILL)), wall=wall, approvals=ops.before(wall).approvals)
    state_file.save(e, state)
    metrics = Metrics()
    ops.after(e, metrics)
    assert 'guardian_rule_awaiting_approval{rule="nic-stall"} 1.0' in \
        generate_latest(metrics.registry).decode()
    assert main(["approve", "nic-stall", "--why", "drained by hand", "--by", "alice",
                 "--config", str(config), "--state", str(state),
                 "--approvals-file", str(approvals_path(Config(), state))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rule nic-stall: approved by alice at ")
    assert out.rstrip().endswith("it waits for approval: its gated actions run at the "
                                 "service's next evaluation")
    assert (tmp_path / "approvals.json").stat().st_mode & 0o077 == 0
    # the service's next tick (its wall clock now past the approval's)
    op = ops.before(time.time() + 1)
    [given] = op.approvals
    assert (given.rule, given.by, given.why) == ("nic-stall", "alice", "drained by hand")
    run = e.evaluate(Snapshot(15, dict(ILL)), wall=op.wall, approvals=op.approvals)
    assert [(d.kind, d.approval.by if d.approval else None) for d in run] == [
        ("retry", "alice")]
    ops.after(e, metrics)
    assert 'guardian_rule_awaiting_approval{rule="nic-stall"} 0.0' in \
        generate_latest(metrics.registry).decode()


def test_an_approvals_file_others_could_write_or_nobody_can_parse_approves_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "approvals.json"
    path.write_text(json.dumps([{"rule": "r", "by": "mallory", "why": "x",
                                 "at": "2027-01-15T09:05:00Z"}]))
    path.chmod(0o600)
    assert [a.by for a in ApprovalFile(path).approvals()] == ["mallory"]
    path.chmod(0o666)
    assert ApprovalFile(path).approvals() == []
    path.chmod(0o600)
    path.write_text('[{"rule": "r", "by": "alice", "why": "x"}]')  # no `at`
    assert ApprovalFile(path).approvals() == []
    assert ApprovalFile(tmp_path / "none.json").approvals() == []


APPROVE_RULES = '''version = 1
[[rule]]
name = "memcg-leak"
summary = "s"
when = "memcg.dying > 100"
approve = { timeout = "2h" }
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]

[[rule]]
name = "ungated"
summary = "s"
when = "memcg.dying > 100"
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]

[[rule]]
name = "ladder"
summary = "s"
when = "memcg.dying > 100"
  [[rule.step]]
  verify = "5m"
    [[rule.step.action]]
    use = "log"
  [[rule.step]]
  verify = "5m"
  approve = { timeout = "2h" }
    [[rule.step.action]]
    use = "command"
    argv = ["/bin/true"]
'''


def _approve_config(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "a.toml").write_text(APPROVE_RULES)
    (tmp_path / "state").mkdir(mode=0o700)
    config = tmp_path / "g.toml"
    config.write_text(f'[service]\nrules = ["{tmp_path / "rules"}"]\n'
                      f'state_file = "{tmp_path / "state" / "state.json"}"\n')
    return config


def test_approve_refuses_a_name_no_loaded_rule_has_and_a_rule_that_never_waits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 45: `guardian approve memcg-lek` said "approved", exit 0, and a
    rule without a gate "does not wait for approval now" (it never will). Now both are
    usage errors (exit 2) that keep nothing, the first answered with the likely meant
    name as `guardian pause` answers it; a ladder whose second step has the gate waits."""
    config = _approve_config(tmp_path)
    kept = tmp_path / "state" / "approvals.json"
    assert main(["approve", "memcg-lek", "--why", "x", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "guardian approve: no loaded rule is named 'memcg-lek' (did you mean "
        "'memcg-leak'?); nothing approved\n")
    assert main(["approve", "ungated", "--why", "x", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "guardian approve: rule ungated has no approve gate: none of its actions ever "
        "waits for approval; nothing approved\n")
    assert not kept.exists()
    assert main(["approve", "ladder", "--why", "x", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("rule ladder: approved by ")
    assert main(["approve", "memcg-leak", "--why", "x", "--config", str(config),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["waits"] is None
    assert [a.rule for a in ApprovalFile(kept).approvals()] == ["ladder", "memcg-leak"]


def test_approve_says_the_truth_when_the_service_would_refuse_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 45: with a state directory of mode 0777 `guardian approve` promised
    the gated actions would run (exit 0) while the service's reader refused the file.
    It now reads back what it wrote with that reader, and says why it is refused."""
    config = _approve_config(tmp_path)
    state = tmp_path / "state"
    state.chmod(0o777)
    try:
        assert main(["approve", "memcg-leak", "--why", "drained", "--config",
                     str(config)]) == 1
        assert capsys.readouterr().err == (
            f"guardian approve: the service will not take this approval: "
            f"{state / 'approvals.json'} approves nothing: {state} is writable by group "
            f"or others (mode 0777) (kept in {state / 'approvals.json'}: it counts once "
            f"that is fixed)\n")
        assert main(["approve", "memcg-leak", "--why", "drained", "--config", str(config),
                     "--json"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert doc["ok"] is False and "is writable by group or others" in \
            doc["errors"][0]["message"]
    finally:
        state.chmod(0o700)
    assert [a.by for a in ApprovalFile(state / "approvals.json").approvals()] != []
