"""Ladders (issue 42): a rule's steps climbed one at a time, each after the previous one's
`verify` with the rule still firing, durable across a restart and a reboot, waiting whole
while held; past the top it needs a human. Time is the snapshots' own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian import Engine, Snapshot, load_text
from guardian.core.diagnostics import RuleError
from guardian.engine import outcomes
from guardian.engine.engine import EngineState
from guardian.model.holds import Hold
from guardian.runtime import state as state_file

LADDER = '''version = 1

[[rule]]
name = "stuck"
summary = "x is high"
when = "memcg.dying > 10"
cooldown = "10m"
limit = {{ runs = 5, within = "2h" }}
{extra}
  [[rule.step]]
  verify = "5m"
  [[rule.step.action]]
  use = "log"
  message = "one"

  [[rule.step]]
  verify = "10m"
  [[rule.step.action]]
  use = "log"
  message = "two"

  [[rule.step]]
  verify = "5m"
  [[rule.step.action]]
  use = "log"
  message = "three"

  [[rule.escalate]]
  use = "log"
  message = "human"
'''


def ladder(extra: str = "") -> Engine:
    return Engine(load_text(LADDER.format(extra=extra)))


def run(e: Engine, times: range | list[int], x: float = 50.0,
        holds: tuple[Hold, ...] = ()) -> list[tuple[int, str, str]]:
    """(time, kind, the messages of its actions) of every decision at ``times``."""
    out: list[tuple[int, str, str]] = []
    for t in times:
        for d in e.evaluate(Snapshot(float(t), {"memcg.dying": x}), holds=holds):
            out.append((t, d.kind, ",".join(a.params.get("message", "") for a in d.actions)))
    return out


def clock(boot: str, mono: float, wall: float) -> state_file.Clock:
    return state_file.Clock(monotonic=lambda: mono, wall=lambda: wall, boot=lambda: boot)


def test_a_ladder_that_never_resolves_climbs_each_step_once_after_its_verify() -> None:
    e = ladder()
    # step 1 at the fire; step 2 once 5m passed (300 s); step 3 10m (600 s) after that;
    # its verify (5m) past, it needs a human: the escalate action, once
    assert run(e, range(0, 3600, 30)) == [
        (0, "firing", "one"), (300, "retry", "two"), (900, "retry", "three"),
        (1200, "escalated", "human")]
    st = e.states["stuck"]
    assert (st.step, st.escalated, st.needs_human) == (3, True, 1)


def test_the_climb_continues_across_a_restart_and_a_reboot() -> None:
    e = ladder()
    assert run(e, range(0, 400, 30)) == [(0, "firing", "one"), (300, "retry", "two")]
    saved = json.loads(json.dumps(state_file.encode(e.state(), clock("a", 390.0, 1e9))))
    # a restart in the same boot: monotonic times are exact; step 3 at 900, not before
    again = ladder()
    again.restore(state_file.decode(saved, Path("s.json"), clock("a", 450.0, 1e9 + 60)))
    assert run(again, [450, 899, 900, 1000]) == [(900, "retry", "three")]
    # a reboot: the new boot's clock starts near 0, the wall clock says 200 s passed
    # since the save, which was 90 s after step 2: 290 s of its 10m verify are over at
    # 60 s into the new boot, and step 3 is due 310 s later
    booted = ladder()
    booted.restore(state_file.decode(saved, Path("s.json"), clock("b", 60.0, 1e9 + 200)))
    assert run(booted, [60, 369]) == []
    assert run(booted, [370]) == [(370, "retry", "three")]


def test_a_held_step_waits_whole_and_is_not_climbed_past() -> None:
    e = ladder()
    pause = (Hold(2000.0, "maintenance", "alice", rule="stuck"),)
    assert run(e, [0]) == [(0, "firing", "one")]
    # paused from 200 s to 2000 s: step 2 (due at 300) waits, said once
    assert run(e, range(200, 2000, 100), holds=pause) == [(300, "held", "")]
    # the hold ends: step 2 runs now, and step 3 only after its own verify (10m)
    assert run(e, range(2000, 2700, 100)) == [(2000, "retry", "two"), (2600, "retry", "three")]


def test_resolving_resets_the_climb_and_records_the_step_that_resolved_it() -> None:
    e = ladder()
    run(e, range(0, 400, 30))  # steps 1 and 2
    assert run(e, [420], x=1.0) == [(420, "resolved", "")]
    st = e.states["stuck"]
    assert (st.step, st.step_at, st.fires, st.resolutions, st.resolved_at,
            st.resolve_times) == (0, None, 1, 1, [0, 0, 1], [420.0])
    # fires again: a new climb from step 1, once the cooldown (10m) since step 2 passed
    assert run(e, range(600, 1000, 60)) == [(600, "firing", ""), (900, "retry", "one")]
    assert outcomes.words(e.states["stuck"], ladder=True) == (
        "fired 2 times, resolved 1 (after step 2: 1), median 7m to resolve (of the last 1)")


def test_the_limit_counts_step_runs() -> None:
    e = Engine(load_text(LADDER.format(extra="").replace(
        'runs = 5, within = "2h"', 'runs = 3, within = "2h"')))
    run(e, range(0, 1300, 30))
    assert len(e.states["stuck"].runs) == 3


def test_a_shadow_ladder_climbs_the_same_and_applies_nothing() -> None:
    e = ladder('mode = "observe"')
    decisions = []
    for t in range(0, 1300, 30):
        decisions += e.evaluate(Snapshot(float(t), {"memcg.dying": 50.0}))
    assert [(d.time, d.kind, d.mode) for d in decisions] == [
        (0.0, "firing", "observe"), (300.0, "retry", "observe"),
        (900.0, "retry", "observe"), (1200.0, "escalated", "observe")]


def test_a_saved_climb_round_trips() -> None:
    e = ladder()
    run(e, range(0, 400, 30))
    raw = json.loads(json.dumps(state_file.encode(e.state(), clock("a", 400.0, 1e9))))
    back = state_file.decode(raw, Path("s.json"), clock("a", 400.0, 1e9))
    assert back == EngineState(e.state().rules, list(e.global_runs))


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param('  [[rule.action]]\n  use = "log"\n',
     "r.toml:28:3: rule 'stuck' climbs steps: its fire actions go in a [[rule.step]]; "
     "[[rule.action]] holds only clean-up (on = \"resolve\"), and this 'log' runs on "
     "'fire'", id="a fire action beside steps"),
    pytest.param('  [[rule.step]]\n  verify = "1m"\n  [[rule.step.action]]\n  use = "log"\n'
     '  on = "resolve"\n',
     "r.toml:32:8: a step's actions run when the step is climbed: on = 'resolve' cannot "
     "be; put clean-up in the rule's [[rule.action]] with on = \"resolve\"",
     id="a clean-up action in a step"),
    pytest.param('  [[rule.step]]\n  [[rule.step.action]]\n  use = "log"\n',
     "r.toml:28:3: step 4 has no `verify`: how long the rule has to resolve after this "
     "step before the next (e.g. verify = \"10m\")", id="a step without verify"),
    pytest.param('  [[rule.step]]\n  verify = "1m"\n',
     "r.toml:28:3: step 4 has no actions: give it a [[rule.step.action]]",
     id="a step without actions"),
    pytest.param('  [[rule.step]]\n  verify = "1m"\n  recurs = { boots = 1 }\n'
     '  [[rule.step.action]]\n  use = "log"\n',
     "r.toml:30:22: step 4: recurs.boots is how many boots the rule must have fired in "
     "(this one counted) for the step to apply: a whole number from 2 to 8",
     id="recurs boots below 2"),
    pytest.param('  [rule.demote]\n  after = 3\n  below = "half"\n',
     "r.toml:30:11: demote.below is a percentage such as \"20%\"", id="below in words"),
])
def test_ladder_mistakes_are_located(tmp_path: Path, body: str, expected: str) -> None:
    text = LADDER.format(extra="").replace('  [[rule.escalate]]\n  use = "log"\n'
                                           '  message = "human"\n', body)
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(RuleError) as info:
        from guardian.policy.loader import load_rules
        load_rules([p])
    assert [str(d).replace(str(tmp_path) + "/", "") for d in info.value.diagnostics] == [
        expected]


def test_a_limit_below_the_steps_is_an_error() -> None:
    with pytest.raises(RuleError, match=r"<text>:8:1: rule 'stuck' has 3 steps and a "
                                        r"limit of 2 runs: its top would never run"):
        load_text(LADDER.format(extra="").replace('runs = 5', 'runs = 2'))


def test_why_and_explain_say_where_the_climb_is() -> None:
    from guardian.runtime import why
    from guardian.runtime.status import state_words
    e = ladder()
    run(e, range(0, 400, 30))  # step 2 ran at 300
    snap = Snapshot(420.0, {"memcg.dying": 50.0})
    decisions = e.evaluate(snap)
    rule = e.ruleset.rules[0]
    # 420 - 300 = 2m of step 2's 10m verify: 8m more
    assert state_words(e, rule, decisions, 420.0, []) == (
        "FIRING for 7m; step 2 of 3 (log), verifying for 8m more; then step 3 (log)")
    [link] = why.links(e, snap, decisions)
    assert link.climb == "step 2 of 3 (log), verifying for 8m more; then step 3 (log)"
    assert link.record == "record: fired 1 time, resolved 0"


def test_the_metrics_carry_the_time_to_resolve_and_each_steps_outcome() -> None:
    from guardian.runtime.metrics import Metrics
    m = Metrics()
    e = ladder()
    m.use_rules(e.ruleset, {})
    for t, x in [(0, 50.0), (300, 50.0), (900, 50.0), (1200, 50.0), (1500, 1.0)]:
        for d in e.evaluate(Snapshot(float(t), {"memcg.dying": x})):
            m.outcome(d)

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(name, {"rule": "stuck", **labels})
    # steps 1 and 2 did not resolve it within their verify, step 3 neither: a human
    assert [value("guardian_rule_outcomes_total", step=s, outcome=o) for s, o in [
        ("1", "climbed"), ("2", "climbed"), ("3", "needs_human"), ("3", "resolved")]] == [
        1.0, 1.0, 1.0, 1.0]
    # fired at 0, resolved at 1500 s (25m): in the 30m bucket, not the 20m one
    assert value("guardian_rule_resolve_seconds_sum") == 1500.0
    assert value("guardian_rule_resolve_seconds_bucket", le="1200.0") == 0.0
    assert value("guardian_rule_resolve_seconds_bucket", le="1800.0") == 1.0


def test_replay_of_a_recording_shows_the_ladder() -> None:
    from guardian.runtime.recording import Recording
    from guardian.runtime.replay import replay, timeline
    rec = Recording({}, [Snapshot(float(t), {"memcg.dying": 50.0})
                         for t in range(0, 1260, 60)])
    lines = timeline(replay(rec, ladder().ruleset))
    said = [ln.split("(", 1)[1].rsplit(")", 1)[0] for ln in lines if "step" in ln]
    assert said == ["step 1 of 3: log, verify 5m",
                    "step 2 of 3: log, verify 10m; step 1 did not resolve it within 5m",
                    "step 3 of 3: log, verify 5m; step 2 did not resolve it within 10m",
                    "needs a human: its 3 steps ran and it still fires 5m after the last"]


def test_a_second_climb_that_reaches_the_limit_escalates_once_and_climbs_no_further(
) -> None:
    e = Engine(load_text(LADDER.format(extra="").replace(
        'runs = 5, within = "2h"', 'runs = 3, within = "1h"')))
    run(e, range(0, 400, 30))  # steps 1 and 2
    assert run(e, [420], x=1.0) == [(420, "resolved", "")]
    # fires again 10m later: step 1 (the third run within 1h); step 2 would be the fourth:
    # it needs a human, said once, and the climb stops (no step once runs age out)
    said = []
    for t in range(1020, 5000, 60):
        said += [(int(d.time), d.kind, d.reason) for d in
                 e.evaluate(Snapshot(float(t), {"memcg.dying": 50.0}))]
    assert said == [
        (1020, "firing", "step 1 of 3: log, verify 5m"),
        (1320, "escalated", "needs a human: ran its limit (3 runs in 1h) before step 2 of "
                            "3 (log) without resolving it; the climb stops here")]
    st = e.states["stuck"]
    assert (st.step, st.escalated, st.escalated_why, st.needs_human) == (
        1, True, "ran its limit (3 runs in 1h) before step 2 of 3 (log)", 1)
    assert run(e, [5000], x=1.0) == [(5000, "resolved", "")]
    assert (e.states["stuck"].escalated, e.states["stuck"].escalated_why) == (False, "")


def test_the_state_keeps_why_it_needs_a_human() -> None:
    e = ladder()
    run(e, range(0, 1300, 30))  # its three steps, then a human
    assert e.states["stuck"].escalated_why == "its 3 steps ran and it still fires"


def test_why_says_why_it_needs_a_human() -> None:
    from guardian.runtime import why
    e = Engine(load_text(LADDER.format(extra="").replace(
        'runs = 5, within = "2h"', 'runs = 3, within = "1h"')))
    run(e, range(0, 1320, 60))  # its three steps, then a human
    snap = Snapshot(1320.0, {"memcg.dying": 50.0})
    chain = why.links(e, snap, e.evaluate(snap))
    assert "   NEEDS A HUMAN: its 3 steps ran and it still fires" in why.text(chain, 1320.0)
    assert chain[0].climb == ("it needs a human: its 3 steps ran and it still fires; the "
                              "last step run: 3 of 3 (log)")


def test_a_standalone_why_says_what_it_would_run_never_that_a_step_verifies() -> None:
    from guardian.runtime import why

    def own(e: Engine, t: float) -> why.Link:
        snap = Snapshot(t, {"memcg.dying": 50.0})
        [link] = why.links(e, snap, e.evaluate(snap), when=lambda _: "now")
        return link
    # no saved state: it would run step 1 now; its record is nobody's (no saved state)
    fresh = own(ladder(), 0.0)
    assert (fresh.climb, fresh.record) == ("would run step 1 of 3 (log) now", "")
    # the service stopped after step 2 ran (at 300): step 3 never ran, it would run now
    e = ladder()
    run(e, range(0, 400, 30))
    saved = e.state()
    alone = ladder()
    alone.restore(saved)
    link = own(alone, 900.0)
    assert (link.climb, link.record, link.needs_human) == (
        "would run step 3 of 3 (log) now", "record: fired 1 time, resolved 0", False)
    # before step 2's verify passed: what the saved state says ran, and when the next is due
    early = ladder()
    early.restore(saved)
    assert own(early, 420.0).climb == ("step 2 of 3 (log) ran 2m ago (the saved state); "
                                       "step 3 would run in 8m if it still fires")


@pytest.mark.parametrize(("change", "expected"), [
    pytest.param(('  verify = "10m"\n', '  verify = "10m"\n  recurs = { boots = 3 }\n',
                  '  verify = "5m"\n  [[rule.step.action]]\n  use = "log"\n  message = '
                  '"three"', '  verify = "5m"\n  recurs = { boots = 2 }\n  '
                  '[[rule.step.action]]\n  use = "log"\n  message = "three"'),
                 r"<text>:\d+:\d+: step 3 recurs at 2 boots, step 2 at 3: `recurs` boots "
                 r"must increase along the ladder .* step 2 would never run", id="recurs"),
    pytest.param(('cooldown = "10m"\n', 'cooldown = "10m"\nvalidate = "memcg.dying < 5"\n'
                  'validate_for = "2h"\nvalidate_within = "1h"\n', "", ""),
                 r"<text>:9:16: `validate_for` \(2h\) is longer than `validate_within` "
                 r"\(1h\): the validation could never hold", id="validate_for"),
    pytest.param(('limit = { runs = 5, within = "2h" }\n', "",
                  '  [[rule.escalate]]', '  [[rule.step]]\n  verify = "1m"\n'
                  '  [[rule.step.action]]\n  use = "log"\n  [[rule.escalate]]'),
                 r"<text>:3:1: rule 'stuck' has 4 steps and no `limit`: the default, 3 runs "
                 r"within 1h, would never let its top run; add `limit = \{ runs = 4, within "
                 r"= \"1h\" \}` \(or more\) to the rule", id="the default limit"),
])
def test_ladders_and_validations_that_cannot_work_are_errors(
        change: tuple[str, str, str, str], expected: str) -> None:
    text = LADDER.format(extra="")
    a, b, c, d = change
    text = text.replace(a, b, 1)
    if c:
        text = text.replace(c, d, 1)
    with pytest.raises(RuleError, match=expected):
        load_text(text)


def test_explain_says_where_the_services_climb_is_from_its_saved_state(
        tmp_path: Path) -> None:
    import re
    import time

    from guardian.cli.explain import _service_climb
    e = ladder()
    # the service ran step 1 and, 2 minutes ago, step 2 (its verify: 10m)
    start = time.monotonic() - 420.0
    run(e, [int(start) + t for t in (0, 300)])
    saved = tmp_path / "state.json"
    state_file.save(e, saved)
    rule = e.ruleset.rules[0]
    assert re.fullmatch(r"step 2 of 3 \(log\), verifying for \S+ more; then step 3 \(log\)",
                        _service_climb(rule, e.ruleset, saved))
    run(e, [int(start) + t for t in (900, 1200)])  # step 3, then a human
    state_file.save(e, saved)
    assert _service_climb(rule, e.ruleset, saved) == (
        "it needs a human: its 3 steps ran and it still fires; the last step run: 3 of 3 "
        "(log)")
