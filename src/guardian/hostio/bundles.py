"""The evidence bundles on the host: ``state_dir``/evidence/ (:data:`EVIDENCE_DIR`), a
directory of root's own holding one bundle a capture (``<time>-<rule>/``), the capture
lock (:data:`LOCK`) and the record of when captures were taken (:data:`RECORD`).

Directories are made private (0700) and never used through a symlink; the record and each
bundle file are written whole or not at all (:mod:`guardian.core.atomicfile`); the record
is read back as :mod:`guardian.hostio.records` reads guardian's records. Bundles are listed
oldest first (their names begin with the time), pruned oldest first, and the newest one's
``summary.json`` read back for ``guardian why``. What goes into a bundle is the
``evidence.profile`` action's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from guardian.core.atomicfile import write_json, write_text
from guardian.hostio.records import read_json

EVIDENCE_DIR = "evidence"  # under the state directory
RECORD = "captures.json"
LOCK = ".capture.lock"
SUMMARY = "summary.json"


# -- the record of captures ------------------------------------------------------------------
def read_captures(base: Path) -> list[float]:
    """When the recorded captures were taken (Unix time), [] when none is recorded; fail
    closed (ValueError) on a record that exists but cannot be read."""
    path = base / RECORD
    try:
        return [float(x) for x in read_json(path)["captures"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"the capture record {path} cannot be read: {exc!s}") from None


def write_captures(base: Path, captures: list[float]) -> None:
    """The record of captures, replaced whole. Raises OSError."""
    write_json(base / RECORD, {"captures": captures})


# -- one capture at a time -------------------------------------------------------------------
def private_dir(path: Path) -> None:
    """A directory of root's own (made 0700 when missing), never through a symlink.
    Raises OSError (ENOTDIR: something else is there)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, f"{path} is not a directory")


class CaptureLock:
    """The capture lock of ``base`` (an exclusive ``flock`` on :data:`LOCK`, which the
    kernel drops when its holder ends, however it ends). :meth:`open` makes ``base`` (and
    the state directory above it) private and opens the lock file; :meth:`take` takes it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, base: Path) -> CaptureLock:
        """Raises OSError: the directories or the lock file cannot be made or opened."""
        private_dir(base.parent)
        private_dir(base)
        return cls(os.open(base / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                           0o600))

    def take(self) -> bool:
        """Whether the lock is now held (False: another capture holds it)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Close the lock file, which releases the lock."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def locked(base: Path) -> bool:
    """Whether a capture holds ``base``'s lock now."""
    try:
        fd = os.open(base / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a shared lock this took
    return False


# -- a bundle ---------------------------------------------------------------------------------
def make_bundle(bundle: Path) -> None:
    """A new bundle directory (0700); one already there is refused. Raises OSError."""
    os.mkdir(bundle, 0o700)


def write_file(bundle: Path, name: str, text: str) -> None:
    """``bundle``/``name``, written whole or not at all. Raises OSError."""
    write_text(bundle / name, text, mode=0o644)


# -- the bundles ------------------------------------------------------------------------------
def bundles(base: Path) -> list[Path]:
    """The bundles under ``base``, oldest first (their names begin with the time)."""
    try:
        return sorted(d for d in base.iterdir()
                      if d.name[:1].isdigit() and d.is_dir() and not d.is_symlink())
    except OSError:
        return []


def _size(d: Path) -> int:
    total = 0
    for f in d.rglob("*"):
        with contextlib.suppress(OSError):
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
    return total


def prune(base: Path, keep: int, max_bytes: int, keep_newest: Path | None = None
          ) -> list[str]:
    """Remove the oldest bundles until at most ``keep`` remain and they take at most
    ``max_bytes`` (the newest is kept whatever its size); the names removed."""
    found = bundles(base)
    sizes = {d: _size(d) for d in found}
    removed = []
    while found and (len(found) > keep or sum(sizes[d] for d in found) > max_bytes):
        oldest = found[0]
        if oldest == keep_newest or len(found) == 1:
            break
        shutil.rmtree(oldest, ignore_errors=True)
        removed.append(oldest.name)
        found.pop(0)
    return removed


def latest(base: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest bundle and its summary, or None."""
    for d in reversed(bundles(base)):
        try:
            summary = read_json(d / SUMMARY)
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict):
            return d, summary
    return None
