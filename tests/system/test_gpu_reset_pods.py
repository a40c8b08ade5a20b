"""gpu.reset's evict_pods against the Kubernetes API stand-in (tests/support/kube_standin.py:
pods, Evictions and PodDisruptionBudget 429s as the API reference gives them; see
tests/system/test_kube_drain.py) and a recorded NVML (tests/support/nvml_recorded.py over
tests/fixtures/nvml/h100x8.json, shaped from nvml.h) whose process list follows the
stand-in: a process is listed on its GPU while its pod exists. The processes live in a
made /proc (stat and cgroup as the kubelet's systemd driver names a pod's cgroup), and
nvidia-smi is a stand-in script the action's `nvidia_smi` argv names, which logs its
arguments: no GPU in this session, nothing is reset."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from guardian.actions.gpu import GpuReset, ResetParams
from guardian.core.snapshot import Snapshot, labels_of
from guardian.hostio.host import Host
from guardian.hostio.nvml import Nvml
from guardian.plugin.contract import ActionContext
from tests.support.kube_standin import Store, kubeconfig, serve
from tests.support.nvml_recorded import RecordedNvml, load
from tests.support.wait import ends

H100 = load("h100x8.json")
GPU2 = labels_of({"gpu": "2", "UUID": H100["gpus"][2]["uuid"],
                  "pci_bus_id": H100["gpus"][2]["pci_bus_id"]})


class LiveNvml(RecordedNvml):
    """The recording, with each GPU's compute processes those of `procs` (pid -> GPU
    index, pod key) whose pod the stand-in still has."""

    def __init__(self, store: Store, procs: dict[int, tuple[int, tuple[str, str] | None]]
                 ) -> None:
        super().__init__(copy.deepcopy(H100))
        self.store, self.procs = store, procs

    def _procs(self, h: int, kind: str) -> list[Any]:
        if kind != "compute":
            return []
        with self.store.lock:
            pods = set(self.store.objects.get("pods", {}))
        return [SimpleNamespace(pid=pid, usedGpuMemory=None)
                for pid, (gpu, pod) in sorted(self.procs.items())
                if gpu == h and (pod is None or pod in pods)]


def _proc(root: Path, pid: int, comm: str, cgroup: str) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 "
                            "100 0 0\n")
    (d / "cgroup").write_text(f"0::{cgroup}\n")


def _in_pod(root: Path, store: Store, pid: int, comm: str, pod: tuple[str, str]) -> None:
    """A process in the pod's container, as the kubelet's systemd driver places it."""
    uid = store.objects["pods"][pod]["metadata"]["uid"]
    _proc(root, pid, comm, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
          f"pod{uid.replace('-', '_')}.slice/cri-containerd-0123abcd.scope")


def _nvidia_smi(tmp_path: Path) -> tuple[list[str], Path]:
    log = tmp_path / "nvidia-smi.log"
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\necho \"GPU $3 was successfully "
                      "reset.\"\n")
    script.chmod(0o755)
    return [str(script)], log


def _action(tmp_path: Path, url: str, store: Store,
            procs: dict[int, tuple[int, tuple[str, str] | None]], **evict: Any
            ) -> tuple[GpuReset, ActionContext, Path]:
    argv, log = _nvidia_smi(tmp_path)
    kc = str(kubeconfig(tmp_path, url))
    action = GpuReset(ResetParams.model_validate({"nvidia_smi": argv, "evict_pods": {
        "kubeconfig": kc, "node": "node-a", "interval": 0.05, "retry_delay": 0.1,
        **evict}}))
    action.reader = lambda: Nvml(LiveNvml(store, procs))
    ctx = ActionContext("gpu-nvml-needs-reset", Snapshot(0.0), Host(tmp_path), dry_run=False)
    ctx.evidence = {"matched": {GPU2: 1.0}}
    return action, ctx, log


def _cluster(store: Store, tmp_path: Path) -> dict[int, tuple[int, tuple[str, str] | None]]:
    """train-0 holds GPU 2 (the one to reset), infer-0 GPU 0; a DaemonSet pod on the node
    holds none."""
    store.add_node("node-a")
    store.add_pod("ml", "train-0", "node-a", owner=("Job", "train"), shutdown=0.3)
    store.add_pod("ml", "infer-0", "node-a", owner=("ReplicaSet", "infer"))
    store.add_pod("kube-system", "dcgm-exporter-x", "node-a",
                  owner=("DaemonSet", "dcgm-exporter"))
    _in_pod(tmp_path, store, 4242, "python", ("ml", "train-0"))
    _in_pod(tmp_path, store, 5151, "python", ("ml", "infer-0"))
    return {4242: (2, ("ml", "train-0")), 5151: (0, ("ml", "infer-0"))}


def test_the_pods_holding_the_gpu_are_evicted_then_it_is_reset(tmp_path: Path) -> None:
    """Before: gpu.reset refused while a pod's process used the GPU, whatever it said."""
    with serve() as (url, store):
        procs = _cluster(store, tmp_path)
        action, ctx, log = _action(tmp_path, url, store, procs)
        plan = action.plan(ctx)
        assert plan.refused == [], plan.refused
        assert [s.target for s in plan.steps] == [
            "pod ml/train-0", "GPU 2 (00000000:3A:00.0, GPU-00000002-0000-4000-8000-"
            "000000000002)"]
        assert "PID 4242 (python)" in plan.steps[0].change
        assert plan.note.startswith("1 pod(s) on node node-a evicted within 150s")
        assert not log.exists()  # planning changes nothing
        out = action.apply(plan, ctx)
        assert out.ok and out.verified, out
        with store.lock:
            left = {n for (_, n) in store.objects["pods"]}
        assert left == {"infer-0", "dcgm-exporter-x"}  # the pod on GPU 0 stays
        assert log.read_text().split() == ["--gpu-reset", "-i", "00000000:3A:00.0"]
        assert out.data["pods"]["gone"] == ["ml/train-0"]
        assert [w for _, pod, w in out.data["pods"]["progress"]] == ["eviction accepted",
                                                                     "gone"]
        assert "after 1 pod(s) evicted" in out.detail
        assert json.dumps(out.to_dict())  # the audit keeps it as JSON


def test_a_pdb_that_refuses_the_eviction_fails_within_wait(tmp_path: Path) -> None:
    """A failed outcome: the ladder's next step (node.reboot) runs after its verify."""
    with serve() as (url, store):
        procs = _cluster(store, tmp_path)
        pod = store.objects["pods"][("ml", "train-0")]
        pod["metadata"]["labels"] = {"app": "train"}
        store.add_pdb("ml", "train", {"app": "train"}, min_available=1)
        action, ctx, log = _action(tmp_path, url, store, procs, wait=0.5)
        plan = action.plan(ctx)
        assert plan.refused == []
        out = ends(lambda: action.apply(plan, ctx), "an eviction the budget refuses")
        assert not out.ok and out.verified is False
        assert "GPU 00000000:3A:00.0 not reset: 1 pod(s) still there" in out.error
        assert "PodDisruptionBudget refuses its eviction (429)" in out.error
        assert list(out.data["pods"]["left"]) == ["ml/train-0"]
        assert not log.exists()  # never reset while the pod holds it
        with store.lock:
            assert ("ml", "train-0") in store.objects["pods"]


def test_what_refuses_the_eviction_and_no_pod_is_touched(tmp_path: Path) -> None:
    with serve() as (url, store):
        procs = _cluster(store, tmp_path)
        store.add_pod("kube-system", "probe-0", "node-a", owner=("ReplicaSet", "probe"))
        store.add_pod("ml", "elsewhere", "node-b", owner=("ReplicaSet", "e"))
        _in_pod(tmp_path, store, 6000, "nv-hostengine", ("kube-system", "dcgm-exporter-x"))
        _in_pod(tmp_path, store, 6001, "probe", ("kube-system", "probe-0"))
        _in_pod(tmp_path, store, 6002, "python", ("ml", "elsewhere"))
        _proc(tmp_path, 777, "Xorg", "/system.slice/display-manager.service")
        uid = store.objects["pods"][("ml", "elsewhere")]["metadata"]["uid"]
        for pid in (6000, 6001, 6002):
            procs[pid] = (2, None)
        action, ctx, _ = _action(tmp_path, url, store, procs)
        assert action.plan(ctx).refused == [
            f"pod UID {uid} (PID 6002 (python)) is no pod on node node-a the API server "
            "knows",
            "pod kube-system/dcgm-exporter-x: DaemonSet-managed and holds the GPU: never "
            "evicted",
            "pod kube-system/probe-0 holds the GPU and namespace kube-system is protected "
            "(say allow_protected = true)"]
        procs[777] = (2, None)  # a host process: refused before the API is asked
        procs[1] = (2, None)
        _proc(tmp_path, 1, "systemd", "/init.scope")
        with store.lock:
            store.requests.clear()
        plan = action.plan(ctx)
        assert plan.refused == ["PID 1 (systemd), never stopped by guardian uses the GPU",
                                "PID 777 (Xorg), not in a pod (a host process) uses the GPU"]
        assert plan.steps == []
        with store.lock:
            assert store.requests == []  # neither listed nor evicted


RULE = '''version = 1
[[rule]]
name = "reset-it"
summary = "reset"
fleet = false
when = "memcg.dying > 10"
  [[rule.action]]
  use = "gpu.reset"
  evict_pods = {evict}
'''


@pytest.mark.parametrize("evict, service, error", [
    ('{{ kubeconfig = "{kc}" }}', "", None),  # 150 s + 120 s < 300 s
    ('{{ kubeconfig = "{kc}", wait = 180 }}', "", "wait 180s + timeout 120s = 300s"),
    ('{{ kubeconfig = "{kc}", wait = 100, force = true, force_wait = 90 }}', "",
     "wait 100s + force_wait 90s + timeout 120s = 310s"),
    ('{{ kubeconfig = "{kc}", wait = 240 }}', '[service]\napply_timeout = "10m"\n', None),
    ("true", "", "evict_pods needs the Kubernetes API, and no credentials reach it here"),
], ids=["below", "wait-reaches-it", "force-wait-past-it", "raised", "no-credentials"])
def test_check_refuses_evictions_past_the_apply_timeout_or_without_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        evict: str, service: str, error: str | None) -> None:
    from guardian.cli import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    kc = kubeconfig(tmp_path, "https://192.0.2.1:6443")
    rules = tmp_path / "reset.toml"
    rules.write_text(RULE.format(evict=evict.format(kc=kc)))
    config = tmp_path / "guardian.toml"
    config.write_text(service)
    assert main(["check", "--config", str(config), str(rules)]) == (0 if error is None else 1)
    out = capsys.readouterr().out
    if error is not None:
        assert out.startswith(f"{rules}:2:") and error in out, out


def test_evict_pods_without_the_kubernetes_extra_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "guardian.kube.gpupods", None)  # as if not installed
    with pytest.raises(ValueError, match="evict_pods needs the Kubernetes extra"):
        ResetParams.model_validate({"evict_pods": True})
    assert ResetParams.model_validate({}).pods() is None  # off: no extra needed


def test_a_ladder_steps_evictions_are_checked_and_reach_the_api_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped rule resets in a ladder's step: its evict_pods is checked there too,
    and the unit's sandbox is asked for the API server's address."""
    from guardian.cli import main

    kc = kubeconfig(tmp_path, "https://192.0.2.1:6443")
    rules = tmp_path / "ladder.toml"
    rules.write_text(f'''version = 1
[[rule]]
name = "reset-then-reboot"
summary = "ladder"
fleet = false
when = "memcg.dying > 10"
  [[rule.step]]
  verify = "10m"
    [[rule.step.action]]
    use = "gpu.reset"
    evict_pods = {{ kubeconfig = "{kc}", wait = 200 }}
''')
    config = tmp_path / "guardian.toml"
    config.write_text("")
    assert main(["check", "--config", str(config), str(rules)]) == 1
    assert "wait 200s + timeout 120s = 320s is not below" in capsys.readouterr().out
    needs = GpuReset(ResetParams.model_validate({"evict_pods": {"kubeconfig": str(kc)}})
                     ).sandbox_needs()
    assert [e.host for e in needs.egress] == ["192.0.2.1"]
    assert GpuReset(ResetParams()).sandbox_needs().egress == ()
