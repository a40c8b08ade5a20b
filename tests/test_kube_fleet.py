"""The fleet-wide disruption budget, simulated: 50 engines (threads, each its own node,
its own client) detect the same problem at once against one API stand-in. Never more
than N act, slots of killed engines expire, min_healthy holds, every eviction honours
the PDB."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import ClassVar

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.kube.fleet import FleetBudget, FleetParams
from guardian.plugins import Action, ActionContext, Outcome, Plan, Registry, default_registry

from .kube_standin import serve
from .test_kube_standin import kubeconfig

N_ENGINES = 50


class Gauge:
    lock = threading.Lock()
    now = 0
    most = 0


class Hold(Action):
    """Counts how many nodes act at the same moment."""

    name: ClassVar[str] = "test.hold"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        with Gauge.lock:
            Gauge.now += 1
            Gauge.most = max(Gauge.most, Gauge.now)
        time.sleep(0.3)
        with Gauge.lock:
            Gauge.now -= 1
        return Outcome(ok=True)


RULE = '''version = 1
[[rule]]
name = "dying-memcgs"
summary = "s"
when = "memcg.dying > 10"
fleet = true
  [[rule.action]]
  use = "test.hold"
  [[rule.action]]
  use = "kube.evict"
  kubeconfig = "{kc}"
  node = "{node}"
  selector = {{ app = "db" }}
  attempts = 1
'''


def registry() -> Registry:
    reg = Registry()
    reg.sources = dict(default_registry().sources)
    reg.actions = dict(default_registry().actions)
    reg.add_action(Hold)
    return reg


def test_fifty_engines_at_once(tmp_path: Path) -> None:
    with serve() as (url, store):
        for i in range(N_ENGINES):
            store.add_node(f"node-{i:02d}")
            store.add_pod("default", f"db-{i:02d}", f"node-{i:02d}", labels={"app": "db"},
                          owner=("StatefulSet", "db"))
        store.add_pdb("default", "db", {"app": "db"}, min_available=N_ENGINES - 2)
        kc = str(kubeconfig(tmp_path, url))
        reg = registry()
        start = threading.Barrier(N_ENGINES)
        acted: list[str] = []
        refused: list[str] = []

        def engine(i: int) -> None:
            node = f"node-{i:02d}"
            rules = load_text(RULE.format(kc=kc, node=node), registry=reg)
            fleet = FleetBudget(FleetParams(kubeconfig=kc, node=node, max_nodes=3, ttl=60))
            ex = Executor(Host(), dry_run=False, fleet=fleet)
            snap = Snapshot(0.0, {"memcg.dying": 50.0})
            decisions = Engine(rules).evaluate(snap)
            start.wait()
            results = ex.run(rules, decisions, snap)
            (refused if results[0].use == "(fleet budget)" else acted).append(node)

        Gauge.most = 0
        threads = [threading.Thread(target=engine, args=(i,)) for i in range(N_ENGINES)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(acted) + len(refused) == N_ENGINES
        assert 1 <= Gauge.most <= 3, Gauge.most
        assert acted and refused
        left = [k for k in store.objects["pods"] if k[1].startswith("db-")]
        assert len(left) >= N_ENGINES - 2  # the PDB held: at most two evictions in all
        leases = store.objects["leases"]
        assert len(leases) <= 3 and all(not lease["spec"].get("holderIdentity")
                                        for lease in leases.values())  # all released


def test_slots_of_dead_engines_expire_and_min_healthy_holds(tmp_path: Path) -> None:
    with serve() as (url, store):
        for i in range(10):
            store.add_node(f"node-{i}")
        kc = str(kubeconfig(tmp_path, url))

        def budget(node: str, **kw: object) -> FleetBudget:
            return FleetBudget(FleetParams.model_validate(
                {"kubeconfig": kc, "node": node, "ttl": 1, **kw}))

        for dead in ("node-1", "node-2"):  # take a slot each, then "die" without release
            slot, _ = budget(dead, max_nodes=2).acquire()
            assert slot is not None
        alive = budget("node-3", max_nodes=2)
        slot, why = alive.acquire()
        assert slot is None and "all 2 slot(s) held" in why
        time.sleep(1.2)
        slot, why = alive.acquire()
        assert slot is not None, why
        alive.release(slot)
        # a percentage: 20% of 10 nodes is 2 slots
        assert budget("node-4", max_nodes=None, max_percent=20)._limits() == (2, "")
        # min_healthy: with 3 of 10 NotReady, "80%" refuses everyone
        for i in range(3):
            node = store.objects["nodes"][("", f"node-{i}")]
            node["status"]["conditions"][0]["status"] = "False"
        slot, why = budget("node-5", min_healthy="80%").acquire()
        assert slot is None and "only 7 of 10 nodes Ready, below min_healthy 80%" in why


def test_unreachable_api_means_no_action(tmp_path: Path) -> None:
    with serve() as (url, _):
        kc = str(kubeconfig(tmp_path, url))
    fleet = FleetBudget(FleetParams(kubeconfig=kc, node="node-0", timeout=1))
    rules = load_text(RULE.format(kc=kc, node="node-0"), registry=registry())
    snap = Snapshot(0.0, {"memcg.dying": 50.0})
    [res] = Executor(Host(), dry_run=False, fleet=fleet).run(
        rules, Engine(rules).evaluate(snap), snap)
    assert res.use == "(fleet budget)" and "fleet budget unavailable: API unreachable" in \
        res.error
