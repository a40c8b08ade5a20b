"""PCI functions under ``/sys/bus/pci/devices``, whether or not a driver is bound: what a
node's hardware is, as opposed to what its drivers made of it.

Each function's directory holds ``vendor`` and ``device`` (``"0x%04x\\n"``) and ``class``
(``"0x%06x\\n"``: base class, subclass, programming interface), as
drivers/pci/pci-sysfs.c writes them (``pci_config_attr``); ``driver``, a link to the bound
driver's directory under ``bus/pci/drivers`` (drivers/base/dd.c, driver_sysfs_add), absent
while none is bound; and ``physfn``, a link to its physical function, on an SR-IOV virtual
function the host made (drivers/pci/iov.c, pci_iov_sysfs_link).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from guardian.hostio.host import read_value

NVIDIA_VENDOR = 0x10DE  # PCI vendor id of NVIDIA (include/linux/pci_ids.h)


@dataclass(frozen=True)
class PciFunction:
    """One PCI function: its address (``0000:18:00.0``), ids and class as numbers, the
    name of the bound driver ("" while none is), and whether it is an SR-IOV virtual
    function of a physical function on this host."""

    address: str
    vendor: int
    device: int | None
    pci_class: int
    driver: str = ""
    virtfn: bool = False

    @property
    def pci_id(self) -> str:
        """``vendor:device`` as lspci -n prints it (``15b3:1021``)."""
        dev = f"{self.device:04x}" if self.device is not None else "????"
        return f"{self.vendor:04x}:{dev}"


def devices_dir(sys: Path) -> Path:
    """``/sys/bus/pci/devices`` under a host's ``/sys``."""
    return sys / "bus" / "pci" / "devices"


def _number(path: Path) -> int | None:
    try:
        return int(read_value(path), 16)
    except (OSError, ValueError):
        return None


def read_function(sys: Path, address: str) -> PciFunction | None:
    """The function at ``address``, or None when it is not on the bus (or its vendor or
    class cannot be read: it is going away)."""
    base = devices_dir(sys) / address
    vendor, pci_class = _number(base / "vendor"), _number(base / "class")
    if vendor is None or pci_class is None:
        return None
    try:
        driver = os.path.basename(os.readlink(base / "driver"))
    except OSError:
        driver = ""
    return PciFunction(address, vendor, _number(base / "device"), pci_class, driver,
                       os.path.lexists(base / "physfn"))


def pci_addresses(sys: Path) -> list[str] | None:
    """The addresses on the PCI bus, sorted; None when ``/sys/bus/pci/devices`` cannot
    be listed (no PCI bus, or sysfs not mounted)."""
    try:
        return sorted(os.listdir(devices_dir(sys)))
    except OSError:
        return None


def pci_identity(sys: Path, address: str) -> tuple[str, str] | None:
    """``(vendor, class)`` of the function at ``address`` as sysfs prints them, in lower
    case (``("0x10de", "0x068000")``), or None when either cannot be read (it left the
    bus)."""
    base = devices_dir(sys) / address
    try:
        return read_value(base / "vendor").lower(), read_value(base / "class").lower()
    except (OSError, ValueError):
        return None


def functions(sys: Path) -> list[PciFunction]:
    """Every function on the PCI bus, by address; none when ``/sys/bus/pci/devices``
    cannot be listed (no PCI bus, or sysfs not mounted)."""
    return [f for f in (read_function(sys, n) for n in pci_addresses(sys) or ())
            if f is not None]


def gpu_functions(sys: Path) -> list[PciFunction]:
    """The NVIDIA display controllers (vendor 0x10de, class 0x03xxxx: VGA 0x0300 or 3D
    0x0302) under ``sys``/bus/pci/devices, whether or not a driver is bound, by
    address."""
    return [f for f in functions(sys) if f.vendor == NVIDIA_VENDOR and f.pci_class >> 16 == 0x03]


def pci_gpus(sys: Path) -> list[str]:
    """The PCI addresses of :func:`gpu_functions`: what tells a GPU node from one
    without GPUs."""
    return [f.address for f in gpu_functions(sys)]
