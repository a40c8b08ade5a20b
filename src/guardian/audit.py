"""The audit log: one JSON object per line, appended and fsynced before the next action,
so a crash never loses what was decided or done."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AuditLog:
    """Append-only JSON-lines file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                           0o640)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str) + "\n"
        data = line.encode()
        while data:
            n = os.write(self._fd, data)
            data = data[n:]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class TornLine:
    """A line that does not parse: a crash mid-write (last line) or damage."""

    line_no: int
    text: str


def read_audit(path: str | Path) -> Iterator[dict[str, Any] | TornLine]:
    """Records of an audit log; unparsable lines come back as :class:`TornLine`."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict) or not raw.endswith(b"\n"):
                    raise ValueError
                yield rec
            except ValueError:
                yield TornLine(n, raw.decode(errors="replace"))
