"""RDMA devices under ``/sys/class/infiniband`` (InfiniBand HCAs, RoCE NICs, AWS EFA): the
layout of each device and port, and their files read and parsed as the kernel writes them
(drivers/infiniband/core/sysfs.c).

Per device ``<dev>/ports/<N>/`` holds ``state`` (``"4: ACTIVE"``, state_show),
``phys_state`` (``"5: LinkUp"``, phys_state_show), ``rate`` (``"100 Gb/sec (4X EDR)"``,
rate_show: ``"%d%s Gb/sec (%dX%s)"``, the ``%s`` being ``".5"`` for SDR's 2.5 Gb/s
lanes), ``link_layer`` (``InfiniBand``, ``Ethernet``, or ``Unknown``: EFA says
IB_LINK_LAYER_UNSPECIFIED), ``counters/`` (the IBTA PortCounters, read by a
Performance Management MAD: devices without one, as EFA, have no such directory) and
``hw_counters/`` (the driver's own counters, 64-bit, plus ``lifespan``, the
milliseconds the kernel caches them, which is no counter). ``<dev>/hw_counters/`` holds
device-wide driver counters where the driver has them (EFA's admin-queue counters,
``no_completion_cmds``...).

A PortCounters counter does not wrap: IBTA has it stop at its all-ones value, and its
width is the kernel's (PORT_PMA_ATTR in sysfs.c, :data:`PMA_WIDTHS`): 4 bits for
``excessive_buffer_overrun_errors``, 8 for ``link_downed``, 16 for ``symbol_error``, 32
for ``port_xmit_wait`` and, on devices without extended counters, for the data and packet
counters. A counter at its ceiling no longer counts (:func:`saturated`). A counter the
kernel could not ask the device for reads ``N/A (no PMA)`` (older kernels) or fails to
read (later ones): no value either way.

Values are read with one ``read`` of a small buffer (sysfs answers a whole attribute to
the first read): a p5.48xlarge has 32 EFA devices of ~40 files, read every tick.

A device's ``device`` link names its parent, the PCI function it drives (the core's
device_add_class_symlinks(); the efa driver sets ``ibdev.dev.parent = &pdev->dev``):
:func:`pci_address`. Which PCI functions must have an RDMA device is
:func:`needs_rdma`'s: an InfiniBand controller (PCI class 0x0207) or an EFA function
does nothing without one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from guardian.hostio.pci import PciFunction

#: Width in bits of each PortCounters file, as sysfs.c declares them (PORT_PMA_ATTR);
#: None for the counters that are 32 bits wide from PortCounters and 64 bits from
#: PortCountersExtended (PORT_PMA_ATTR_EXT), as the device's PMA ClassPortInfo says.
PMA_WIDTHS: dict[str, int | None] = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8,
    "port_rcv_errors": 16, "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4, "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16, "port_xmit_wait": 32,
    "port_xmit_data": None, "port_rcv_data": None, "port_xmit_packets": None,
    "port_rcv_packets": None,
    "unicast_xmit_packets": 64, "unicast_rcv_packets": 64,
    "multicast_xmit_packets": 64, "multicast_rcv_packets": 64,
}

#: PCI class (base class and subclass) of an InfiniBand controller (pci.ids: ``C 02``
#: Network controller, ``07`` Infiniband controller): a ConnectX in InfiniBand mode
#: (``Infiniband controller [0207]: ... [ConnectX-7] [15b3:1021]``, as lspci -nn lists
#: them in NVIDIA/gpu-admin-tools pci/cx7.py).
INFINIBAND_CLASS = 0x0207
#: PCI vendor id of Amazon (PCI_VENDOR_ID_AMAZON, 0x1d0f in amzn-drivers' efa_main.c).
AMAZON_VENDOR = 0x1D0F
#: The device ids the efa driver binds: efa_pci_tbl in linux
#: drivers/infiniband/hw/efa/efa_main.c lists PCI_DEV_ID_EFA0_VF 0xefa0 to EFA3_VF 0xefa3;
#: 0xefa4 is added by "RDMA/efa: Add EFA 0xefa4 PCI ID", posted to linux-rdma in 2026;
#: pci.ids names all five "Elastic Fabric Adapter (EFA)".
EFA_DEVICES = frozenset({0xEFA0, 0xEFA1, 0xEFA2, 0xEFA3, 0xEFA4})
#: Drivers that hand a function over whole (to a virtual machine, or to user space):
#: bound to one of these (or to any vfio driver, such as mlx5_vfio_pci), a function's
#: RDMA device is made elsewhere, if at all.
PASSTHROUGH_DRIVERS = frozenset({"pci-stub", "uio_pci_generic", "igb_uio"})
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

_STATE = re.compile(rb"^\s*(\d+)\s*:")
_RATE = re.compile(rb"^\s*(\d+(?:\.\d+)?)\s+Gb/sec")
_READ = 256  # every attribute above is one short line


def saturated(name: str, value: int) -> bool:
    """Whether PortCounters counter ``name`` stands at the all-ones value IBTA stops it
    at. A 32-or-64-bit one (:data:`PMA_WIDTHS` None) is taken as saturated at 2^32-1: a
    64-bit counter passing exactly that value at a read is one chance in 2^32 and only
    loses that read. False for names the kernel does not declare."""
    if name not in PMA_WIDTHS:
        return False
    width = PMA_WIDTHS[name] or 32
    return value == (1 << width) - 1 or value == (1 << 64) - 1


def read_raw(path: str, dir_fd: int | None = None) -> bytes | None:
    """The bytes of a small sysfs attribute, or None when it cannot be read (gone, refused,
    the device did not answer: the kernel returns the error to the read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, _READ)
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_counter(raw: bytes | None) -> int | None:
    """A counter's value (``"1234\\n"``), or None for ``N/A (no PMA)``, garbage or no
    read."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def parse_state(raw: bytes | None) -> int | None:
    """The number of a ``state`` or ``phys_state`` line (``"4: ACTIVE"`` -> 4)."""
    m = _STATE.match(raw) if raw is not None else None
    return int(m.group(1)) if m else None


def parse_rate(raw: bytes | None) -> float | None:
    """Gb/s of a ``rate`` line (``"100 Gb/sec (4X EDR)"`` -> 100.0, ``"2.5 Gb/sec (1X
    SDR)"`` -> 2.5)."""
    m = _RATE.match(raw) if raw is not None else None
    return float(m.group(1)) if m else None


def parse_word(raw: bytes | None) -> str | None:
    """A one-word attribute (``link_layer``, a netdev's name), stripped."""
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace").strip()
    return text or None


@dataclass(frozen=True)
class Port:
    """One port's directory and the counter files it holds (names as the kernel has
    them; ``hw_counters`` without ``lifespan``); ``link_layer`` as its file says it (None
    when it cannot be read: it changes only with the device); ``netdev`` the network
    interface the kernel ties to it, or "" where it has none or it cannot be told."""

    device: str
    port: str
    path: str
    counters: tuple[str, ...]
    hw_counters: tuple[str, ...]
    netdev: str
    link_layer: str | None = None


@dataclass(frozen=True)
class Device:
    """One RDMA device: its directory, its device-wide driver counters and its ports."""

    name: str
    path: str
    hw_counters: tuple[str, ...]
    ports: tuple[Port, ...]


def infiniband_dir(sys: Path) -> str:
    """``/sys/class/infiniband`` under a host's ``/sys``."""
    return str(sys / "class" / "infiniband")


def list_devices(class_dir: str) -> list[str]:
    """The devices under ``class_dir``, sorted; none when the directory is not there (no
    RDMA driver loaded: the kernel makes it with the first device class). Raises other
    OSError (a permission denied)."""
    try:
        return sorted(os.listdir(class_dir))
    except FileNotFoundError:
        return []


def _names(path: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(n for n in os.listdir(path) if n != "lifespan"))
    except (FileNotFoundError, NotADirectoryError):
        return ()


def _netdev(dev_path: str, port: str, n_ports: int) -> str:
    """The port's network interface: a RoCE port's first GID names it
    (``gid_attrs/ndevs/0``, print_ndev); otherwise the interfaces of the device's PCI
    function (``device/net/*``: IPoIB's ``ib0``), the one whose ``dev_port`` is the
    port's index from 0 where there are several (IPoIB and mlx4_en set it so)."""
    ndev = parse_word(read_raw(f"{dev_path}/ports/{port}/gid_attrs/ndevs/0"))
    if ndev:
        return ndev
    net = f"{dev_path}/device/net"
    found = _names(net)
    if len(found) == 1 and n_ports == 1:
        return found[0]
    for iface in found:
        if parse_counter(read_raw(f"{net}/{iface}/dev_port")) == int(port) - 1:
            return iface
    return ""


def scan_device(class_dir: str, name: str) -> Device:
    """The layout of device ``name``: its ports (numbered directories) with the counter
    files each holds and their link layer, and its device-wide ``hw_counters``. Raises
    OSError when the device's ``ports`` directory cannot be listed (the device went
    away)."""
    path = f"{class_dir}/{name}"
    numbers = sorted((p for p in os.listdir(f"{path}/ports") if p.isdigit()), key=int)
    ports = tuple(
        Port(name, p, f"{path}/ports/{p}", _names(f"{path}/ports/{p}/counters"),
             _names(f"{path}/ports/{p}/hw_counters"), _netdev(path, p, len(numbers)),
             parse_word(read_raw(f"{path}/ports/{p}/link_layer")))
        for p in numbers)
    return Device(name, path, _names(f"{path}/hw_counters"), ports)


def pci_address(class_dir: str, name: str) -> str | None:
    """The PCI address of the function device ``name`` drives (its ``device`` link's
    last component), or None where it has none (a software device: rxe, siw) or the
    link cannot be read."""
    try:
        target = os.path.basename(os.readlink(f"{class_dir}/{name}/device"))
    except OSError:
        return None
    return target if _PCI_ADDRESS.match(target) else None


def passed_through(fn: PciFunction) -> bool:
    """Whether ``fn`` is bound to a driver that hands it over whole (vfio, pci-stub)."""
    return "vfio" in fn.driver or fn.driver in PASSTHROUGH_DRIVERS


def needs_rdma(fn: PciFunction) -> bool:
    """Whether ``fn`` must have an RDMA device on this host: an InfiniBand controller
    (class 0x0207) or an EFA function (vendor 0x1d0f, :data:`EFA_DEVICES`), unless the
    host made it as an SR-IOV virtual function (handed to a guest or a pod, whose RDMA
    device may live in another network namespace) or it is bound to a passthrough
    driver. A ConnectX Ethernet function (class 0x0200) does not count: without
    mlx5_ib loaded it is a plain NIC."""
    if fn.virtfn or passed_through(fn):
        return False
    return fn.pci_class >> 8 == INFINIBAND_CLASS or (
        fn.vendor == AMAZON_VENDOR and fn.device in EFA_DEVICES)
