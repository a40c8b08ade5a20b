"""The host root every source and action reads through, so fixture trees and recordings
exercise the same code as the live host."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Host:
    """Paths of one host, relocatable under ``root`` (``/`` on the live host)."""

    root: Path = Path("/")

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    @property
    def kmsg(self) -> Path:
        return self.root / "dev" / "kmsg"

    @property
    def is_live(self) -> bool:
        return self.root == Path("/")


def read_kernel_file(path: str | Path) -> str:
    """The whole text of a /proc or /sys file, read with plain system calls: these files
    are read every tick, and a buffered text file costs several times the read itself.
    Raises OSError as ``open`` does."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")
