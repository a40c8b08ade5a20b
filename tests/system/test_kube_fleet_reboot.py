"""Round 4 of hostile input, the fleet budget across a reboot without drain: the rebooting
node cannot renew its slot's Lease while it is down (coordination.k8s.io/v1 Lease:
holderIdentity, leaseDurationSeconds, renewTime; a holder that stops renewing loses the
lease once leaseDurationSeconds pass without a renewal, as client-go's leader election
judges it). Before: the slot lapsed after `ttl` while the node was still down, and a
second node took it: two nodes down under max_nodes = 1. Now a holder that is a node and
not Ready keeps its slot until it is back and Ready. Against the API stand-in
(tests/support/kube_standin.py), on a simulated monotonic clock."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from guardian.kube.fleet import FleetBudget, FleetParams
from tests.support.kube_standin import Store, kubeconfig, serve


def _ready(store: Store, node: str, ready: bool) -> None:
    store.objects["nodes"][("", node)]["status"]["conditions"][0]["status"] = \
        "True" if ready else "False"


def test_a_rebooting_node_keeps_its_slot_until_it_is_back_and_ready(tmp_path: Path) -> None:
    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    mono = [0.0]
    with serve() as (url, store):
        for name in ("rebooter", "other", "third"):
            store.add_node(name)
        kc = str(kubeconfig(tmp_path, url))

        def budget(node: str) -> FleetBudget:
            return FleetBudget(FleetParams(kubeconfig=kc, node=node, max_nodes=1, ttl=600),
                               clock=lambda: base + dt.timedelta(seconds=mono[0]),
                               monotonic=lambda: mono[0])

        rebooter, other = budget("rebooter"), budget("other")
        assert rebooter.hold("reboot-rule")[0] is not None
        assert other.acquire()[0] is None  # seen once: the observer's clock starts
        _ready(store, "rebooter", False)  # it reboots: down, renewing nothing
        for _ in range(12):  # an hour down, six TTLs
            mono[0] += 300
            slot, why = other.acquire()
            assert slot is None and "rebooter" in why, why
        # back and Ready: its restarted guardian takes its slot up again and renews it
        _ready(store, "rebooter", True)
        again = budget("rebooter")
        again.renew()
        assert again.slot is not None
        for _ in range(4):
            mono[0] += 300
            again.renew()
            assert other.acquire()[0] is None
        again.done("reboot-rule")
        assert other.acquire()[0] is not None


def test_a_node_back_and_ready_without_guardian_loses_the_slot_a_ttl_later(
        tmp_path: Path) -> None:
    mono = [0.0]
    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    with serve() as (url, store):
        for name in ("rebooter", "other"):
            store.add_node(name)
        kc = str(kubeconfig(tmp_path, url))

        def budget(node: str) -> FleetBudget:
            return FleetBudget(FleetParams(kubeconfig=kc, node=node, max_nodes=1, ttl=600),
                               clock=lambda: base + dt.timedelta(seconds=mono[0]),
                               monotonic=lambda: mono[0])

        assert budget("rebooter").hold("r")[0] is not None
        other = budget("other")
        _ready(store, "rebooter", False)
        assert other.acquire()[0] is None
        mono[0] += 3600
        assert other.acquire()[0] is None  # still down: kept
        _ready(store, "rebooter", True)
        assert other.acquire()[0] is None  # Ready: its guardian has a TTL to start
        mono[0] += 601
        assert other.acquire()[0] is not None


def test_a_start_lists_the_leases_and_surveys_the_nodes_only_for_its_own_slot(
        tmp_path: Path) -> None:
    """At its first renew a node looks for a slot held from before a restart. Before:
    every node listed every Node (a DaemonSet rollout of 1,000 nodes read 0.9 GB). Now
    one list of the namespace's Leases; the nodes are surveyed only where a slot of any
    pool names it (a node group's own pool too), or where Leases may not be listed (403:
    as before)."""
    from guardian.model.nodegroups import NodeGroup

    base = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)
    gpu = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_nodes=1)
    with serve() as (url, store):
        for name in ("n1", "n2", "n3"):
            store.add_node(name, {"pool": "gpu" if name == "n2" else "cpu"})
        kc = str(kubeconfig(tmp_path, url))

        def budget(node: str) -> FleetBudget:
            return FleetBudget(FleetParams(kubeconfig=kc, node=node), groups=[gpu],
                               clock=lambda: base)

        assert budget("n2").hold("r")[0] == "guardian-gpu-slot-0"
        lease_list = ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
        k = len(store.requests)
        fresh = budget("n1")
        fresh.renew()
        assert store.requests[k:] == [lease_list] and fresh.slot is None and fresh.adopted
        k = len(store.requests)
        restarted = budget("n2")
        restarted.renew()  # its slot, found and judged by the survey
        assert restarted.slot == "guardian-gpu-slot-0"
        assert store.requests[k] == lease_list and ("GET", "/api/v1/nodes") in \
            store.requests[k:]
        k = len(store.requests)
        store.fail_next = [403]
        no_list = budget("n3")
        no_list.renew()
        assert no_list.adopted and no_list.slot is None
        assert ("GET", "/api/v1/nodes") in store.requests[k:]
