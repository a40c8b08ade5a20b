"""The fleet-wide disruption budget, simulated: 50 engines (threads, each its own node,
its own client) detect the same problem at once against one API stand-in. Never more
than N act, slots of killed engines expire, min_healthy holds, every eviction honours
the PDB."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.kube.fleet import FleetBudget, FleetParams
from guardian.plugin.contract import Action, ActionContext, NoParams, Outcome, Plan
from guardian.plugin.registry import Registry, default_registry
from tests.support.kube_standin import kubeconfig, serve
from tests.support.wait import wait_until

N_ENGINES = 50


class Gauge:
    lock = threading.Lock()
    now = 0
    most = 0


class Hold(Action[NoParams]):
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
    reg = default_registry().copy()
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
            engine = Engine(rules)
            decisions = engine.evaluate(snap)
            start.wait()
            results = ex.run(decisions, snap)
            (refused if results[0].use == "(fleet budget)" else acted).append(node)
            start.wait()  # every node has tried while the acting ones hold their slots
            calm = Snapshot(60.0, {"memcg.dying": 0.0})
            ex.run(engine.evaluate(calm), calm)  # resolved: the slot is given back

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
        assert len(acted) <= 3  # slots are held until the rule resolves, not per action


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
        assert slot is None and "2 other node(s) already disrupted (node-1, node-2)" in why
        # the dead nodes' leases expire (ttl 1 s): a slot is had again
        slot = wait_until(lambda: alive.acquire()[0], "a slot once the dead nodes' leases "
                          "expired", every=0.2)
        alive.release(slot)
        # a percentage: 20% of 10 nodes is 2 slots
        assert budget("node-4", max_nodes=None, max_percent=20)._limits() == (2, "")
        # min_healthy: with 3 of 10 NotReady, "80%" refuses everyone
        for i in range(3):
            node = store.objects["nodes"][("", f"node-{i}")]
            node["status"]["conditions"][0]["status"] = "False"
        slot, why = budget("node-5", min_healthy="80%").acquire()
        assert slot is None and "only 7 of 10 nodes Ready and undisrupted, below " \
            "min_healthy 80%" in why


def test_unreachable_api_means_no_action(tmp_path: Path) -> None:
    with serve() as (url, _):
        kc = str(kubeconfig(tmp_path, url))
    fleet = FleetBudget(FleetParams(kubeconfig=kc, node="node-0", timeout=1))
    rules = load_text(RULE.format(kc=kc, node="node-0"), registry=registry())
    snap = Snapshot(0.0, {"memcg.dying": 50.0})
    [res] = Executor(Host(), dry_run=False, fleet=fleet).run(Engine(rules).evaluate(snap),
                                                             snap)
    assert res.use == "(fleet budget)" and "fleet budget unavailable: API unreachable" in \
        res.error


def test_cordoned_nodes_count_against_min_healthy_and_the_budget(tmp_path: Path) -> None:
    """A node cordoned by hand (no Lease) or carrying guardian's condition is disrupted:
    it uses up the budget and is not healthy."""
    with serve() as (url, store):
        for i in range(10):
            store.add_node(f"node-{i}")
        kc = str(kubeconfig(tmp_path, url))
        nodes = store.objects["nodes"]
        nodes[("", "node-0")]["spec"]["unschedulable"] = True
        nodes[("", "node-1")]["status"]["conditions"].append(
            {"type": "GuardianProblem", "status": "True"})
        two = FleetBudget(FleetParams(kubeconfig=kc, node="node-5", max_nodes=2))
        slot, why = two.acquire()
        assert slot is None and "2 other node(s) already disrupted (node-0, node-1)" in why
        healthy = FleetBudget(FleetParams(kubeconfig=kc, node="node-5", max_nodes=5,
                                          min_healthy="9"))
        slot, why = healthy.acquire()
        assert slot is None and "only 8 of 10 nodes Ready and undisrupted" in why
        nodes[("", "node-0")]["spec"]["unschedulable"] = False
        three = FleetBudget(FleetParams(kubeconfig=kc, node="node-5", max_nodes=3))
        slot, why = three.acquire()
        assert slot is not None, why
        # a restarted guardian on the same node finds its own slot instead of a second
        again = FleetBudget(FleetParams(kubeconfig=kc, node="node-5", max_nodes=3))
        assert again.acquire() == (slot, "")
        assert sum(1 for lease in store.objects["leases"].values()
                   if lease["spec"].get("holderIdentity") == "node-5") == 1


STAGGERED = '''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "memcg.dying > 10"
for = "1m"
cooldown = "2m"
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


def _live_holders(store: Any, now: dt.datetime, ttl: int) -> set[str]:
    out = set()
    for lease in store.objects.get("leases", {}).values():
        spec = lease["spec"]
        renewed = dt.datetime.fromisoformat(str(spec.get("renewTime")).replace("Z", "+00:00"))
        if spec.get("holderIdentity") and renewed + dt.timedelta(seconds=ttl) > now:
            out.add(spec["holderIdentity"])
    return out


def test_staggered_fleet_never_disrupts_more_than_the_budget(tmp_path: Path) -> None:
    """30 engines against one API stand-in, on a simulated clock (the engines' snapshots and
    the Leases' times): each node detects the problem at a random time within an hour, acts
    through the engine's `for`, cooldowns and retries, and its problem clears 2-10 minutes
    after it was cordoned; a cleared rule uncordons on resolve. Two crashed guardians hold
    both slots at the start and never renew them. At no tick are more than `max_nodes`
    nodes disrupted (cordoned, or holding a live slot), the crashed slots expire after their
    TTL, and every node is remediated in the end. (Before slots were held until resolve,
    seven of eight such nodes were cordoned at once with max_nodes = 2.)"""
    rng = random.Random(20261203)
    n_nodes, max_nodes, ttl, tick = 30, 2, 600, 20
    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    now = [0.0]

    def clock() -> dt.datetime:
        return base + dt.timedelta(seconds=now[0])

    with serve() as (url, store):
        names = [f"node-{i:02d}" for i in range(n_nodes)]
        for name in [*names, "ghost-a", "ghost-b"]:
            store.add_node(name)
        kc = str(kubeconfig(tmp_path, url))

        def budget(node: str) -> FleetBudget:
            return FleetBudget(FleetParams(kubeconfig=kc, node=node, max_nodes=max_nodes,
                                           ttl=ttl), clock=clock)

        for ghost in ("ghost-a", "ghost-b"):  # crashed right after taking a slot
            assert budget(ghost).acquire()[0] is not None
        detect = {n: rng.uniform(0, 3600) for n in names}
        clears_after = {n: rng.uniform(120, 600) for n in names}
        cordoned_at: dict[str, float] = {}
        resolved: set[str] = set()
        engines = {}
        for n in names:
            rules = load_text(STAGGERED.format(kc=kc, node=n))
            engines[n] = (Engine(rules), Executor(Host(), dry_run=False, fleet=budget(n)))
        worst = 0
        while now[0] < 5 * 3600 and len(resolved) < n_nodes:
            for n in names:
                engine, ex = engines[n]
                ill = detect[n] <= now[0] and (
                    n not in cordoned_at or now[0] < cordoned_at[n] + clears_after[n])
                snap = Snapshot(now[0], {"memcg.dying": 50.0 if ill else 0.0})
                for done in ex.run(engine.evaluate(snap), snap):
                    if done.use == "kube.uncordon" and done.outcome and done.outcome.ok:
                        resolved.add(n)
                cordoned = {k[1] for k, o in store.objects["nodes"].items()
                            if o["spec"].get("unschedulable")}
                if n in cordoned:
                    cordoned_at.setdefault(n, now[0])
                disrupted = cordoned | _live_holders(store, clock(), ttl)
                worst = max(worst, len(disrupted))
                assert len(disrupted) <= max_nodes, (now[0], sorted(disrupted))
            now[0] += tick
        assert resolved == set(names), sorted(set(names) - resolved)
        assert worst == max_nodes  # the budget was used, not just respected
        assert min(cordoned_at.values()) >= ttl  # nobody acted before the ghosts expired
        assert not any(o["spec"].get("unschedulable") for o in store.objects["nodes"].values())
        assert not any(lease["spec"].get("holderIdentity")
                       for lease in store.objects["leases"].values())


def test_a_skewed_wall_clock_neither_steals_nor_keeps_a_slot(tmp_path: Path) -> None:
    """Before: expiry compared the holder's renewTime with the observer's wall clock. A node
    20 minutes slow (TTL 15 min) had its slot taken while it renewed it: two nodes
    disrupting under max_nodes = 1; a node a year fast that died kept its slot for the
    year. Now, as client-go's leader election: how long this observer has seen the Lease
    unchanged, on its own monotonic clock (here the simulated one both nodes share)."""
    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    mono = [0.0]
    with serve() as (url, store):
        for name in ("slow", "fast", "observer"):
            store.add_node(name)
        kc = str(kubeconfig(tmp_path, url))

        def budget(node: str, skew: dt.timedelta) -> FleetBudget:
            return FleetBudget(FleetParams(kubeconfig=kc, node=node, max_nodes=1, ttl=900),
                               clock=lambda: base + dt.timedelta(seconds=mono[0]) + skew,
                               monotonic=lambda: mono[0])

        slow = budget("slow", -dt.timedelta(minutes=20))
        observer = budget("observer", dt.timedelta(0))
        assert slow.hold("r")[0] is not None
        for _ in range(12):  # an hour: the slow node renews every ttl/3, as it does
            mono[0] += 300
            slow.renew()
            slot, why = observer.acquire()
            assert slot is None and "slow" in why, why
        slow.done("r")

        fast = budget("fast", dt.timedelta(days=365))
        assert fast.hold("r")[0] is not None  # ... and then it dies, never renewing
        slot, _ = observer.acquire()
        assert slot is None
        mono[0] += 901  # one TTL on the observer's own clock, not a year
        slot, why = observer.acquire()
        assert slot is not None, why


def test_a_fleet_wide_pause_is_seen_by_every_engine_within_one_tick(tmp_path: Path) -> None:
    """Issue 31: the staggered fleet, with a hold written into the guardian-holds ConfigMap
    (as `kubectl apply` would) while nodes are being remediated. At its first tick after
    the ConfigMap changes, every engine has the hold (read through its own client): no
    node is cordoned while it lasts, the firing rules say `held: paused by …`, the
    cordoned ones still uncordon when they recover (clean-up is not held), and when the
    hold expires the nodes that still need it are remediated."""
    from guardian.kube.holds import KubeHolds, KubeHoldsParams

    rng = random.Random(31)
    n_nodes, max_nodes, ttl, tick = 12, 2, 600, 20
    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    now = [0.0]
    pause_at, pause_for = 1200.0, 1800.0

    def clock() -> dt.datetime:
        return base + dt.timedelta(seconds=now[0])

    with serve() as (url, store):
        names = [f"node-{i:02d}" for i in range(n_nodes)]
        for name in names:
            store.add_node(name)
        kc = str(kubeconfig(tmp_path, url))
        detect = {n: rng.uniform(0, 1800) for n in names}
        clears_after = {n: rng.uniform(120, 600) for n in names}
        cordoned_at: dict[str, float] = {}
        resolved: set[str] = set()
        engines = {}
        for n in names:
            fleet = FleetBudget(FleetParams(kubeconfig=kc, node=n, max_nodes=max_nodes,
                                            ttl=ttl), clock=clock)
            holds = KubeHolds(KubeHoldsParams(kubeconfig=kc, node=n, annotation=""))
            engines[n] = (Engine(load_text(STAGGERED.format(kc=kc, node=n))),
                          Executor(Host(), dry_run=False, fleet=fleet), holds)
        until = (base + dt.timedelta(seconds=pause_at + pause_for)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        saw_pause: dict[str, float] = {}
        held_reasons: set[str] = set()
        cordoned_during_pause: list[str] = []
        while now[0] < 4 * 3600 and len(resolved) < n_nodes:
            if now[0] == pause_at:
                store.put("configmaps", {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "guardian-holds", "namespace": "kube-system"},
                    "data": {"holds.toml": f'[[hold]]\nuntil = {until}\nreason = "kernel '
                                           f'rollout"\nauthor = "sre"\n'}})
            for n in names:
                engine, ex, holds = engines[n]
                # one whole read a tick (the loop's read() may answer with the last one
                # while a read is under way; that is test_kube_holds_hostile's subject)
                held, wall = holds.fetch(), clock().timestamp()
                if held and n not in saw_pause:
                    saw_pause[n] = now[0]
                ill = detect[n] <= now[0] and (
                    n not in cordoned_at or now[0] < cordoned_at[n] + clears_after[n])
                snap = Snapshot(now[0], {"memcg.dying": 50.0 if ill else 0.0})
                decisions = engine.evaluate(snap, holds=held, wall=wall)
                held_reasons |= {d.reason for d in decisions if d.kind == "held"}
                for done in ex.run(decisions, snap):
                    if done.use == "kube.uncordon" and done.outcome and done.outcome.ok:
                        resolved.add(n)
                    if done.use == "kube.cordon" and done.outcome and \
                            pause_at <= now[0] < pause_at + pause_for:
                        cordoned_during_pause.append(n)
                cordoned = {k[1] for k, o in store.objects["nodes"].items()
                            if o["spec"].get("unschedulable")}
                if n in cordoned:
                    cordoned_at.setdefault(n, now[0])
                assert len(cordoned | _live_holders(store, clock(), ttl)) <= max_nodes
            now[0] += tick
        assert saw_pause == dict.fromkeys(names, pause_at)  # every engine, the same tick
        assert not cordoned_during_pause
        assert held_reasons == {f"paused by sre until {until}: kernel rollout"}
        assert any(pause_at <= t < pause_at + pause_for for t in cordoned_at.values()) is \
            False
        assert any(t >= pause_at + pause_for for t in cordoned_at.values())  # acts after
        assert resolved == set(names), sorted(set(names) - resolved)
