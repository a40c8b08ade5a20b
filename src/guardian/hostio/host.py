"""The host root every source and action reads through, so fixture trees and recordings
exercise the same code as the live host."""

from __future__ import annotations

import ctypes
import errno
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


def exists(path: str | Path) -> bool:
    """Whether ``path`` is there (a symlink: its target). Raises OSError other than "no
    such file" (a permission denied on the way), as ``Path.exists`` does."""
    return Path(path).exists()


def is_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory (symlinks followed). Raises as :func:`exists`."""
    return Path(path).is_dir()


def on_read_only_filesystem(path: str | Path) -> bool:
    """Whether ``path`` is on a file system mounted read-only; False when that cannot be
    asked."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def sync_filesystems() -> None:
    """Write every file system's dirty pages back (sync(2))."""
    os.sync()


def resolve_under(root: Path, path: str) -> Path:
    """``path`` on the host at ``root``, its symlinks followed inside that root (an
    absolute link such as /var/run -> /run points into the host, not out of it)."""
    out = root
    parts = [x for x in path.split("/") if x]
    for _ in range(40):  # symlink hops
        if not parts:
            return out
        part = parts.pop(0)
        if part == "..":
            out = out.parent if out != root else root
            continue
        nxt = out / part
        if nxt.is_symlink():
            target = str(nxt.readlink())
            parts = [x for x in target.split("/") if x] + parts
            if target.startswith("/"):
                out = root
            continue
        out = nxt
    return out


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


def write_kernel_file(path: str | Path, text: str) -> None:
    """Write ``text`` to a /proc or /sys file in one write() (a knob such as
    ``memory.reclaim`` acts on each write). Raises OSError as the write does."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_value(path: str | Path) -> str:
    """The text of a file that holds one value (a boot id, a sysfs or cgroup knob),
    stripped. Raises OSError, or ValueError when it is not UTF-8."""
    return Path(path).read_text().strip()


def boot_id(path: Path) -> str:
    """The kernel's boot id (a new one after each boot) read from ``path``
    (``/proc/sys/kernel/random/boot_id`` on the host); "" when it cannot be read."""
    try:
        return read_value(path)
    except OSError:
        return ""


def access_refused(path: str | Path) -> str | None:
    """Why this process may not open ``path`` to read and write, as access(2) answers:
    the errno's name (``EPERM``, ``EACCES``, ``ENOENT``), or None where it may. The
    device is not opened. For a device node access(2) asks the device cgroup too
    (fs/namei.c inode_permission calls devcgroup_inode_permission), which refuses with
    EPERM: security/device_cgroup.c, devcgroup_check_permission: "returns 0 on success,
    -EPERM case the operation is not permitted", and a BPF device program's refusal is
    -EPERM as well; a file's mode refuses with EACCES."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.access(os.fsencode(path), os.R_OK | os.W_OK) == 0:
        return None
    code = ctypes.get_errno()
    return errno.errorcode.get(code, str(code))
