"""Real kernel objects for tests: zombies, dying memory cgroups, veth pairs, kernel-log
lines. Each helper cleans up exactly what it made, and nothing else."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.testing import MEMCG_V1
from guardian.testing import dying_memcgs as dying_memcgs  # re-exported for the tests
from guardian.testing import memcg_count as memcg_count
from guardian.testing import settle_memcgs as settle_memcgs
from tests.support.wait import wait_until

ZOMBIE_PARENT = r"""
import os, signal, sys, time
n = int(sys.argv[1])
def reap(*_):
    while True:
        try:
            if os.waitpid(-1, 0)[0] <= 0: break
        except ChildProcessError:
            break
    sys.exit(0)
signal.signal(signal.SIGTERM, reap)
for _ in range(n):
    if os.fork() == 0:
        os._exit(0)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (real kernel objects)")


@contextlib.contextmanager
def zombies(n: int) -> Iterator[subprocess.Popen[str]]:
    """A parent that never waits, with ``n`` zombie children. On exit it is asked to
    reap them (SIGTERM), so none is left behind."""
    parent = subprocess.Popen([sys.executable, "-c", ZOMBIE_PARENT, str(n)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        wait_until(lambda: _zombie_children(parent.pid) >= n, f"{n} zombie children",
                   every=0.01)
        yield parent
    finally:
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=10)


def _zombie_children(ppid: int) -> int:
    return sum(1 for p in os.listdir("/proc") if p.isdigit() and is_zombie_of(int(p), ppid))


def need_memcg_v1() -> None:
    need_root()
    if not (MEMCG_V1 / "cgroup.procs").exists():
        pytest.skip("no writable cgroup v1 memory hierarchy on this machine")


@contextlib.contextmanager
def netns_with_veth() -> Iterator[tuple[str, str, str]]:
    """A network namespace of the test's own with a veth pair inside it, both ends up.
    Yields (namespace, end a, end b)."""
    need_root()
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")
    ns = f"gtest{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        run = ["ip", "-n", ns]
        subprocess.run([*run, "link", "add", "gva", "type", "veth", "peer", "name", "gvb"],
                       check=True)
        for dev in ("gva", "gvb", "lo"):
            subprocess.run([*run, "link", "set", dev, "up"], check=True)
        yield ns, "gva", "gvb"
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)


def inject_kmsg(line: str) -> None:
    """Write one line into the kernel log. /dev/kmsg rate-limits writes per open file,
    so each line gets its own open."""
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        # the line as the driver writes it (no tag: patterns anchor at the message start);
        # a write to /dev/kmsg always carries the user facility, never the kernel's
        os.write(fd, f"<4>{line}\n".encode())
    finally:
        os.close(fd)


def drop_caches() -> None:
    """Write back dirty pages, then drop clean page cache (value 1)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1")


NEVER_WAITS = r"""
import os, sys, time
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        os._exit(0)
print("ready", flush=True)
while True:
    time.sleep(1)
"""
PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@contextlib.contextmanager
def orphaning_zombies(n: int) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """A parent that never waits and dies on SIGTERM, with ``n`` zombies. PID 1 on these
    machines does not reap orphans, so this process is a child subreaper meanwhile: the
    zombies reparent to it when their parent dies, and it reaps them on exit."""
    need_root()
    set_subreaper(True)
    parent = subprocess.Popen([sys.executable, "-c", NEVER_WAITS, str(n)],
                              stdout=subprocess.PIPE, text=True)
    zpids: list[int] = []
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"

        def all_zombies() -> bool:
            zpids[:] = [int(p) for p in os.listdir("/proc") if p.isdigit()
                        and is_zombie_of(int(p), parent.pid)]
            return len(zpids) >= n

        wait_until(all_zombies, f"{n} zombie children", every=0.01)
        yield parent, zpids
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait(timeout=10)
        for z in zpids:  # reparented to us: reap whatever nobody else did
            def reaped(z: int = z) -> bool:
                try:
                    return os.waitpid(z, os.WNOHANG)[0] == z
                except ChildProcessError:
                    return not is_zombie_of(z, os.getpid()) and not Path(f"/proc/{z}").exists()

            with contextlib.suppress(AssertionError):  # cleanup: never the test's failure
                wait_until(reaped, f"zombie {z} reaped", timeout=5, every=0.01)
        set_subreaper(False)


def is_zombie_of(pid: int, ppid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] == "Z" and int(fields[1]) == ppid


@contextlib.contextmanager
def tmpfs(where: Path, *options: str) -> Iterator[Path]:
    """A real 64 KiB tmpfs mounted at ``where`` (made here; root): filled, its writes fail
    with ENOSPC as a full disk's do; with "ro", with EROFS. Unmounted after."""
    need_root()
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(["size=64k", *options]),
                    "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(fs: Path) -> Path:
    """Fill the filesystem at ``fs`` with one file, whose path is returned (remove it and
    the disk has room again)."""
    ballast = fs / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)
    return ballast
