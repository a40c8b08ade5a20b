"""Run a program bounded in time and output: its own session, an argv list (no shell),
stdout and stderr read without blocking, a capped part of each kept and the rest read and
dropped until EOF (as node-problem-detector does, so a program that says too much still
ends with its exit status), the whole process group killed at the deadline and when the
program ends (whatever it left running in the background).

The program's exit is seen through a pidfd (or polled where there is none) without
reaping it, so the group is killed while its leader's PID cannot have been reused.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

MINIMAL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
DRAIN_CHUNK = 1 << 20  # bytes a read takes once past the kept part (few reads per flood)
_AFTER_EXIT = 0.2      # how long output is still read after the program itself exits


@dataclass
class Ran:
    """How a run ended: ``status`` is the exit status (-N for a signal), None when the
    program could not start or ran past its timeout (``error`` says which)."""

    status: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    error: str = ""
    timed_out: bool = False


def find_program(name: str, path: str | None = None) -> str | None:
    """Where the program ``name`` is found on ``path`` (guardian's own $PATH when None),
    as ``shutil.which`` finds it; None when it is not."""
    return shutil.which(name, path=path)


def cannot_run(prog: str, path: str = MINIMAL_ENV["PATH"]) -> str | None:
    """Why ``prog`` (an absolute path, or a name looked for on ``path``) cannot be run:
    "not found" (no such regular file) or "is not executable"; None when it can."""
    found = prog if prog.startswith("/") else find_program(prog, path)
    if found is None or not os.path.isfile(found):
        return "not found"
    if not os.access(found, os.X_OK):
        return "is not executable"
    return None


def run_bounded(argv: list[str], timeout: float, keep: int = 4096,
                env: dict[str, str] | None = None, cwd: str = "/",
                stop: threading.Event | None = None) -> Ran:
    """Run ``argv`` for at most ``timeout`` seconds, keeping ``keep`` bytes of each stream;
    ended early (as a timeout) when ``stop`` is set (guardian is stopping)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=MINIMAL_ENV if env is None else env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                close_fds=True)
    except OSError as exc:
        return Ran(None, b"", b"", time.monotonic() - started,
                   error=f"cannot run {argv[0]}: {exc.strerror or exc}")
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    read = dict.fromkeys(bufs, 0)
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)
    deadline = started + timeout
    exited = False
    try:
        while True:
            if not exited and _exited(proc.pid):
                exited = True
                deadline = min(deadline, time.monotonic() + _AFTER_EXIT)
                if pidfd is not None:
                    sel.unregister(pidfd)
            if exited and all(read[fd] < 0 for fd in bufs):
                break
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                break
            wait = 0.05 if pidfd is None else 0.2 if stop is not None else left
            for key, _ in sel.select(min(left, wait)):
                fd = int(key.fd)
                if fd == pidfd:
                    continue
                try:
                    chunk = os.read(fd, 65536 if len(bufs[fd]) < keep else DRAIN_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    read[fd] = -1
                    continue
                buf = bufs[fd]
                if len(buf) < keep:
                    buf += chunk[:keep - len(buf)]
                read[fd] += len(chunk)
    finally:
        # kill the group while the leader is unreaped: its PID (the group's id) is ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
        if pidfd is not None:
            os.close(pidfd)
    seconds = time.monotonic() - started
    out, err = bytes(bufs[out_fd]), bytes(bufs[err_fd])
    if not exited:
        why = "stopped with guardian" if stop is not None and stop.is_set() \
            else f"timed out after {timeout:g}s"
        return Ran(None, out, err, seconds, error=why, timed_out=True)
    return Ran(proc.returncode, out, err, seconds)


def read_pipe(fd: int, size: int = 1 << 16) -> bytes:
    """One read of a child's output pipe, set non-blocking: b"" at its end. Raises
    BlockingIOError while it holds nothing, OSError as read() does."""
    return os.read(fd, size)


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:  # a kernel before 5.3
        return None


def _exited(pid: int) -> bool:
    """Whether ``pid`` (our child) has ended, leaving it unreaped."""
    try:
        got = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return got is not None and got.si_pid == pid
