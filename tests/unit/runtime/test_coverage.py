"""guardian.runtime.coverage and the words `why` says of it: a rule with no value is
blind, named with why, never counted healthy.

Before: on a host without systemd as PID 1 and without a DCGM exporter, `guardian why`
printed "Nothing is wrong: no rule is pending or firing." while `unit-crashloop` (the
incident's root cause) and the DCGM rules had no value."""

from __future__ import annotations

from pathlib import Path

from guardian import load_text
from guardian.core.snapshot import Snapshot, labels_of
from guardian.engine.engine import Engine
from guardian.runtime import seen as seen_file
from guardian.runtime import why
from guardian.runtime.coverage import Blind, Sight, blind_rules, sight_of, summary
from guardian.service.instancelock import InstanceLock, holder

# the incident's chain in small: a unit's crash loop causes the dying memcgs
RULES = '''version = 1
[[rule]]
name = "unit-crashloop"
summary = "a unit restarts over and over"
when = "systemd.unit_restarts_recent >= 5"

[[rule]]
name = "dying-memcgs"
summary = "dying memory cgroups pile up"
severity = "critical"
when = "memcg.dying > 10"
caused_by = ["unit-crashloop"]

[[rule]]
name = "gpu-gone"
summary = "a GPU fell off the bus"
severity = "critical"
when = "prom.sample{metric=\\"DCGM_FI_DEV_XID_ERRORS\\"} == 79"
'''

SIGHT = Sight.of({"systemd": ["systemd.unit_restarts_recent"], "cgroups": ["memcg.dying"],
                  "exposition": ["prom.sample"]},
                 running={"cgroups", "exposition"},
                 unavailable={"systemd": "no systemd to talk to"})


def _evaluated(values: dict[str, object], errors: dict[str, str] | None = None
               ) -> tuple[Engine, Snapshot]:
    engine = Engine(load_text(RULES))
    snap = Snapshot(100.0, dict(values), dict(errors or {}))  # type: ignore[arg-type]
    engine.evaluate(snap)
    return engine, snap


def test_a_rule_without_value_is_blind_with_its_source_and_why() -> None:
    engine, snap = _evaluated({"memcg.dying": 3.0},
                              {"exposition": "textfile dcgm.prom: older than max_age"})
    blind = blind_rules(engine.ruleset, engine.states, snap, SIGHT)
    assert [b.rule for b in blind] == ["unit-crashloop", "gpu-gone"]
    crash = blind[0]
    assert crash.missing == ("systemd.unit_restarts_recent",)
    assert crash.reasons == ("source systemd unavailable: no systemd to talk to",)
    assert crash.causes_of == ("dying-memcgs",) and crash.root_cause
    assert blind[1].reasons == (
        "source exposition failing: textfile dcgm.prom: older than max_age",)
    assert (crash.causes, crash.cause, crash.chosen) == (("unavailable",), "unavailable",
                                                        False)
    assert blind[1].cause == "failing"
    assert summary(blind) == ("2 blind (unit-crashloop, gpu-gone): exposition failing, "
                              "systemd unavailable")
    assert summary([]) == ""


def test_a_source_with_nothing_configured_is_the_operators_choice_and_named() -> None:
    """Before: the DCGM rules on a node with no exporter configured were blind exactly as
    a broken source's are ("unavailable"), and GuardianRuleBlind fired for each, forever.
    They stay blind and named, with their cause: not configured."""
    sight = Sight.of({"systemd": ["systemd.unit_restarts_recent"],
                      "cgroups": ["memcg.dying"], "exposition": ["prom.sample"]},
                     running={"cgroups"},
                     unavailable={"systemd": "no systemd to talk to",
                                  "exposition": "no endpoints or textfile directories in "
                                                "[sources.exposition]"},
                     unconfigured={"exposition": "no endpoints or textfile directories in "
                                                 "[sources.exposition]"})
    engine, snap = _evaluated({"memcg.dying": 3.0})
    blind = {b.rule: b for b in blind_rules(engine.ruleset, engine.states, snap, sight)}
    gpu = blind["gpu-gone"]
    assert (gpu.causes, gpu.cause, gpu.chosen) == (("unconfigured",), "unconfigured", True)
    assert gpu.reasons == ("source exposition not configured: no endpoints or textfile "
                           "directories in [sources.exposition]",)
    assert (blind["unit-crashloop"].cause, blind["unit-crashloop"].chosen) == \
        ("unavailable", False)
    assert summary(list(blind.values())) == (
        "2 blind (unit-crashloop, gpu-gone): systemd unavailable, exposition not configured")
    # the cause travels in what the service writes for `guardian why`
    assert Blind.from_dict(gpu.to_dict()) == gpu
    # a rule lacking one chosen and one broken source is blind for the broken one
    both = Blind("r", "warning", ("a", "b"), ("exposition", "systemd"), ("", ""), (),
                 ("unconfigured", "unavailable"))
    assert (both.cause, both.chosen) == ("unavailable", False)


def test_the_collector_tells_a_source_with_nothing_configured_apart() -> None:
    from guardian.hostio.host import Host
    from guardian.plugin.registry import default_registry
    from guardian.runtime.collector import Collector
    from guardian.sources.exposition import ExpositionSource
    from guardian.sources.probe import ProbeSource
    coll = Collector(Host(), [ExpositionSource(Host()), ProbeSource(Host())])
    assert coll.sources == []
    assert coll.unconfigured == {
        "exposition": "no endpoints or textfile directories in [sources.exposition]",
        "probe": "no probes in [sources.probe]"}
    assert coll.unavailable == coll.unconfigured  # still listed among those that do not run
    sight = sight_of(coll, default_registry())
    assert sight.off_cause["probe"] == "unconfigured"
    assert sight.off["probe"] == "not configured: no probes in [sources.probe]"
    assert sight.off_cause["systemd"] == "disabled"  # not among those built


def test_the_blind_cause_of_a_rule_that_is_seen_comes_first() -> None:
    # gpu-gone is critical and unit-crashloop a warning, but unit-crashloop is the cause
    # of a rule that is seen: the chain from a visible symptom breaks at it
    engine, snap = _evaluated({"memcg.dying": 50.0})
    assert [b.rule for b in blind_rules(engine.ruleset, engine.states, snap, SIGHT)] == \
        ["unit-crashloop", "gpu-gone"]


def test_a_source_left_out_by_the_config_is_named_as_such() -> None:
    sight = Sight.of({"systemd": ["systemd.unit_restarts_recent"]}, running=set(),
                     unavailable={})
    engine, snap = _evaluated({"memcg.dying": 3.0})
    blind = blind_rules(engine.ruleset, engine.states, snap, sight)
    # blind by the operator's choice: after gpu-gone (whose source is not known here)
    assert [b.rule for b in blind] == ["gpu-gone", "unit-crashloop"]
    assert blind[1].reasons == ("source systemd disabled in the config ([sources] disabled)",)
    assert (blind[1].cause, blind[1].chosen) == ("disabled", True)
    assert (blind[0].cause, blind[0].chosen) == ("absent", False)


def test_why_never_says_nothing_is_wrong_while_a_rule_is_blind() -> None:
    engine, snap = _evaluated({"memcg.dying": 3.0, "prom.sample": {}})
    blind = blind_rules(engine.ruleset, engine.states, snap, SIGHT)
    lines = why.text(why.links(engine, snap, []), snap.time, blind=blind, rules=3)
    assert not any("Nothing is wrong" in line for line in lines), lines
    assert lines[0] == ("Nothing is pending or firing among the 2 rules that have values, "
                        "but 1 rule is BLIND: what it watches is not seen.")
    assert lines[2].startswith("  unit-crashloop [warning; a cause of dying-memcgs]: no value "
                               "for systemd.unit_restarts_recent (source systemd)")
    assert "  source systemd unavailable: no systemd to talk to" in lines
    # and with everything seen, it is said
    engine, snap = _evaluated({"memcg.dying": 3.0, "prom.sample": {},
                               "systemd.unit_restarts_recent": {}})
    assert blind_rules(engine.ruleset, engine.states, snap, SIGHT) == []
    assert why.text([], snap.time, blind=[], rules=3) == [
        "Nothing is wrong: no rule is pending or firing."]


def test_an_active_rule_whose_cause_is_blind_says_so() -> None:
    engine, snap = _evaluated({"memcg.dying": 50.0, "prom.sample": {}})
    chain = why.links(engine, snap, [])
    assert [lk.rule for lk in chain] == ["dying-memcgs"]
    assert chain[0].unseen_causes == ["unit-crashloop"]
    blind = blind_rules(engine.ruleset, engine.states, snap, SIGHT)
    lines = why.text(chain, snap.time, blind=blind, rules=3)
    assert "   its cause unit-crashloop is BLIND: whether it is active is not seen" in lines
    assert lines[lines.index("") + 1].startswith("Blind (1: no value")


def test_what_the_service_saw_reads_back_whole(tmp_path: Path) -> None:
    unit = labels_of({"unit": "ecs-agent.service"})
    engine, snap = _evaluated({"memcg.dying": 50.0, "prom.sample": {},
                               "systemd.unit_restarts_recent": {unit: 141.0}})
    chain = why.links(engine, snap, [])
    entry = {"at": 1_700_000_000.0, "rule": "unit-crashloop", "use": "systemd.unit",
             "result": "ok", "what": "systemd.unit ok: systemctl stop ecs-agent.service"}
    chain[0].did = [seen_file.action_line(entry)]
    path = tmp_path / seen_file.SEEN_NAME
    seen_file.write(path, seen_file.Seen(42, 1_700_000_001.0, snap.time, 3, chain, [],
                                         [entry]))
    back = seen_file.read(path)
    assert [lk.to_dict() for lk in back.chain] == [lk.to_dict() for lk in chain]
    assert back.pid == 42 and back.actions == [entry] and back.rules == 3
    text = "\n".join(why.text(back.chain, back.now))
    # the evidence as people read it, its unit read back from the report (issue 40)
    assert "evidence: systemd.unit_restarts_recent: ecs-agent.service 141 restarts" in text
    assert "systemctl stop ecs-agent.service" in text


def test_a_damaged_report_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / seen_file.SEEN_NAME
    path.write_text('{"format": 1, "pid": 1}')
    try:
        seen_file.read(path)
    except ValueError as exc:
        assert "damaged report" in str(exc)
    else:
        raise AssertionError("read a damaged report")


def test_holder_names_the_process_that_holds_the_state_directory(tmp_path: Path) -> None:
    assert holder(tmp_path) is None  # no lock file: no service
    lock = InstanceLock(tmp_path)
    lock.acquire()
    try:
        import os
        assert holder(tmp_path) == str(os.getpid())
    finally:
        lock.release()
    assert holder(tmp_path) is None  # the file is there, nobody holds it


def test_what_the_service_saw_is_written_when_it_changes_or_is_a_minute_old(
        tmp_path: Path) -> None:
    """A quiet node costs no file write a tick (it cost 0.4 ms of a 3 ms tick)."""
    keeper = seen_file.Keeper(tmp_path / seen_file.SEEN_NAME, refresh=60.0)

    def seen(wall: float, actions: list[dict[str, object]]) -> seen_file.Seen:
        return seen_file.Seen(1, wall, wall, 3, [], [], actions)

    assert keeper.keep(seen(1000.0, []), now=0.0)
    assert not keeper.keep(seen(1001.0, []), now=1.0)  # only its times moved
    assert seen_file.read(keeper.path).wall == 1000.0
    entry = {"at": 1002.0, "rule": "r", "use": "log", "result": "ok", "what": "log ok"}
    assert keeper.keep(seen(1002.0, [entry]), now=2.0)  # something changed
    assert not keeper.keep(seen(1003.0, [entry]), now=3.0)
    assert keeper.keep(seen(1062.0, [entry]), now=62.0)  # a minute on: fresh again
    assert seen_file.read(keeper.path).wall == 1062.0


def test_a_root_whose_cause_is_blind_is_only_as_far_as_guardian_sees() -> None:
    """Before: "Root cause: dying-memcgs" while its cause unit-crashloop was blind."""
    engine, snap = _evaluated({"memcg.dying": 50.0, "prom.sample": {}})
    lines = why.text(why.links(engine, snap, []), snap.time)
    assert lines[0] == ("Root cause: dying-memcgs (dying memory cgroups pile up) — as far as "
                        "guardian sees: its cause unit-crashloop is BLIND")


def test_this_hosts_evaluation_says_would_act_now_never_a_time_since_boot() -> None:
    """Before: a live `why` printed "acted: +28m39s: firing: log" (the monotonic clock
    since boot, as if a recording's point) while nothing had run."""
    engine = Engine(load_text(RULES.replace(
        'caused_by = ["unit-crashloop"]', 'caused_by = ["unit-crashloop"]\n'
        '  [[rule.action]]\n  use = "log"')))
    snap = Snapshot(1719.0, {"memcg.dying": 50.0, "prom.sample": {},
                             "systemd.unit_restarts_recent": {}})
    decisions = engine.evaluate(snap)
    chain = why.links(engine, snap, decisions, when=lambda _: "now")
    assert chain[0].did == ["now: firing: log"]
    assert "   would act: now: firing: log" in why.text(chain, snap.time, "would act")
