"""The host root every source and action reads through, so fixture trees and recordings
exercise the same code as the live host."""

from __future__ import annotations

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
