"""kube.drain against the API stand-in (tests/support/kube_standin.py), whose pods, evictions and
PodDisruptionBudget refusals follow the API reference: an accepted Eviction (policy/v1,
201) is a graceful delete, so the pod stays with a deletionTimestamp until its containers
stop (within its grace period: the Eviction's deleteOptions.gracePeriodSeconds, else the
pod's terminationGracePeriodSeconds); an eviction a PDB forbids is 429 TooManyRequests
("Cannot evict pod as it would violate the pod's disruption budget."); a pod being deleted
does not count as healthy for the budget (pkg/controller/disruption). The drain's logic is
kubectl's (pkg/drain/drain.go evictPods/waitForDelete, filters.go), quoted in
guardian/kube/drain.py; kubectl drain itself runs against the stand-in in
tests/system/test_kube_standin.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.core.audit import AuditLog
from guardian.core.diagnostics import RuleError
from guardian.kube.drain import DrainParams, KubeDrain
from guardian.model.kinds import DecisionKind
from guardian.plugin.contract import ActionContext
from tests.support.kube_standin import Store, kubeconfig, serve
from tests.support.wait import ends, wait_until

EVICT_DB_1 = "/api/v1/namespaces/default/pods/db-1/eviction"


def ctx(kind: DecisionKind = "firing") -> ActionContext:
    return ActionContext("nic-reset", Snapshot(0.0, {}), Host(), dry_run=False, kind=kind)


def cluster(store: Store, shutdown: float = 0.0) -> None:
    store.add_node("node-a")
    store.add_node("node-b")
    store.add_pod("kube-system", "guardian-x", "node-a", owner=("DaemonSet", "guardian"))
    store.add_pod("default", "web-1", "node-a", labels={"app": "web"},
                  owner=("ReplicaSet", "web"), shutdown=shutdown)
    store.add_pod("default", "batch-1", "node-a", owner=("Job", "batch"), shutdown=shutdown)
    store.add_pod("default", "done-1", "node-a", phase="Succeeded", emptydir=True)
    store.add_pod("default", "elsewhere", "node-b", owner=("ReplicaSet", "x"))
    store.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "etcd-node-a", "namespace": "kube-system",
        "annotations": {"kubernetes.io/config.mirror": "abc"}},
        "spec": {"nodeName": "node-a", "containers": []}, "status": {"phase": "Running"}})


def params(kc: str, **kw: object) -> DrainParams:
    return DrainParams.model_validate({"kubeconfig": kc, "node": "node-a", "interval": 0.05,
                                       "retry_delay": 0.1, **kw})


def _pods_on(store: Store, node: str = "node-a") -> set[str]:
    return {n for (_, n), p in store.objects["pods"].items() if p["spec"]["nodeName"] == node}


def test_drain_plan_names_each_pod_and_kubectls_refusals(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        store.add_pod("default", "cache-1", "node-a", owner=("ReplicaSet", "c"), emptydir=True)
        store.add_pod("default", "bare", "node-a")  # no controller
        kc = str(kubeconfig(tmp_path, url))
        plan = KubeDrain(params(kc)).plan(ctx())
        assert plan.refused == [
            "pod default/bare declares no controller: nothing would recreate it (say "
            "evict_unmanaged = true)",
            "pod default/cache-1 has emptyDir data (say delete_emptydir_data = true)"]
        plan = KubeDrain(params(kc, delete_emptydir_data=True, evict_unmanaged=True,
                                grace_period=5)).plan(ctx())
        assert not plan.refused
        assert [(s.target, s.change) for s in plan.steps] == [
            ("node node-a", "set cordon (claimed by rule nic-reset)"),
            *[(f"pod default/{n}", "evict (policy/v1 Eviction, grace 5 s); wait until gone")
              for n in ("bare", "batch-1", "cache-1", "done-1", "web-1")]]
        assert plan.skipped == ["pod kube-system/etcd-node-a: mirror of a static pod",
                                "pod kube-system/guardian-x: DaemonSet-managed"]
        assert "5 pod(s) within 240s; then report what is left" in plan.note
        assert not store.objects["nodes"][("", "node-a")]["spec"].get("unschedulable")


def test_drain_waits_until_the_pods_are_gone(tmp_path: Path) -> None:
    """Before: kube.evict returned once the evictions were accepted, while the pods were
    still terminating on the node."""
    with serve() as (url, store):
        cluster(store, shutdown=0.6)
        kc = str(kubeconfig(tmp_path, url))
        act = KubeDrain(params(kc))
        plan = act.plan(ctx())
        out = act.apply(plan, ctx())
        assert out.ok and out.verified, out
        # gone when apply returns: it waited out their 0.6 s shutdown, not the acceptance
        assert _pods_on(store) == {"guardian-x", "etcd-node-a"}
        assert store.objects["nodes"][("", "node-a")]["spec"]["unschedulable"] is True
        assert out.data["gone"] == ["default/batch-1", "default/done-1", "default/web-1"]
        web = [(t, what) for t, pod, what in out.data["progress"] if pod == "default/web-1"]
        assert [w for _, w in web] == ["eviction accepted", "gone"]
        assert web[0][0] < web[1][0]


def test_a_pdbs_429_is_retried_until_it_allows_the_eviction(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        store.add_pod("default", "db-1", "node-a", labels={"app": "db"},
                      owner=("StatefulSet", "db"))
        store.add_pdb("default", "db", {"app": "db"}, min_available=1)
        kc = str(kubeconfig(tmp_path, url))
        act = KubeDrain(params(kc, wait=10))
        plan = act.plan(ctx())

        def refused() -> int:
            with store.lock:
                return store.requests.count(("POST", EVICT_DB_1))

        def second_replica() -> None:  # the budget allows one once another is healthy
            wait_until(lambda: refused() >= 3, "three evictions refused by the budget")
            with store.lock:
                store.add_pod("default", "db-2", "node-b", labels={"app": "db"},
                              owner=("StatefulSet", "db"))

        helper = threading.Thread(target=second_replica)
        helper.start()
        out = act.apply(plan, ctx())
        helper.join()
        assert out.ok and out.verified
        db = [what for _, pod, what in out.data["progress"] if pod == "default/db-1"]
        assert db[0] == "429: disruption budget" and db[-2:] == ["eviction accepted", "gone"]
        assert db.count("429: disruption budget") >= 3  # every retry_delay (0.1 s)


def test_a_pdb_that_never_allows_it_fails_at_the_timeout_or_is_forced(tmp_path: Path
                                                                       ) -> None:
    with serve() as (url, store):
        cluster(store)
        store.add_pod("default", "db-1", "node-a", labels={"app": "db"},
                      owner=("StatefulSet", "db"), shutdown=0.3)
        store.add_pdb("default", "db", {"app": "db"}, min_available=1)
        kc = str(kubeconfig(tmp_path, url))
        act = KubeDrain(params(kc, wait=0.5))
        out = ends(lambda: act.apply(act.plan(ctx()), ctx()), "a drain the budget refuses")
        assert not out.ok and out.verified is False
        assert list(out.data["left"]) == ["default/db-1"]
        assert "PodDisruptionBudget refuses its eviction (429)" in out.error
        assert "db-1" in _pods_on(store) and "web-1" not in _pods_on(store)
        # the opt-in fallback: what is left after `wait` is deleted (no PDB on a delete)
        act = KubeDrain(params(kc, wait=0.3, force=True, force_wait=5))
        out = act.apply(act.plan(ctx()), ctx())
        assert out.ok and out.verified and out.data["forced"] == ["default/db-1"]
        assert "db-1" not in _pods_on(store)
        assert ("DELETE", "/api/v1/namespaces/default/pods/db-1") in store.requests


def test_the_grace_period_goes_with_the_eviction(tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a")
        store.add_pod("default", "slow", "node-a", owner=("ReplicaSet", "s"), shutdown=30)
        kc = str(kubeconfig(tmp_path, url))
        act = KubeDrain(params(kc, grace_period=0, wait=5))
        # killed at once: with its 30 s shutdown it would outlive wait (5 s) and fail
        assert act.apply(act.plan(ctx()), ctx()).ok
        assert "slow" not in _pods_on(store)


def test_drain_through_the_engine_audits_progress_and_uncordons_on_resolve(
        tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        text = f'''version = 1
[[rule]]
name = "nic-reset"
summary = "s"
when = "memcg.dying > 10"
{{fleet}}
  [[rule.action]]
  use = "kube.drain"
  on = "both"
  kubeconfig = "{kc}"
  node = "node-a"
  interval = 0.05
'''
        with pytest.raises(RuleError, match=r"kube\.drain can disrupt every node at once"):
            load_text(text.format(fleet=""))
        engine = Engine(load_text(text.format(fleet="fleet = false")))
        audit = tmp_path / "audit.jsonl"
        ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
        [done] = ex.run(engine.evaluate(Snapshot(0.0, {"memcg.dying": 50.0})), Snapshot(0.0))
        assert done.result == "ok"
        [done] = ex.run(engine.evaluate(Snapshot(15.0, {"memcg.dying": 1.0})), Snapshot(15.0))
        assert done.result == "ok" and done.decision.kind == "resolved"
        assert store.objects["nodes"][("", "node-a")]["spec"]["unschedulable"] is False
        entries = [json.loads(line) for line in audit.read_text().splitlines()]
        first = next(e for e in entries if e["type"] == "outcome")["outcome"]
        assert {pod for _, pod, what in first["data"]["progress"] if what == "gone"} == {
            "default/web-1", "default/batch-1", "default/done-1"}


DRAIN_RULE = '''version = 1
[[rule]]
name = "drain-it"
summary = "drain"
fleet = false
when = "memcg.dying > 10"
  [[rule.action]]
  use = "kube.drain"
  {waits}
'''


@pytest.mark.parametrize("service, waits, ok", [
    ("", "wait = 240", True),
    ("", "wait = 240\n  force = true\n  force_wait = 45", True),  # 285 s < 300 s
    ("", "wait = 240\n  force = true\n  force_wait = 90", False),  # 330 s
    ("", "wait = 300", False),
    ("[service]\napply_timeout = \"10m\"\n", "wait = 500\n  force = true", True),
    ("[service]\napply_timeout = \"2m\"\n", "wait = 240", False),
])
def test_check_refuses_a_drain_longer_than_the_apply_timeout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], service: str, waits: str,
        ok: bool) -> None:
    """The executor gives an apply up after [service] apply_timeout (300 s by default)
    while the drain's worker goes on evicting, then force-deleting: `guardian check`
    says so up front."""
    from guardian.cli import main

    rules = tmp_path / "drain.toml"
    rules.write_text(DRAIN_RULE.format(waits=waits))
    config = tmp_path / "guardian.toml"
    config.write_text(service)
    assert main(["check", "--config", str(config), str(rules)]) == (0 if ok else 1)
    out = capsys.readouterr().out
    assert ("is not below [service] apply_timeout" in out) is not ok, out
    if not ok:
        assert out.startswith(f"{rules}:2:") and "'drain-it': kube.drain: wait" in out


def test_check_counts_node_reboots_drain_too() -> None:
    from guardian.kube.drain import check

    rs = load_text(DRAIN_RULE.replace("kube.drain", "node.reboot").format(
        waits='drain = { wait = 200, force = true, force_wait = 100 }'))
    [(rule, why)] = check(rs.rules, 300.0)
    assert rule.spec.name == "drain-it"
    assert "node.reboot: wait 200s + force_wait 100s = 300s" in why
    assert check(rs.rules, 301.0) == []
