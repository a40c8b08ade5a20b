"""One guardian per state directory: two (the package's unit beside a DaemonSet, both
writing /var/lib/guardian) would both act on every rule and overwrite each other's state.
The service holds an exclusive ``flock`` on ``guardian.lock`` there for its lifetime; the
kernel drops it when the process ends, however it ends.

The lock needs no space: only the pid written into the file for the message of another
instance does, and that is skipped on a full disk. A lock file that cannot even be created
(a read-only or full filesystem, an I/O error) is :class:`LockUnavailable`: the service
runs failing closed (it acts on nothing without its state durable, which such a directory
cannot hold either) and takes the lock once it can."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from guardian.core.errors import GuardianError

LOCK_NAME = "guardian.lock"


class InstanceLocked(GuardianError):
    """Another process holds the lock, or it cannot be taken; the message says which."""


class LockUnavailable(InstanceLocked):
    """The lock file cannot be created or opened for what the disk is now (read-only,
    full, failing): no setting to fix, and worth taking again later."""


# what the disk is, not how guardian is set up: a read-only or full filesystem, a quota,
# an I/O error
DISK_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO})


class InstanceLock:
    """The lock on one state directory, taken by :meth:`acquire`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self.fd = -1

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def acquire(self) -> None:
        """Take the lock, or raise :class:`InstanceLocked` with a one-line reason
        (:class:`LockUnavailable` when it is the disk that says no)."""
        if self.held:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._open()
        except OSError as exc:
            why = f"cannot use the state directory {self.path.parent}: {exc.strerror or exc}"
            if exc.errno in DISK_ERRNOS:
                raise LockUnavailable(why) from None
            raise InstanceLocked(why) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read(fd)
            os.close(fd)
            if exc.errno in (11, 13):  # EAGAIN/EWOULDBLOCK, EACCES: held by another
                raise InstanceLocked(
                    f"another guardian{f' (pid {holder})' if holder else ''} already uses "
                    f"the state directory {self.path.parent}; one per node (stop the other "
                    "first, or give this one a state directory of its own)") from None
            raise InstanceLocked(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        with contextlib.suppress(OSError):  # the pid is for messages: a full disk skips it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def take(self) -> str:
        """Why the lock is not held ("" when it is), taken now if it can be."""
        try:
            self.acquire()
        except InstanceLocked as exc:
            return str(exc)
        return ""

    def _open(self) -> int:
        flags = os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | flags, 0o600)
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            # a read-only filesystem: a lock file already there locks as well read-only
            try:
                return os.open(self.path, os.O_RDONLY | flags)
            except FileNotFoundError:
                raise exc from None

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def holder(directory: Path) -> str | None:
    """The pid of the guardian that holds the lock on ``directory`` now ("" when it
    wrote none), or None when no process holds it (or the lock file cannot be read)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _read(fd)  # held: exclusively, by the service
    finally:
        os.close(fd)  # closing drops a shared lock this took
    return None


def _read(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    return ""
