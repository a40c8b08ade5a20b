"""The DaemonSet a cluster admin applies (deploy/kubernetes/): every manifest valid against
Kubernetes' own schemas (kubernetes-validate, PyPI), seeing the host (host network and
PID namespaces), scrapeable and probed, and RBAC no wider than the node, with the
admission policy's CEL evaluated by a CEL library (cel-python) on the requests the API
server would hand it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.checkout import REPO

DEPLOY = REPO / "deploy" / "kubernetes"
K8S = "1.30.0"  # ValidatingAdmissionPolicy is v1 from 1.30


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _one(kind: str) -> dict[str, Any]:
    return next(d for p in sorted(DEPLOY.glob("*.yaml")) for d in _docs(p.name)
                if d["kind"] == kind)


def _validate(doc: dict[str, Any]) -> list[str]:
    kv = pytest.importorskip("kubernetes_validate")
    try:
        kv.validate(doc, K8S, strict=True)
    except kv.ValidationError as exc:
        return [str(exc)]
    return []


def _unprivileged(doc: dict[str, Any]) -> dict[str, Any]:
    """kubernetes-unprivileged/kustomization.yaml's JSON patches (``replace`` only) of
    ``doc``, applied as kustomize would."""
    overlay = REPO / "deploy" / "kubernetes-unprivileged" / "kustomization.yaml"
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for patch in yaml.safe_load(overlay.read_text())["patches"]:
        target = patch["target"]
        if (target["kind"], target["name"]) != (doc["kind"], doc["metadata"]["name"]):
            continue
        ops = patch["patch"] if "patch" in patch else (overlay.parent / patch["path"]
                                                       ).read_text()
        for op in yaml.safe_load(ops):
            assert op["op"] == "replace"
            *path, last = op["path"].strip("/").split("/")
            node: Any = out
            for part in path:
                node = node[int(part)] if part.isdigit() else node[part]
            node[last] = op["value"]
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in DEPLOY.glob("*.yaml")
                                        if p.name != "kustomization.yaml"))
def test_every_manifest_is_valid_kubernetes(name: str) -> None:
    for doc in _docs(name):
        assert _validate(doc) == [], (name, doc["kind"])


def test_the_unprivileged_variant_is_valid_and_unprivileged() -> None:
    ds = _unprivileged(_one("DaemonSet"))
    assert _validate(ds) == []
    ctx = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert ctx["privileged"] is False and ctx["capabilities"]["add"]
    # nsenter into PID 1 (the systemctl fallback) opens /proc/1/ns/mnt: a ptrace check
    assert {"SYS_ADMIN", "SYS_PTRACE"} <= set(ctx["capabilities"]["add"])


def test_the_unprivileged_rules_act_only_as_an_unprivileged_pod_can() -> None:
    """Before: its ConfigMap shipped memcg.release, which fails without a writable
    /proc/sys (only a privileged container has one). The rules load and check."""
    from guardian.policy.loader import load_rules

    [rules] = [d for d in _docs("rules.yaml") if d["metadata"]["name"] == "guardian-rules"]
    data = _unprivileged(rules)["data"]
    with tempfile.TemporaryDirectory() as d:
        for key, text in data.items():
            (Path(d) / key).write_text(text)
        loaded = load_rules([d]).rules
    assert loaded
    assert not {a.use for r in loaded for a in r.actions} & {"memcg.release", "irq.move"}


def _kustomize(path: Path) -> list[dict[str, Any]]:
    import shutil
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_the_monitoring_component_adds_a_podmonitor_of_the_pods(tmp_path: Path) -> None:
    """Before: podmonitor.yaml lay beside the kustomization, in no kustomization. Now an
    operator's overlay turns it on with `components:`; the PodMonitor selects the
    DaemonSet's pods in its namespace and scrapes their named metrics port."""
    site = tmp_path / "site"
    site.mkdir()
    rel = os.path.relpath(DEPLOY, site)  # kustomize takes no absolute paths
    (site / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel], "components": [f"{rel}/components/monitoring"]}))
    docs = _kustomize(site)
    for doc in docs:
        if doc["kind"] != "PodMonitor":  # a CRD's kind: no schema in kubernetes-validate
            assert _validate(doc) == [], doc["kind"]
    [pm] = [d for d in docs if d["kind"] == "PodMonitor"]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert pm["spec"]["selector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"]
    ports = ds["spec"]["template"]["spec"]["containers"][0]["ports"]
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in ports} and endpoint["path"] == "/metrics"
    # opt-in: the base alone has none (its cluster may not have the operator's CRDs)
    assert "PodMonitor" not in {d["kind"] for d in _kustomize(DEPLOY)}


def test_the_pod_sees_the_host_and_is_probed() -> None:
    """Before: no hostNetwork (the NIC and softnet rules read the pod's namespace), metrics
    on the pod's loopback, no probe, and Windows nodes admitted."""
    spec = _one("DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    [c] = spec["containers"]
    assert "--metrics-address=$(NODE_IP)" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    probe = c["livenessProbe"]["httpGet"]
    assert probe == {"path": "/healthz", "port": "metrics"}
    # readiness is its own question: the rules loaded and evaluated (before: no probe)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/sys", "/dev/kmsg", "/run/systemd"} <= mounts


def test_leases_only_in_guardians_namespace_and_only_its_slots() -> None:
    """Before: get/create/update on any Lease in kube-system (leader locks included)."""
    from guardian.kube.fleet import FleetParams

    config = next(d for d in _docs("configmap.yaml")
                  if d["metadata"]["name"] == "guardian-config")["data"]["guardian.toml"]
    from guardian.core.diagnostics import parse_toml
    fleet = FleetParams.model_validate(parse_toml("guardian.toml", config)["fleet"])
    ns = _one("DaemonSet")["metadata"]["namespace"]
    assert fleet.namespace == ns != "kube-system"
    roles = [d for d in _docs("rbac.yaml") if d["kind"] == "Role"]
    assert all(r["metadata"]["namespace"] == ns for r in roles)
    lease_rules = [r for role in roles for r in role["rules"] if "leases" in r["resources"]]
    named = {v for r in lease_rules if "resourceNames" in r for v in r["verbs"]}
    assert named == {"get", "update"}
    [by_name] = [r for r in lease_rules if "resourceNames" in r]
    assert by_name["resourceNames"] == [f"{fleet.name}-slot-{i}"
                                        for i in range(fleet.max_nodes or 0)]
    unnamed = [r for r in lease_rules if "resourceNames" not in r]
    # RBAC cannot name a create; the breaker's latches are listed (by label)
    assert [r["verbs"] for r in unnamed] == [["create"], ["list"]]
    cluster = [d for d in _docs("rbac.yaml") if d["kind"] == "ClusterRole"]
    assert not any("leases" in r["resources"] for c in cluster for r in c["rules"])


# -- the admission policy's CEL, evaluated ------------------------------------------------

def _request(username: str, node_name: str | None, target: str) -> dict[str, Any]:
    extra = {"authentication.kubernetes.io/node-name": [node_name]} if node_name else {}
    return {"request": {"userInfo": {"username": username, "extra": extra}},
            "object": {"metadata": {"name": target}}}


def _cel(expression: str, activation: dict[str, Any]) -> bool:
    celpy = pytest.importorskip("celpy")
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return bool(program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()}))


SA = "system:serviceaccount:guardian:guardian"


@pytest.mark.parametrize(("username", "node", "target", "matched", "allowed"), [
    (SA, "node-a", "node-a", True, True),         # its own node
    (SA, "node-a", "node-b", True, False),        # another node: denied
    (SA, None, "node-a", True, False),            # a token without the node: denied
    ("system:node:node-b", "node-b", "node-a", False, True),  # not guardian: not matched
])
def test_the_admission_policy_holds_guardian_to_its_node(
        username: str, node: str | None, target: str, matched: bool, allowed: bool) -> None:
    [policy, binding] = _docs("admission.yaml")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    sa = _one("ServiceAccount")["metadata"]
    assert f"system:serviceaccount:{sa['namespace']}:{sa['name']}" == SA
    activation = _request(username, node, target)
    [condition] = spec["matchConditions"]
    assert _cel(condition["expression"], activation) is matched
    if matched:
        [validation] = spec["validations"]
        assert _cel(validation["expression"], activation) is allowed


@pytest.mark.parametrize("overlay", ["kubernetes", "kubernetes-unprivileged"])
def test_the_kustomizations_render_valid_manifests(overlay: str) -> None:
    """What `kubectl apply -k` would send: rendered by kubectl's own kustomize, every
    object valid, the image renamed, the unprivileged overlay unprivileged."""
    import shutil
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / overlay)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert "ValidatingAdmissionPolicy" in kinds and "DaemonSet" in kinds
    for doc in docs:
        assert _validate(doc) == [], doc["kind"]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    from guardian.core.version import __version__
    assert c["image"].endswith(f"/node-guardian:{__version__}")
    assert c["securityContext"]["privileged"] is (overlay == "kubernetes")
    # every shipped rule (before: 13 of 55), in the ConfigMap the pod mounts as its rules
    from guardian.policy.loader import rule_files
    [rules] = [d for d in docs if d["kind"] == "ConfigMap"
               and d["metadata"]["name"] == "guardian-rules"]
    assert {"name": "rules", "configMap": {"name": "guardian-rules"}} in \
        ds["spec"]["template"]["spec"]["volumes"]
    shipped = {m for p in rule_files([REPO / "rules"])
               for m in re.findall(r'(?m)^name = "([^"]+)"', p.read_text())}
    rendered = {m for text in rules["data"].values()
                for m in re.findall(r'(?m)^name = "([^"]+)"', text)}
    assert len(shipped) >= 55 and rendered == shipped


@pytest.mark.parametrize("target", ["-k=deploy/kubernetes", "-k=deploy/kubernetes-unprivileged",
                                    "-f=deploy/kubernetes/components/monitoring/podmonitor.yaml"])
def test_kubectl_apply_dry_run_accepts_the_manifests(tmp_path: Path, target: str) -> None:
    """`kubectl apply --dry-run=client`, kubectl's own check of what it would send, against
    the API stand-in (tests/support/kube_standin.py) for discovery: every kind maps, every object
    would be created."""
    import shutil

    from tests.support.kube_standin import kubeconfig, kubectl, serve
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    with serve() as (url, _):
        kc = kubeconfig(tmp_path, url)
        flag, path = target.split("=", 1)
        out = kubectl(kc, "apply", "--dry-run=client", "--validate=false", flag,
                      str(REPO / path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines and all(line.endswith("created (dry run)") for line in lines), out.stdout


@pytest.mark.parametrize("overlay", ["kubernetes", "kubernetes-unprivileged"])
def test_node_reboot_looks_for_the_sentinel_in_the_nodes_run(
        overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """kured's sentinel is the node's /var/run/reboot-required (/run/reboot-required):
    the DaemonSet says where node.reboot finds it in the pod (GUARDIAN_REBOOT_SENTINEL),
    and that path lies in a read-only hostPath mount of the node's /run. Before: no such
    mount nor setting, node.reboot looked in the pod's own /run and never rebooted."""
    import shutil

    from guardian.actions.node import SENTINEL_ENV, RebootParams

    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / overlay)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    [ds] = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    [c] = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert SENTINEL_ENV in env, "the DaemonSet does not say where the node's sentinel is"
    monkeypatch.setenv(SENTINEL_ENV, env[SENTINEL_ENV])
    sentinel = RebootParams().sentinel_path()  # what a rule that sets none looks for
    assert sentinel == env[SENTINEL_ENV]
    mounts = [m for m in c["volumeMounts"]
              if sentinel.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{sentinel} is in no mount: the pod's own filesystem"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    assert mount.get("readOnly") is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    on_node = volume["hostPath"]["path"].rstrip("/") + sentinel[len(mount["mountPath"]):]
    assert on_node == "/run/reboot-required"  # kured's /var/run/reboot-required


def _gpu_site(tmp_path: Path, base: str) -> Path:
    """An operator's overlay: ``base`` (deploy/<base>) with components/gpu."""
    site = tmp_path / base
    site.mkdir()
    rel = os.path.relpath(REPO / "deploy", site)  # kustomize takes no absolute paths
    (site / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{rel}/{base}"],
        "components": [f"{rel}/kubernetes/components/gpu"]}))
    return site


def _without_gpu_setup(pod: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(pod))
    out.pop("runtimeClassName", None)
    out.pop("affinity", None)
    [c] = out["containers"]
    c["env"] = [e for e in c["env"] if not e["name"].startswith("NVIDIA_")]
    return out


@pytest.mark.parametrize("base", ["kubernetes", "kubernetes-unprivileged"])
def test_the_gpu_component_gives_gpu_nodes_a_daemonset_with_nvml(
        tmp_path: Path, base: str) -> None:
    """Before: one DaemonSet on every node, its image without the NVIDIA driver, so on a
    GPU node the gpu source could not load libnvidia-ml.so.1 and gpu.reset found no
    nvidia-smi. With components/gpu: guardian-gpu on nodes labelled
    nvidia.com/gpu.present=true (the GPU Operator's label), through the NVIDIA runtime
    (runtimeClassName nvidia) with NVIDIA_VISIBLE_DEVICES=all and
    NVIDIA_DRIVER_CAPABILITIES=utility (libnvidia-container's utility_libs and
    utility_bins: libnvidia-ml.so and nvidia-smi), requesting no nvidia.com/gpu; guardian
    kept off those nodes (a node's runtime without the class would not start it); the
    rest of the pod the same as guardian's, the unprivileged overlay's included."""
    docs = _kustomize(_gpu_site(tmp_path, base))
    for doc in docs:
        assert _validate(doc) == [], doc["kind"]
    ds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}
    assert set(ds) == {"guardian", "guardian-gpu"}
    plain, gpu = (ds[n]["spec"]["template"]["spec"] for n in ("guardian", "guardian-gpu"))
    assert gpu["runtimeClassName"] == "nvidia" and "runtimeClassName" not in plain
    key = "nvidia.com/gpu.present"
    for pod, op in ((gpu, "In"), (plain, "NotIn")):
        [term] = pod["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchExpressions"] == [{"key": key, "operator": op, "values": ["true"]}]
    [c] = gpu["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert not any("nvidia.com" in r for part in c["resources"].values() for r in part)
    assert _without_gpu_setup(gpu) == _without_gpu_setup(plain)
    # its own pods only; the PodMonitor's selector (components/monitoring) takes both
    gpu_ds = ds["guardian-gpu"]["spec"]
    labels = gpu_ds["template"]["metadata"]["labels"]
    assert gpu_ds["selector"]["matchLabels"].items() <= labels.items()
    assert gpu_ds["selector"]["matchLabels"] != ds["guardian"]["spec"]["selector"]["matchLabels"]
    [pm] = _docs("components/monitoring/podmonitor.yaml")
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # the base alone is unchanged: one DaemonSet on every Linux node
    assert [d["metadata"]["name"] for d in _kustomize(REPO / "deploy" / base)
            if d["kind"] == "DaemonSet"] == ["guardian"]


def test_kubectl_apply_dry_run_accepts_the_gpu_component(tmp_path: Path) -> None:
    """As test_kubectl_apply_dry_run_accepts_the_manifests, for an overlay with
    components/gpu: both DaemonSets would be created."""
    from tests.support.kube_standin import kubeconfig, kubectl, serve
    site = _gpu_site(tmp_path, "kubernetes")
    _kustomize(site)  # skips where kubectl is not installed
    with serve() as (url, _):
        out = kubectl(kubeconfig(tmp_path, url), "apply", "--dry-run=client",
                      "--validate=false", "-k", str(site))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(line.endswith("created (dry run)") for line in lines), out.stdout
    assert {"daemonset.apps/guardian created (dry run)",
            "daemonset.apps/guardian-gpu created (dry run)"} <= set(lines)
