"""The fleet backtest (issue 45): a rule set over many nodes' recordings on one clock.

Over copies of the shipped recordings (tests/data: the incident reproduced for real by
tests/support/incident.py, and a busy healthy node) it says which nodes act and when, how
many are disrupted at once, and which named problems are caught or missed (a golden
file); the fleet budget, the breaker, holds and the alignment are each shown by a case
that fails without them."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.model import budget
from guardian.model.breaker import BreakerParams
from guardian.model.nodegroups import NodeGroup
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime.backtest import Backtest, BudgetParams, backtest
from guardian.runtime.fleetdir import read_fleet
from tests.support.checkout import DATA, RULES
from tests.support.golden import matches_golden

INCIDENT, CHAIN, HEALTHY = DATA / "incident.rec", DATA / "chain.rec", DATA / "healthy.rec"
ZONE = "topology.kubernetes.io/zone"

# A fleet rule over memcg.dying: in the incident recording it holds from +2m25s to
# +7m5s, in the chain recording from +2m25s to +4m (the kernel frees them in bursts).
FLOOD = """version = 1

[[rule]]
name = "memcg-flood"
summary = "dying memcgs past 18,000"
when = "memcg.dying > 18000"
for = "{for_}"
fleet = true
cooldown = "1m"
severity = "warning"

  [[rule.action]]
  use = "log"
  message = "flood: $values"

  [[rule.action]]
  use = "memcg.release"
  method = "drop_caches"
"""


def _fleet(tmp: Path, nodes: dict[str, tuple[Path, str]]) -> Path:
    """A backtest directory: each node's recording (a copy) and its node file."""
    tmp.mkdir(parents=True, exist_ok=True)
    for stem, (rec, node_file) in nodes.items():
        shutil.copyfile(rec, tmp / f"{stem}.rec")
        if node_file:
            (tmp / f"{stem}.node.toml").write_text(node_file)
    return tmp


def _flood(tmp: Path, for_: str = "0s") -> Ruleset:
    path = tmp / "flood.toml"
    path.write_text(FLOOD.format(for_=for_))
    return load_rules([path], catalogue=default_registry().catalogue())


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two incident nodes in two zones and a healthy one: node-a names the problems it
    shows, ip-10-0-2-7 (node-b's name) none, node-c says it is healthy."""
    return _fleet(tmp_path_factory.mktemp("fleet"), {
        "node-a": (INCIDENT, f'labels = {{ "{ZONE}" = "us-east-1a" }}\nproblems = '
                             f'["dying-memcgs", "core-system-saturated", "nic-reset"]\n'),
        "node-b": (INCIDENT, f'name = "ip-10-0-2-7"\nlabels = {{ "{ZONE}" = "us-east-1b" }}\n'),
        "node-c": (HEALTHY, f'labels = {{ "{ZONE}" = "us-east-1b" }}\nproblems = []\n')})


def test_the_shipped_recordings_backtest_is_the_golden_file(
        shipped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Which node acts when, the most nodes disrupted at once, problems caught (by the
    rule, or through a cause it names) and missed, rules firing on a node that names no
    problem."""
    assert main(["backtest", str(shipped), "--rules", str(RULES)]) == 0
    out = capsys.readouterr().out
    matches_golden(DATA / "golden" / "backtest-incident-healthy.txt", out)
    assert "disrupted at once: at most 2 nodes (ip-10-0-2-7, node-a), first at +5m5s" in out
    assert "  node-a  nic-reset              missed: neither it nor a cause it names fired" \
        in out


def test_json_and_fail_on_missed(shipped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json says the same in the keys docs/commands.md lists; --fail-on missed exits 1
    where a named problem was missed."""
    assert main(["backtest", str(shipped), "--rules", str(RULES), "--json",
                 "--fail-on", "missed"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "backtest" and doc["ok"] is False
    assert doc["errors"] == [{"message": "--fail-on: 1 recorded problem(s) not caught: 1 "
                                         "missed, 0 not judged (no value)"}]
    data = doc["data"]
    assert set(data) == {"align", "end", "budget", "breaker", "nodes", "events",
                         "disrupted", "peak", "trips", "missed", "false_positives",
                         "not_judged", "blind", "blind_everywhere"}
    assert data["blind"]["unit-crashloop"] == {"whole": ["node-c"], "part": {}}
    assert data["blind"]["core-system-saturated"]["part"] == {
        "ip-10-0-2-7": 1, "node-a": 1, "node-c": 1}  # a rate's first snapshot
    assert data["peak"] == {"nodes": 2, "time": 305.03, "names": ["ip-10-0-2-7", "node-a"]}
    assert data["missed"] == [{"node": "node-a", "problem": "nic-reset"}]
    assert [(f["node"], f["rule"]) for f in data["false_positives"]] == [
        ("ip-10-0-2-7", "unit-crashloop"), ("ip-10-0-2-7", "dying-memcgs")]
    a = data["nodes"][1]
    assert a["name"] == "node-a" and a["caught"][1] == {
        "problem": "core-system-saturated", "caught": True, "rule": "dying-memcgs",
        "time": 385.037, "how": "its cause", "known": True, "judged": True, "blind": 1}
    assert set(data["events"][0]) == {"time", "node", "rule", "kind", "mode", "step",
                                      "reason", "compared", "ran", "shadow", "held",
                                      "refused", "why", "breaker"}


def test_the_config_says_the_budget_breaker_and_node_groups_it_simulates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The header names what [fleet], [fleet.breaker] and [[group]] set (before: the node
    groups' line joined the letters of the breaker's groups)."""
    pytest.importorskip("lightkube")  # [fleet] is the Kubernetes extra's
    d = _fleet(tmp_path / "d", {"n": (HEALTHY, "")})
    config = tmp_path / "guardian.toml"
    config.write_text('[fleet]\nnode = "x"\n[fleet.breaker]\nby = ["zone"]\n'
                      '[[group]]\nname = "canary"\nlabels = { canary = "true" }\n'
                      'mode = "shadow"\n')
    _flood(tmp_path)
    assert main(["backtest", str(d), "--rules", str(tmp_path / "flood.toml"),
                 "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:5] == [
        "fleet budget: at most 1 node disrupted at once (max_nodes 1 of 1), min_healthy 0",
        "breaker: trips when a rule's condition begins to hold (pending or firing) within "
        "10m on more than 30% of a group's nodes (and at least 3); groups: the fleet, zone",
        "node groups: canary (first match by each node's labels)", ""]
    assert "breaker: did not trip" in out


def _runs(bt: Backtest, node: str) -> list[float]:
    return [round(e.time) for e in bt.events if e.node == node and "memcg.release" in e.ran]


def test_a_budget_of_one_refuses_the_second_node_until_the_first_resolves(
        tmp_path: Path) -> None:
    """Both recordings flood at +2m25s; the chain's node (first by name) takes the only
    slot, the incident's is refused until the chain's resolves at +4m and gives it back.
    With room for two, both act at once: the refusals are the budget's."""
    fleet = read_fleet(_fleet(tmp_path / "d", {"a-chain": (CHAIN, ""),
                                               "b-incident": (INCIDENT, "")}))
    rules = _flood(tmp_path)
    one = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=1))
    refused = [(round(e.time), e.why) for e in one.events if e.refused]
    assert refused == [(145, "fleet budget: 1 other node(s) already disrupted (a-chain); "
                             "at most 1 at once")] * 1 + [(205, refused[1][1])]
    resolved = next(e.time for e in one.events if e.node == "a-chain"
                    and e.decision.kind == "resolved")
    assert round(resolved) == 240
    assert _runs(one, "a-chain")[0] == 145
    assert _runs(one, "b-incident")[0] == 265  # its first retry after the slot came back
    assert one.peak[0] == 1
    two = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=2))
    assert _runs(two, "b-incident")[0] == 145 and two.peak[0] == 2
    assert not any(e.refused for e in two.events)
    # without [fleet], a fleet rule's disruptive action is refused, as the executor does
    none = backtest(fleet, rules)
    assert all(e.refused == ["memcg.release"] and e.ran == ["log"]
               for e in none.events if e.decision.kind in ("firing", "retry"))


def test_the_breaker_holds_a_zone_and_spares_a_lone_node_in_another(tmp_path: Path) -> None:
    """Two of zone a's three nodes begin to flood within seconds: the breaker trips once,
    for zone a, while the rule is pending, so neither acts when it fires; the lone node
    flooding in zone b still acts. Without the breaker all three act."""
    fleet = read_fleet(_fleet(tmp_path / "d", {
        "a-chain": (CHAIN, 'labels = { zone = "a" }'),
        "b-incident": (INCIDENT, 'labels = { zone = "a" }'),
        "c-healthy": (HEALTHY, 'labels = { zone = "a" }'),
        "d-incident": (INCIDENT, 'labels = { zone = "b" }'),
        "e-healthy": (HEALTHY, 'labels = { zone = "b" }')}))
    rules = _flood(tmp_path, for_="30s")
    params = BreakerParams(share=0.6, min_nodes=2, by=["zone"])
    bt = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=5), breaker=params)
    assert [(round(t), trip.rule, trip.group, trip.names) for t, trip in bt.trips] == [
        (145, "memcg-flood", "zone=a", ("a-chain", "b-incident"))]
    # tripped at +145s while pending (its for = "30s" ran out at +175s): before, the
    # words said the nodes "fired" it
    assert bt.trips[0][1].why == ("memcg-flood's condition began to hold (pending or "
                                  "firing) on 2 of 3 nodes in zone=a within 10m (67%, "
                                  "above the bound of 60%)")
    from guardian.cli.backtest import data, report
    [trip] = data(bt)["trips"]
    assert trip["holding"] == 2 and "firing" not in trip  # --json's count, renamed too
    assert ("breaker: trips when a rule's condition begins to hold (pending or firing) "
            "within 10m on more than 60% of a group's nodes (and at least 2); groups: the "
            "fleet, zone") in report(bt, 0, [])
    held = [(e.node, round(e.time)) for e in bt.events if e.breaker]
    assert ("a-chain", 175) in held and ("b-incident", 175) in held
    assert _runs(bt, "a-chain") == [] and _runs(bt, "b-incident") == []
    assert _runs(bt, "d-incident")[0] == 175
    free = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=5))
    assert [_runs(free, n)[0] for n in ("a-chain", "b-incident", "d-incident")] == [175] * 3


def test_a_node_group_in_shadow_mode_never_acts_while_the_others_do(tmp_path: Path) -> None:
    """The canary (its node file's label puts it in the shadow group) plans what the
    other node runs."""
    fleet = read_fleet(_fleet(tmp_path / "d", {
        "a-canary": (INCIDENT, 'labels = { "guardian.io/canary" = "true" }'),
        "b-worker": (INCIDENT, "")}))
    canary = NodeGroup(name="canary", labels={"guardian.io/canary": "true"}, mode="shadow")
    bt = backtest(fleet, _flood(tmp_path), fleet_budget=BudgetParams(max_nodes=2),
                  groups=[canary])
    acted = [(e.node, e.decision.kind, e.ran, e.shadow) for e in bt.events
             if e.decision.kind == "firing"]
    assert acted == [("a-canary", "firing", [], ["log", "memcg.release"]),
                     ("b-worker", "firing", ["log", "memcg.release"], [])]
    assert bt.peak[2] == ("b-worker",)


def test_holds_are_judged_at_each_nodes_recorded_time(tmp_path: Path) -> None:
    """A hold in holds.toml that ends 400 s after the incident recording began holds
    dying-memcgs when it fires (+6m25s) and lets it run at the first snapshot after."""
    d = _fleet(tmp_path / "d", {"node": (INCIDENT, "")})
    started = read_fleet(d).nodes[0].started
    until = dt.datetime.fromtimestamp(started + 400, dt.timezone.utc).isoformat()
    (d / "holds.toml").write_text(f'[[hold]]\nrule = "dying-memcgs"\nuntil = "{until}"\n'
                                  f'reason = "kernel rollout"\nauthor = "alice"\n')
    fleet = read_fleet(d)
    rules = load_rules([RULES], catalogue={**default_registry().catalogue(),
                                           **fleet.nodes[0].recording.catalogue})
    bt = backtest(fleet, rules)
    mine = [(round(e.time), e.decision.kind, e.ran) for e in bt.events
            if e.decision.rule == "dying-memcgs" and e.decision.kind != "pending"]
    assert mine[:3] == [(385, "firing", []), (385, "held", []),
                        (400, "retry", ["log", "systemd.unit", "memcg.release"])]


def test_wall_alignment_places_each_recording_at_its_recorded_start(shipped: Path) -> None:
    """--align wall: the healthy node was recorded 3m22s before the incident copies."""
    fleet = read_fleet(shipped)
    bt = backtest(fleet, Ruleset(), align="wall")
    assert [(r.name, round(r.offset)) for r in bt.nodes] == [
        ("ip-10-0-2-7", 202), ("node-a", 202), ("node-c", 0)]
    assert [round(r.offset) for r in backtest(fleet, Ruleset()).nodes] == [0, 0, 0]


def test_a_bad_directory_says_every_problem_where_it_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _fleet(tmp_path / "d", {"x": (HEALTHY, 'labels = { zone = "a" }\nproblem = ["y"]\n'),
                                "y": (HEALTHY, 'name = "x"\n')})
    (d / "z.node.toml").write_text("")
    (d / "holds.toml").write_text('[[hold]]\nrule = "*"\nuntil = 2030-01-01T00:00:00Z\n'
                                  'reason = "ok"\nauthor = "a"\n\n[[hold]]\nrule = "*"\n'
                                  'until = "tomorrow"\nreason = "ok"\nauthor = "a"\n')
    (d / "w.rec").write_text("junk")
    assert main(["backtest", str(d), "--rules", str(RULES)]) == 2
    err = capsys.readouterr().err
    assert f"{d}/x.node.toml:2:1: unknown key 'problem'" in err
    assert f"{d}/y.node.toml:1:8: name: node 'x' again (also x.rec)" in err
    assert f"{d}/z.node.toml:1:1: no recording z.rec beside it" in err
    # review of issue 45: at the position `guardian check` gives a drop-in, its path once
    # (was holds.toml:1:1: <path>/holds.toml: hold 2: until: ...); a recording, which has
    # no lines to point at, and a directory by their path alone
    assert f"{d}/holds.toml:9:9: hold: until: Input should be a valid datetime" in err
    assert f"{d}/w.rec: not a readable recording: " in err
    assert main(["backtest", str(tmp_path / "none"), "--rules", str(RULES)]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'none'}: not a directory\n"
    (tmp_path / "empty").mkdir()
    assert main(["backtest", str(tmp_path / "empty"), "--rules", str(RULES)]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'empty'}: no recording (*.rec) in it\n"


def test_a_problem_no_rule_of_the_set_names_is_a_located_error_with_the_likely_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 45: `problems = ["dying-memcg"]` showed as "missed: the rule set has
    no rule of that name", unlocated, exit 0; now it is an error where it is written."""
    d = _fleet(tmp_path / "d", {"x": (HEALTHY, 'problems = ["zombie-flood", "dying-memcg"]\n')})
    assert main(["backtest", str(d), "--rules", str(RULES), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["errors"] == [{
        "path": f"{d}/x.node.toml", "line": 1, "col": 29,
        "message": "problems: no rule named 'dying-memcg' in the rule set (did you mean "
                   "'dying-memcgs'?)"}]


def test_a_rule_with_no_value_is_said_by_name_and_a_problem_it_should_catch_not_judged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 45: the shipped NVML rules over recordings without NVML printed "no
    rule fired", "possible false positives: none", exit 0 under --fail-on
    false-positive --fail-on missed, and a problem of one of them "missed". Now every
    rule without a value is named with where, such a problem is not judged, --fail-on
    missed counts it (it was not caught) and --fail-on blind fails on both."""
    d = _fleet(tmp_path / "d", {"a": (INCIDENT, 'problems = ["gpu-nvml-needs-reset"]\n'),
                                "b": (HEALTHY, "")})
    nvml = RULES / "gpu-nvml.toml"
    names = [r.name for r in load_rules([nvml], catalogue=default_registry().catalogue())
             .rules]
    args = ["backtest", str(d), "--rules", str(nvml)]
    assert main([*args, "--fail-on", "false-positive", "--fail-on", "missed"]) == 1
    out = capsys.readouterr().out
    assert f"no rule fired on any node ({len(names)} of {len(names)} rules had no value " \
           f"on any node: they could not fire)" in out
    said = " ".join(line.strip() for line in out.splitlines() if line.startswith(
        ("blind", "    ")))
    assert said == f"blind (no value) the whole time on every node ({len(names)} rules): " \
        + ", ".join(sorted(names))
    assert "problems: 0 caught, 0 missed, 1 not judged" in out
    assert "  a  gpu-nvml-needs-reset  not judged: the rule had no value on that node (none " \
           "in its 97 snapshots)" in out
    assert f"possible false positives: none, but {len(names)} of {len(names)} rules had no " \
           f"value on any node (they could not fire)" in out
    assert out.endswith("failed (--fail-on): 1 recorded problem(s) not caught: 0 missed, "
                        "1 not judged (no value)\n")  # and no false positive
    assert main([*args, "--fail-on", "blind", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["errors"] == [{
        "message": f"--fail-on: {len(names)} rule(s) with no value on any node, 1 recorded "
                   f"problem(s) not judged (no value)"}]
    assert doc["warnings"] == [
        f"{len(names)} rule(s) had no value on any node the whole time (the backtest "
        f"judged nothing of them): {', '.join(sorted(names))}",
        "a: problem gpu-nvml-needs-reset not judged: the rule had no value on that node "
        "(none in its 97 snapshots)"]
    data = doc["data"]
    assert data["blind_everywhere"] == sorted(names) and data["missed"] == []
    assert data["not_judged"] == [{"node": "a", "problem": "gpu-nvml-needs-reset",
                                   "why": "the rule had no value on that node (none in "
                                          "its 97 snapshots)"}]
    assert data["blind"]["gpu-nvml-needs-reset"] == {"whole": ["a", "b"], "part": {}}
    # no node names a problem (the review's case): --fail-on blind still fails
    (d / "a.node.toml").unlink()
    assert main([*args, "--fail-on", "blind", "--fail-on", "false-positive"]) == 1
    assert capsys.readouterr().out.endswith(
        f"failed (--fail-on): {len(names)} rule(s) with no value on any node\n")


def test_the_budgets_counting_rules() -> None:
    """The pure counts kube/fleet.py and the backtest share."""
    assert budget.slots(10, None, 25) == 2 and budget.slots(10, 1, 50) == 1
    assert budget.slots(3, None, 10) == 1 and budget.slots(3, None, None) == 1
    assert budget.healthy_needed(10, "80%") == 8 and budget.healthy_needed(10, "3") == 3
    assert budget.verdict("a", 10, 7, {"b", "c"}, 2, "80%") == (
        "only 7 of 10 nodes Ready and undisrupted, below min_healthy 80%")
    assert budget.verdict("a", 10, 8, {"a", "b"}, 2, "80%") == ""
    assert budget.verdict("a", 10, 8, {"b", "c"}, 2, "0") == (
        "2 other node(s) already disrupted (b, c); at most 2 at once")


def test_a_node_groups_own_budget_counts_its_nodes_within_the_fleets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three nodes flood at +2m25s: the two of group gpu share its budget of one (the
    second refused, naming the group) while the node in no group acts beside them under
    [fleet]'s budget of three; [fleet]'s budget bounds the group too (one slot: one node
    acts); without the group's budget all three act."""
    fleet = read_fleet(_fleet(tmp_path / "d", {
        "a-chain": (CHAIN, 'labels = { pool = "gpu" }'),
        "b-incident": (INCIDENT, 'labels = { pool = "gpu" }'),
        "c-incident": (INCIDENT, 'labels = { pool = "cpu" }')}))
    rules = _flood(tmp_path)
    gpu = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_nodes=1)
    bt = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=3), groups=[gpu])
    assert next((e.node, round(e.time), e.why) for e in bt.events if e.refused) == (
        "b-incident", 145, "fleet budget: node group gpu: 1 other node(s) already "
        "disrupted (a-chain); at most 1 at once")
    assert _runs(bt, "a-chain")[0] == 145 and _runs(bt, "c-incident")[0] == 145
    assert _runs(bt, "b-incident")[0] == 265  # after a-chain gave the group's slot back
    assert bt.peak[0] == 2
    wide = gpu.model_copy(update={"max_nodes": 2})
    bound = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=1), groups=[wide])
    assert bound.peak[0] == 1
    free = backtest(fleet, rules, fleet_budget=BudgetParams(max_nodes=3))
    assert [_runs(free, n)[0] for n in ("a-chain", "b-incident", "c-incident")] == [145] * 3
    # the command says the group's budget, in words and in --json
    config = tmp_path / "guardian.toml"
    config.write_text('[fleet]\nnode = "x"\nmax_nodes = 3\n[[group]]\nname = "gpu"\n'
                      'labels = { pool = "gpu" }\nmax_nodes = 1\n')
    pytest.importorskip("lightkube")  # [fleet] is the Kubernetes extra's
    args = ["backtest", str(tmp_path / "d"), "--rules", str(tmp_path / "flood.toml"),
            "--config", str(config)]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == [
        "fleet budget: at most 3 nodes disrupted at once (max_nodes 3 of 3), min_healthy 0",
        "node group gpu's own budget: at most 1 node disrupted at once (max_nodes 1 of 2), "
        "min_healthy 0, and the fleet budget's"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["budget"]["groups"] == {"gpu": {"max_nodes": 1, "max_percent": None,
                                                "min_healthy": "0", "nodes": 2}}
    assert data["peak"]["nodes"] == 2
