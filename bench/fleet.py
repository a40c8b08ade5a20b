"""The fleet at 1,000 nodes: what the fleet budget, the holds reader and the breaker cost
the Kubernetes API at the default tick, and how long the breaker takes to hold a wave.

1,000 simulated nodes in 4 zones (250 each) against the API stand-in
(guardian.testing.kubeapi, the tests' tests/support/kube_standin.py: the real wire
format, every request recorded by verb and path), on a simulated clock at the default 15
s tick. Each node is what the DaemonSet runs: an engine with a ``fleet = true`` rule
(``for = "5m"``, a disruptive action), the fleet budget
(guardian.kube.fleet.FleetBudget, its defaults: one node at once; ``renew`` every tick,
as the executor calls it), the holds reader (guardian.kube.holds.KubeHolds: the
ConfigMap and this node's annotation) and the breaker
(guardian.kube.breaker.KubeBreaker, ``by`` the zone, its defaults otherwise), each read
whole once a tick on the loop's thread (the service reads them on a worker: the same
requests). One lightkube client serves every node (one connection: the requests are the
same, the stand-in serves them one by one).

Measured: the requests a second each costs at steady state (ticks 2-4, after each node's
first tick), during a wave (half of zone a's nodes begin to fire the rule at one tick)
and the simulated seconds from the wave's start to the breaker's latch and to every node
of zone a holding the rule; and the requests one node's disruption costs the budget
(take a slot, renew, give it back)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import figure

import guardian.kube.breaker as kbreaker
import guardian.kube.fleet as kfleet
import guardian.kube.holds as kholds
from guardian import Engine, Snapshot, load_text
from guardian.kube.client import make_client
from guardian.model.breaker import BreakerParams
from guardian.runtime.operate import holding
from guardian.testing.kubeapi import kubeconfig, serve

NODES = int(os.environ.get("GUARDIAN_BENCH_FLEET_NODES", "1000"))
ZONES = "abcd"
ZONE = "topology.kubernetes.io/zone"
TICK = 15.0  # the default [engine] interval
STEADY = (1, 4)  # the ticks measured at steady state: tick 0 is every node's first
WAVE_AT = 5  # the tick at which half of zone a begins to fire
WAVE_TICKS = 4  # ticks simulated from the wave's start
RULE = """version = 1
[[rule]]
name = "memcg-leak"
summary = "s"
when = "memcg.dying > 10"
for = "5m"
fleet = true
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "systemd.unit"
  allow = ["ecs*.service"]
  verbs = ["stop"]
"""
_PATH = re.compile(r"^/(?:api/v1|apis/[^/]+/v1)(?:/namespaces/[^/]+)?/([a-z]+)(/[^/]+)?")


def _kind(method: str, path: str) -> str:
    """``LIST nodes``, ``GET configmaps``, ``PATCH nodes``: a request's verb and
    resource."""
    m = _PATH.match(path)
    if not m:
        return f"{method} {path}"
    verb = "LIST" if method == "GET" and not m.group(2) else method
    return f"{verb} {m.group(1)}"


class _Fleet:
    """The simulated nodes, each with its engine, budget, holds reader and breaker."""

    def __init__(self, url: str, kc: str, store: Any) -> None:
        self.store = store
        self.now = 0.0
        self.base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
        shared = make_client(kfleet.FleetParams(kubeconfig=kc, node="x"))
        for mod in (kfleet, kholds, kbreaker):  # one client for every node
            mod.make_client = lambda _p, c=shared: c  # type: ignore[attr-defined]
        self.names = [f"{z}-{i:04d}" for z in ZONES for i in range(NODES // len(ZONES))]
        for n in self.names:
            store.add_node(n, {ZONE: n[0], "kubernetes.io/hostname": n})
        store.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "guardian-holds", "namespace": "kube-system"},
            "data": {"holds.toml": ""}})
        rules = load_text(RULE)
        self.nodes: dict[str, tuple[Engine, Any, Any, Any]] = {}
        for n in self.names:
            p = kfleet.FleetParams(kubeconfig=kc, node=n, breaker=BreakerParams(by=[ZONE]))
            budget = kfleet.FleetBudget(p, clock=self._clock)
            holds = kholds.KubeHolds(kholds.KubeHoldsParams(kubeconfig=kc, node=n))
            breaker = kbreaker.KubeBreaker(p, clock=self._wall, monotonic=lambda: self.now)
            self.nodes[n] = (Engine(rules), budget, holds, breaker)
        self.ill: set[str] = set()
        self.held: dict[str, float] = {}  # node -> when its breaker first held the rule
        self.cost: dict[str, Counter[str]] = {}  # component -> requests by kind

    def _clock(self) -> dt.datetime:
        return self.base + dt.timedelta(seconds=self.now)

    def _wall(self) -> float:
        return self.base.timestamp() + self.now

    def _count(self, component: str, since: int) -> None:
        c = self.cost.setdefault(component, Counter())
        c.update(_kind(m, p) for m, p in self.store.requests[since:])

    def tick(self) -> None:
        """One tick of every node, in name order, as the service's loop runs it."""
        reqs = self.store.requests
        for n in self.names:
            engine, budget, holds, breaker = self.nodes[n]
            k = len(reqs)
            got = holds.fetch()
            self._count("holds", k)
            k = len(reqs)
            latched = breaker.fetch()
            self._count("breaker", k)
            if any(h.rule == "memcg-leak" for h in latched):
                self.held.setdefault(n, self.now)
            snap = Snapshot(self.now, {"memcg.dying": 50.0 if n in self.ill else 0.0})
            engine.evaluate(snap, holds=[*got, *latched], wall=self._wall())
            k = len(reqs)
            budget.renew()
            self._count("budget", k)
            breaker.firing(holding(engine))
        self.now += TICK

    def take(self, component: str) -> Counter[str]:
        return self.cost.pop(component, Counter())


def _rate(counts: Counter[str], seconds: float) -> tuple[float, str]:
    total = sum(counts.values())
    kinds = ", ".join(f"{k} {v / seconds:.1f}" for k, v in counts.most_common())
    return total / seconds, kinds or "none"


def run() -> Iterator[dict[str, Any]]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, serve() as (url, store):
        fleet = _Fleet(url, str(kubeconfig(Path(tmp), url)), store)
        nodes = len(fleet.names)
        fleet.tick()  # every node's first tick: the budget looks for a slot of its own
        first = {c: sum(fleet.take(c).values()) for c in ("holds", "breaker", "budget")}
        for _ in range(*STEADY):
            fleet.tick()
        span = (STEADY[1] - STEADY[0]) * TICK
        steady = {c: _rate(fleet.take(c), span) for c in ("holds", "breaker", "budget")}
        while fleet.now < WAVE_AT * TICK:
            fleet.tick()
            for c in ("holds", "breaker", "budget"):
                fleet.take(c)
        zone_a = [n for n in fleet.names if n.startswith("a")]
        fleet.ill = set(random.Random(45).sample(zone_a, len(zone_a) // 2))
        wave = fleet.now
        for _ in range(WAVE_TICKS):
            fleet.tick()
        during = {c: _rate(fleet.take(c), WAVE_TICKS * TICK)
                  for c in ("holds", "breaker", "budget")}
        latches = [lease for (_, name), lease in store.objects.get("leases", {}).items()
                   if "-breaker-" in name]
        record = json.loads(latches[0]["metadata"]["annotations"][kbreaker.RECORD]) \
            if latches else None
        tripped = record["at"] - fleet.base.timestamp() - wave if record else None
        all_held = max((fleet.held.get(n, float("inf")) for n in zone_a), default=0.0)
        # one node's disruption: a slot taken, renewed past ttl/3, given back
        budget = fleet.nodes[fleet.names[-1]][1]
        k = len(store.requests)
        budget.hold("memcg-leak")
        fleet.now += budget.p.ttl / 3
        budget.renew()
        budget.done("memcg-leak")
        one = Counter(_kind(m, p) for m, p in store.requests[k:])
        list_bytes = len(json.dumps([o for o in store.objects["nodes"].values()]))
    took = time.monotonic() - started
    how = (f"bench/fleet.py: {nodes} simulated nodes in {len(ZONES)} zones against the "
           f"API stand-in, every node's holds reader, breaker and budget read once a "
           f"{TICK:g} s tick on a simulated clock; ticks {STEADY[0] + 1}-{STEADY[1]} "
           f"({span:g} s simulated), by verb: ")
    yield figure(f"holds reader, {nodes} nodes, steady", steady["holds"][0], "req/s",
                 how + steady["holds"][1], digits=1)
    yield figure(f"breaker, {nodes} nodes, steady", steady["breaker"][0], "req/s",
                 how + steady["breaker"][1], digits=1)
    yield figure(f"fleet budget, {nodes} nodes, steady", steady["budget"][0], "req/s",
                 how + steady["budget"][1] + f"; each node's first tick: "
                 f"{first['budget']} requests in all (its own slot looked for)", digits=1)
    wave_how = (f"half of zone a ({len(fleet.ill)} of {len(zone_a)} nodes) begins to "
                f"fire the rule at one tick; the {WAVE_TICKS} ticks from then, by verb: ")
    yield figure(f"breaker, {nodes} nodes, during the wave", during["breaker"][0], "req/s",
                 wave_how + during["breaker"][1] + f"; a LIST of the nodes is "
                 f"{list_bytes / 1e6:.1f} MB of JSON", digits=1)
    yield figure("wave start to the breaker's latch",
                 float("nan") if tripped is None else tripped, "s",
                 f"simulated seconds from the tick at which the wave's nodes began to "
                 f"fire to the latch's Lease ({len(latches)} latch(es); its record: "
                 f"{record['why'] if record else 'none'})", digits=1)
    yield figure("wave start to every node of zone a held", all_held - wave, "s",
                 "simulated seconds until the last of zone a's nodes read the latch "
                 "(its breaker's holds carry it)", digits=1)
    yield figure("one disruption, the fleet budget's requests", sum(one.values()),
                 "requests", ", ".join(f"{k} {v}" for k, v in one.most_common())
                 + f"; the whole bench took {took:.0f} s of wall time", digits=0)


if __name__ == "__main__":
    for f in run():
        print(json.dumps(f))
