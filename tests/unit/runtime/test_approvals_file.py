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
