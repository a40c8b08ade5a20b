"""The kube.* actions through lightkube, over HTTP on loopback, against the API stand-in
(tests/support/kube_standin.py, whose fidelity kubectl checks): no Kubernetes API server can be
installed on these machines."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.core.audit import AuditLog
from guardian.kube.actions import (
    ConditionParams,
    CordonParams,
    EventParams,
    EvictParams,
    KubeCondition,
    KubeCordon,
    KubeEvent,
    KubeEvict,
    KubeUncordon,
)
from guardian.model.kinds import DecisionKind
from guardian.plugin.contract import ActionContext
from tests.support.kube_standin import Store, kubeconfig, serve


def ctx(kind: DecisionKind = "firing") -> ActionContext:
    return ActionContext("r", Snapshot(0.0, {}), Host(), dry_run=False, values={"x": 1},
                         kind=kind)


def cluster(store: Store) -> None:
    store.add_node("node-a")
    store.add_daemonset("kube-system", "guardian")
    store.add_pod("kube-system", "guardian-x", "node-a", owner=("DaemonSet", "guardian"))
    store.add_pod("kube-system", "coredns-1", "node-a", owner=("ReplicaSet", "coredns"))
    store.add_pod("default", "web-1", "node-a", labels={"app": "web"},
                  owner=("ReplicaSet", "web"), priority=10)
    store.add_pod("default", "batch-1", "node-a", labels={"app": "batch"},
                  owner=("Job", "batch"), priority=1)
    store.add_pod("default", "db-1", "node-a", labels={"app": "db"},
                  owner=("StatefulSet", "db"), priority=100)
    store.add_pod("default", "elsewhere", "node-b", owner=("ReplicaSet", "x"))
    store.add_pdb("default", "db", {"app": "db"}, min_available=1)
    store.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "static-node-a", "namespace": "kube-system",
        "annotations": {"kubernetes.io/config.mirror": "abc"}},
        "spec": {"nodeName": "node-a", "containers": []}, "status": {"phase": "Running"}})


def _node(store: Store, name: str = "node-a") -> dict[str, Any]:
    return store.objects["nodes"][("", name)]


def _owned(store: Store, name: str = "node-a") -> dict[str, Any]:
    raw = _node(store, name)["metadata"].get("annotations", {}).get("guardian.io/owned")
    return json.loads(raw) if raw else {}


def test_cordon_and_uncordon(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        cordon = KubeCordon(CordonParams(kubeconfig=kc, node="node-a"))
        plan = cordon.plan(ctx())
        assert [s.change for s in plan.steps] == ["set cordon (claimed by rule r)"]
        out = cordon.apply(plan, ctx())
        assert out.ok and out.verified
        assert _node(store)["spec"]["unschedulable"] is True
        assert list(_owned(store)) == ["cordon"] and list(_owned(store)["cordon"]) == ["r"]
        un = KubeUncordon(CordonParams(kubeconfig=kc, node="node-a"))
        plan = un.plan(ctx("resolved"))
        assert [s.change for s in plan.steps] == ["remove cordon (guardian's, rule r)"]
        assert un.apply(plan, ctx("resolved")).verified
        assert _node(store)["spec"]["unschedulable"] is False
        assert "guardian.io/owned" not in _node(store)["metadata"]["annotations"]


def test_a_cordon_guardian_did_not_make_is_never_undone(tmp_path: Path) -> None:
    """draino #17 / kured #63: a node a person cordoned stays cordoned when the rule that
    would have cordoned it resolves. Before: kube.uncordon patched any cordon away."""
    with serve() as (url, store):
        cluster(store)
        _node(store)["spec"]["unschedulable"] = True  # `kubectl cordon node-a` by a person
        kc = str(kubeconfig(tmp_path, url))
        cordon = KubeCordon(CordonParams(kubeconfig=kc, node="node-a"))
        plan = cordon.plan(ctx())
        assert not plan.steps and "not guardian's" in plan.note
        assert cordon.apply(plan, ctx()).verified
        assert _owned(store) == {}  # no claim on someone else's cordon
        un = KubeUncordon(CordonParams(kubeconfig=kc, node="node-a"))
        plan = un.plan(ctx("resolved"))
        assert not plan.steps and "not guardian's" in plan.note
        out = un.apply(plan, ctx("resolved"))
        assert out.ok and out.data["changed"] is False
        assert _node(store)["spec"]["unschedulable"] is True
        # nor by the operator's `guardian act kube.uncordon`
        un.apply(un.plan(ctx("manual")), ctx("manual"))
        assert _node(store)["spec"]["unschedulable"] is True


def test_a_cordon_two_rules_claim_lasts_until_both_resolve(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        cordon = KubeCordon(CordonParams(kubeconfig=kc, node="node-a"))
        for rule in ("a", "b"):
            c = ActionContext(rule, Snapshot(0.0, {}), Host(), dry_run=False)
            assert cordon.apply(cordon.plan(c), c).verified
        assert sorted(_owned(store)["cordon"]) == ["a", "b"]
        # kube.cordon with on = "both": its resolve releases the rule's own claim
        a = ActionContext("a", Snapshot(0.0, {}), Host(), dry_run=False, kind="resolved")
        plan = cordon.plan(a)
        assert [s.change for s in plan.steps] == ["drop rule a's claim; cordon stays for "
                                                  "rule b"]
        assert cordon.apply(plan, a).verified
        assert _node(store)["spec"]["unschedulable"] is True
        b = ActionContext("b", Snapshot(0.0, {}), Host(), dry_run=False, kind="resolved")
        assert cordon.apply(cordon.plan(b), b).verified
        assert _node(store)["spec"]["unschedulable"] is False and _owned(store) == {}


def test_a_cordon_racing_a_persons_edit_is_recomputed(tmp_path: Path) -> None:
    """The patch carries the read's resourceVersion: a person's cordon between guardian's
    read and its patch makes the stand-in answer 409 (as the API server does), and the
    retry sees a cordon that is not guardian's: no claim is made on it."""
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        cordon = KubeCordon(CordonParams(kubeconfig=kc, node="node-a"))
        plan = cordon.plan(ctx())
        client = cordon.client()
        real_get = client.get
        raced: list[int] = []

        def get(*args: Any, **kw: Any) -> Any:
            got = real_get(*args, **kw)
            if not raced:
                raced.append(1)
                with store.lock:
                    node = _node(store)
                    node["spec"]["unschedulable"] = True
                    store.put("nodes", node)
            return got

        client.get = get  # type: ignore[method-assign]
        out = cordon.apply(plan, ctx())
        assert out.ok and out.verified and out.data["changed"] is False
        assert ("PATCH", "/api/v1/nodes/node-a") in store.requests
        assert _owned(store) == {} and _node(store)["spec"]["unschedulable"] is True


def test_cordon_on_resolve_through_the_engine_leaves_a_human_cordon(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        rules = load_text(f'''version = 1
[[rule]]
name = "dying-memcgs"
summary = "s"
when = "memcg.dying > 10"
fleet = false
  [[rule.action]]
  use = "kube.cordon"
  on = "both"
  kubeconfig = "{kc}"
  node = "node-a"
''')
        _node(store)["spec"]["unschedulable"] = True  # a person cordoned it first
        engine = Engine(rules)
        audit = tmp_path / "audit.jsonl"
        ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
        [done] = ex.run(engine.evaluate(Snapshot(0.0, {"memcg.dying": 50.0})), Snapshot(0.0))
        assert done.result == "ok" and "not guardian's" in done.plan.note  # type: ignore
        [done] = ex.run(engine.evaluate(Snapshot(15.0, {"memcg.dying": 1.0})), Snapshot(15.0))
        assert done.decision.kind == "resolved" and done.result == "ok"
        assert _node(store)["spec"]["unschedulable"] is True and _owned(store) == {}
        entries = [json.loads(line) for line in audit.read_text().splitlines()]
        outcomes = [e["outcome"] for e in entries if e["type"] == "outcome"]
        assert [o["data"]["changed"] for o in outcomes] == [False, False]
        assert "not guardian's" in outcomes[1]["detail"]


def test_evict_plans_exact_pods_and_honours_the_pdb(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        act = KubeEvict(EvictParams(kubeconfig=kc, node="node-a", backoff=0.05, attempts=3))
        plan = act.plan(ctx())
        # lowest priority first; never the DaemonSet pod, the mirror pod, kube-system
        assert plan.data["pods"] == [["default", "batch-1"], ["default", "web-1"],
                                     ["default", "db-1"]]
        assert plan.skipped == ["pod kube-system/coredns-1: namespace kube-system is "
                                "protected"]
        waits: list[float] = []
        real_sleep = time.sleep

        def sleep(seconds: float) -> None:  # the action's waits, as it asks for them
            if threading.current_thread() is threading.main_thread():
                waits.append(seconds)
            real_sleep(seconds)

        monkeypatch.setattr(time, "sleep", sleep)
        out = act.apply(plan, ctx())
        monkeypatch.undo()
        assert not out.ok and out.data["evicted"] == ["default/batch-1", "default/web-1"]
        assert out.data["blocked"] == ["default/db-1"] and "429" in out.error
        assert waits == [0.05, 0.1]  # backed off between the 429s, doubling
        posts = [p for m, p in store.requests if p.endswith("/db-1/eviction")]
        assert len(posts) == 3
        assert ("default", "db-1") in store.objects["pods"]


def test_evict_selection_by_label_and_qos(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        plan = KubeEvict(EvictParams(kubeconfig=kc, node="node-a", selector={"app": "web"})
                         ).plan(ctx())
        assert plan.data["pods"] == [["default", "web-1"]]
        plan = KubeEvict(EvictParams(kubeconfig=kc, node="node-a", qos=["Guaranteed"])
                         ).plan(ctx())
        assert plan.data["pods"] == [] and "nothing to do" in plan.note


def test_condition_set_while_firing_and_cleared_on_resolve(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        rules = load_text(f'''version = 1
[[rule]]
name = "dying-memcgs"
summary = "s"
when = "memcg.dying > 10"
  [[rule.action]]
  use = "kube.condition"
  on = "both"
  type = "DyingMemcgs"
  reason = "TooManyDyingMemcgs"
  kubeconfig = "{kc}"
  node = "node-a"
''')
        engine = Engine(rules)
        ex = Executor(Host(), dry_run=False)
        for t, v in ((0.0, 50.0), (15.0, 1.0)):
            snap = Snapshot(t, {"memcg.dying": v})
            results = ex.run(engine.evaluate(snap), snap)
            assert [r.outcome.ok for r in results if r.outcome] == [True]
            conds = {c["type"]: c for c in
                     store.objects["nodes"][("", "node-a")]["status"]["conditions"]}
            assert conds["Ready"]["status"] == "True"  # the others are kept
            want = ("True", "TooManyDyingMemcgs") if v > 10 else \
                ("False", "TooManyDyingMemcgsResolved")
            assert (conds["DyingMemcgs"]["status"], conds["DyingMemcgs"]["reason"]) == want


def test_a_resolved_condition_takes_npds_default_reason_and_message() -> None:
    """node-problem-detector sets a condition back to its default reason and message
    (custom_plugin_monitor.go generateStatus, scenario 1); resolved_reason says which."""
    act = KubeCondition(ConditionParams(type="NTPProblem", reason="NTPIsDown",
                                        resolved_reason="NTPIsUp",
                                        resolved_message="ntp service is up", node="n"))
    ctx = ActionContext(rule="r", snapshot=Snapshot(0.0), host=Host(), dry_run=True,
                        kind="resolved")
    assert act.plan(ctx).data["condition"] == {
        "type": "NTPProblem", "status": "False", "reason": "NTPIsUp",
        "message": "ntp service is up"}
    ctx.kind = "firing"
    assert act.plan(ctx).data["condition"]["reason"] == "NTPIsDown"


def test_event_about_the_node(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        act = KubeEvent(EventParams(kubeconfig=str(kubeconfig(tmp_path, url)), node="node-a"))
        out = act.apply(act.plan(ctx()), ctx())
        assert out.ok
        [event] = store.objects["events"].values()
        assert event["involvedObject"] == {"kind": "Node", "name": "node-a",
                                           "apiVersion": "v1"}
        assert event["reason"] == "GuardianRuleFired" and event["type"] == "Warning"


def test_api_down_slow_or_5xx_means_no_action_and_a_reported_failure(tmp_path: Path) -> None:
    with serve() as (url, store):
        cluster(store)
        kc = str(kubeconfig(tmp_path, url))
        store.fail_next = [503]
        plan = KubeCordon(CordonParams(kubeconfig=kc, node="node-a")).plan(ctx())
        assert plan.refused and "API 503" in plan.refused[0]
        store.delay = 2.0  # had it waited for the answer, the plan would have been made
        slow = KubeCordon(CordonParams(kubeconfig=kc, node="node-a", timeout=0.5))
        plan = slow.plan(ctx())
        assert plan.refused and "API unreachable" in plan.refused[0]
        store.delay = 0.0
        assert not store.objects["nodes"][("", "node-a")]["spec"].get("unschedulable")
    down = KubeCordon(CordonParams(kubeconfig=kc, node="node-a"))  # server gone
    out = down.apply(down.plan(ctx()), ctx())
    assert not out.ok and "API unreachable" in out.error


def test_the_token_never_reaches_the_audit_log(tmp_path: Path) -> None:
    from guardian.core.audit import AuditLog
    with serve() as (url, store):
        cluster(store)
        kc = kubeconfig(tmp_path, url)
        rules = load_text(f'''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 10"
fleet = false
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "node-a"
''')
        ex = Executor(Host(), dry_run=False, audit=AuditLog(tmp_path / "a.jsonl"))
        snap = Snapshot(0.0, {"memcg.dying": 50.0})
        ex.run(Engine(rules).evaluate(snap), snap)
    text = (tmp_path / "a.jsonl").read_text()
    assert "not-a-real-token" not in text and json.loads(text.splitlines()[-1])["outcome"]["ok"]


def test_in_cluster_service_account_over_tls(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod's credentials (token, ca.crt, namespace) and KUBERNETES_SERVICE_HOST/PORT,
    against the stand-in speaking HTTPS with a certificate made for the test."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("in-cluster-token")
    (sa / "namespace").write_text("kube-system")
    (sa / "ca.crt").write_bytes(cert.read_bytes())
    with serve(tls=(str(cert), str(key))) as (url, store):
        cluster(store)
        port = url.rsplit(":", 1)[1]
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
        monkeypatch.setenv("NODE_NAME", "node-a")  # the downward API
        act = KubeCordon(CordonParams(service_account=str(sa)))
        out = act.apply(act.plan(ctx()), ctx())
        assert out.ok and out.verified, out
        assert store.objects["nodes"][("", "node-a")]["spec"]["unschedulable"] is True
        assert set(store.authorization) == {"Bearer in-cluster-token"}


def test_the_service_keeps_ticking_when_the_api_fails(tmp_path: Path) -> None:
    """guardian run, live, with a kube rule, against a stand-in answering 503: the plan
    cannot read the node, so the executor refuses it (never applied), in the audit log and
    the metrics, and the loop goes on."""
    import socket
    import urllib.request

    from tests.support.daemon import daemon

    with serve() as (url, store):
        cluster(store)
        store.fail_next = [503] * 1000
        kc = kubeconfig(tmp_path, url)
        rules = tmp_path / "rules"
        rules.mkdir()
        (rules / "k.toml").write_text(f'''version = 1
[[rule]]
name = "k"
summary = "s"
when = "processes.total > 0"
cooldown = "1h"
fleet = false
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "node-a"
''')
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with daemon(tmp_path, "--metrics-port", str(port), rules=rules) as (proc, notify):
            notify.wait_for("STATUS", contains="last action: kube.cordon for k: refused")
            first = notify.messages[-1]
            notify.wait_for("WATCHDOG", timeout=3)  # still ticking
            assert proc.poll() is None and first
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                             timeout=5).read().decode()
        assert 'guardian_actions_total{action="kube.cordon",outcome="refused",rule="k"} 1.0' \
            in metrics
        audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text()
                 .splitlines()]
        refused = next(a for a in audit if a["type"] == "refused")
        assert "API 503" in refused["reason"] and not any(a["type"] == "outcome" for a in audit)
        assert not store.objects["nodes"][("", "node-a")]["spec"].get("unschedulable")


def test_condition_transition_time_changes_only_with_the_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every retry rewrote lastTransitionTime, so Node Health Check's and EKS node
    repair's delays (timed from it) never ran out. NodeCondition's contract (k8s.io/api
    core/v1 types.go): lastTransitionTime is the last time the condition went from one
    status to another; lastHeartbeatTime is the last time it was probed."""
    from guardian.kube import actions as kube_actions
    from guardian.kube.actions import ConditionParams, KubeCondition

    times = iter(["2026-12-04T01:00:00Z", "2026-12-04T01:05:00Z", "2026-12-04T01:10:00Z",
                  "2026-12-04T01:15:00Z"])
    monkeypatch.setattr(kube_actions, "_now", lambda: next(times))
    with serve() as (url, store):
        cluster(store)
        act = KubeCondition(ConditionParams(kubeconfig=str(kubeconfig(tmp_path, url)),
                                            node="node-a", type="DyingMemcgs"))

        def run(kind: DecisionKind) -> dict[str, str]:
            assert act.apply(act.plan(ctx(kind)), ctx(kind)).ok
            conds = store.objects["nodes"][("", "node-a")]["status"]["conditions"]
            return next(c for c in conds if c["type"] == "DyingMemcgs")

        first = run("firing")
        assert first["lastTransitionTime"] == "2026-12-04T01:00:00Z"
        retry = run("retry")
        assert (retry["lastTransitionTime"], retry["lastHeartbeatTime"]) == \
            ("2026-12-04T01:00:00Z", "2026-12-04T01:05:00Z")
        escalated = run("escalated")  # still True: the reason says a human is needed
        assert escalated["reason"] == "GuardianRuleFiringNeedsHuman"
        assert escalated["lastTransitionTime"] == "2026-12-04T01:00:00Z"
        resolved = run("resolved")
        assert (resolved["status"], resolved["lastTransitionTime"]) == \
            ("False", "2026-12-04T01:15:00Z")


def test_holds_from_the_configmap_and_this_nodes_annotation(tmp_path: Path) -> None:
    from guardian.kube.holds import KubeHolds, KubeHoldsParams

    # fetch(): one whole read now (read(), the loop's, answers with the last read while a
    # new one is under way: tests/system/test_kube_holds_hostile.py)
    with serve() as (url, store):
        cluster(store)
        store.add_node("node-b")
        kc = str(kubeconfig(tmp_path, url))
        a = KubeHolds(KubeHoldsParams(kubeconfig=kc, node="node-a"))
        b = KubeHolds(KubeHoldsParams(kubeconfig=kc, node="node-b"))
        assert a.fetch() == []  # no ConfigMap, no annotation: no holds
        node = store.objects["nodes"][("", "node-a")]
        node["metadata"]["annotations"] = {"guardian.io/hold": json.dumps(
            {"rule": "nic-stall", "until": "2026-12-05T06:00:00Z", "reason": "NIC swap",
             "author": "dc-ops"})}
        store.put("configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "guardian-holds", "namespace": "kube-system"},
            "data": {"holds.toml": '[[hold]]\nlabels = { team = "net" }\n'
                                   'until = 2026-12-05T06:00:00Z\nreason = "r"\n'
                                   'author = "sre"\n'}})
        [fleet_wide, mine] = a.fetch()
        assert fleet_wide.source == "configmap kube-system/guardian-holds:holds.toml"
        assert (mine.rule, mine.author) == ("nic-stall", "dc-ops")
        assert [h.author for h in b.fetch()] == ["sre"]  # the annotation is node-a's only
        assert a.unknown() == []
        store.fail_next = [503, 503]  # the API fails: the holds last read stay in force
        assert [h.author for h in a.fetch()] == ["sre", "dc-ops"]
        # and what was not read is said (`guardian holds`: unknown, never "no holds")
        assert [u.split(": API")[0] for u in a.unknown()] == [
            "configmap kube-system/guardian-holds", "node node-a annotation guardian.io/hold"]
        cm = store.objects["configmaps"][("kube-system", "guardian-holds")]
        cm["data"]["holds.toml"] = "[[hold]\nbroken"  # a typo must not lift the pause
        assert [h.author for h in a.fetch()] == ["guardian", "sre", "dc-ops"]
        # review (ops) 1c: one bad entry beside a good one dropped the bad one's hold;
        # now it holds every rule (until fixed) and the last good holds stay
        node["metadata"]["annotations"]["guardian.io/hold"] = json.dumps([
            {"rule": "other", "until": "2026-12-05T06:00:00Z", "reason": "r",
             "author": "x"}, {"rule": "nic-stall", "reason": "typo", "author": "dc-ops"}])
        cm["data"]["holds.toml"] = ""
        held = a.fetch()
        assert [(h.rule, h.author) for h in held] == \
            [("other", "x"), ("*", "guardian"), ("nic-stall", "dc-ops")]
        assert "until: Field required" in held[1].reason and held[1].broken


def test_holds_without_credentials_report_and_keep_the_last_ones(tmp_path: Path) -> None:
    """No kubeconfig, no service account: the service still starts; each tick says why
    the fleet-wide holds cannot be read, and none are invented or dropped."""
    from guardian.kube.holds import KubeHolds, KubeHoldsParams

    holds = KubeHolds(KubeHoldsParams(kubeconfig=str(tmp_path / "missing"), node="n"))
    assert holds.read() == []
    assert any("no credentials reach the Kubernetes API" in said for said in holds.said)
    assert [u.split(": no credentials")[0] for u in holds.unknown()] == [
        "configmap kube-system/guardian-holds", "node n annotation guardian.io/hold"]
