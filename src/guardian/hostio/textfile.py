"""node_exporter's textfile-collector files (``*.prom``), read as guardian trusts them:
regular files only, opened without blocking (a FIFO or a device named ``x.prom`` is
refused, never waited on), capped in size, and only those root or guardian's own user
owns and no group or other user may write, in a directory trusted the same way."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path


def untrusted(st: os.stat_result) -> str | None:
    """Why a file or directory others could write is refused, or None: it must be owned by
    root or guardian's own user and writable by neither group nor others."""
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}, neither root nor guardian's"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def read_capped(path: Path, max_bytes: int) -> tuple[str, float]:
    """A regular file's text (opened without blocking, at most ``max_bytes``) and its
    mtime; a file others could write is refused. Raises OSError or ValueError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if (why := untrusted(st)) is not None:
            raise ValueError(why)
        if st.st_size > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        return read_capped_stream(lambda n: os.read(fd, n), max_bytes), st.st_mtime
    finally:
        os.close(fd)


def read_capped_stream(read: Callable[[int], bytes], max_bytes: int,
                       deadline: float | None = None) -> str:
    """All of a stream as UTF-8 text, read in chunks by ``read`` until it gives none: at
    most ``max_bytes``, and (with a monotonic ``deadline``) whole by then. Raises
    ValueError past the cap and TimeoutError past the deadline."""
    return read_capped_bytes(read, max_bytes, deadline).decode("utf-8")


def read_capped_bytes(read: Callable[[int], bytes], max_bytes: int,
                      deadline: float | None = None) -> bytes:
    """:func:`read_capped_stream`'s bytes, undecoded."""
    chunks, size = [], 0
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("not read whole in time")
        chunk = read(1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def is_directory(path: str | Path) -> bool:
    """Whether a textfile directory is there (symlinks followed); False also when it
    cannot be looked at."""
    return os.path.isdir(path)


def textfiles(directory: Path) -> list[str]:
    """The names of the ``*.prom`` files in a textfile directory, sorted; a directory
    others could write is refused. Raises OSError or ValueError."""
    if (why := untrusted(os.stat(directory))) is not None:
        raise ValueError(why)
    return sorted(n for n in os.listdir(directory) if n.endswith(".prom"))
