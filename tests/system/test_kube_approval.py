"""An approval-gated cordon on a cluster (issue 45): against the API stand-in, a rule
whose kube.cordon waits for approval (approve = { timeout = "2h" }) does not cordon its
node while nobody approves, nor for an approval given before its wait began (a previous
episode's, left on the node); once someone who may annotate the node writes
guardian.io/approve (read in the GET of the node [holds.kube] makes at each tick), the
next tick cordons it, with the approver and why in the audit.

Before: `approve` was no key of a rule, and the cordon ran as soon as the rule fired."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

from lightkube.resources.core_v1 import Node

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.core.audit import AuditLog
from guardian.kube.client import KubeParams, make_client
from guardian.kube.holds import KubeHolds, KubeHoldsParams
from guardian.runtime.config import Config
from guardian.runtime.operate import Operations
from tests.support.kube_standin import kubeconfig, serve

RULE = '''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "memcg.dying > 10"
fleet = false
approve = {{ timeout = "2h" }}
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "node-a"
'''


def _approve(kc: str, at: float, by: str, why: str) -> None:
    """What `kubectl annotate --overwrite node node-a guardian.io/approve=...` does."""
    note = json.dumps({"rule": "nic-stall", "by": by, "why": why,
                       "at": dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat()})
    make_client(KubeParams(kubeconfig=kc)).patch(
        Node, "node-a", {"metadata": {"annotations": {"guardian.io/approve": note}}})


def test_an_approval_gated_cordon_waits_for_the_annotation(tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a")
        kc = str(kubeconfig(tmp_path, url))
        reader = KubeHolds(KubeHoldsParams(kubeconfig=kc, node="node-a", configmap=""))
        ops = Operations(Config(), None, sources=[reader])
        path = tmp_path / "audit.jsonl"
        ex = Executor(Host(), dry_run=False, audit=AuditLog(path))
        engine = Engine(load_text(RULE.format(kc=kc)))

        def cordoned() -> bool:
            return bool(store.objects["nodes"][("", "node-a")]["spec"].get("unschedulable"))

        def tick(t: float) -> list[str]:
            reader.fetch()  # this tick's read of the node, finished (the loop's is off it)
            op = ops.before()
            snap = Snapshot(t, {"memcg.dying": 50.0})
            decisions = engine.evaluate(snap, holds=op.holds, wall=op.wall,
                                        approvals=op.approvals)
            ex.run(decisions, snap)
            return [d.kind for d in decisions]

        # an approval left from an earlier episode, given before this wait begins
        _approve(kc, time.time() - 3600, "bob", "the last time")
        assert tick(0.0) == ["firing", "awaiting_approval"]
        assert [a.by for a in ops.approvals()] == ["bob"]  # read, and stale
        for t in (15.0, 30.0):
            assert tick(t) == [] and not cordoned()
        _approve(kc, time.time(), "alice", "drained by hand")
        assert tick(45.0) == ["retry"] and cordoned()
        records = [json.loads(line) for line in path.read_text().splitlines()]
        cordon = next(r for r in records if r["type"] == "outcome"
                      and r["use"] == "kube.cordon")
        assert cordon["outcome"]["ok"]
        assert (cordon["approval"]["by"], cordon["approval"]["why"]) == (
            "alice", "drained by hand")
        assert cordon["approval"]["source"] == "node node-a annotation guardian.io/approve"
        planned = [r for r in records if r["type"] == "plan" and r["use"] == "kube.cordon"]
        assert [r.get("held", False) for r in planned] == [True, False]  # waited, then ran
