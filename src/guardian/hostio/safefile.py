"""Files that others may have planted or could change, handled as root must handle them:
read only as regular files, without blocking (a FIFO or a device named like the file is
refused, never waited on), without following a final symlink, capped in size; written only
as a new file (``O_EXCL|O_NOFOLLOW``: never through a planted symlink, never over a file
someone put there); and programs run as root only when no one but root (or guardian's own
user) could have replaced them or any directory on their path."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from guardian.hostio.textfile import read_capped_bytes

_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, opened with
    ``O_NONBLOCK|O_NOFOLLOW`` and checked with ``fstat``. Raises FileNotFoundError when it
    is not there, OSError (a symlink: ELOOP) or ValueError (not a regular file, too
    large) otherwise."""
    fd = os.open(path, _READ)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size} bytes; at most {max_bytes} are read")
        return read_capped_bytes(lambda n: os.read(fd, n), max_bytes)
    finally:
        os.close(fd)


def read_in_directory(directory: str | Path, name: str, max_bytes: int) -> bytes:
    """:func:`read_regular` of ``directory/name``, where a symlink is followed only to a
    file inside the same directory (a ConfigMap volume's ``name -> ..data/name``); one
    that leads out of it is refused (ValueError)."""
    path = os.path.join(directory, name)
    real = os.path.realpath(path)
    top = os.path.realpath(directory)
    if real != path and os.path.commonpath([real, top]) != top:
        raise ValueError(f"a symlink out of {directory}")
    return read_regular(real, max_bytes)


def list_names(directory: str | Path) -> list[str]:
    """The names in a directory, sorted. Raises OSError."""
    return sorted(os.listdir(directory))


def create_new(path: str | Path, data: bytes, mode: int = 0o644,
               dir_fd: int | None = None) -> None:
    """Write ``data`` to a file that must not exist yet (``O_CREAT|O_EXCL|O_NOFOLLOW``: a
    planted symlink or file is refused with FileExistsError, never written through);
    ``dir_fd``: ``path`` is relative to that open directory (see :func:`open_directory`).
    Raises OSError; a file half written is removed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path, dir_fd=dir_fd)
        raise
    os.close(fd)


def open_directory(path: str | Path, dir_fd: int | None = None, create: bool = False,
                   mode: int = 0o755) -> int:
    """An open directory (close it), never through a final symlink (a planted one is
    refused: OSError ELOOP or ENOTDIR); ``create``: made first when missing."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, mode, dir_fd=dir_fd)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                   dir_fd=dir_fd)


def remove(path: str | Path, dir_fd: int | None = None) -> None:
    """Remove a file (not following a symlink; relative to ``dir_fd`` if given)."""
    os.unlink(path, dir_fd=dir_fd)


def _trusted_owner(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def replaceable_by_others(path: str | Path) -> str | None:
    """Why another user could replace the file at ``path`` (an absolute path) or what it
    runs, or None: the file (its symlinks followed) must be owned by root or guardian's
    own user and writable by neither group nor others, and so must every directory above
    it and above each symlink on the way, except a root-owned sticky directory (``/tmp``:
    no one may rename or remove another's entry in it). Missing: "not found"."""
    seen: set[str] = set()
    todo = [os.path.abspath(path)]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            st = os.lstat(p)
        except OSError as exc:
            return f"{p}: {exc.strerror or exc}"
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(p)
            todo.append(os.path.normpath(os.path.join(os.path.dirname(p), target)))
        elif not _trusted_owner(st):
            return f"{p} is owned by uid {st.st_uid}, neither root nor guardian's"
        elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (f"{p} is writable by group or others "
                    f"(mode {stat.S_IMODE(st.st_mode):04o})")
        parent = os.path.dirname(p)
        while parent != p:
            try:
                dst = os.lstat(parent)
            except OSError as exc:
                return f"{parent}: {exc.strerror or exc}"
            if stat.S_ISLNK(dst.st_mode):
                # the directory is reached through a symlink: its target is checked too
                todo.append(os.path.normpath(os.path.join(os.path.dirname(parent),
                                                          os.readlink(parent))))
            elif not _trusted_owner(dst):
                return f"{parent} is owned by uid {dst.st_uid}, neither root nor guardian's"
            elif dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (
                    dst.st_mode & stat.S_ISVTX and dst.st_uid == 0):
                return (f"{parent} is writable by group or others "
                        f"(mode {stat.S_IMODE(dst.st_mode):04o})")
            p, parent = parent, os.path.dirname(parent)
    return None
