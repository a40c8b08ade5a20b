"""Helpers for testing rules, plugins and embeddings: a fake host root to read from,
families and checked snapshots. guardian's own tests use them too."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .host import Host
from .plugins import Registry, default_registry
from .snapshot import Family, Snapshot, labels_of


class FakeHost:
    """A host root under a directory: write the /proc, /sys and /dev files a source or an
    action reads, then hand :attr:`host` to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = Host(root)

    def write(self, path: str, text: str) -> Path:
        """Write ``text`` at ``path`` (relative to the root, e.g. ``"proc/uptime"``)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def process(self, pid: int, comm: str, state: str = "S", ppid: int = 1,
                flags: int = 0x400000, starttime: int = 5) -> None:
        """A ``/proc/<pid>/stat`` line in the kernel's format (fs/proc/array.c)."""
        self.write(f"proc/{pid}/stat", f"{pid} ({comm}) {state} {ppid} 0 0 0 -1 {flags} "
                                       + "0 " * 10 + f"{starttime} " + "0 " * 20)


def family(label: str, members: Mapping[str, float]) -> Family:
    """A one-label family: ``family("cpu", {"0": 97.0})``."""
    return {labels_of({label: key}): float(v) for key, v in members.items()}


def snapshot(time: float, values: Mapping[str, object],
             registry: Registry | None = None) -> Snapshot:
    """A snapshot checked against the signals of ``registry`` (default: the installed
    sources), as the collector checks a source's output."""
    reg = registry or default_registry()
    return Snapshot.build(time, values, reg.catalogue().values())
