"""A host root whose /sys and /proc lay out NICs as the kernel does, for the IRQ code.

An ENA NIC (``ens5``, as Amazon Linux 2023 and Ubuntu name it on Nitro instances):

    /sys/class/net/ens5 -> ../../devices/pci0000:00/0000:00:05.0/net/ens5
    /sys/devices/pci0000:00/0000:00:05.0/net/ens5/device -> ../../../0000:00:05.0
    /sys/devices/pci0000:00/0000:00:05.0/driver -> ../../../bus/pci/drivers/ena
    /sys/devices/pci0000:00/0000:00:05.0/msi_irqs/{27,28,29}

The kernel makes each of these: ``/sys/class/net/IF`` when the interface registers
(net/core/net-sysfs.c, netdev_register_kobject()); ``device``, a link to the parent device,
in drivers/base/core.c, device_add_class_symlinks():
``sysfs_create_link(&dev->kobj, &dev->parent->kobj, "device")``; ``driver``, a link to the
driver's directory under its bus, when the driver binds, drivers/base/dd.c,
driver_sysfs_add(): ``sysfs_create_link(&dev->kobj, &dev->driver->p->kobj, "driver")``;
``msi_irqs``, one entry per MSI-X vector, when the driver enables them (kernel/irq/msi.c).
The ENA driver registers as ``ena`` (drivers/net/ethernet/amazon/ena/ena_netdev.h,
``#define DRV_MODULE_NAME "ena"``, the ``.name`` of its ``struct pci_driver``) and names
its vectors ``ena-mgmnt@pci:<bdf>`` and ``<ifname>-Tx-Rx-<queue>`` (ena_netdev.c,
ena_setup_mgmnt_intr() and ena_setup_io_intr()).

Beside it, a virtio NIC as this project's own build machines show it (``eth1`` here): its
``device`` is the virtio device, whose parent PCI device holds ``msi_irqs``, and whose
``driver`` links to ``bus/virtio/drivers/virtio_net``; and ``lo``, with no ``device``.
"""

from __future__ import annotations

from pathlib import Path

from guardian.testing import FakeHost

ENA_IRQS = {27: "ena-mgmnt@pci:0000:00:05.0", 28: "ens5-Tx-Rx-0", 29: "ens5-Tx-Rx-1"}
VIRTIO_IRQS = {40: "virtio2-config", 41: "virtio2-input.0", 42: "virtio2-output.0"}


def _link(at: Path, target: str) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)


def nic_host(root: Path, ena_name: str = "ens5", cpus: int = 4) -> FakeHost:
    """The tree above under ``root``, every IRQ's affinity on all ``cpus`` cores."""
    fake = FakeHost(root)
    sys = root / "sys"
    pci = sys / "devices" / "pci0000:00"
    # ENA
    ena = pci / "0000:00:05.0"
    (sys / "bus" / "pci" / "drivers" / "ena").mkdir(parents=True)
    _link(ena / "driver", "../../../bus/pci/drivers/ena")
    _link(ena / "net" / ena_name / "device", "../../../0000:00:05.0")
    _link(sys / "class" / "net" / ena_name, f"../../devices/pci0000:00/0000:00:05.0/net/"
                                            f"{ena_name}")
    # virtio: the PCI device 0000:00:03.0 holds msi_irqs, its child virtio2 the NIC
    virtio = pci / "0000:00:03.0"
    (sys / "bus" / "virtio" / "drivers" / "virtio_net").mkdir(parents=True)
    _link(virtio / "virtio2" / "driver", "../../../../bus/virtio/drivers/virtio_net")
    _link(virtio / "virtio2" / "net" / "eth1" / "device", "../../../virtio2")
    _link(sys / "class" / "net" / "eth1",
          "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth1")
    # lo: a virtual interface, no device
    (sys / "devices" / "virtual" / "net" / "lo").mkdir(parents=True)
    _link(sys / "class" / "net" / "lo", "../../devices/virtual/net/lo")
    for dev, irqs in ((ena, ENA_IRQS), (virtio, VIRTIO_IRQS)):
        for irq in irqs:
            fake.write(str((dev / "msi_irqs" / str(irq)).relative_to(root)), "msix\n")
    every = f"0-{cpus - 1}"
    head = "".join(f"{'CPU' + str(c):>11}" for c in range(cpus))
    lines = [f"{irq:>4}: " + "0 " * cpus + f"PCI-MSIX-0000:00:05.0 {irq} {name}"
             for irq, name in {**ENA_IRQS, **VIRTIO_IRQS}.items()]
    fake.write("proc/interrupts", head + "\n" + "\n".join(lines) + "\n")
    for irq in {**ENA_IRQS, **VIRTIO_IRQS}:
        fake.write(f"proc/irq/{irq}/smp_affinity_list", every + "\n")
    fake.write("sys/devices/system/cpu/online", every + "\n")
    return fake
