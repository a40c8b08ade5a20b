"""What guardian says when libnvidia-ml.so.1 cannot be loaded (pynvml's LIBRARY_NOT_FOUND:
``dlopen("libnvidia-ml.so.1")`` failed), over a host root laid out as sysfs lays out PCI
functions: each function's ``vendor`` and ``class`` (``"0x%04x\\n"``, ``"0x%06x\\n"``,
drivers/pci/pci-sysfs.c) and its ``driver`` link to the bound driver (drivers/base/dd.c,
driver_sysfs_add); the NVIDIA kernel module registers its PCI driver as ``nvidia``
(open-gpu-kernel-modules, kernel-open/nvidia/nv-pci.c, ``nv_pci_driver.name =
MODULE_NAME``). Before: "no NVIDIA driver: libnvidia-ml.so.1 is not installed", in a pod
on a node whose driver is loaded as on one without any."""

from __future__ import annotations

import re
from pathlib import Path

from guardian.hostio.container import container
from guardian.hostio.gpuhost import GPU_NODES_DOC, library_missing
from guardian.hostio.host import Host
from tests.support.checkout import REPO

POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}


def _function(root: Path, address: str, vendor: str, pci_class: str, driver: str = "") -> None:
    fn = root / "sys" / "bus" / "pci" / "devices" / address
    fn.mkdir(parents=True)
    (fn / "vendor").write_text(f"{vendor}\n")
    (fn / "class").write_text(f"{pci_class}\n")
    if driver:
        (root / "sys" / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (fn / "driver").symlink_to(f"../../drivers/{driver}")


def _gpu_node(root: Path, gpus: int = 2, driver: str = "nvidia") -> None:
    for i in range(gpus):
        _function(root, f"0000:{0x18 + 0x12 * i:02x}:00.0", "0x10de", "0x030200", driver)
    _function(root, "0000:00:05.0", "0x1d0f", "0x020000", "ena")  # a NIC: no GPU


def test_in_a_pod_on_a_gpu_node_the_container_lacks_the_library(tmp_path: Path) -> None:
    _gpu_node(tmp_path)
    said = library_missing(Host(tmp_path), POD)
    assert said.startswith("2 NVIDIA GPUs on this node's PCI bus (0000:18:00.0, "
                           "0000:2a:00.0 bound to nvidia), but libnvidia-ml.so.1 (NVML) is "
                           "not found in this container (a Kubernetes pod")
    assert "runtimeClassName nvidia" in said and "NVIDIA_DRIVER_CAPABILITIES=utility" in said
    assert said.endswith(f"see {GPU_NODES_DOC}")
    assert "no NVIDIA driver" not in said and "no NVIDIA GPU" not in said


def test_on_a_host_the_drivers_user_space_part_is_missing(tmp_path: Path) -> None:
    _gpu_node(tmp_path, gpus=1, driver="")
    said = library_missing(Host(tmp_path), {})
    assert said == ("1 NVIDIA GPU on this node's PCI bus (0000:18:00.0 with no driver "
                    "bound), but libnvidia-ml.so.1 (NVML) is not found on this host: it "
                    "is installed with the NVIDIA driver's user-space part")


def test_many_gpus_are_named_by_driver_and_counted(tmp_path: Path) -> None:
    _gpu_node(tmp_path, gpus=6)
    _function(tmp_path, "0000:f0:00.0", "0x10de", "0x030000", "vfio-pci")
    said = library_missing(Host(tmp_path), {})
    assert said.startswith("7 NVIDIA GPUs on this node's PCI bus (0000:18:00.0, 0000:2a:00.0,"
                           " 0000:3c:00.0, 0000:4e:00.0 and 2 more bound to nvidia; "
                           "0000:f0:00.0 bound to vfio-pci), ")


def test_without_a_gpu_on_the_bus_it_says_both(tmp_path: Path) -> None:
    """gpus = "expected" on a node whose bus shows none (or a container without /sys)."""
    _function(tmp_path, "0000:00:05.0", "0x1d0f", "0x020000", "ena")
    assert library_missing(Host(tmp_path), POD) == (
        "libnvidia-ml.so.1 (NVML) is not found in this container (a Kubernetes pod "
        "(KUBERNETES_SERVICE_HOST is set)), and no NVIDIA GPU is on this node's PCI bus "
        "(vendor 0x10de, class 0x03)")


def test_what_says_a_process_runs_in_a_container(tmp_path: Path) -> None:
    assert container(tmp_path, {}) is None
    assert container(tmp_path, {"container": "systemd-nspawn"}) == \
        "a container (container=systemd-nspawn)"
    (tmp_path / ".dockerenv").touch()
    assert container(tmp_path, {}) == "a docker container (/.dockerenv)"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").touch()
    assert container(tmp_path, {}) == "a podman container (/run/.containerenv)"
    assert container(tmp_path, POD) == "a Kubernetes pod (KUBERNETES_SERVICE_HOST is set)"


def test_the_section_the_message_points_to_exists() -> None:
    doc, _, section = GPU_NODES_DOC.partition(", ")
    text = (REPO / doc).read_text()
    assert re.search(rf"(?m)^#+ {re.escape(section)}\b", text), f"no '{section}' in {doc}"
