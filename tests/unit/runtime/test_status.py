"""guardian.runtime.status: a rule's status in words (``run --once``, ``explain``), read
from the engine's state and decisions, each sentence true of what the engine did."""

from __future__ import annotations

from guardian import load_text
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine
from guardian.engine.lifecycle import RuleState
from guardian.model.holds import Hold
from guardian.model.ruleset import CompiledRule
from guardian.runtime.status import (
    acted_line,
    for_people,
    held_by,
    now_words,
    state_words,
    tally,
)


def _engine(body: str) -> Engine:
    return Engine(load_text("version = 1\n" + body))


RULE = '''
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
for = "{for_}"
cooldown = "30m"
keep_firing_for = "{keep}"
limit = {{ runs = {runs}, within = "1h" }}
  [[rule.action]]
  use = "log"
'''


def _one(for_: str = "0s", keep: str = "0s", runs: int = 3) -> Engine:
    return _engine(RULE.format(for_=for_, keep=keep, runs=runs))


def _at(engine: Engine, t: float, dying: float, holds: tuple[Hold, ...] = (),
        wall: float | None = None) -> list[Decision]:
    return engine.evaluate(Snapshot(t, {"memcg.dying": dying, "memcg.live": 1.0}),
                           holds=holds, wall=wall)


def _rule(engine: Engine, name: str = "r") -> CompiledRule:
    rule = engine.ruleset.by_name(name)
    assert rule is not None
    return rule


def test_durations_for_people_never_raw_float_seconds() -> None:
    assert for_people(190.022) == "3m10s"
    assert for_people(1609.98) == "26m50s"
    assert for_people(0.5) == "500ms"
    assert for_people(-3.0) == "0s"


def test_a_rule_that_fires_now_would_act_now_never_no_action() -> None:
    """Before: `firing: no action now (cooldown, limit or budget ...)` above the very
    plan the dry run was about to print."""
    engine = _one()
    decisions = _at(engine, 0.0, 5.0)
    assert [d.kind for d in decisions] == ["firing"]
    words = now_words(engine, _rule(engine), decisions, 0.0, dry_run=True)
    assert words == "firing: would act now: log"
    assert now_words(engine, _rule(engine), decisions, 0.0, dry_run=False) == \
        "firing: acting now: log"


def test_a_rule_in_cooldown_says_how_long_is_left() -> None:
    engine = _one()
    _at(engine, 0.0, 5.0)
    decisions = _at(engine, 60.0, 5.0)
    assert decisions == []
    assert now_words(engine, _rule(engine), decisions, 60.0, dry_run=True) == (
        "firing: in cooldown: actions again in 29m (cooldown 30m from the last run, 1m "
        "ago)")


def test_a_rule_at_its_limit_says_the_engines_refusal() -> None:
    engine = _engine(RULE.format(for_="0s", keep="0s", runs=1).replace(
        'cooldown = "30m"', 'cooldown = "10s"'))
    _at(engine, 0.0, 5.0)
    first = _at(engine, 20.0, 5.0)
    assert [d.kind for d in first] == ["suppressed"]
    want = ("firing: not acting: rule limit reached: 1 action runs within 1h; not acting "
            "until one ages out")
    assert now_words(engine, _rule(engine), first, 20.0, dry_run=True) == want
    later = _at(engine, 40.0, 5.0)  # said once: no decision now, the same reason
    assert later == []
    assert now_words(engine, _rule(engine), later, 40.0, dry_run=True) == want


def test_a_rule_kept_firing_by_keep_firing_for_says_so() -> None:
    engine = _one(keep="10m")
    _at(engine, 0.0, 5.0)
    _at(engine, 60.0, 0.0)  # first false evaluation: kept firing from here
    decisions = _at(engine, 180.0, 0.0)
    rule = _rule(engine)
    assert engine.states["r"].phase == "firing"
    assert now_words(engine, rule, decisions, 180.0, dry_run=True) == (
        "firing: kept firing by keep_firing_for: resolves in 8m unless it holds again "
        "(false for the last 2m; no action meanwhile)")
    assert state_words(engine, rule, decisions, 180.0, []) == (
        "FIRING for 3m; kept firing by keep_firing_for: resolves in 8m unless it holds "
        "again (false for the last 2m; no action meanwhile)")


def test_pending_and_its_time_left() -> None:
    engine = _one(for_="5m")
    _at(engine, 0.0, 5.0)
    decisions = _at(engine, 60.022, 5.0)
    rule = _rule(engine)
    assert now_words(engine, rule, decisions, 60.022, dry_run=True) == \
        "pending: fires after holding for 5m (4m left)"
    assert state_words(engine, rule, decisions, 60.022, []) == \
        "PENDING: holds for 1m; fires in 4m (for = 5m)"
    ended = _at(engine, 120.0, 0.0)
    assert [d.kind for d in ended] == ["inactive"]
    assert now_words(engine, rule, ended, 120.0, dry_run=True) == \
        "inactive now: it stopped holding before `for` passed, without firing"


CHAIN = '''
[[rule]]
name = "cause"
summary = "the cause"
when = "memcg.live > 0"
  [[rule.action]]
  use = "log"

[[rule]]
name = "symptom"
summary = "the symptom"
when = "memcg.dying > 1"
caused_by = ["cause"]
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "memcg.release"
  method = "drop_caches"
  hold = {hold}
'''


def test_a_cause_holds_only_what_it_holds() -> None:
    """Before, `explain` said "its disruptive actions are held while its cause ... is
    firing" of a rule whose actions say `hold = false`, while `why` showed them run."""
    engine = _engine(CHAIN.format(hold="false"))
    decisions = _at(engine, 0.0, 5.0)
    rule = _rule(engine, "symptom")
    assert [(d.rule, d.kind) for d in decisions] == [("cause", "firing"),
                                                     ("symptom", "firing")]
    assert held_by(engine, rule) == []
    words = state_words(engine, rule, decisions, 0.0, [])
    assert words == "FIRING for 0s; would act now: log, memcg.release"
    assert "held" not in words
    assert acted_line(rule, engine.states["symptom"], decisions, "would act") == \
        "would act: +0s: firing: log, memcg.release"

    engine = _engine(CHAIN.format(hold="true"))
    decisions = _at(engine, 0.0, 5.0)
    rule = _rule(engine, "symptom")
    assert held_by(engine, rule) == ["cause"]
    assert now_words(engine, rule, decisions, 0.0, dry_run=True) == (
        "firing: would act now: log; held now: memcg.release held while its cause cause "
        "is firing: the cause is fixed first")
    later = _at(engine, 60.0, 5.0)  # in cooldown, the release still owed
    assert now_words(engine, rule, later, 60.0, dry_run=True) == (
        "firing: in cooldown: actions again in 4m (cooldown 5m from the last run, 1m ago);"
        " waiting: memcg.release held while its cause cause is firing: the cause is fixed "
        "first")


def test_state_words_of_disabled_unknown_inactive_and_resolved() -> None:
    engine = _one()
    rule = _rule(engine)
    assert state_words(engine, rule, [], 0.0, []) == "INACTIVE: the condition does not hold"
    engine.states["r"] = RuleState(unknown=True)
    assert state_words(engine, rule, [], 0.0, ["memcg.dying"]) == (
        "UNKNOWN: the condition has no value (missing: memcg.dying); it neither fires "
        "nor clears")
    engine = _one()
    _at(engine, 0.0, 5.0)
    done = _at(engine, 15.0, 0.0)
    assert [d.kind for d in done] == ["resolved"]
    assert now_words(engine, _rule(engine), done, 15.0, dry_run=True) == "resolved now"
    assert state_words(engine, _rule(engine), done, 15.0, []) == \
        "INACTIVE: resolved at this evaluation"
    off = _engine(RULE.format(for_="0s", keep="0s", runs=3).replace(
        'cooldown = "30m"', 'enabled = false'))
    assert state_words(off, _rule(off), [], 0.0, []) == "disabled"


def test_the_summary_counts_each_rule_once_and_names_the_blind() -> None:
    t = tally([("a", "ok", "inactive", "", []), ("b", "ok", "inactive", "", []),
               ("c", "unknown", "inactive", "systemd unavailable: no bus", []),
               ("d", "holds", "firing", "", ["planned", "planned"]),
               ("e", "holds", "pending", "", []), ("f", "disabled", "inactive", "", []),
               ("g", "holds", "firing", "", ["held"])])
    assert t.line(dry_run=True) == ("7 rules: 2 ok, 2 firing, 1 pending, 1 unknown, "
                                    "1 disabled; would run 2 actions, 1 held")
    assert t.blind == [("c", "systemd unavailable: no bus")]
    assert t.to_dict()["unknown"] == 1 and t.to_dict()["actions"] == 2
    quiet = tally([("a", "ok", "inactive", "", []), ("c", "unknown", "inactive", "x", [])])
    assert quiet.line(dry_run=False) == "2 rules: 1 ok, 1 unknown; nothing to do"
    live = tally([("d", "holds", "firing", "", ["ok", "failed"])])
    assert live.line(dry_run=False) == "1 rule: 1 firing; ran 1 action, 1 failed or refused"


def test_a_paused_rule_says_the_hold_and_what_was_held_runs_when_it_ends() -> None:
    engine = _one()
    freeze = (Hold(1e9, "freeze", "ops"),)
    rule = _rule(engine)
    pause = "paused by ops until 2001-09-09T01:46:40Z: freeze"
    first = _at(engine, 0.0, 5.0, freeze, 1000.0)
    assert [d.kind for d in first] == ["firing", "held"]
    assert now_words(engine, rule, first, 0.0, dry_run=True) == f"firing: held now: {pause}"
    later = _at(engine, 60.0, 5.0, freeze, 1000.0)
    assert now_words(engine, rule, later, 60.0, dry_run=True) == (
        "firing: in cooldown: actions again in 29m (cooldown 30m from the last run, 1m "
        f"ago); waiting: {pause}")
    # the pause ended: what was held runs, cooldown or not
    owed = _at(engine, 120.0, 5.0, (), 1000.0)
    assert now_words(engine, rule, owed, 120.0, dry_run=False) == \
        "firing: acting now (what was held runs now): log"
