"""The Kubernetes stand-in's fidelity, checked with kubectl (a real client no one here
wrote): list nodes and pods, cordon, uncordon, and drain through the Eviction API,
including a drain that a PodDisruptionBudget blocks with 429."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkout import REPO
from tests.support.kube_standin import kubeconfig, kubectl, serve


def test_kubectl_against_the_standin(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    with serve() as (url, store):
        store.add_node("node-a")
        store.add_node("node-b")
        store.add_daemonset("kube-system", "guardian")
        store.add_pod("kube-system", "guardian-x", "node-a", owner=("DaemonSet", "guardian"))
        store.add_pod("default", "web-1", "node-a", labels={"app": "web"},
                      owner=("ReplicaSet", "web-6f7d"))
        store.add_pod("default", "web-2", "node-b", labels={"app": "web"},
                      owner=("ReplicaSet", "web-6f7d"))
        store.add_pod("default", "db-1", "node-a", labels={"app": "db"},
                      owner=("StatefulSet", "db"))
        store.add_pdb("default", "db", {"app": "db"}, min_available=1)
        kc = kubeconfig(tmp_path, url)

        out = kubectl(kc, "get", "nodes", "-o", "json")
        assert out.returncode == 0, out.stderr
        assert [n["metadata"]["name"] for n in json.loads(out.stdout)["items"]] == [
            "node-a", "node-b"]
        out = kubectl(kc, "get", "pods", "-A", "-o", "json")
        assert out.returncode == 0, out.stderr
        assert len(json.loads(out.stdout)["items"]) == 4

        out = kubectl(kc, "cordon", "node-b")
        assert out.returncode == 0, out.stderr
        assert store.objects["nodes"][("", "node-b")]["spec"]["unschedulable"] is True
        out = kubectl(kc, "uncordon", "node-b")
        assert out.returncode == 0, out.stderr
        assert not store.objects["nodes"][("", "node-b")]["spec"].get("unschedulable")

        # db-1 is protected by its PDB (minAvailable 1 of 1): the drain is refused with 429
        out = kubectl(kc, "drain", "node-a", "--ignore-daemonsets", "--timeout=4s")
        assert out.returncode != 0
        assert "disruption budget" in out.stderr, out.stderr
        assert ("default", "web-1") not in store.objects["pods"]  # evicted
        assert ("default", "db-1") in store.objects["pods"]  # protected
        assert ("kube-system", "guardian-x") in store.objects["pods"]  # DaemonSet pod kept
        evictions = [p for m, p in store.requests if m == "POST" and p.endswith("/eviction")]
        assert "/api/v1/namespaces/default/pods/web-1/eviction" in evictions

        # without the PDB the drain completes
        del store.objects["poddisruptionbudgets"][("default", "db")]
        out = kubectl(kc, "drain", "node-a", "--ignore-daemonsets", "--timeout=20s")
        assert out.returncode == 0, out.stderr
        assert ("default", "db-1") not in store.objects["pods"]
        assert store.objects["nodes"][("", "node-a")]["spec"]["unschedulable"] is True


def test_deploy_manifests_parse_and_grant_least_privilege(tmp_path: Path) -> None:
    """kubectl reads the manifests (client-side; the stand-in serves only discovery)."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    deploy = REPO / "deploy" / "kubernetes"
    with serve() as (url, _):
        out = kubectl(kubeconfig(tmp_path, url), "create", "--dry-run=client",
                      "--validate=false", "-o", "json", "-k", str(deploy))
    assert out.returncode == 0, out.stderr
    items: list[dict[str, Any]] = []
    pos, dec = 0, json.JSONDecoder()
    while pos < len(out.stdout.rstrip()):  # one JSON document per object, back to back
        doc, end = dec.raw_decode(out.stdout, pos)
        items.extend(doc["items"] if doc.get("kind") == "List" else [doc])
        pos = end + len(out.stdout[end:]) - len(out.stdout[end:].lstrip())
    by_kind = {(i["kind"], i["metadata"]["name"]): i for i in items}
    ds = by_kind[("DaemonSet", "guardian")]["spec"]["template"]["spec"]
    assert ds["hostPID"] is True and ds["serviceAccountName"] == "guardian"
    env = ds["containers"][0]["env"][0]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath":
                                                                   "spec.nodeName"}}}
    rules = by_kind[("ClusterRole", "guardian")]["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert ("pods/eviction", "create") in granted
    assert not any(v in ("delete", "deletecollection", "*") for _, v in granted)
    assert not any(r == "*" for r, _ in granted)
    fleet = by_kind[("Role", "guardian-fleet")]
    assert fleet["metadata"]["namespace"] == "guardian"  # its own namespace only
    assert fleet["rules"][0]["resources"] == ["leases"]
