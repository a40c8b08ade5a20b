"""NICs found by the driver bound to them, through the links the kernel makes in sysfs
(the layout and its kernel sources: tests/support/sysfs.py)."""

from __future__ import annotations

from pathlib import Path

from guardian.hostio.irq import interface_driver, interface_irqs, interfaces_by_driver
from tests.support.sysfs import ENA_IRQS, VIRTIO_IRQS, nic_host


def test_the_driver_of_each_interface_is_its_device_s_driver_link(tmp_path: Path) -> None:
    host = nic_host(tmp_path).host
    assert interface_driver(host, "ens5") == "ena"
    assert interface_driver(host, "eth1") == "virtio_net"
    assert interface_driver(host, "lo") == ""  # virtual: no device
    assert interface_driver(host, "eth9") == ""  # no such interface


def test_interfaces_are_found_by_driver_whatever_their_names(tmp_path: Path) -> None:
    for name in ("ens5", "eth0", "enp0s5"):  # AL2023 and Ubuntu, AL2, a PCI-path name
        host = nic_host(tmp_path / name, ena_name=name).host
        assert interfaces_by_driver(host, "ena") == [name]
        assert interface_irqs(host, name) == sorted(ENA_IRQS)
    host = nic_host(tmp_path / "both").host
    assert interfaces_by_driver(host, "virtio_net") == ["eth1"]
    assert interface_irqs(host, "eth1") == sorted(VIRTIO_IRQS)  # the PCI parent's
    assert interfaces_by_driver(host, "mlx5_core") == []


def test_an_unbound_device_has_no_driver(tmp_path: Path) -> None:
    """A device whose driver was unbound (echo BDF > .../drivers/ena/unbind): the kernel
    removes the ``driver`` link (drivers/base/dd.c, driver_sysfs_remove())."""
    fake = nic_host(tmp_path)
    (tmp_path / "sys/devices/pci0000:00/0000:00:05.0/driver").unlink()
    assert interface_driver(fake.host, "ens5") == ""
    assert interfaces_by_driver(fake.host, "ena") == []


def test_no_sysfs_is_no_interface(tmp_path: Path) -> None:
    from guardian.hostio.host import Host
    assert interfaces_by_driver(Host(tmp_path), "ena") == []
