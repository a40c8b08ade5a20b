"""What the systemd unit guardian runs under lets its actions write: the shipped unit as
installed (``/etc/systemd/system/guardian.service``, else the package's own) and its
drop-ins, read as systemd reads them (the last assignment wins)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

UNIT_NAME = "guardian.service"
_UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system",
              "lib/systemd/system")
_YES = {"yes", "true", "on", "1", "strict"}


def unit_texts(root: Path = Path("/")) -> list[str]:
    """The unit's text, then its drop-ins' in the order systemd applies them."""
    texts: list[str] = []
    for d in _UNIT_DIRS:
        unit = root / d / UNIT_NAME
        if unit.is_file():
            texts.append(unit.read_text())
            break
    else:
        texts.append((resources.files("guardian") / "data" / "systemd" / UNIT_NAME)
                     .read_text())
    dropins: dict[str, Path] = {}
    for d in reversed(_UNIT_DIRS):  # /etc's drop-in overrides a same-named one elsewhere
        for conf in sorted((root / d / f"{UNIT_NAME}.d").glob("*.conf")):
            dropins[conf.name] = conf
    texts += [dropins[name].read_text() for name in sorted(dropins)]
    return texts


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
