"""kube.taint, kube.untaint and kube.label against the API stand-in (tests/support/kube_standin.py).

Ground truth: kubectl pkg/cmd/taint/taint.go and utils.go (a strategic merge patch of the
whole spec.taints, a taint matched by key and effect), k8s.io/api core/v1 types.go
(NodeSpec.taints carries no patch strategy, so a patch replaces the list; Taint.timeAdded
"is only written for NoExecute taints"); the stand-in's merge does the same, and kubectl
itself taints the stand-in's node below, so its patch and guardian's meet on one list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.core.audit import AuditLog
from guardian.kube.marks import KubeLabel, KubeTaint, KubeUntaint, LabelParams, TaintParams
from guardian.model.kinds import DecisionKind
from guardian.plugin.contract import ActionContext
from tests.support.kube_standin import Store, kubeconfig, kubectl, serve


def ctx(rule: str = "gpu-xid", kind: DecisionKind = "firing") -> ActionContext:
    return ActionContext(rule, Snapshot(0.0, {}), Host(), dry_run=False, kind=kind)


def _node(store: Store) -> dict[str, Any]:
    return store.objects["nodes"][("", "node-a")]


def _owned(store: Store) -> dict[str, Any]:
    raw = _node(store)["metadata"].get("annotations", {}).get("guardian.io/owned")
    return json.loads(raw) if raw else {}


def test_taint_plan_apply_verify_and_removed_on_resolve(tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a")
        _node(store)["spec"]["taints"] = [{"key": "dedicated", "value": "gpu",
                                           "effect": "NoSchedule"}]
        kc = str(kubeconfig(tmp_path, url))
        act = KubeTaint(TaintParams(kubeconfig=kc, node="node-a", effect="NoExecute"))
        plan = act.plan(ctx())
        assert [s.change for s in plan.steps] == [
            "set taint guardian.io/gpu-xid:NoExecute (claimed by rule gpu-xid)"]
        out = act.apply(plan, ctx())
        assert out.ok and out.verified and out.data["changed"]
        taints = _node(store)["spec"]["taints"]
        assert [(t["key"], t["effect"]) for t in taints] == [
            ("dedicated", "NoSchedule"), ("guardian.io/gpu-xid", "NoExecute")]
        assert taints[1]["timeAdded"].endswith("Z")  # written for NoExecute only
        assert list(_owned(store)["taint:guardian.io/gpu-xid:NoExecute"]) == ["gpu-xid"]
        again = act.plan(ctx())  # repeated: nothing more to do
        assert not again.steps and "claimed by rule gpu-xid" in again.note
        # on = "both": the resolve removes guardian's taint and only it
        plan = act.plan(ctx(kind="resolved"))
        assert [s.change for s in plan.steps] == [
            "remove taint guardian.io/gpu-xid:NoExecute (guardian's, rule gpu-xid)"]
        assert act.apply(plan, ctx(kind="resolved")).verified
        assert _node(store)["spec"]["taints"] == [{"key": "dedicated", "value": "gpu",
                                                   "effect": "NoSchedule"}]
        assert _owned(store) == {}


def test_untaint_never_removes_a_taint_guardian_did_not_make(tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a")
        # someone set guardian's key by hand: no claim, so not guardian's to remove
        _node(store)["spec"]["taints"] = [{"key": "guardian.io/gpu-xid",
                                           "effect": "NoSchedule"}]
        kc = str(kubeconfig(tmp_path, url))
        taint = KubeTaint(TaintParams(kubeconfig=kc, node="node-a"))
        plan = taint.plan(ctx())
        assert not plan.steps and "not guardian's" in plan.note
        untaint = KubeUntaint(TaintParams(kubeconfig=kc, node="node-a"))
        for kind in ("resolved", "manual"):
            out = untaint.apply(untaint.plan(ctx(kind=kind)), ctx(kind=kind))
            assert out.ok and not out.data["changed"]
        assert len(_node(store)["spec"]["taints"]) == 1


def test_taint_key_must_be_guardians(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"not a key under guardian\.io/"):
        TaintParams(key="node.kubernetes.io/unreachable")
    with serve() as (url, store):
        store.add_node("node-a")
        kc = str(kubeconfig(tmp_path, url))
        act = KubeTaint(TaintParams(kubeconfig=kc, node="node-a"))
        plan = act.plan(ctx(rule="x" * 70))  # too long for a key's name part (63)
        assert plan.refused and "not a key under guardian.io/" in plan.refused[0]


def test_kubectl_taint_and_guardians_taint_share_the_list(tmp_path: Path) -> None:
    """kubectl's own patch against the stand-in: neither drops the other's taint."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    with serve() as (url, store):
        store.add_node("node-a")
        kc = kubeconfig(tmp_path, url)
        act = KubeTaint(TaintParams(kubeconfig=str(kc), node="node-a"))
        assert act.apply(act.plan(ctx()), ctx()).verified
        out = kubectl(kc, "taint", "nodes", "node-a", "maintenance=true:NoSchedule")
        assert out.returncode == 0, out.stderr
        assert {t["key"] for t in _node(store)["spec"]["taints"]} == {
            "guardian.io/gpu-xid", "maintenance"}
        assert act.apply(act.plan(ctx(kind="resolved")), ctx(kind="resolved")).verified
        assert [t["key"] for t in _node(store)["spec"]["taints"]] == ["maintenance"]


def test_label_set_claimed_and_removed_on_resolve_through_the_engine(tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a")
        _node(store)["metadata"]["labels"]["guardian.io/owner-set"] = "by-hand"
        kc = str(kubeconfig(tmp_path, url))
        with pytest.raises(ValidationError, match="not a key under"):
            LabelParams(labels={"node-role.kubernetes.io/gpu": ""})
        clash = KubeLabel(LabelParams(kubeconfig=kc, node="node-a",
                                      labels={"guardian.io/owner-set": "guardian"}))
        assert "is 'by-hand', not 'guardian'" in clash.plan(ctx()).refused[0]
        rules = load_text(f'''version = 1
[[rule]]
name = "gpu-xid"
summary = "s"
when = "memcg.dying > 10"
  [[rule.action]]
  use = "kube.label"
  on = "both"
  kubeconfig = "{kc}"
  node = "node-a"
  labels = {{ "guardian.io/gpu-health" = "degraded" }}
''')
        engine = Engine(rules)
        audit = tmp_path / "audit.jsonl"
        ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
        [done] = ex.run(engine.evaluate(Snapshot(0.0, {"memcg.dying": 50.0})), Snapshot(0.0))
        assert done.result == "ok"
        assert _node(store)["metadata"]["labels"]["guardian.io/gpu-health"] == "degraded"
        [done] = ex.run(engine.evaluate(Snapshot(15.0, {"memcg.dying": 1.0})), Snapshot(15.0))
        assert done.result == "ok" and done.decision.kind == "resolved"
        labels = _node(store)["metadata"]["labels"]
        assert "guardian.io/gpu-health" not in labels
        assert labels["guardian.io/owner-set"] == "by-hand" and _owned(store) == {}
        entries = [json.loads(line) for line in audit.read_text().splitlines()]
        assert [e["plan"]["steps"][0]["change"] for e in entries if e["type"] == "plan"] == [
            "set label guardian.io/gpu-health=degraded (claimed by rule gpu-xid)",
            "remove label guardian.io/gpu-health=degraded (guardian's, rule gpu-xid)"]
        assert [e["outcome"]["verified"] for e in entries if e["type"] == "outcome"] == [
            True, True]
