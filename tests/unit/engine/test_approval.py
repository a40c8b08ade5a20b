"""The approval gate (issue 45): a rule's (or a ladder step's) disruptive actions wait for
a human's approval, its other actions run meanwhile; an approval given for this wait lets
them run once, with who and why in the decision and the audit; one given before the wait
began (a previous episode's, or one already used) approves nothing; past the timeout it
needs a human and never applies (or, with then = "proceed", runs and says so); a restart
keeps waiting. All on a simulated clock (the snapshot's time, and a wall clock beside it).

Before: `approve` was no key of a rule (a located error), and a disruptive action ran as
soon as its rule fired."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian import Executor, Host, load_text
from guardian.core.audit import AuditLog, read_audit
from guardian.core.diagnostics import RuleError
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision
from guardian.model.approvals import Approval, parse_approvals
from guardian.runtime import state as state_file
from tests.support.approval import ILL, WALL, WELL, approval, engine, registry, rules, tick


def said(decisions: list[Decision]) -> list[tuple[str, list[str], list[str]]]:
    return [(d.kind, [a.use for a in d.actions], [a.use for a in d.would])
            for d in decisions]


def test_a_gated_action_waits_then_runs_once_with_who_and_why_in_the_audit(
        tmp_path: Path) -> None:
    e = engine()
    first = tick(e, 0)
    assert said(first) == [("firing", ["log"], []),
                           ("awaiting_approval", [], ["test.disrupts"])]
    assert first[1].reason.startswith("test.disrupts waits for approval (times out in 2h, "
                                      "then it needs a human): approve with `guardian "
                                      "approve nic-stall --why TEXT`")
    # nothing approves it: each tick looks, none acts, nothing more is said
    for t in (15, 600, 3600):
        assert tick(e, t, approvals=[approval(-60), approval(30, rule="other")]) == []
    # approved at 1h05m: it runs at the next tick (not after a cooldown), once
    path = tmp_path / "audit.jsonl"
    ex = Executor(Host(), dry_run=False, audit=AuditLog(path))
    ok = [approval(3900)]
    snap = Snapshot(3915, dict(ILL))
    run = e.evaluate(snap, wall=WALL + 3915, approvals=ok)
    assert said(run) == [("retry", ["log", "test.disrupts"], [])]
    assert run[0].approval == ok[0]
    assert run[0].reason == "approved by alice at 2027-01-15T09:05:00Z: drained by hand"
    assert [r.result for r in ex.run(run, snap)] == ["ok", "ok"]
    records = [r for r in read_audit(path) if isinstance(r, dict)]
    decision = next(r for r in records if r["type"] == "decision")
    assert decision["approval"] == {"rule": "nic-stall", "by": "alice",
                                    "why": "drained by hand", "at": "2027-01-15T09:05:00Z",
                                    "source": "cli"}
    outcomes = {r["use"]: r.get("approval") for r in records if r["type"] == "outcome"}
    assert outcomes == {"log": None, "test.disrupts": decision["approval"]}
    # used: the same approval never approves the next wait (after the cooldown)
    assert tick(e, 3930, approvals=ok) == []
    again = tick(e, 3915 + 600, approvals=ok)
    assert said(again) == [("retry", ["log"], []),
                           ("awaiting_approval", [], ["test.disrupts"])]
    assert tick(e, 3915 + 700, approvals=ok) == []


def test_a_stale_approval_from_the_last_episode_approves_nothing() -> None:
    e = engine()
    tick(e, 0)
    used = [approval(60)]
    assert said(tick(e, 120, approvals=used))[0] == ("retry", ["log", "test.disrupts"], [])
    assert said(tick(e, 200, WELL)) == [("resolved", [], [])]
    # the annotation stays on the node; a new episode begins: it waits again
    assert said(tick(e, 1000, approvals=used))[-1] == (
        "awaiting_approval", [], ["test.disrupts"])
    assert tick(e, 1100, approvals=used) == []
    expired = [Approval("nic-stall", "bob", "ok", WALL + 1050, WALL + 1090)]
    assert tick(e, 1100, approvals=expired) == []  # given for it, but past its `until`
    fresh = [*used, approval(1150, by="bob")]
    run = tick(e, 1200, approvals=fresh)
    assert [d.approval.by for d in run if d.approval] == ["bob"]


def test_past_the_timeout_it_needs_a_human_and_never_applies() -> None:
    e = engine(rules('approve = { timeout = "30m" }\n'
                     '  [[rule.escalate]]\n  use = "log"'))
    tick(e, 0)
    assert tick(e, 1799) == []
    out = tick(e, 1800)
    assert said(out) == [("escalated", ["log"], [])]
    assert out[0].reason == ("needs a human: not approved within 30m: test.disrupts never "
                             "runs in this episode")
    [rule] = e.ruleset.rules
    assert e.states[rule.name].escalated and e.states[rule.name].needs_human == 1
    # a late approval does not apply it either: the episode needs a human
    for t in (1815, 3600, 7200):
        assert all(a.use != "test.disrupts" for d in tick(e, t, approvals=[approval(1810)])
                   for a in d.actions)
    # a rule without escalate actions says it too, in an escalated decision of its own
    plain = engine(rules('approve = { timeout = "30m" }'))
    tick(plain, 0)
    assert said(tick(plain, 1800)) == [("escalated", [], [])]


def test_then_proceed_runs_without_an_approval_and_says_so() -> None:
    e = engine(rules('approve = { timeout = "30m", then = "proceed" }'))
    assert "then they run without one" in tick(e, 0)[1].reason
    out = tick(e, 1800)
    assert said(out) == [("retry", ["log", "test.disrupts"], [])]
    assert out[0].approval is None
    assert out[0].reason == ('not approved within 30m: test.disrupts runs without an '
                             'approval (approve.then = "proceed")')


def test_a_restart_keeps_waiting_and_its_timeout(tmp_path: Path) -> None:
    e = engine()
    tick(e, 0)
    clock = state_file.Clock(monotonic=lambda: 100.0, wall=lambda: WALL + 100,
                             boot=lambda: "b1")
    path = tmp_path / "state.json"
    state_file.save(e, path, clock=clock)
    again = engine()
    assert state_file.load(again, path, clock=clock) == ["nic-stall"]
    st = again.states["nic-stall"]
    assert (st.awaiting, st.awaiting_wall) == (0.0, WALL)
    assert tick(again, 300) == []  # still waiting: no second awaiting_approval, no action
    assert [d.approval.by for d in tick(again, 400, approvals=[approval(350)])
            if d.approval] == ["alice"]
    # and one restarted past its timeout needs a human at its first tick
    late = engine()
    state_file.load(late, path, clock=clock)
    assert said(tick(late, 7200)) == [("escalated", [], [])]


def test_a_ladder_step_waits_whole_for_its_approval() -> None:
    e = engine('''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "memcg.dying > 100"
limit = { runs = 3, within = "1h" }
  [[rule.step]]
  verify = "5m"
    [[rule.step.action]]
    use = "log"
  [[rule.step]]
  verify = "5m"
  approve = { timeout = "1h" }
    [[rule.step.action]]
    use = "log"
    [[rule.step.action]]
    use = "test.disrupts"
''')
    assert said(tick(e, 0)) == [("firing", ["log"], [])]
    out = tick(e, 300)
    assert said(out) == [("retry", ["log"], []), ("awaiting_approval", [], ["test.disrupts"])]
    assert out[1].step == 2 and out[1].reason.startswith("step 2 of 2 (log, test.disrupts):")
    assert tick(e, 400) == []
    run = tick(e, 500, approvals=[approval(450)])
    assert said(run) == [("retry", ["log", "test.disrupts"], [])]
    assert run[0].step == 2 and "approved by alice" in run[0].reason
    assert e.states["nic-stall"].awaiting is None


def test_approve_is_checked_where_it_is_written() -> None:
    with pytest.raises(RuleError) as err:
        load_text(rules('approve = { timeout = "2h", then = "maybe" }'), registry=registry())
    assert "approve.then" in str(err.value)
    # a gate on a rule with nothing disruptive would wait for nothing: said where it is
    with pytest.raises(RuleError) as err:
        load_text(rules('approve = { timeout = "2h" }').replace('use = "test.disrupts"',
                                                               'use = "log"'),
                  registry=registry())
    assert err.value.diagnostics[0].line == 7
    assert "`approve` holds only disruptive actions" in str(err.value)


def test_an_approval_that_cannot_be_read_approves_nothing() -> None:
    good = json.dumps({"rule": "r", "by": "alice", "why": "ok",
                       "at": "2027-01-15T09:05:00Z"})
    ok, problems = parse_approvals(good, "node n1")
    assert [a.by for a in ok] == ["alice"] and problems == []
    for bad in ('{"rule": "r", "by": "alice", "why": "ok"}',  # no `at`: no time to judge
                '{"rule": "r", "by": " ", "why": "ok", "at": "2027-01-15T09:05:00Z"}',
                '{"rule": "r", "by": "a", "why": "ok", "at": "2027-01-15T09:05:00"}',
                "not json", "[1]", b"\xff"):
        got, problems = parse_approvals(bad, "node n1")
        assert got == [] and problems, bad


def test_a_rule_test_expects_the_wait_and_its_timeout(tmp_path: Path) -> None:
    from guardian.policy.ruletest import run_test_file
    from tests.support.checkout import write
    write(tmp_path, "r.toml", rules('approve = { timeout = "30m" }').replace(
        'use = "test.disrupts"', 'use = "command"\n  argv = ["/bin/true"]'))
    t = write(tmp_path, "r.test.toml", '''rule_files = ["r.toml"]
interval = "5m"
[[test]]
[test.series]
"memcg.dying" = "500x10"
  [[test.expect]]
  at = "0m"
  actions = [{ rule = "nic-stall", use = "log" }]
  awaiting_approval = ["nic-stall"]
  [[test.expect]]
  at = "25m"
  actions = []
  awaiting_approval = ["nic-stall"]
  needs_human = []
  [[test.expect]]
  at = "30m"
  actions = []
  needs_human = ["nic-stall"]
  awaiting_approval = []
''')
    res = run_test_file(t)
    assert not res.failures, [f.message for f in res.failures]


def test_why_says_since_when_it_waits_until_when_and_how_to_approve() -> None:
    from guardian.runtime import why
    e = engine()
    snap = Snapshot(0, dict(ILL))
    decisions = e.evaluate(snap, wall=WALL)
    [link] = why.links(e, snap, decisions)
    assert link.awaiting == (
        "waits for approval since 2027-01-15T08:00:00Z (times out 2027-01-15T10:00:00Z): "
        "approve with `guardian approve nic-stall --why TEXT` or the node annotation "
        "guardian.io/approve")
    assert f"   AWAITING APPROVAL: {link.awaiting}" in why.text([link], 0)
    tick(e, 7200)  # past its timeout: it needs a human, and says it waited in vain
    [link] = why.links(e, Snapshot(7200, dict(ILL)), [])
    assert link.needs_human and link.awaiting == (
        "waited for approval since 2027-01-15T08:00:00Z: not approved within 2h, it needs "
        "a human")


def test_a_pause_during_the_wait_keeps_it_and_its_approval() -> None:
    from guardian.model.holds import Hold
    e = engine()
    tick(e, 0)
    pause = [Hold(WALL + 1200, "kernel rollout", "bob", "nic-stall")]
    paused = e.evaluate(Snapshot(600, dict(ILL)), holds=pause, wall=WALL + 600,
                        approvals=[approval(300)])
    assert all(a.use != "test.disrupts" for d in paused for a in d.actions)
    assert e.states["nic-stall"].awaiting == 0.0  # the wait goes on under the pause
    run = tick(e, 1300, approvals=[approval(300)])  # the pause ended: approved before it
    assert [d.approval.by for d in run if d.approval] == ["alice"]
