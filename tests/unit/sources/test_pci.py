"""The pci source over sysfs trees made in a temporary directory, laid out as the
kernel's Documentation/ABI/testing/sysfs-bus-pci describes (one directory per function
under /sys/bus/pci/devices, its ``vendor`` and ``class`` files as the kernel prints
them: ``0x10de``, ``0x068000``). The functions are an HGX H100 board's: NVIDIA's GPUs
(3D controller, 0x030200) and NVSwitches (bridge, other: 0x068000, the class NVIDIA's
nvswitch driver binds in open-gpu-kernel-modules kernel-open/nvidia/linux_nvswitch.c)."""

from __future__ import annotations

import shutil
from pathlib import Path

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.sources.pci import PciSource


def _function(root: Path, address: str, vendor: str, klass: str) -> Path:
    d = root / "sys" / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(klass + "\n")
    return d


def _count(src: PciSource, vendor: str, klass: str) -> float | None:
    fam = src.collect(0.0)["pci.devices"]
    assert isinstance(fam, dict)
    return fam.get(labels_of({"vendor": vendor, "class_code": klass}))


def test_functions_are_counted_by_vendor_and_class_and_leave_with_the_device(
        tmp_path: Path) -> None:
    for i in range(4):
        _function(tmp_path, f"0000:0{5 + i}:00.0", "0x10de", "0x068000")
    for i in range(2):
        _function(tmp_path, f"0000:1{i}:00.0", "0x10DE", "0x030200")
    gone = _function(tmp_path, "0000:00:00.0", "0x8086", "0x060000")
    src = PciSource(Host(tmp_path))
    assert src.unavailable() is None
    assert _count(src, "0x10de", "0x068000") == 4
    assert _count(src, "0x10de", "0x030200") == 2  # the kernel's case is not kept
    shutil.rmtree(gone)
    assert _count(src, "0x8086", "0x060000") is None


def test_a_function_that_cannot_be_read_is_left_out_until_it_can(tmp_path: Path) -> None:
    d = _function(tmp_path, "0000:05:00.0", "0x10de", "0x068000")
    (d / "class").unlink()
    src = PciSource(Host(tmp_path))
    assert _count(src, "0x10de", "0x068000") is None
    (d / "class").write_text("0x068000\n")
    assert _count(src, "0x10de", "0x068000") == 1


def test_no_pci_bus_is_unavailable_not_a_node_without_devices(tmp_path: Path) -> None:
    assert PciSource(Host(tmp_path)).unavailable() == (
        "no /sys/bus/pci/devices (no PCI bus, or sysfs not mounted)")
