"""Helpers for testing rules, plugins and embeddings: a fake host root to read from,
families and checked snapshots, and (as root, on a cgroup v1 memory hierarchy) real dying
memory cgroups. guardian's own tests and benchmarks use them too."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from .host import Host
from .plugins import Registry, default_registry
from .snapshot import Family, Snapshot, labels_of


class FakeHost:
    """A host root under a directory: write the /proc, /sys and /dev files a source or an
    action reads, then hand :attr:`host` to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = Host(root)

    def write(self, path: str, text: str) -> Path:
        """Write ``text`` at ``path`` (relative to the root, e.g. ``"proc/uptime"``)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def process(self, pid: int, comm: str, state: str = "S", ppid: int = 1,
                flags: int = 0x400000, starttime: int = 5, threads: int = 1) -> None:
        """A ``/proc/<pid>/stat`` line in the kernel's format (fs/proc/array.c,
        do_task_stat: num_threads is field 20, starttime field 22)."""
        self.write(f"proc/{pid}/stat", f"{pid} ({comm}) {state} {ppid} 0 0 0 -1 {flags} "
                                       + "0 " * 10 + f"{threads} 0 {starttime} " + "0 " * 30)


def family(label: str, members: Mapping[str, float]) -> Family:
    """A one-label family: ``family("cpu", {"0": 97.0})``."""
    return {labels_of({label: key}): float(v) for key, v in members.items()}


def snapshot(time: float, values: Mapping[str, object],
             registry: Registry | None = None) -> Snapshot:
    """A snapshot checked against the signals of ``registry`` (default: the installed
    sources), as the collector checks a source's output."""
    reg = registry or default_registry()
    return Snapshot.build(time, values, reg.catalogue().values())


# -- real kernel objects (root) ---------------------------------------------------------

MEMCG_V1 = Path("/sys/fs/cgroup/memory")

MEMCG_MAKER = r"""
import os, sys
parent, files, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
me = str(os.getpid())
for i in range(n):
    cg = os.path.join(parent, f"cg{i}")
    os.mkdir(cg)
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(me)
    with open(os.path.join(files, f"f{i}"), "wb") as f:
        f.write(os.urandom(16384))  # page cache charged to this memcg
    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
        f.write(me)
    os.rmdir(cg)  # removed, but its page cache keeps it alive: dying
"""


@contextlib.contextmanager
def dying_memcgs(n: int) -> Iterator[Path]:
    """Make ``n`` real dying memory cgroups under a test-owned parent cgroup. Yields the
    directory of the files whose page cache pins them; on exit the files are removed
    (which frees that cache and so releases the memcgs) and the parent cgroup too."""
    parent = MEMCG_V1 / f"guardian-test-{os.getpid()}-{time.monotonic_ns()}"
    files = Path(tempfile.mkdtemp(prefix="guardian-memcg-", dir="/var/tmp"))
    parent.mkdir()
    try:
        subprocess.run([sys.executable, "-c", MEMCG_MAKER, str(parent), str(files), str(n)],
                       check=True, timeout=300)
        yield files
    finally:
        shutil.rmtree(files, ignore_errors=True)
        for _ in range(50):
            try:
                parent.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        settle_memcgs()


def memcg_count() -> int:
    for line in Path("/proc/cgroups").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "memory":
            return int(parts[2])
    return 0


def settle_memcgs(timeout: float = 30.0) -> None:
    """Wait until released memcgs are gone (the kernel frees them asynchronously), so a
    later test counting dying memcgs does not see this one's clean-up as a fall."""
    deadline = time.monotonic() + timeout
    last = memcg_count()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = memcg_count()
        if now == last:
            return
        last = now
