"""gpu.reset's refusals and its apply, over a recorded NVML (tests/support/nvml_recorded.py:
pynvml's functions answering from tests/fixtures/nvml/h100x8.json, raising pynvml's own
errors) and a stand-in runner for nvidia-smi (unit tests start no process). Stand-in
built from NVML's documentation (nvml.h); no GPU in this session."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from guardian.actions.gpu import GpuReset, ResetParams
from guardian.core.snapshot import Snapshot, labels_of
from guardian.hostio.host import Host
from guardian.hostio.nvml import Nvml, Sessions
from guardian.hostio.procfs import pod_uid_of
from guardian.hostio.programs import Ran
from guardian.plugin.contract import ActionContext
from guardian.runtime.collector import Collector
from guardian.sources.gpu import GpuConfig, GpuSource
from tests.support.nvml_recorded import RecordedNvml, load

H100 = load("h100x8.json")
GPU2 = labels_of({"gpu": "2", "UUID": H100["gpus"][2]["uuid"],
                  "pci_bus_id": H100["gpus"][2]["pci_bus_id"]})


def _action(rec: dict[str, Any], ran: Ran | None = None, **params: Any
            ) -> tuple[GpuReset, list[list[str]]]:
    action = GpuReset(ResetParams.model_validate(params))
    action.reader = lambda: Nvml(RecordedNvml(copy.deepcopy(rec)))
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> Ran:
        calls.append(argv)
        return ran or Ran(0, b"GPU 00000000:3A:00.0 was successfully reset.\n", b"", 4.2)
    action.runner = runner
    action.runnable = lambda prog: None  # the stand-in runner runs any argv
    return action, calls


def _ctx(tmp_path: Path, *members: tuple[tuple[str, str], ...]) -> ActionContext:
    ctx = ActionContext("gpu-nvml-needs-reset", Snapshot(0.0), Host(tmp_path), dry_run=False)
    ctx.evidence = {"matched": dict.fromkeys(members, 1.0)}
    return ctx


def _with(**gpu2: Any) -> dict[str, Any]:
    rec = copy.deepcopy(H100)
    rec["gpus"][2].update(gpu2)
    return rec


def test_an_idle_gpu_is_reset_by_its_pci_address(tmp_path: Path) -> None:
    action, calls = _action(H100)
    ctx = _ctx(tmp_path, GPU2)
    plan = action.plan(ctx)
    assert plan.refused == []
    assert plan.data["target"] == "00000000:3A:00.0"
    out = action.apply(plan, ctx)
    assert calls == [["nvidia-smi", "--gpu-reset", "-i", "00000000:3A:00.0"]]
    assert out.ok and out.verified is True


def test_a_failed_reset_is_a_failed_outcome(tmp_path: Path) -> None:
    """The ladder's next step (node.reboot) runs on it."""
    action, _ = _action(H100, Ran(255, b"", b"Unable to reset GPU 00000000:3A:00.0\n", 1.0))
    ctx = _ctx(tmp_path, GPU2)
    out = action.apply(action.plan(ctx), ctx)
    assert not out.ok and out.verified is False
    assert "exit 255" in out.error and "Unable to reset" in out.error
    action, _ = _action(H100, Ran(None, b"", b"", 120.0, error="ran past 120 s",
                                  timed_out=True))
    out = action.apply(action.plan(ctx), ctx)
    assert not out.ok and "ran past 120 s" in out.error


def _pid(tmp_path: Path, pid: int, comm: str, cgroup: str, flags: int = 0) -> None:
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 1 2 0 0 20 "
                            "0 1 0 100 0 0\n")
    (d / "cgroup").write_text(f"0::{cgroup}\n")


POD = "5f6c7d8e-1a2b-4c3d-9e8f-0a1b2c3d4e5f"


@pytest.mark.parametrize(("gpu2", "refusal"), [
    ({"processes.compute": [4242]}, f"PID 4242 (python) in pod {POD}"),
    ({"processes.compute": {"error": "NO_PERMISSION"}}, "processes on the GPU are unknown"),
    ({"display_active": 1}, "drives a display"),
    ({"display_mode": 1}, "drives a display"),
    ({"mig_mode": [1, 1]}, "MIG mode is on"),
    ({"architecture": 5}, "18 active NVLink(s) on a GPU older than Ampere"),
    ({"handle": {"error": "GPU_IS_LOST"}}, "no GPU 0000:3a:00.0 answers NVML"),
], ids=["process-in-pod", "processes-unknown", "display-active", "display-mode", "mig",
        "nvlink-pre-ampere", "lost"])
def test_each_refusal(tmp_path: Path, gpu2: dict[str, Any], refusal: str) -> None:
    # kubelet's systemd driver: kubepods-<qos>-pod<uid, "-" as "_">.slice
    _pid(tmp_path, 4242, "python", "/kubepods.slice/kubepods-burstable.slice/kubepods-"
         f"burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-0123abcd.scope")
    action, calls = _action(_with(**gpu2))
    plan = action.plan(_ctx(tmp_path, GPU2))
    assert any(refusal in r for r in plan.refused), plan.refused
    assert plan.steps == [] and calls == []


def test_no_driver_refuses(tmp_path: Path) -> None:
    action, _ = _action({**H100, "init": "DRIVER_NOT_LOADED"})
    plan = action.plan(_ctx(tmp_path, GPU2))
    assert plan.refused == ["cannot ask NVML: the NVIDIA kernel driver is not loaded"]


def test_in_a_pod_without_the_library_the_refusal_names_the_container(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LIBRARY_NOT_FOUND (pynvml's dlopen of libnvidia-ml.so.1 failed) in a pod on a node
    whose PCI bus has the GPU, bound to nvidia (sysfs: vendor, class, the driver link).
    Before: "cannot ask NVML: no NVIDIA driver: libnvidia-ml.so.1 is not installed"."""
    gpu = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:3a:00.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "class").write_text("0x030200\n")
    (tmp_path / "sys" / "bus" / "pci" / "drivers" / "nvidia").mkdir(parents=True)
    (gpu / "driver").symlink_to("../../drivers/nvidia")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    action, calls = _action({**H100, "init": "LIBRARY_NOT_FOUND"})
    [refusal] = action.plan(_ctx(tmp_path, GPU2)).refused
    assert refusal.startswith("cannot ask NVML: 1 NVIDIA GPU on this node's PCI bus "
                              "(0000:3a:00.0 bound to nvidia), but libnvidia-ml.so.1 (NVML) "
                              "is not found in this container (a Kubernetes pod")
    assert refusal.endswith("see docs/kubernetes.md, GPU nodes") and calls == []


def test_without_nvidia_smi_the_reset_is_refused_before_it_runs(tmp_path: Path) -> None:
    """Before: planned, then a failed outcome at apply ("cannot run nvidia-smi: No such
    file or directory") and the ladder climbed to a reboot."""
    from guardian.hostio.programs import cannot_run

    action, calls = _action(H100, nvidia_smi=[str(tmp_path / "nvidia-smi")])
    action.runnable = cannot_run  # the real question, of a path that is not there
    plan = action.plan(_ctx(tmp_path, GPU2))
    [refusal] = plan.refused
    assert refusal.startswith(f"{tmp_path / 'nvidia-smi'} not found (PATH ")
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in refusal
    assert plan.steps == [] and calls == []


def test_one_gpu_at_a_time_and_a_named_one(tmp_path: Path) -> None:
    other = labels_of({"gpu": "0", "UUID": "x", "pci_bus_id": "00000000:18:00.0"})
    action, _ = _action(H100)
    plan = action.plan(_ctx(tmp_path, GPU2, other))
    assert "2 GPUs matched" in plan.refused[0]
    plan = action.plan(_ctx(tmp_path))
    assert "no GPU named" in plan.refused[0]
    # the kernel log's gpu.xid names the GPU by "pci" without the function
    plan = action.plan(_ctx(tmp_path, labels_of({"pci": "0000:3a:00", "code": "48",
                                                 "action": "reset_gpu"})))
    assert plan.refused == [] and plan.data["target"] == "00000000:3A:00.0"
    # or the parameter names it, by UUID
    action, _ = _action(H100, gpu=H100["gpus"][2]["uuid"])
    assert action.plan(_ctx(tmp_path)).data["target"] == "00000000:3A:00.0"


def test_by_hand_it_says_to_name_the_gpu_and_takes_its_index_as_a_number(
        tmp_path: Path) -> None:
    """`guardian act gpu.reset` has no rule: before, its refusal spoke of "the rule's
    matched members"; and `--set gpu=2` (TOML: the integer 2) was refused as no string."""
    action, _ = _action(H100)
    ctx = _ctx(tmp_path)
    ctx.kind = "manual"
    assert action.plan(ctx).refused == [
        "no GPU named: give one with --set gpu=<PCI bus id, UUID or index> (guardian act "
        "has no rule to name it)"]
    action, _ = _action(H100, gpu=2)
    assert action.params.gpu == "2" and action.plan(ctx).data["target"] == "00000000:3A:00.0"


def test_guardian_pid_1_and_kernel_threads_are_named_never_stopped(tmp_path: Path) -> None:
    _pid(tmp_path, 1, "systemd", "/init.scope")
    _pid(tmp_path, 77, "kworker/0:1", "/", flags=0x00200000)
    ctx = _ctx(tmp_path, GPU2)
    ctx.own_pid = 555
    _pid(tmp_path, 555, "guardian", "/system.slice/guardian.service")
    action, _ = _action(_with(**{"processes.compute": [1, 77], "processes.graphics": [555]}))
    [refusal] = action.plan(ctx).refused
    assert "PID 1 (systemd), never stopped by guardian" in refusal
    assert "PID 77 (kworker/0:1), never stopped by guardian" in refusal
    assert "PID 555 (guardian), never stopped by guardian" in refusal


@pytest.mark.parametrize(("cgroup", "uid"), [
    # cgroupfs driver: kubepods/<qos>/pod<uid>/<container>
    (f"/kubepods/besteffort/pod{POD}/0123abcd", POD),
    (f"/kubepods/pod{POD}/0123abcd", POD),  # Guaranteed: no QoS level
    (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/cri-o-1.scope", POD),
    ("/system.slice/containerd.service", None),
    (f"/user.slice/pod{POD}", None),  # a name alone, outside kubepods, is no pod
], ids=["cgroupfs", "cgroupfs-guaranteed", "systemd-guaranteed", "service", "outside"])
def test_a_process_pod_from_its_cgroup(tmp_path: Path, cgroup: str, uid: str | None) -> None:
    _pid(tmp_path, 4242, "python", cgroup)
    assert pod_uid_of(tmp_path / "proc", 4242) == uid


@pytest.mark.parametrize(("arch", "remote", "fabric_manager", "refusal"), [
    (7, 2, False, "an Ampere GPU on NVSwitches while Fabric Manager (nv-fabricmanager) does "
                  "not run: its NVLink peers must be reset in the same command"),
    (7, 2, True, None),
    (7, 0, False, None),  # NVLinks to GPUs directly (no NVSwitch): no Fabric Manager there
    (9, 2, False, None),  # Hopper: "the dependency on Fabric Manager ... is removed"
    (7, {"error": "NO_PERMISSION"}, True, "nvlink 0 remote device type: NVML NO_PERMISSION"),
], ids=["ampere-nvswitch-no-fm", "ampere-nvswitch-fm", "ampere-direct", "hopper-nvswitch",
        "remote-unknown"])
def test_nvlink_peers_as_nvidia_smi_says(tmp_path: Path, arch: int, remote: Any,
                                         fabric_manager: bool, refusal: str | None) -> None:
    """nvidia-smi(1), -r: Ampere GPUs on NVSwitch systems reset alone only while Fabric
    Manager runs; direct-connected Ampere+ and Hopper+ on NVSwitches reset alone. Before:
    any Ampere GPU was reset alone, with or without Fabric Manager."""
    (tmp_path / "proc").mkdir()
    if fabric_manager:  # comm keeps 15 characters of nv-fabricmanager
        _pid(tmp_path, 900, "nv-fabricmanage", "/system.slice/nvidia-fabricmanager.service")
    links = [{**link, "remote": remote} for link in H100["gpus"][2]["nvlinks"]]
    action, _ = _action(_with(architecture=arch, nvlinks=links))
    plan = action.plan(_ctx(tmp_path, GPU2))
    if refusal is None:
        assert plan.refused == [] and plan.data["target"] == "00000000:3A:00.0"
    else:
        assert any(refusal in r for r in plan.refused), plan.refused


# -- guardian's own NVML session and the reset (issue 44) -------------------------------

@pytest.mark.parametrize("status", [0, 255], ids=["reset", "refused-by-nvidia-smi"])
def test_guardians_own_nvml_session_is_shut_while_nvidia_smi_resets(
        tmp_path: Path, status: int) -> None:
    """nvidia-smi(1), -r: "There can't be any applications using these devices (e.g. ...
    monitoring application like other instance of nvidia-smi)", and the gpu source keeps
    an NVML session open from its first collect. When nvidia-smi runs, every nvmlInit of
    the process is matched by its nvmlShutdown (nvml.h: "Shutdown only occurs when the
    reference count reaches zero"); a collect meanwhile, on another thread as the loop's,
    has no value and says why at once, and another gpu.reset's plan is refused; the
    collect after the reset, succeeded or not, opens NVML anew. Before, the source's
    session stayed open while nvidia-smi ran (one init unmatched)."""
    fake = RecordedNvml(copy.deepcopy(H100))
    sessions = Sessions()

    def reader() -> Nvml:
        return Nvml(fake, sessions)

    source = GpuSource(Host(tmp_path), GpuConfig(gpus="expected"), reader=reader)
    collector = Collector(Host(tmp_path), [source])
    assert collector.collect(0.0).values["nvml.gpus"] == 8.0
    ctx = _ctx(tmp_path, GPU2)
    other, _ = _action(H100)
    other.reader = reader
    seen: dict[str, Any] = {}

    def runner(argv: list[str], timeout: float) -> Ran:
        seen["open"] = fake.calls.count("nvmlInit") - fake.calls.count("nvmlShutdown")
        loop = threading.Thread(target=lambda: seen.update(snap=collector.collect(1.0)))
        loop.start()
        loop.join()
        seen["other"] = other.plan(ctx).refused
        return Ran(status, b"", b"" if status == 0 else b"Unable to reset\n", 4.2)

    action, _ = _action(H100)
    action.reader, action.runner = reader, runner
    out = action.apply(action.plan(ctx), ctx)
    why = "NVML released for a GPU reset of 0000:3a:00.0"
    assert seen["open"] == 0
    assert seen["snap"].errors["gpu"] == why
    assert not any(name.startswith("nvml.") for name in seen["snap"].values)
    assert seen["other"] == [f"cannot ask NVML: {why}"]
    assert out.ok is (status == 0) and out.data["nvml_sessions_released"] == 1
    inits = fake.calls.count("nvmlInit")
    after = collector.collect(2.0)
    assert after.values["nvml.gpus"] == 8.0 and "released" not in after.errors["gpu"]
    assert fake.calls.count("nvmlInit") == inits + 1  # its session, opened anew
    assert source.nvml is not None and source.nvml.registered  # Xid events anew too


def test_a_device_cgroup_that_refuses_nvidiactl_is_named_in_the_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvmlInit UNKNOWN where the device cgroup refuses /dev/nvidiactl (access(2) EPERM:
    security/device_cgroup.c); /proc/devices as drivers up to 535 register major 195
    (nv-frontend.c: "nvidia-frontend"). Before: "cannot ask NVML: nvmlInit failed: NVML
    UNKNOWN" alone."""
    import guardian.hostio.nvidiadev as nd

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "devices").write_text("Character devices:\n195 nvidia-frontend\n")
    monkeypatch.setattr(nd, "access_refused", lambda path: "EPERM")
    action, calls = _action({**H100, "init": "UNKNOWN"})
    [refusal] = action.plan(_ctx(tmp_path, GPU2)).refused
    assert refusal.startswith(
        "cannot ask NVML: nvmlInit failed: NVML UNKNOWN; this process's device cgroup "
        "refuses /dev/nvidiactl (access(2): EPERM) (/proc/devices lists major 195 as "
        "nvidia-frontend): under systemd, the unit's DevicePolicy=closed or strict "
        "without DeviceAllow=char-nvidia rw (drivers up to 535: char-nvidia-frontend)")
    assert calls == []
