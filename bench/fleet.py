"""The fleet at 1,000 nodes: what the fleet budget, the holds reader and the breaker cost
the Kubernetes API at the default tick, and how long the breaker takes to hold a wave.

1,000 simulated nodes in 4 zones (250 each) against the API stand-in
(guardian.testing.kubeapi, the tests' tests/support/kube_standin.py: the real wire
format, every request recorded by verb and path, every answer's size in bytes), on a
simulated clock at the default 15 s tick. Each node is what the DaemonSet runs: an engine
with a ``fleet = true`` rule (``for = "5m"``, a disruptive action), the fleet budget
(guardian.kube.fleet.FleetBudget, its defaults: one node at once; ``renew`` every tick,
as the executor calls it) and the readers of holds the service builds
(guardian.runtime.operate.readers) for ``[holds.kube]`` (the ConfigMap and this node's
annotations) and ``[fleet.breaker]`` (``by`` the zone, its defaults otherwise), each read
whole once a tick on the loop's thread (the service reads them on a worker: the same
requests) and told what fires after each evaluation, as Operations.tell tells them. One
lightkube client serves every node (one connection: the requests are the same, the
stand-in serves them one by one).

Measured: the requests and bytes a second the readers and the budget cost at steady
state (ticks 2-4, after each node's first tick), during a wave (half of zone a's nodes
begin to fire the rule at one tick), and at each node's first tick; the simulated
seconds from the wave's start to the breaker's latch and to every node of zone a holding
the rule; and the requests one node's disruption costs the budget (take a slot, renew,
give it back)."""

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
from guardian.runtime.config import Config, HoldsConfig
from guardian.runtime.operate import holding, readers
from guardian.testing.kubeapi import kubeconfig, serve

NODES = int(os.environ.get("GUARDIAN_BENCH_FLEET_NODES", "1000"))
ZONES = "abcd"
ZONE = "topology.kubernetes.io/zone"
TICK = 15.0  # the default [engine] interval
STEADY = (1, 4)  # the ticks measured at steady state: tick 0 is every node's first
WAVE_AT = 5  # the tick at which half of zone a begins to fire
WAVE_TICKS = 4  # ticks simulated from the wave's start
PARTS = ("readers", "budget")
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


class _Cost:
    """Requests and answered bytes, by kind."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def add(self, sent: list[tuple[str, str, int]]) -> None:
        for method, path, size in sent:
            kind = _kind(method, path)
            self.requests[kind] += 1
            self.bytes[kind] += size


class _Fleet:
    """The simulated nodes, each with its engine, budget and readers of holds."""

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
        self.nodes: dict[str, tuple[Engine, Any, list[Any]]] = {}
        for n in self.names:
            p = kfleet.FleetParams(kubeconfig=kc, node=n, breaker=BreakerParams(by=[ZONE]))
            budget = kfleet.FleetBudget(p, clock=self._clock)
            config = Config(holds=HoldsConfig(kube=kholds.KubeHoldsParams(
                kubeconfig=kc, node=n), dropin=""), fleet=p)
            kube = [r for r in readers(config, None) if isinstance(r, kholds.KubeHolds)]
            for r in kube:  # the simulated clock
                if isinstance(r, kbreaker.KubeBreaker):
                    r.clock, r.monotonic = self._wall, lambda: self.now
            self.nodes[n] = (Engine(rules), budget, kube)
        self.readers = len(self.nodes[self.names[0]][2])
        self.ill: set[str] = set()
        self.held: dict[str, float] = {}  # node -> when its breaker first held the rule
        self.cost: dict[str, _Cost] = {}

    def _clock(self) -> dt.datetime:
        return self.base + dt.timedelta(seconds=self.now)

    def _wall(self) -> float:
        return self.base.timestamp() + self.now

    def _count(self, part: str, since: int) -> None:
        self.cost.setdefault(part, _Cost()).add(self.store.sent[since:])

    def tick(self) -> None:
        """One tick of every node, in name order, as the service's loop runs it."""
        sent = self.store.sent
        for n in self.names:
            engine, budget, kube = self.nodes[n]
            k = len(sent)
            got = [h for r in kube for h in r.fetch()]
            self._count("readers", k)
            if any(h.rule == "memcg-leak" and h.latched for h in got):
                self.held.setdefault(n, self.now)
            snap = Snapshot(self.now, {"memcg.dying": 50.0 if n in self.ill else 0.0})
            engine.evaluate(snap, holds=got, wall=self._wall())
            k = len(sent)
            budget.renew()
            self._count("budget", k)
            for r in kube:
                if isinstance(r, kbreaker.KubeBreaker):
                    r.firing(holding(engine))
        self.now += TICK

    def take(self, part: str) -> _Cost:
        return self.cost.pop(part, _Cost())


def _rate(cost: _Cost, seconds: float) -> tuple[float, float, str]:
    """Requests a second, bytes a second, and each kind's requests (bytes) a second."""
    kinds = ", ".join(f"{k} {v / seconds:.{1 if v / seconds >= 0.1 else 2}f} "
                      f"({_size(cost.bytes[k] / seconds)}/s)"
                      for k, v in cost.requests.most_common())
    return (sum(cost.requests.values()) / seconds, sum(cost.bytes.values()) / seconds,
            kinds or "none")


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def run() -> Iterator[dict[str, Any]]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, serve() as (url, store):
        fleet = _Fleet(url, str(kubeconfig(Path(tmp), url)), store)
        nodes = len(fleet.names)
        fleet.tick()  # every node's first tick: the budget looks for a slot of its own
        first = {c: fleet.take(c) for c in PARTS}
        for _ in range(*STEADY):
            fleet.tick()
        span = (STEADY[1] - STEADY[0]) * TICK
        steady = {c: _rate(fleet.take(c), span) for c in PARTS}
        while fleet.now < WAVE_AT * TICK:
            fleet.tick()
            for c in PARTS:
                fleet.take(c)
        zone_a = [n for n in fleet.names if n.startswith("a")]
        fleet.ill = set(random.Random(45).sample(zone_a, len(zone_a) // 2))
        wave = fleet.now
        for _ in range(WAVE_TICKS):
            fleet.tick()
        during = {c: _rate(fleet.take(c), WAVE_TICKS * TICK) for c in PARTS}
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
        list_bytes = len(json.dumps({"items": list(store.objects["nodes"].values())}))
    took = time.monotonic() - started
    how = (f"bench/fleet.py: {nodes} simulated nodes in {len(ZONES)} zones against the "
           f"API stand-in, every node's readers of holds ({fleet.readers} for "
           f"[holds.kube] and [fleet.breaker], as guardian.runtime.operate.readers "
           f"builds them) and budget read once a {TICK:g} s tick on a simulated clock; "
           f"ticks {STEADY[0] + 1}-{STEADY[1]} ({span:g} s simulated), by verb "
           f"(answered bytes): ")
    yield figure(f"holds and breaker readers, {nodes} nodes, steady",
                 steady["readers"][0], "req/s", how + steady["readers"][2]
                 + f"; {_size(steady['readers'][1])}/s in all", digits=1)
    yield figure(f"fleet budget, {nodes} nodes, steady", steady["budget"][0], "req/s",
                 how + steady["budget"][2], digits=1)
    b = first["budget"]
    yield figure(f"fleet budget, each node's first tick, {nodes} nodes",
                 sum(b.requests.values()), "requests",
                 "every node looks for a slot of its own from before a restart: "
                 + ", ".join(f"{k} {v} ({_size(b.bytes[k])})"
                             for k, v in b.requests.most_common())
                 + f"; {_size(sum(b.bytes.values()))} in all", digits=0)
    wave_how = (f"half of zone a ({len(fleet.ill)} of {len(zone_a)} nodes) begins to "
                f"fire the rule at one tick; the {WAVE_TICKS} ticks from then, by verb: ")
    yield figure(f"holds and breaker readers, {nodes} nodes, during the wave",
                 during["readers"][0], "req/s", wave_how + during["readers"][2]
                 + f"; {_size(during['readers'][1])}/s in all; a LIST of the nodes is "
                 f"{_size(list_bytes)} of JSON", digits=1)
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
