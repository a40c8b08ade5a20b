"""The NVML source over a recorded NVML (tests/support/nvml_recorded.py): pynvml's own
functions replaced by answers from tests/fixtures/nvml/h100x8.json, raising pynvml's own
NVMLError classes, through the real reader (guardian.hostio.nvml) and source. Stand-in
built from NVML's documentation (nvml.h); no GPU in this session."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import labels_of
from guardian.core.xid import ACTION_NAMES
from guardian.hostio.host import Host
from guardian.hostio.nvml import Nvml, normal_pci
from guardian.runtime.collector import Collector
from guardian.sources.gpu import GpuConfig, GpuSource
from tests.support.nvml_recorded import RecordedNvml, load

H100 = load("h100x8.json")


def _source(rec: dict[str, Any], tmp_path: Path, gpus: str = "expected"
            ) -> tuple[GpuSource, RecordedNvml]:
    fake = RecordedNvml(copy.deepcopy(rec))
    return GpuSource(Host(tmp_path), GpuConfig.model_validate({"gpus": gpus}),
                     reader=lambda: Nvml(fake)), fake


def _collect(src: GpuSource, now: float) -> dict[str, Any]:
    return src.collect(now)


def _gpu(i: int, **extra: str) -> tuple[tuple[str, str], ...]:
    g = H100["gpus"][i]
    return labels_of({"gpu": str(i), "UUID": g.get("uuid", ""),
                      "pci_bus_id": g.get("pci_bus_id", ""), **extra})


def test_an_h100_node_read_through_nvml(tmp_path: Path) -> None:
    src, _ = _source(H100, tmp_path)
    assert src.unavailable() is None
    got = _collect(src, 0.0)
    assert got["nvml.gpus"] == 8.0
    lost = got["nvml.gpu_lost"]
    assert isinstance(lost, dict)
    # GPU 3's handle is GPU_IS_LOST: lost, its UUID and PCI address unknown ("")
    assert lost[labels_of({"gpu": "3", "UUID": "", "pci_bus_id": ""})] == 1.0
    assert lost[_gpu(0)] == 0.0 and len(lost) == 8
    # GPU 2: an uncorrectable error and a remap pending a reset
    assert got["nvml.ecc_errors"][_gpu(2, error="uncorrected", counter="volatile")] == 1.0
    assert got["nvml.remap_pending"][_gpu(2)] == 1.0
    assert got["nvml.remap_pending"][_gpu(0)] == 0.0
    assert got["nvml.remapped_rows"][_gpu(2, cause="uncorrectable")] == 1.0
    # retired pages: NOT_SUPPORTED on GPUs that remap rows: no value, and no fault
    assert got["nvml.retired_pages"] == {} and got["nvml.retired_pages_pending"] == {}
    assert got["nvml.nvlinks_active"][_gpu(0)] == 18.0
    assert got["nvml.nvlink_errors"][_gpu(0, link="17", counter="replay")] == 0.0
    assert len(got["nvml.nvlink_errors"]) == 7 * 18 * 4  # per link, never summed
    assert got["nvml.power_watts"][_gpu(1)] == 72.0  # nvmlDeviceGetPowerUsage: milliwatts
    assert got["nvml.temperature_celsius"][_gpu(0)] == 33.0
    assert got["nvml.persistence_mode"][_gpu(0)] == 1.0
    # the Xid event of GPU 5, by NVIDIA's catalog
    assert got["nvml.xid"] == {_gpu(5, code="79", action="reboot"): 1.0}
    assert got["nvml.xid_by_action"][labels_of({"action": "reboot"})] == 1.0
    assert got["nvml.xid_by_action"][labels_of({"action": "reset_gpu"})] == 0.0
    # per GPU: every action of every GPU at 0 from this first read; GPU 5's Xid, taken in
    # the read that first lists it, counts at the next (so it too is a rise)
    by_gpu = got["nvml.xid_by_gpu"]
    assert len(by_gpu) == 8 * len(ACTION_NAMES) and set(by_gpu.values()) == {0.0}
    # the lost GPU is a fault of the source, with NVML's own name for it
    assert src.faults() == ["GPU 3: NVML GPU_IS_LOST: handle"]


def test_a_gpu_lost_between_reads_keeps_its_identity_and_has_no_values(
        tmp_path: Path) -> None:
    src, _ = _source(H100, tmp_path)
    src.collect(0.0)
    got = _collect(src, 30.0)
    assert got["nvml.gpu_lost"][_gpu(5)] == 1.0  # its UUID and PCI address from before
    assert not any(dict(k)["gpu"] == "5" for k in got["nvml.ecc_errors"])
    assert got["nvml.xid"] == {_gpu(5, code="79", action="reboot"): 1.0}  # kept, not again
    assert "GPU 5 (00000000:AB:00.0): NVML GPU_IS_LOST: handle" in src.faults()


def test_each_refused_read_is_no_value_and_a_named_fault(tmp_path: Path) -> None:
    rec = copy.deepcopy(H100)
    rec["gpus"][0]["ecc.uncorrected.volatile"] = {"error": "NO_PERMISSION"}
    rec["gpus"][0]["temperature"] = {"error": "UNKNOWN"}
    src, _ = _source(rec, tmp_path)
    got = _collect(src, 0.0)
    assert _gpu(0, error="uncorrected", counter="volatile") not in got["nvml.ecc_errors"]
    assert _gpu(0) not in got["nvml.temperature_celsius"]  # never 0
    assert _gpu(0, error="uncorrected", counter="aggregate") in got["nvml.ecc_errors"]
    assert ("GPU 0 (00000000:18:00.0): NVML NO_PERMISSION: ecc uncorrected volatile; "
            "NVML UNKNOWN: temperature") in src.faults()


def test_the_collector_counts_the_faults_and_keeps_the_rest(tmp_path: Path) -> None:
    src, _ = _source(H100, tmp_path)
    collector = Collector(Host(tmp_path), [src])
    snap = collector.collect(0.0)
    assert "GPU_IS_LOST" in snap.errors["gpu"]
    assert snap.values["nvml.gpus"] == 8.0
    errors = snap.values["guardian.source_errors"]
    assert isinstance(errors, dict) and errors[labels_of({"source": "gpu"})] == 1.0


@pytest.mark.parametrize(("error", "says"), [
    ("LIBRARY_NOT_FOUND", "libnvidia-ml.so.1 (NVML) is not found"),
    ("DRIVER_NOT_LOADED", "the NVIDIA kernel driver is not loaded"),
    ("LIB_RM_VERSION_MISMATCH", "different versions"),
    ("UNKNOWN", "nvmlInit failed: NVML UNKNOWN"),
])
def test_no_driver_the_source_does_not_run_and_says_why(
        tmp_path: Path, error: str, says: str) -> None:
    rec = {**H100, "init": error}
    src, _ = _source(rec, tmp_path)
    collector = Collector(Host(tmp_path), [src])
    assert collector.sources == []
    assert says in collector.unavailable["gpu"]


def test_in_a_pod_without_the_nvidia_runtime_it_says_so_never_no_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DaemonSet's image has no NVIDIA driver, so on a GPU node whose pod the NVIDIA
    container runtime did not set up, nvmlInit is LIBRARY_NOT_FOUND (pynvml's dlopen of
    libnvidia-ml.so.1 failed) while the node's PCI bus has the GPUs, bound to the nvidia
    driver (sysfs: vendor, class and the driver link). Before: "no NVIDIA driver:
    libnvidia-ml.so.1 is not installed"."""
    for i, address in enumerate(("0000:18:00.0", "0000:2a:00.0")):
        gpu = tmp_path / "sys" / "bus" / "pci" / "devices" / address
        gpu.mkdir(parents=True)
        (gpu / "vendor").write_text("0x10de\n")
        (gpu / "class").write_text("0x030200\n")
        if i == 0:
            (tmp_path / "sys" / "bus" / "pci" / "drivers" / "nvidia").mkdir(parents=True)
        (gpu / "driver").symlink_to("../../drivers/nvidia")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    src, _ = _source({**H100, "init": "LIBRARY_NOT_FOUND"}, tmp_path, gpus="auto")
    collector = Collector(Host(tmp_path), [src])
    assert collector.sources == [] and "gpu" not in collector.unconfigured
    said = collector.unavailable["gpu"]
    assert said.startswith("2 NVIDIA GPUs on this node's PCI bus (0000:18:00.0, "
                           "0000:2a:00.0 bound to nvidia), but libnvidia-ml.so.1 (NVML) is "
                           "not found in this container (a Kubernetes pod")
    assert said.endswith("see docs/kubernetes.md, GPU nodes")
    assert "no NVIDIA" not in said


def test_a_node_without_an_nvidia_gpu_has_nothing_to_read(tmp_path: Path) -> None:
    """gpus = "auto": the PCI bus decides (vendor 0x10de, class 0x03xxxx); a NIC of
    another vendor is no GPU; "expected" reads whatever the bus says."""
    nic = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:00:05.0"
    nic.mkdir(parents=True)
    (nic / "vendor").write_text("0x1d0f\n")
    (nic / "class").write_text("0x020000\n")
    src, fake = _source(H100, tmp_path, gpus="auto")
    collector = Collector(Host(tmp_path), [src])
    assert "no NVIDIA GPU on this node's PCI bus" in collector.unconfigured["gpu"]
    assert fake.calls == []  # NVML was not even loaded
    gpu = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:18:00.0"
    gpu.mkdir()
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "class").write_text("0x030200\n")
    src, _ = _source(H100, tmp_path, gpus="auto")
    assert src.unconfigured() is None


def test_xid_events_are_taken_without_waiting(tmp_path: Path) -> None:
    """Every drain waits 0 ms (the recorded nvmlEventSetWait_v2 asserts it) and stops at
    NVML's TIMEOUT, which is no fault."""
    rec = copy.deepcopy(H100)
    rec["events"] = [[0, 13], [0, 13], [2, 48], [1, 9999]]
    src, _ = _source(rec, tmp_path)
    got = _collect(src, 0.0)
    assert got["nvml.xid"] == {_gpu(0, code="13", action="restart_app"): 2.0,
                               _gpu(2, code="48", action="reset_gpu"): 1.0,
                               _gpu(1, code="9999", action="unknown"): 1.0}
    assert not any("TIMEOUT" in f for f in src.faults())


def test_a_pcie_gpu_without_nvlink_has_no_nvlink_values_and_no_fault(tmp_path: Path) -> None:
    rec = copy.deepcopy(H100)
    rec["gpus"][0]["nvlinks"] = {"error": "NOT_SUPPORTED"}
    src, _ = _source(rec, tmp_path)
    got = _collect(src, 0.0)
    assert _gpu(0) not in got["nvml.nvlinks_active"]
    assert not any("GPU 0 " in f for f in src.faults())


def test_pci_addresses_compare_as_the_kernel_and_nvml_write_them() -> None:
    assert normal_pci("00000000:AB:00.0") == normal_pci("0000:ab:00.0") == "0000:ab:00.0"


def test_the_recorder_writes_what_the_replay_reads(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/support/nvml_record.py over the recorded NVML: its recording, replayed, gives
    the source the same values (so a recording made on a real node is one the tests
    read). Read-only calls only: the recorded NVML has no setter to call."""
    from tests.support import nvml_record
    monkeypatch.setattr(nvml_record, "N", RecordedNvml(copy.deepcopy(H100)))
    made = nvml_record.record(0.0)
    assert made["count"] == 8 and made["gpus"][3] == {"handle": {"error": "GPU_IS_LOST"}}
    src, _ = _source(H100, tmp_path)
    again, _ = _source({**made, "events": []}, tmp_path)
    want, got = _collect(src, 0.0), _collect(again, 0.0)
    assert {k: v for k, v in got.items() if "xid" not in k} == \
        {k: v for k, v in want.items() if "xid" not in k}


def test_a_device_cgroup_that_refuses_nvidiactl_is_named_never_no_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: the shipped unit's DevicePolicy=closed allowed /dev/kmsg only. A device
    cgroup that refuses /dev/nvidiactl makes nvmlInit UNKNOWN ("Failed to initialize
    NVML: Unknown Error" where a container's device list kept only "c 195:* m":
    NVIDIA/nvidia-container-toolkit#251), and access(2) on the node EPERM
    (security/device_cgroup.c: "-EPERM case the operation is not permitted"). Before:
    "nvmlInit failed: NVML UNKNOWN" alone. /proc/devices as the 545+ driver registers
    major 195 (nv.c: "nvidia", "nvidiactl"), in the kernel's "%3d %s\\n"."""
    import guardian.hostio.nvidiadev as nd

    gpu = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:18:00.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "class").write_text("0x030200\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "devices").write_text(
        "Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n\nBlock devices:\n"
        "  7 loop\n")
    asked: list[Path] = []

    def refused(path: Path) -> str:
        asked.append(Path(path))
        return "EPERM"

    monkeypatch.setattr(nd, "access_refused", refused)
    src, _ = _source({**H100, "init": "UNKNOWN"}, tmp_path, gpus="auto")
    collector = Collector(Host(tmp_path), [src])
    said = collector.unavailable["gpu"]
    assert "gpu" not in collector.unconfigured and asked == [tmp_path / "dev" / "nvidiactl"]
    assert said.startswith(
        "nvmlInit failed: NVML UNKNOWN: 1 NVIDIA GPU(s) on the PCI bus (0000:18:00.0), but "
        "this process's device cgroup refuses /dev/nvidiactl (access(2): EPERM) "
        "(/proc/devices lists major 195 as nvidia, nvidiactl): under systemd, the unit's "
        "DevicePolicy=closed or strict without DeviceAllow=char-nvidia rw"), said
    assert "restart guardian" in said and "no NVIDIA GPU" not in said
    # a mode that refuses (EACCES) or no node (ENOENT) is no device cgroup: NVML's word
    monkeypatch.setattr(nd, "access_refused", lambda path: "ENOENT")
    src, _ = _source({**H100, "init": "UNKNOWN"}, tmp_path, gpus="auto")
    assert src.unavailable() == "nvmlInit failed: NVML UNKNOWN"
