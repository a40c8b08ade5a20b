"""The systemd unit guardian runs under, read for what its sandbox lets actions do: the
unit as installed (``/etc/systemd/system/guardian.service``, else the package's own) or a
unit file named, and their drop-ins, in the order systemd applies them (parsed by
:mod:`guardian.core.unitsandbox`); the addresses a host name has here; and the device
groups of /proc/devices a node's major belongs to."""

from __future__ import annotations

import os
import socket
import stat
from importlib import resources
from pathlib import Path

UNIT_NAME = "guardian.service"
_UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system",
              "lib/systemd/system")
_YES = {"yes", "true", "on", "1", "strict"}


def unit_texts(root: Path = Path("/")) -> list[str]:
    """The unit's text, then its drop-ins' in the order systemd applies them."""
    return [text for _, text in unit_sources(root)]


def unit_sources(root: Path = Path("/"), unit: Path | None = None
                 ) -> list[tuple[str, str]]:
    """``(path, text)`` of the unit, then of its drop-ins in the order systemd applies
    them. ``unit``: that file and the drop-ins in ``UNIT.d/`` beside it; else the
    installed unit (the package's own when none is) and the drop-ins of every unit
    directory, /etc's overriding a same-named one elsewhere."""
    if unit is not None:
        confs = sorted(unit.with_name(unit.name + ".d").glob("*.conf"))
        return [(str(unit), unit.read_text()), *((str(c), c.read_text()) for c in confs)]
    out: list[tuple[str, str]] = []
    for d in _UNIT_DIRS:
        path = root / d / UNIT_NAME
        if path.is_file():
            out.append((str(path), path.read_text()))
            break
    else:
        shipped = resources.files("guardian") / "data" / "systemd" / UNIT_NAME
        out.append((f"the package's {UNIT_NAME}", shipped.read_text()))
    dropins: dict[str, Path] = {}
    for d in reversed(_UNIT_DIRS):  # /etc's drop-in overrides a same-named one elsewhere
        for conf in sorted((root / d / f"{UNIT_NAME}.d").glob("*.conf")):
            dropins[conf.name] = conf
    out += [(str(dropins[name]), dropins[name].read_text()) for name in sorted(dropins)]
    return out


def addresses(host: str) -> list[str]:
    """The addresses ``host`` resolves to here (a literal address: itself); empty when
    it does not resolve."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in found})


def nameservers(root: Path = Path("/")) -> list[str]:
    """The name servers of ``/etc/resolv.conf`` (a name is looked up through them)."""
    try:
        text = (root / "etc" / "resolv.conf").read_text()
    except OSError:
        return []
    return [words[1] for words in (line.split() for line in text.splitlines())
            if len(words) >= 2 and words[0] == "nameserver"]


def directive(texts: list[str], key: str) -> str | None:
    """The value of ``key`` in the [Service] settings, the last assignment winning."""
    value = None
    for text in texts:
        for line in text.splitlines():
            k, sep, v = line.strip().partition("=")
            if sep and k.strip() == key:
                value = v.strip()
    return value


def cgroupfs_read_only(texts: list[str]) -> bool:
    """Whether the unit makes /sys/fs/cgroup read-only (ProtectControlGroups=yes)."""
    value = directive(texts, "ProtectControlGroups")
    return value is not None and value.lower() in _YES


def proc_devices(root: Path = Path("/")) -> dict[str, dict[int, list[str]]]:
    """The device groups of ``/proc/devices`` by kind (``char``, ``block``) and major:
    each major's names in the order listed (one major may have several: the NVIDIA
    driver since 545 registers 195 as ``nvidia`` and ``nvidiactl``). fs/char_dev.c,
    chrdev_show: ``seq_printf(f, "%3d %s\\n", cd->major, cd->name)`` under "Character
    devices:", and block devices' alike under "Block devices:". Empty when unreadable."""
    out: dict[str, dict[int, list[str]]] = {"char": {}, "block": {}}
    try:
        text = (root / "proc" / "devices").read_text()
    except OSError:
        return out
    kind = ""
    for line in text.splitlines():
        if line.strip() in ("Character devices:", "Block devices:"):
            kind = "char" if line.startswith("Character") else "block"
            continue
        number, _, name = line.strip().partition(" ")
        if kind and number.isdigit() and name.strip():
            out[kind].setdefault(int(number), []).append(name.strip())
    return out


def device_groups(path: str, root: Path = Path("/")) -> tuple[str, ...]:
    """The ``DeviceAllow=`` groups (``char-nvidia``) that take in the device node at
    ``path`` on this host: one per name /proc/devices lists for its major. Empty where
    ``path`` is no device node here (then only a path entry is known to grant it)."""
    try:
        st = os.stat(root / path.lstrip("/"))
    except OSError:
        return ()
    if stat.S_ISCHR(st.st_mode):
        kind = "char"
    elif stat.S_ISBLK(st.st_mode):
        kind = "block"
    else:
        return ()
    names = proc_devices(root)[kind].get(os.major(st.st_rdev), [])
    return tuple(f"{kind}-{name}" for name in names)
