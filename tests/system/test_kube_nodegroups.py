"""Node groups on a cluster (issue 45): six engines against the API stand-in, each
reading its own Node's labels as the service does ([holds.kube], off the loop). The same
rule fires on all of them: the two canaries, in a shadow group, plan and audit the cordon
and never apply it, while the others are cordoned; a node that cannot read its labels
does not cordon (it cannot tell its group) and still logs."""

from __future__ import annotations

import json
from pathlib import Path

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.core.audit import AuditLog
from guardian.kube.fleet import FleetBudget, FleetParams
from guardian.kube.holds import KubeHolds, KubeHoldsParams
from guardian.model.nodegroups import NodeGroup
from guardian.runtime.config import Config
from guardian.runtime.executor import Executed
from guardian.runtime.operate import Operations
from tests.support.kube_standin import kubeconfig, serve

RULE = '''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "memcg.dying > 10"
fleet = false
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "{node}"
'''
CANARY = {"guardian.io/canary": "true"}


def test_a_shadow_group_never_acts_while_the_others_do(tmp_path: Path) -> None:
    config = Config(groups=[NodeGroup(name="canary", labels=CANARY, mode="shadow")])
    with serve() as (url, store):
        names = [f"node-{i}" for i in range(6)]
        for i, n in enumerate(names):
            store.add_node(n, {**(CANARY if i < 2 else {}), "kubernetes.io/hostname": n})
        kc = str(kubeconfig(tmp_path, url))
        results: dict[str, list[Executed]] = {}
        for n in names:
            # node-5's reader reads no Node object (annotation "", and a name the
            # cluster does not know): its labels stay unknown
            reader = KubeHolds(KubeHoldsParams(kubeconfig=kc, configmap="",
                                               node="unknown" if n == "node-5" else n,
                                               annotation="" if n == "node-5"
                                               else "guardian.io/hold"))
            ops = Operations(config, None, sources=[reader])
            audit = AuditLog(tmp_path / f"{n}.jsonl")
            ex = Executor(Host(), dry_run=False, audit=audit, shadow=ops.shadow)
            engine = Engine(load_text(RULE.format(kc=kc, node=n)))
            for t in (0.0, 600.0):  # firing, then a retry after the cooldown
                op = ops.before()
                snap = Snapshot(t, {"memcg.dying": 50.0})
                decisions = engine.evaluate(snap, holds=op.holds, wall=op.wall)
                results.setdefault(n, []).extend(ex.run(decisions, snap))
            audit.close()
        cordoned = sorted(k[1] for k, o in store.objects["nodes"].items()
                          if o["spec"].get("unschedulable"))
        assert cordoned == ["node-2", "node-3", "node-4"]
        for n in ("node-0", "node-1"):
            assert {(r.use, r.result) for r in results[n]} == {
                ("log", "would_act"), ("kube.cordon", "would_act")}
            assert all(r.decision.mode == "observe" and r.decision.reason ==
                       "node group canary is in shadow mode" for r in results[n])
            records = [json.loads(line) for line in
                       (tmp_path / f"{n}.jsonl").read_text().splitlines()]
            assert any(r.get("would_act") and r.get("use") == "kube.cordon" for r in records)
            assert not any(r.get("outcome") for r in records)  # nothing applied
        # labels unknown: the disruptive action in shadow, never as if in no group; the
        # log runs (a human learns of the problem)
        assert {(r.use, r.result) for r in results["node-5"]} == {
            ("log", "ok"), ("kube.cordon", "would_act")}
        assert results["node-5"][0].decision.reason.startswith(
            "this node's labels are not known")


def test_a_groups_own_budget_is_its_own_pool_of_leases_within_the_fleets(
        tmp_path: Path) -> None:
    """Group gpu's budget of one is the Leases guardian-gpu-slot-<i>, counted among its
    nodes: the second gpu node is refused (naming the group) while a node in no group
    takes [fleet]'s guardian-slot-0; [fleet]'s budget of two counts the gpu node's slot
    too, so a third node waits; the gpu slot given back, the other gpu node takes it."""
    gpu = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_nodes=1)
    with serve() as (url, store):
        for n, pool in (("g1", "gpu"), ("g2", "gpu"), ("c1", "cpu"), ("c2", "cpu")):
            store.add_node(n, {"pool": pool})
        kc = str(kubeconfig(tmp_path, url))
        budgets = {n: FleetBudget(FleetParams(kubeconfig=kc, node=n, max_nodes=2),
                                  groups=[gpu]) for n in ("g1", "g2", "c1", "c2")}
        assert budgets["g1"].hold("r") == ("guardian-gpu-slot-0", "")
        assert budgets["g2"].hold("r") == (None, "fleet budget: node group gpu: 1 other "
                                           "node(s) already disrupted (g1); at most 1 at once")
        assert budgets["c1"].hold("r") == ("guardian-slot-0", "")
        assert budgets["c2"].hold("r") == (None, "fleet budget: 2 other node(s) already "
                                           "disrupted (c1, g1); at most 2 at once")
        budgets["g1"].done("r")
        assert store.objects["leases"][("kube-system", "guardian-gpu-slot-0")][
            "spec"].get("holderIdentity") is None
        assert budgets["g2"].hold("r") == ("guardian-gpu-slot-0", "")
