"""The audit log: one JSON object per line, appended and fsynced before the next action,
so a crash never loses what was decided or done.

Rotation: before each record the log checks that its path still names the file it holds
open. When logrotate (the packages' /etc/logrotate.d/node-guardian) has renamed it
away, the next record opens a new file at the path, so a plain rename rotation works
without a signal, a postrotate or copytruncate. Nothing guardian needs at run time is read back
from this log (the state, the restart records and the IRQ originals live in the state
directory), so a rotation loses nothing it depends on."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AuditLog:
    """Append-only JSON-lines file. Opened without following a symlink (a link planted
    where the log goes must not aim root's writes elsewhere); a torn last line, left by a
    crash or a full disk, is closed before anything is appended, so no record is ever
    glued onto it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = open_append(self.path)
        self._torn = _ends_torn(self._fd)

    def _follow_rotation(self) -> None:
        """Open the file at the path again if it is no longer the one held open (renamed
        away by a rotation, or removed)."""
        held = os.fstat(self._fd)
        try:
            now = os.stat(self.path, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                return
        except FileNotFoundError:
            pass
        fd = open_append(self.path)  # raises (a link planted there): no record is written
        os.close(self._fd)
        self._fd = fd
        self._torn = _ends_torn(fd)

    def write(self, record: dict[str, Any]) -> None:
        """Append and fsync one record. Raises OSError (ENOSPC, EROFS, EIO): then nothing
        that depends on the record may happen."""
        self._follow_rotation()
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str) + "\n"
        data = (b"\n" if self._torn else b"") + line.encode()
        self._torn = True  # until the whole line is down
        while data:
            n = os.write(self._fd, data)
            data = data[n:]
        os.fsync(self._fd)
        self._torn = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_append(path: Path) -> int:
    """An append-only descriptor on a regular file, never through a symlink."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o640)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def _ends_torn(fd: int) -> bool:
    """Whether the file behind ``fd`` ends in the middle of a line."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


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
