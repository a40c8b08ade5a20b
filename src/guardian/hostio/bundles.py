"""The evidence bundles on the host: ``state_dir``/evidence/ (:data:`EVIDENCE_DIR`), a
directory of guardian's own holding one bundle a capture (``<time>-<rule>/``), the capture
lock (:data:`LOCK`) and the record of when captures were taken (:data:`RECORD`).

Root writes here, so nothing another user controls may choose where: the path is opened
one component at a time from ``/`` and never through a symlink (``O_NOFOLLOW``); every
directory above the state directory must be root's or guardian's and writable by others
only when sticky (as /tmp), and the state directory, evidence/ and each bundle must be
guardian's own (its effective UID) and writable by no one else: anything else is refused
(:class:`Untrusted`), never repaired or followed. Directories are made 0700; every file is
written relative to its directory's descriptor (``openat``), whole or not at all (a
temporary file renamed over, ``renameat``). Bundles are listed and pruned oldest first by
the time their ``summary.json`` records (else the directory's mtime), never by name, and
only bundles owned by evidence/'s owner count. What goes into a bundle is the
``evidence.profile`` action's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from guardian.core.errors import GuardianError

EVIDENCE_DIR = "evidence"  # under the state directory
RECORD = "captures.json"
LOCK = ".capture.lock"
SUMMARY = "summary.json"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_READ = 1 << 20  # a record or summary larger than this is not ours


class Untrusted(GuardianError, OSError):
    """A directory on the way that someone other than guardian could change."""


def _check(st: os.stat_result, where: str, owners: tuple[int, ...], own: bool) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted(errno.ENOTDIR, f"{where} is not a directory")
    if st.st_uid not in owners:
        raise Untrusted(errno.EPERM, f"{where} is owned by UID {st.st_uid}, not by "
                        f"guardian (UID {owners[-1]})")
    writable = st.st_mode & 0o022
    if writable and (own or not st.st_mode & stat.S_ISVTX):
        raise Untrusted(errno.EPERM, f"{where} is writable by other users "
                        f"(mode {stat.S_IMODE(st.st_mode):04o})")


def open_trusted(path: Path, own: int, create: bool = False,
                 owners: tuple[int, ...] | None = None) -> int:
    """A descriptor of the directory ``path``, opened from ``/`` one component at a time,
    never through a symlink (those above the last ``own`` components resolved first).
    Every directory above the last ``own`` components is root's or guardian's and
    writable by others only when sticky; the last ``own`` are guardian's (``owners``: or
    one of those) and writable by no one else, made (0700) when missing and ``create``.
    Raises :class:`Untrusted`, or OSError (FileNotFoundError: missing)."""
    euid = os.geteuid()
    owners = owners or (euid,)
    # the directories above may be reached through symlinks (each then checked where it
    # leads); the last ``own`` are taken as named, and never through one
    tail = Path(os.path.abspath(path)).parts[-own:] if own else ()
    above = Path(os.path.abspath(path)).parents[own - 1] if own else Path(path)
    parts = (*Path(os.path.realpath(above)).parts[1:], *tail)
    fd = os.open("/", _DIR)
    try:
        for i, part in enumerate(parts):
            mine = i >= len(parts) - own
            if mine and create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            try:
                nfd = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Untrusted(exc.errno, f"/{'/'.join(parts[:i + 1])} is a symlink "
                                    "or not a directory") from None
                raise
            os.close(fd)
            fd = nfd
            _check(os.fstat(fd), "/" + "/".join(parts[:i + 1]),
                   owners if mine else (0, euid), mine)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_at(dir_fd: int, name: str, data: bytes | str, mode: int = 0o644) -> None:
    """``name`` in the directory ``dir_fd``, whole or not at all: a new temporary file
    there (never through a symlink), fsync, ``renameat`` over ``name``. Raises OSError."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = f".{name}-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def read_at(dir_fd: int, name: str, owner: int | None = None) -> bytes:
    """A regular file ``name`` of ``dir_fd`` (never through a symlink), of ``owner`` when
    given. Raises OSError (FileNotFoundError: none) or ValueError (not a file of ours)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                 dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and st.st_uid != owner):
            raise ValueError(f"{name} is not a regular file of UID {owner}")
        out = b""
        while len(out) <= _MAX_READ:
            chunk = os.read(fd, 65536)
            if not chunk:
                return out
            out += chunk
        raise ValueError(f"{name} is larger than {_MAX_READ} bytes")
    finally:
        os.close(fd)


class Bundle:
    """One bundle directory, held open: its files are written relative to it."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def write(self, name: str, data: bytes | str) -> None:
        write_at(self.fd, name, data)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def summary(self) -> dict[str, Any] | None:
        try:
            got = json.loads(read_at(self.fd, SUMMARY, os.fstat(self.fd).st_uid))
        except (OSError, ValueError):
            return None
        return got if isinstance(got, dict) else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_bundle(path: Path) -> Bundle:
    """An existing bundle ``state_dir``/evidence/<name>, checked as the evidence directory
    is (the state directory, evidence/ and the bundle guardian's own). Raises OSError."""
    return Bundle(open_trusted(path, own=3), path)


class CaptureLock:
    """The capture lock (an exclusive ``flock`` on :data:`LOCK`, which the kernel drops
    when its holder ends, however it ends)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

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


class EvidenceDir:
    """``state_dir``/evidence/, held open (:meth:`open`)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path
        self.owner = os.fstat(fd).st_uid

    @classmethod
    def open(cls, state_dir: Path, create: bool = False, reading: bool = False
             ) -> EvidenceDir:
        """The evidence directory of ``state_dir``: made (0700, the state directory too)
        when ``create``; ``reading`` (``guardian why``) accepts root's as well as this
        process's. Raises :class:`Untrusted`, or OSError (FileNotFoundError: none)."""
        path = state_dir / EVIDENCE_DIR
        owners = (0, os.geteuid()) if reading else None
        return cls(open_trusted(path, own=2, create=create, owners=owners), path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> EvidenceDir:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the record of captures --------------------------------------------------------
    def read_captures(self) -> list[float]:
        """When the recorded captures were taken (Unix time), [] when none is recorded;
        fail closed (ValueError) on a record that exists but cannot be read."""
        try:
            return [float(x) for x in json.loads(read_at(self.fd, RECORD,
                                                         self.owner))["captures"]]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"the capture record {self.path / RECORD} cannot be read: "
                             f"{exc!s}") from None

    def write_captures(self, captures: list[float]) -> None:
        """The record of captures, replaced whole. Raises OSError."""
        write_at(self.fd, RECORD, json.dumps({"captures": captures}), mode=0o600)

    # -- one capture at a time -----------------------------------------------------------
    def lock(self) -> CaptureLock:
        """The capture lock's file, opened (made when missing). Raises OSError."""
        return CaptureLock(os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW |
                                   os.O_CLOEXEC, 0o600, dir_fd=self.fd))

    def locked(self) -> bool:
        """Whether a capture holds the lock now."""
        try:
            fd = os.open(LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops a shared lock this took
        return False

    # -- the bundles ---------------------------------------------------------------------
    def make_bundle(self, name: str) -> Bundle:
        """A new bundle directory (0700); one already there is refused. Raises OSError."""
        os.mkdir(name, 0o700, dir_fd=self.fd)
        return self._bundle(name)

    def _bundle(self, name: str) -> Bundle:
        fd = os.open(name, _DIR, dir_fd=self.fd)
        try:
            _check(os.fstat(fd), str(self.path / name), (self.owner,), True)
        except BaseException:
            os.close(fd)
            raise
        return Bundle(fd, self.path / name)

    def bundles(self) -> list[tuple[str, float]]:
        """The bundles (name, when taken), oldest first: directories owned by evidence/'s
        owner and writable by no one else, timed by their summary's ``at`` (else their
        mtime), never by their names."""
        out = []
        try:
            entries = list(os.scandir(self.fd))
        except OSError:
            return []
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != self.owner or \
                    st.st_mode & 0o022:
                continue
            when = float(st.st_mtime)
            try:
                with self._bundle(e.name) as b:
                    at = (b.summary() or {}).get("at")
            except OSError:
                continue
            if isinstance(at, (int, float)) and not isinstance(at, bool):
                when = float(at)
            out.append((e.name, when))
        return sorted(out, key=lambda x: (x[1], x[0]))

    def prune(self, keep: int, max_bytes: int, keep_newest: str | None = None
              ) -> list[str]:
        """Remove the oldest bundles until at most ``keep`` remain and they take at most
        ``max_bytes`` (the newest is kept whatever its size); the names removed."""
        found = [name for name, _ in self.bundles()]
        sizes = {name: _size_at(self.fd, name) for name in found}
        removed = []
        while found and (len(found) > keep or sum(sizes[d] for d in found) > max_bytes):
            oldest = found[0]
            if oldest == keep_newest or len(found) == 1:
                break
            with contextlib.suppress(OSError):
                _rmtree_at(self.fd, oldest)
            removed.append(oldest)
            found.pop(0)
        return removed

    def latest(self, since: float | None = None) -> tuple[Path, dict[str, Any]] | None:
        """The newest bundle with a summary (taken at or after ``since``) and the
        summary, or None."""
        for name, when in reversed(self.bundles()):
            if since is not None and when < since:
                return None
            try:
                with self._bundle(name) as b:
                    summary = b.summary()
            except OSError:
                continue
            if summary is not None:
                return self.path / name, summary
        return None


def _size_at(dir_fd: int, name: str) -> int:
    total = 0
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        for e in os.scandir(fd):
            with contextlib.suppress(OSError):
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
                elif stat.S_ISDIR(st.st_mode):
                    total += _size_at(fd, e.name)
    finally:
        os.close(fd)
    return total


def _rmtree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` of ``dir_fd`` and all in it, never through a symlink."""
    fd = os.open(name, _DIR, dir_fd=dir_fd)
    try:
        for e in list(os.scandir(fd)):
            if e.is_dir(follow_symlinks=False):
                _rmtree_at(fd, e.name)
            else:
                os.unlink(e.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def latest(state_dir: Path, since: float | None = None
           ) -> tuple[Path, dict[str, Any]] | None:
    """The newest bundle under ``state_dir``'s evidence/ taken at or after ``since``, and
    its summary; None when there is none, or evidence/ is not to be trusted."""
    try:
        with EvidenceDir.open(state_dir, reading=True) as ev:
            return ev.latest(since)
    except OSError:
        return None
