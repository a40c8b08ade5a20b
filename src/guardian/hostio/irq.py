"""IRQs on this host: their names (/proc/interrupts), a NIC's (its PCI device's
``msi_irqs``), the NICs a kernel driver is bound to (their ``device/driver`` links), the
online cores, and each IRQ's ``smp_affinity_list``."""

from __future__ import annotations

from pathlib import Path

from guardian.hostio.host import Host


def parse_cpu_list(text: str) -> list[int]:
    """ "0-3,8" -> [0, 1, 2, 3, 8]. Raises ValueError."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        out.update(range(int(lo), int(hi) + 1) if sep else (int(lo),))
    return sorted(out)


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def irq_names(host: Host) -> dict[int, str]:
    """IRQ number -> its name (last column of /proc/interrupts)."""
    out: dict[int, str] = {}
    for line in (host.proc / "interrupts").read_text().splitlines()[1:]:
        head, sep, rest = line.partition(":")
        if sep and head.strip().isdigit():
            parts = rest.split()
            out[int(head)] = parts[-1] if parts else ""
    return out


def interface_irqs(host: Host, iface: str) -> list[int]:
    """IRQs of a NIC's PCI device (``device/msi_irqs``, or its parent's for virtio)."""
    dev = host.sys / "class" / "net" / iface / "device"
    for d in (dev, dev / ".."):
        msi = d / "msi_irqs"
        if msi.is_dir():
            return sorted(int(p.name) for p in msi.iterdir() if p.name.isdigit())
    return []


def interface_driver(host: Host, iface: str) -> str:
    """The kernel driver bound to a NIC: the last part of the link
    ``/sys/class/net/IF/device/driver`` (the kernel makes ``device`` when it adds the
    interface, device_add_class_symlinks(), and ``driver`` when a driver binds,
    driver_sysfs_add()): ``ena`` for an ENA NIC, whatever its name. "" for a virtual
    interface (no ``device``), an unbound device, or a name sysfs does not have."""
    try:
        return (host.sys / "class" / "net" / iface / "device" / "driver").readlink().name
    except (OSError, ValueError):
        return ""


def interfaces_by_driver(host: Host, driver: str) -> list[str]:
    """The NICs bound to ``driver`` (``ena``: ``ens5`` on Amazon Linux 2023 and Ubuntu,
    ``eth0`` on Amazon Linux 2), sorted by name; none when /sys/class/net cannot be read."""
    try:
        names = sorted(p.name for p in (host.sys / "class" / "net").iterdir())
    except OSError:
        return []
    return [n for n in names if interface_driver(host, n) == driver]


def online_cpus(host: Host) -> list[int]:
    """The online cores. Raises OSError or ValueError."""
    return parse_cpu_list((host.sys / "devices/system/cpu/online").read_text())


def affinity_path(host: Host, irq: int | str) -> Path:
    return host.proc / "irq" / str(irq) / "smp_affinity_list"


def read_affinity(path: str | Path) -> list[int]:
    """The cores an IRQ may run on. Raises OSError or ValueError."""
    return parse_cpu_list(Path(path).read_text())


def write_affinity(path: str | Path, cpus: str) -> str:
    """Write a core list (``"0-3,8"``) and read it back, as the kernel took it. Raises
    OSError, or ValueError when the read-back is no core list."""
    Path(path).write_text(cpus + "\n")
    return format_cpu_list(read_affinity(path))
