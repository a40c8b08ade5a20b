"""PCI functions on the bus, counted by vendor and class.

What is on the bus tells which hardware a node has, whatever drivers are loaded or
daemons run: an HGX or DGX board's NVSwitches are NVIDIA functions of class 0x068000
(bridge, other), the class NVIDIA's nvswitch driver binds (open-gpu-kernel-modules
kernel-open/nvidia/linux_nvswitch.c, nvswitch_pci_table: PCI_VENDOR_ID_NVIDIA,
PCI_CLASS_BRIDGE_OTHER << 8). A rule about software such hardware needs (Fabric Manager)
reads it to hold only where the hardware is.

Each address's vendor and class are read once, when it first appears, and forgotten when
it leaves the bus (:mod:`guardian.hostio.pci`); a tick lists the directory.
"""

from __future__ import annotations

from typing import ClassVar

from guardian.core.snapshot import Family, SignalSpec, labels_of
from guardian.hostio.host import Host
from guardian.hostio.pci import pci_addresses, pci_identity
from guardian.plugin.contract import NoParams, Source


class PciSource(Source[NoParams]):
    """PCI functions on the bus, counted by vendor and class code (an NVSwitch: NVIDIA
    0x068000)."""

    name: ClassVar[str] = "pci"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("pci.devices", "PCI functions on the bus by vendor and class code, as sysfs "
                   "prints them (vendor 0x10de, class_code 0x068000: NVIDIA NVSwitches)",
                   "functions", labels=("vendor", "class_code")),
    )

    def __init__(self, host: Host, config: NoParams | None = None) -> None:
        super().__init__(host, config)
        self.known: dict[str, tuple[str, str]] = {}

    def unavailable(self) -> str | None:
        if pci_addresses(self.host.sys) is None:
            return "no /sys/bus/pci/devices (no PCI bus, or sysfs not mounted)"
        return None

    def collect(self, now: float) -> dict[str, object]:
        addresses = pci_addresses(self.host.sys)
        if addresses is None:
            raise OSError("/sys/bus/pci/devices cannot be listed")
        present = set(addresses)
        for gone in self.known.keys() - present:
            del self.known[gone]
        for address in addresses:
            if address not in self.known and (ident := pci_identity(
                    self.host.sys, address)) is not None:
                self.known[address] = ident
        counts: dict[tuple[str, str], int] = {}
        for ident in self.known.values():
            counts[ident] = counts.get(ident, 0) + 1
        devices: Family = {labels_of({"vendor": v, "class_code": c}): float(n)
                           for (v, c), n in counts.items()}
        return {"pci.devices": devices}
