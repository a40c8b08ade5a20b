"""The correlated-failure breaker, simulated (issue 45): 20 engines (zones a and b, ten
nodes each) against one API stand-in on a simulated clock. Four nodes of zone a begin to
fire the same rule within three minutes, and one node of zone b: the breaker latches the
rule in zone a once (one Lease, one Event), zone a's cordons are held (`held`: breaker
tripped, with the numbers) while zone b's lone node is cordoned and recovers; a human's
release lifts it and zone a is remediated under the fleet budget."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.cli import main
from guardian.kube.breaker import FIRING, KubeBreaker, release
from guardian.kube.fleet import FleetBudget, FleetParams
from guardian.model.breaker import BreakerParams
from guardian.runtime.operate import holding
from tests.support.kube_standin import kubeconfig, serve
from tests.support.wait import wait_until

ZONE = "topology.kubernetes.io/zone"
T0 = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc).timestamp()
RULE = '''version = 1
[[rule]]
name = "memcg-leak"
summary = "s"
when = "memcg.dying > 10"
for = "5m"
cooldown = "1m"
limit = {{ runs = 1000, within = "1h" }}
fleet = true
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "{node}"
  [[rule.action]]
  use = "kube.uncordon"
  on = "resolve"
  kubeconfig = "{kc}"
  node = "{node}"
'''


def test_half_a_zone_trips_the_breaker_and_a_lone_node_elsewhere_is_remediated(
        tmp_path: Path) -> None:
    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    now = [0.0]
    tick, release_at = 30.0, 900.0

    def wall() -> float:
        return base.timestamp() + now[0]

    with serve() as (url, store):
        names = [f"{z}-{i:02d}" for z in "ab" for i in range(10)]
        for n in names:
            store.add_node(n, {ZONE: n[0], "kubernetes.io/hostname": n})
        kc = str(kubeconfig(tmp_path, url))
        params = {n: FleetParams(kubeconfig=kc, node=n, max_nodes=2, ttl=600,
                                 breaker=BreakerParams(by=[ZONE], every=30)) for n in names}
        ill_at = {"a-00": 0.0, "a-01": 60.0, "a-02": 120.0, "a-03": 150.0, "b-00": 0.0}
        nodes = {}
        for n in names:
            fleet = FleetBudget(params[n], clock=lambda: base + dt.timedelta(seconds=now[0]))
            nodes[n] = (Engine(load_text(RULE.format(kc=kc, node=n))),
                        Executor(Host(), dry_run=False, fleet=fleet),
                        KubeBreaker(params[n], clock=wall, monotonic=lambda: now[0]))
        cordoned_at: dict[str, float] = {}
        resolved: dict[str, float] = {}
        held: dict[str, str] = {}
        latched: list[tuple[str, str]] = []
        patches_before_release: dict[str, int] = {}
        while now[0] < 3600 and len(resolved) < len(ill_at):
            if now[0] == release_at:
                patches_before_release = {
                    n: store.requests.count(("PATCH", f"/api/v1/nodes/{n}")) for n in names}
                latched = [k for k in store.objects["leases"] if "breaker" in k[1]]
                gone = release(params["b-05"], "memcg-leak", "the zone's switch was "
                               "replaced", "sre")
                assert [x.group for x in gone] == [f"{ZONE}=a"]
            for n in names:
                engine, ex, breaker = nodes[n]
                holds = breaker.fetch()
                ill = n in ill_at and ill_at[n] <= now[0] and (
                    n not in cordoned_at or now[0] < cordoned_at[n] + 120)
                snap = Snapshot(now[0], {"memcg.dying": 50.0 if ill else 0.0})
                decisions = engine.evaluate(snap, holds=holds, wall=wall())
                for d in decisions:
                    if d.kind == "held":
                        held.setdefault(n, d.reason)
                for done in ex.run(decisions, snap):
                    if done.use == "kube.cordon" and done.outcome and done.outcome.ok:
                        cordoned_at.setdefault(n, now[0])
                    if done.use == "kube.uncordon" and done.outcome and done.outcome.ok:
                        resolved[n] = now[0]
                breaker.firing(holding(engine))
            now[0] += tick
        # zone b's lone node was remediated while zone a was held
        assert cordoned_at["b-00"] == 300 and resolved["b-00"] < release_at
        # zone a: nothing cordoned before the release; every held node says why
        assert sorted(held) == ["a-00", "a-01", "a-02", "a-03"]
        assert all(t >= release_at for n, t in cordoned_at.items() if n.startswith("a"))
        reason = held["a-00"]
        # pending counts (for = "5m": none of them had fired): the words say so
        assert reason.startswith("kube.cordon held: breaker tripped 2026-12-03T00:03:00Z "
                                 "(node a-03): memcg-leak's condition began to hold "
                                 "(pending or firing) on 4 of 10 nodes in topology."
                                 "kubernetes.io/zone=a within 10m (40%, above the bound of "
                                 "30%); "
                                 "until a human releases it: guardian breaker release "
                                 "memcg-leak --why TEXT (or kubectl -n kube-system delete "
                                 "lease guardian-breaker-"), reason
        # one fleet-level signal: one latch created, one Event, by the node that tripped it
        tripped = [e for e in store.objects["events"].values()
                   if e["reason"] == "GuardianBreakerTripped"]
        assert len(tripped) == 1 and tripped[0]["source"]["host"] == "a-03"
        assert tripped[0]["involvedObject"]["kind"] == "Lease"
        assert len(latched) == 1  # one latch (Lease) while it was tripped
        # after the release: zone a remediated under the fleet budget, all resolved
        assert sorted(resolved) == sorted(ill_at), sorted(set(ill_at) - set(resolved))
        released = [e for e in store.objects["events"].values()
                    if e["reason"] == "GuardianBreakerReleased"]
        assert len(released) == 1 and "sre released the breaker on memcg-leak in " \
            "topology.kubernetes.io/zone=a: the zone's switch was replaced" in \
            released[0]["message"]
        assert not [k for k in store.objects.get("leases", {}) if "breaker" in k[1]]
        # the firing annotation is written only on change: once by each node of the
        # wave (no cordon before the release), never by the healthy nodes
        assert {n: c for n, c in patches_before_release.items() if c} == {
            "a-00": 1, "a-01": 1, "a-02": 1, "a-03": 1, "b-00": 4}
        assert store.objects["nodes"][("", "a-00")]["metadata"]["annotations"][FIRING] == "{}"


def test_guardian_breaker_lists_and_a_human_releases(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """`guardian breaker` lists the latch with its numbers; `release` without --why is
    refused; with it, the latch goes and the Event records who and why; a second release
    finds nothing (exit 1)."""
    with serve() as (url, store):
        for n in ("n1", "n2", "n3"):
            store.add_node(n)
        kc = kubeconfig(tmp_path, url)
        config = tmp_path / "guardian.toml"
        config.write_text(f'[fleet]\nkubeconfig = "{kc}"\nnode = "n1"\n'
                          f'[fleet.breaker]\nmin_nodes = 2\n')
        for n in ("n1", "n2"):
            store.objects["nodes"][("", n)]["metadata"]["annotations"] = {
                FIRING: f'{{"memcg-leak": {T0}}}'}
        p = FleetParams(kubeconfig=str(kc), node="n1", breaker=BreakerParams(min_nodes=2))
        breaker = KubeBreaker(p, clock=lambda: T0 + 60, monotonic=lambda: 0.0)
        breaker.firing(["memcg-leak"])
        breaker.onsets["memcg-leak"] = T0
        [hold] = breaker.fetch()
        assert hold.latched and "on 2 of 3 nodes in the fleet within" in hold.reason
        assert main(["breaker", "--config", str(config)]) == 0
        out = capsys.readouterr().out
        assert out.startswith("memcg-leak in fleet: tripped 2026-12-03T00:01:00Z by node "
                              "n1: memcg-leak's condition began to hold (pending or "
                              "firing) on 2 of 3 nodes in the fleet within 10m (67%, above "
                              "the bound of 30%) (release: guardian breaker release "
                              "memcg-leak --why TEXT)"), out
        assert main(["breaker", "release", "memcg-leak", "--config", str(config)]) == 2
        assert main(["breaker", "release", "memcg-leak", "--why", "bad rule, fixed",
                     "--author", "alice", "--config", str(config)]) == 0
        assert "released memcg-leak in fleet" in capsys.readouterr().out
        assert not [k for k in store.objects["leases"] if "breaker" in k[1]]
        [ev] = [e for e in store.objects["events"].values()
                if e["reason"] == "GuardianBreakerReleased"]
        assert ev["message"].startswith("alice released the breaker on memcg-leak in "
                                        "fleet: bad rule, fixed")
        assert main(["breaker", "release", "memcg-leak", "--why", "again",
                     "--config", str(config)]) == 1
        assert breaker.fetch() == []  # the node's holds lift at its next read


def test_a_node_held_by_a_latch_of_its_rule_no_longer_lists_the_nodes(
        tmp_path: Path) -> None:
    """Zone a's latch of memcg-leak exists: a node of zone a on which the rule began a
    minute ago is held by it and lists no Node at its reads (before: one LIST of every
    Node each ``every`` for the whole window, 0.9 MB at 1,000 nodes); a node of zone b
    firing the same rule is not held and still judges (one LIST)."""
    with serve() as (url, store):
        for n in ("a-0", "a-1", "b-0"):
            store.add_node(n, {ZONE: n[0]})
        kc = str(kubeconfig(tmp_path, url))
        record = {"rule": "memcg-leak", "group": f"{ZONE}=a", "at": T0, "firing": 3,
                  "nodes": 4, "bound": 0.3, "window": 600.0, "why": "w"}
        store.put("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": "guardian-breaker-x",
                                          "namespace": "kube-system",
                                          "labels": {"guardian.io/breaker": "tripped"},
                                          "annotations": {"guardian.io/breaker":
                                                          json.dumps(record)}},
                             "spec": {"holderIdentity": "a-1"}})
        now = [0.0]
        lists = {}
        for n in ("a-0", "b-0"):
            p = FleetParams(kubeconfig=kc, node=n, breaker=BreakerParams(by=[ZONE]))
            breaker = KubeBreaker(p, clock=lambda: T0 + 60 + now[0],
                                  monotonic=lambda: now[0])
            breaker.firing(["memcg-leak"])
            breaker.onsets["memcg-leak"] = T0
            k = len(store.requests)
            for now[0] in (0.0, 30.0, 60.0):
                held = breaker.fetch()
            lists[n] = store.requests[k:].count(("GET", "/api/v1/nodes"))
            assert [h.source for h in held] == (["breaker topology.kubernetes.io/zone=a"]
                                                if n == "a-0" else [])
        assert lists == {"a-0": 0, "b-0": 3}


def test_holds_kube_and_the_breaker_read_the_node_once_a_tick(tmp_path: Path) -> None:
    """[holds.kube] and [fleet.breaker] on the same node are one reader: one read GETs
    the ConfigMap, the node (once: its hold and approval annotations, its labels, its
    published firing rules) and lists the latches. Before: two readers, each GETting
    the node (66.7 requests a second of the 1,000-node bench's 266.7). The reads stay
    off the loop: while the API drips, the loop's read answers with the holds last
    read and starts no second read."""
    from guardian.plugin.registry import default_registry
    from guardian.runtime.config import load_config
    from guardian.runtime.operate import Operations, readers

    until = "2026-12-10T00:00:00Z"  # a week after T0
    with serve() as (url, store):
        for n in ("n1", "n2", "n3"):
            store.add_node(n)
        store.objects["nodes"][("", "n1")]["metadata"]["annotations"] = {
            "guardian.io/hold": json.dumps({"until": until, "reason": "by hand",
                                            "author": "bob"}),
            "guardian.io/approve": json.dumps({"rule": "memcg-leak", "by": "alice",
                                               "why": "ok", "at": until})}
        store.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "guardian-holds", "namespace": "kube-system"}, "data": {
            "holds.toml": f'[[hold]]\nuntil = {until}\nreason = "rollout"\nauthor = "sre"\n'}})
        record = {"rule": "memcg-leak", "group": "fleet", "at": T0, "firing": 3,
                  "nodes": 3, "bound": 0.3, "window": 600.0}
        store.put("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": "guardian-breaker-x",
                                          "namespace": "kube-system",
                                          "labels": {"guardian.io/breaker": "tripped"},
                                          "annotations": {"guardian.io/breaker":
                                                          json.dumps(record)}},
                             "spec": {"holderIdentity": "n2"}})
        kc = kubeconfig(tmp_path, url)
        config = tmp_path / "guardian.toml"
        config.write_text(f'[holds.kube]\nkubeconfig = "{kc}"\nnode = "n1"\n'
                          f'[fleet]\nkubeconfig = "{kc}"\nnode = "n1"\n[fleet.breaker]\n')
        ops = Operations(load_config(config, default_registry()), None)
        [reader] = [r for r in ops.sources if hasattr(r, "labels")]
        assert isinstance(reader, KubeBreaker)
        k = len(store.requests)
        held = ops.holds(T0)
        assert sorted(h.author for h in held) == ["bob", "guardian breaker", "sre"]
        assert sorted(store.requests[k:]) == [
            ("GET", "/api/v1/namespaces/kube-system/configmaps/guardian-holds"),
            ("GET", "/api/v1/nodes/n1"),
            ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")]
        assert [a.by for a in ops.approvals()] == ["alice"]
        assert ops.labels() == {"kubernetes.io/hostname": "n1"}
        # off the loop, bounded: a dripping API holds no tick and lifts no hold
        store.drip = 0.5

        def tick() -> bool:  # the loop's read: waits at most `wait`, keeps the holds
            assert sorted(h.author for h in reader.read()) == [
                "bob", "guardian breaker", "sre"]
            return store.dripping == 1

        # the loop ticks until its read is dripping (the first read's worker may still
        # be ending when the next tick asks: that tick starts none), bounded
        wait_until(tick, "a read drips from the API while the loop ticks")
        for _ in range(3):  # three more ticks while it drips: no second read
            assert tick()
        assert reader.reads == 1  # only the first read finished
        # on another node or credentials, two readers as before
        config.write_text(f'[holds.kube]\nkubeconfig = "{kc}"\nnode = "n1"\n'
                          f'[fleet]\nkubeconfig = "{kc}"\nnode = "n2"\n[fleet.breaker]\n')
        kinds = [type(r).__name__ for r in readers(load_config(config, default_registry()),
                                                   None)]
        assert [k for k in kinds if k.startswith("Kube")] == ["KubeHolds", "KubeBreaker"]


def test_a_latch_whose_record_cannot_be_read_is_shown_and_holds_failing_closed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Lease labelled guardian.io/breaker=tripped whose record is not JSON: before,
    `guardian breaker` said "No breaker is tripped." (exit 0, `--json` data []) and the
    node's reader dropped it (held nothing). Now it is listed, and it holds every rule's
    disruptive actions on every node (it names no rule or group), as a broken hold does.
    Every `--json` outcome is one JSON document (before: release printed the envelope,
    then a sentence; an API error printed plain text), and an API that fails is exit 69,
    never "nothing tripped" (1)."""
    with serve() as (url, store):
        for n in ("n1", "n2"):
            store.add_node(n)
        kc = kubeconfig(tmp_path, url)
        config = tmp_path / "guardian.toml"
        config.write_text(f'[fleet]\nkubeconfig = "{kc}"\nnode = "n1"\n[fleet.breaker]\n')
        store.put("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": "guardian-breaker-bogus",
                                          "namespace": "kube-system",
                                          "labels": {"guardian.io/breaker": "tripped"},
                                          "annotations": {"guardian.io/breaker": "{not"}},
                             "spec": {"holderIdentity": "n2"}})
        assert main(["breaker", "--config", str(config)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(
            "lease guardian-breaker-bogus: breaker latch guardian-breaker-bogus (node n2) "
            "cannot be read (its annotation guardian.io/breaker is missing or not a JSON "
            "object; it names no rule): it holds every rule's disruptive actions on every "
            "node, failing closed, until a human removes it: kubectl -n kube-system delete "
            "lease guardian-breaker-bogus"), out
        assert main(["breaker", "--config", str(config), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["ok"] and [(x["lease"], x["rule"], x["at"]) for x in doc["data"]] == [
            ("guardian-breaker-bogus", "*", None)]
        assert "no rule" in doc["data"][0]["problem"]
        # the node's reader holds every rule's disruptive actions (latched: its log and
        # event actions still run), and says why once
        p = FleetParams(kubeconfig=str(kc), node="n1", breaker=BreakerParams())
        breaker = KubeBreaker(p, clock=lambda: T0, monotonic=lambda: 0.0)
        [hold] = breaker.fetch()
        assert (hold.rule, hold.latched, hold.source) == ("*", True, "breaker fleet")
        assert hold.matches("any-rule", {}) and "cannot be read" in hold.reason
        assert any("guardian-breaker-bogus" in said for said in breaker.said)
        # release of a rule with no latch: one JSON document, exit 1, the reason in errors
        assert main(["breaker", "release", "memcg-leak", "--why", "w", "--json",
                     "--config", str(config)]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert not doc["ok"] and doc["errors"] == [{
            "message": "no breaker is tripped on memcg-leak; 1 latch(es) cannot be read: "
                       "guardian breaker shows them"}]
        # the API fails: exit 69, one JSON document or one line on stderr
        store.fail_next = [503]
        assert main(["breaker", "--config", str(config), "--json"]) == 69
        doc = json.loads(capsys.readouterr().out)
        assert not doc["ok"] and doc["errors"][0]["message"].startswith("API 503")
        store.fail_next = [503]
        assert main(["breaker", "release", "memcg-leak", "--why", "w",
                     "--config", str(config)]) == 69
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith("guardian breaker release: API 503")
        # a release that finds its latch: one JSON document
        store.objects["leases"][("kube-system", "guardian-breaker-bogus")]["metadata"][
            "annotations"]["guardian.io/breaker"] = json.dumps(
            {"rule": "memcg-leak", "group": "fleet", "at": T0, "holding": 2, "nodes": 2,
             "bound": 0.3, "window": 600.0})
        assert main(["breaker", "release", "memcg-leak", "--why", "w", "--json",
                     "--config", str(config)]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["ok"] and [x["lease"] for x in doc["data"]] == ["guardian-breaker-bogus"]
